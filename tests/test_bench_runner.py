"""benchmarks/bench: an experiment file runs end to end, a killed run resumes without rerunning finished cells,
and the summary holds the environment, the seed aggregates and the paired intervals."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench import runner
from bench.environment import environment
from bench.experiment import load
from bench.tasks import resolve


@pytest.fixture(autouse=True)
def _library_encode_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench.tasks.migrate swaps the library's ``encode`` for its cached one (in a benchmark process, for good); here
    the swap ends with the test, so later tests in this worker see the library's own function."""
    import subspaces.models.encoder as module

    monkeypatch.setattr(module, "encode", module.encode)


def toy(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """A task of no cost for the runner's tests: noisy per-row scores around an arm's level."""
    import numpy as np

    rng = np.random.default_rng([seed, int(params.get("pool_seed", 0))])
    rows = np.clip(float(params["level"]) + 0.1 * rng.standard_normal(int(params.get("rows", 50))), 0, 1)
    return {"score": float(rows.mean()), "n": len(rows), "rows": {"score": rows.round(6).tolist()}}


EXPERIMENT = """
name = "tiny"
task = "test_bench_runner:toy"
out = "{out}"
seeds = [0, 1]
compare = [["good", "base"]]
bootstrap = 200
[params]
rows = 40
[[arms]]
name = "base"
params = {{ level = 0.5 }}
[[arms]]
name = "good"
params = {{ level = 0.7 }}
[[pools]]
name = "choose"
role = "dev"
[[pools]]
name = "report"
role = "test"
params = {{ pool_seed = 1 }}
"""


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(EXPERIMENT.format(out=tmp_path / "out"))
    return path


def test_cells_are_arms_by_seeds_by_pools_with_arms_rotated(experiment: Path) -> None:
    cells = load(experiment).cells
    assert len(cells) == 8
    assert [c.arm for c in cells[:2]] == ["base", "good"]
    assert [c.arm for c in cells[4:6]] == ["good", "base"]  # seed 1 starts with the other arm
    assert {c.pool: c.role for c in cells} == {"choose": "dev", "report": "test"}
    assert cells[0].params == {"rows": 40, "level": 0.5}


def test_a_killed_run_resumes_and_finished_cells_are_not_rerun(experiment: Path) -> None:
    calls: list[tuple[float, int]] = []

    def killed_after_three(params: dict[str, Any], seed: int) -> dict[str, Any]:
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append((params["level"], seed))
        return toy(params, seed)

    with pytest.raises(KeyboardInterrupt):
        runner.run(experiment, task=killed_after_three)
    assert len(calls) == 3
    with pytest.raises(SystemExit, match="--resume"):
        runner.run(experiment)  # a fresh run does not overwrite finished cells

    def counted(params: dict[str, Any], seed: int) -> dict[str, Any]:
        calls.append((params["level"], seed))
        return toy(params, seed)

    summary = runner.run(experiment, resume=True, task=counted)
    assert len(calls) == 8  # the five unfinished cells only
    assert summary == json.loads((load(experiment).out / "summary.json").read_text())
    assert summary["schema"] == runner.SCHEMA
    assert [c["cell"] for c in summary["cells"]] == [c.key for c in load(experiment).cells]
    assert all("rows" not in c["result"] for c in summary["cells"])
    good = summary["aggregate"]["report"]["good"]["score"]
    assert good["seeds"] == 2
    assert good["mean"] == pytest.approx(0.7, abs=0.05)
    d = summary["paired"]["report"]["good - base"]["score"]
    assert d["low"] < d["diff"] < d["high"]
    assert d["diff"] == pytest.approx(0.2, abs=0.05)
    assert d["low"] > 0

    again = runner.run(experiment, resume=True, task=counted)  # all finished: nothing reruns
    assert len(calls) == 8
    assert again["aggregate"] == summary["aggregate"]


def test_a_finished_cell_with_other_parameters_stops_the_run(experiment: Path) -> None:
    runner.run(experiment)
    experiment.write_text(experiment.read_text().replace("rows = 40", "rows = 41"))
    with pytest.raises(SystemExit, match="other parameters"):
        runner.run(experiment, resume=True)


def test_cells_another_task_code_ran_are_named_and_rerun_only_when_asked(experiment: Path, tmp_path: Path) -> None:
    import importlib.util

    runner.run(experiment)  # by this module's toy task
    source = tmp_path / "changed_task.py"  # the same measurement in another module: other code, another hash
    source.write_text(
        "from test_bench_runner import toy\n\nCALLS = []\n\n\ndef measure(params, seed):\n"
        "    CALLS.append(seed)\n    return toy(params, seed)\n"
    )
    spec = importlib.util.spec_from_file_location("changed_task", source)
    assert spec is not None and spec.loader is not None
    changed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(changed)
    assert runner.task_code(changed.measure) != runner.task_code(toy)

    kept = runner.run(experiment, resume=True, task=changed.measure)
    assert changed.CALLS == [] and kept["stale_cells"] == [c.key for c in load(experiment).cells]
    rerun = runner.run(experiment, resume=True, task=changed.measure, rerun_stale=True)
    assert len(changed.CALLS) == 8 and rerun["stale_cells"] == []
    assert runner.run(experiment, resume=True, task=changed.measure)["stale_cells"] == []
    assert len(changed.CALLS) == 8


def test_the_table_reads_the_summary(experiment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runner.main([str(experiment)])
    runner.main([str(experiment), "--table"])
    out = capsys.readouterr().out
    assert "### report (test)" in out
    assert "| good - base | score |" in out


def test_the_environment_record() -> None:
    env = environment()
    assert set(env) >= {"cpu", "threads", "versions", "git"}
    assert {"avx512_bf16", "amx_bf16"} <= set(env["cpu"]["features"])
    assert env["versions"]["numpy"]
    assert env["git"]["commit"] is None or len(env["git"]["commit"]) == 40


def test_every_experiment_file_loads_and_names_a_task() -> None:
    files = sorted((Path(__file__).resolve().parents[1] / "benchmarks" / "experiments").glob("*.toml"))
    assert files
    for path in files:
        experiment = load(path)
        assert experiment.cells
        assert callable(resolve(experiment.task))


def test_the_store_table_renders_the_committed_store_json() -> None:
    from bench.tasks.store import render

    committed = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "store_bench.json"
    rows = render(json.loads(committed.read_text()))
    assert "| exact |" in rows
    assert "time / re-embedding" in rows


def test_every_committed_summary_renders_as_its_tables() -> None:
    """Each experiment whose summary is committed prints its tables from it (the figures BENCHMARKS quotes)."""
    from bench.tables import markdown

    files = sorted((Path(__file__).resolve().parents[1] / "benchmarks" / "experiments").glob("*.toml"))
    rendered = 0
    for path in files:
        summary_path = load(path).out / "summary.json"
        if summary_path.is_file():
            summary = json.loads(summary_path.read_text())
            text = markdown(summary)
            rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("|---")]
            assert len(rows) > len(summary["aggregate"]), path.name  # a header and at least a row a pool
            rendered += 1
    assert rendered >= 5


def test_conditional_search_over_the_cached_view_ranks_as_the_explicit_product() -> None:
    from bench.tasks.cond_search import run

    for rank in (8, 0):  # low rank and full rank
        result = run({"n": 3000, "dim": 32, "rank": rank, "queries": 8, "explicit_queries": 4, "threads": 1}, 0)
        assert result["topk_agreement"] == 1.0
        assert result["query_ms"] > 0 and result["view_ms"] > 0


def _fake_summary(tmp_path: Path, task: str, arms: dict[str, dict[str, Any]], pools: list[str], measure: Any) -> str:
    """The tables a summary of ``task``'s experiment prints, its cells measured by ``measure`` (no training)."""
    lines = [f'name = "fake"\ntask = "{task}"\nout = "{tmp_path / "out"}"\nseeds = [0, 1]']
    for name, params in arms.items():
        lines.append(f'[[arms]]\nname = "{name}"\nparams = {json.dumps(params).replace(":", " =")}')
    lines += [f'[[pools]]\nname = "{pool}"\nrole = "test"\nparams = {{ domain = "{pool}" }}' for pool in pools]
    path = tmp_path / "fake.toml"
    path.write_text("\n".join(lines) + "\n")
    from bench.tables import markdown

    return markdown(runner.run(path, task=measure))


def test_the_kgc_table_gives_each_head_and_the_paired_seed_differences(tmp_path: Path) -> None:
    def measure(params: dict[str, Any], seed: int) -> dict[str, Any]:
        mrr = {"hadamard": 0.1, "hypernet": 0.2}[params["head"]] + seed / 100
        return {"test": {"mrr": mrr, "hits@1": 0.0, "hits@10": 0.4}, "rerank": {"mrr": mrr + 0.01}}

    arms = {"hadamard": {"head": "hadamard"}, "concat": {"head": "hadamard"}, "hypernet-32": {"head": "hypernet"}}
    text = _fake_summary(tmp_path, "bench.tasks.kgc:run", arms, ["wn18rr"], measure)
    assert "| hypernet-32 | 2 | 0.205 ± 0.064 | 0.000 ± 0.000 | 0.400 ± 0.000 | 0.215 ± 0.064 |" in text
    assert "- paired MRR hypernet-32 − concat: +0.100 ± 0.000 over 2 seeds" in text


def test_the_simcse_domain_table_gives_each_arm_against_the_start_and_the_control(tmp_path: Path) -> None:
    def measure(params: dict[str, Any], seed: int) -> dict[str, Any]:
        gain = {"start": 0.0, "in-domain": 10.0 + seed, "control": 1.0}[params["arm"]]
        after = {"probes": {"Emotion": 60.0 + gain}, "metrics": {"Emotion": "accuracy"}}
        return {"after": after | {"clustering_v_measure": {"Emotion": 5.0 + 2 * gain}, "sts": {"avg": 78.0}}}

    arms = {name: {"arm": name} for name in ("start", "in-domain", "control")}
    text = _fake_summary(tmp_path, "bench.tasks.simcse_domain:run", arms, ["tweets"], measure)
    assert "| probe Emotion (accuracy) | 60.00 | +10.50 [+10.00, +11.00] | +1.00 [+1.00, +1.00] | +9.50" in text
    assert "| k-means V-measure Emotion | 5.00 | +21.00 [+20.00, +22.00] |" in text
    assert "| STS avg | 78.00 | +0.00 [+0.00, +0.00] |" in text


def test_the_matryoshka_adapter_task_scores_each_arm_on_tiny_vectors_and_prints_the_section_3_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    from bench.tasks import matryoshka_adapter, migrate

    texts = [f"text {i}" for i in range(120)]
    rng = np.random.default_rng(0)
    found = dict(zip(texts, rng.normal(size=(120, 24)).astype(np.float32), strict=True))
    for i in range(80, 90):  # each STS-B query's relevant sentence is a near copy of it
        found[texts[i + 10]] = found[texts[i]] + 0.01 * rng.normal(size=24).astype(np.float32)
    labels = [i % 3 for i in range(80)]
    probes = {task: [(texts[:60], labels[:60]), (texts[60:80], labels[60:])] for task in ("banking77", "emotion")}
    stsb = (texts[80:90], texts[90:100], [4.5] * 5 + [1.0] * 5)
    snli = (texts[110:115], texts[80:110], [[0, 1], [2], [3], [4], [5, 6]])
    data = (probes, stsb, texts[80:110], np.asarray([[i, i + 10] for i in range(5)]), snli)
    monkeypatch.setattr(matryoshka_adapter, "tasks", lambda split, limit: data)
    monkeypatch.setattr(migrate, "vectors", lambda model, rows, params: np.stack([found[t] for t in rows]))
    path = tmp_path / "mrl.toml"
    arms = "".join(
        f'[[arms]]\nname = "{arm}"\nparams = {{ arm = "{arm}" }}\n{"seeds = [0]" if arm in ("raw", "pca") else ""}\n'
        for arm in ("raw", "pca", "adapter", "adapter_mic", "adapter_pca")
    )
    path.write_text(
        f'name = "mrl"\ntask = "bench.tasks.matryoshka_adapter:run"\nout = "{tmp_path / "out"}"\nseeds = [0, 1]\n'
        'compare = [["adapter", "raw"]]\nbootstrap = 100\n[params]\ndims = [4, 8, 24]\nthreads = 1\n'
        "adapter = { epochs = 1, hidden = 8, batch_size = 16 }\n"
        f'{arms}[[pools]]\nname = "test"\nrole = "test"\n'
    )
    assert [c.key for c in load(path).cells if c.seed == 1] == [
        "test/adapter-seed1",
        "test/adapter_mic-seed1",
        "test/adapter_pca-seed1",
    ]
    summary = runner.run(path)
    raw = summary["aggregate"]["test"]["raw"]
    assert raw["metrics/stsb_r@10/24"]["mean"] == raw["metrics/stsb_ndcg@10/24"]["mean"] == 100
    assert (
        raw["metrics/stsb_r@10/24"]["seeds"] == 1 and summary["aggregate"]["test"]["adapter"]["fit_rows"]["seeds"] == 2
    )
    assert set(summary["paired"]["test"]["adapter - raw"]) >= {"snli_ndcg@10/4", "banking77/8", "stsb_cosine/24"}
    from bench.tables import markdown

    text = markdown(summary)
    assert "| metric (test) | arm | 4 | 8 | 24 |" in text
    assert "| SNLI nDCG@10 | adapter from the principal axes |" in text
    assert re.search(
        r"\| SNLI nDCG@10 \| Δ adapter − raw \| [+−]\d+\.\d\d \[−?\d+\.\d\d, −?\d+\.\d\d\] \([+−]\d+ %\) \|", text
    )
    assert re.search(r"\| STS-B Spearman \| raw / adapter \| -?\d+\.\d\d / -?\d+\.\d\d \|", text)


def test_the_matryoshka_encoder_task_trains_each_arm_on_a_tiny_model_and_prints_the_section_3_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path
) -> None:
    import numpy as np

    from bench.tasks import matryoshka_adapter, matryoshka_encoder

    texts = [f"a sentence about thing {i}" for i in range(60)]
    probes = {
        task: [(texts[:24], [i % 2 for i in range(24)]), (texts[24:36], [i % 2 for i in range(12)])]
        for task in ("banking77", "emotion")
    }
    stsb = (texts[36:44], texts[44:52], [4.5, 1.0, 3.0, 2.5, 4.0, 0.5, 5.0, 2.0])
    snli = (texts[52:56], texts[36:52], [[0, 1], [2], [3], [4, 5]])
    data = (probes, stsb, texts[36:52], np.asarray([[i, i + 8] for i in range(3)]), snli)
    monkeypatch.setattr(matryoshka_adapter, "tasks", lambda split, limit: data)
    triplets = [(texts[i], texts[i + 1], texts[i + 2]) for i in range(0, 48, 3)]
    monkeypatch.setattr(matryoshka_encoder, "training_rows", lambda limit: triplets)
    path = tmp_path / "encoder.toml"
    path.write_text(
        f'name = "encoder"\ntask = "bench.tasks.matryoshka_encoder:run"\nout = "{tmp_path / "out"}"\nseeds = [0, 1]\n'
        'compare = [["mic", "mrl"]]\nbootstrap = 100\n'
        f'[params]\nmodel = "{tiny_model_dir}"\ndims = [4, 8, 32]\nthreads = 1\nsteps = 2\nbatch_size = 4\n'
        f'trainable_layers = 1\nwork = "{tmp_path / "work"}"\ncache = "{tmp_path / "cache"}"\n'
        '[[arms]]\nname = "start"\nparams = { arm = "start" }\nseeds = [0]\n'
        '[[arms]]\nname = "mrl"\nparams = { arm = "mrl" }\n[[arms]]\nname = "mic"\nparams = { arm = "mic" }\n'
        '[[pools]]\nname = "test"\nrole = "test"\n'
    )
    summary = runner.run(path)
    mic = next(c["result"] for c in summary["cells"] if c["arm"] == "mic")
    assert mic["terms_last"] and mic["seconds_per_step"] > 0 and mic["dims"] == [4, 8, 32]
    spearman = summary["aggregate"]["test"]["mrl"]["metrics/stsb_spearman/8"]["mean"]
    assert set(summary["paired"]["test"]["mic - mrl"]) >= {"stsb_spearman/4", "snli_ndcg@10/8", "banking77/4"}
    cell = json.loads((tmp_path / "out" / "cells" / "test" / "mrl-seed0.json").read_text())["result"]
    assert np.mean(cell["rows"]["stsb_spearman/8"]) == pytest.approx(cell["metrics"]["stsb_spearman/8"] / 100, abs=1e-5)
    assert -100 <= spearman <= 100
    from bench.tables import markdown

    text = markdown(summary)
    assert "| arm | seeds | Banking77 4 | Banking77 8 | Emotion 4 |" in text and "| SNLI nDCG@10 32 |" in text
    assert re.search(r"\| start \| 1 \| \d+\.\d\d \|", text)
    assert re.search(r"\| Δ mic − mrl \| \| [+−]\d+\.\d\d \[−?\d+\.\d\d, −?\d+\.\d\d\] \|", text)
    assert re.search(r"step time / MRL's: mrl 1\.00× \(\d\.\d{3} s\), mic \d+\.\d\d×", text)
