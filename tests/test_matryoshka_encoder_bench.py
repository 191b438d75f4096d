"""benchmarks/matryoshka_encoder.py: the arms' objectives, their check under partial fine-tuning, the resumable
run's skip rule and the table's paired bootstrap (tiny random models and hand-made per-row scores)."""

from __future__ import annotations

import json
import random
from dataclasses import asdict

import numpy as np
import pytest
import torch

import matryoshka_encoder as script
from vocabulary import WORDS


def _differing(a, b) -> dict[str, tuple]:
    x, y = asdict(a), asdict(b)
    return {k: (x[k], y[k]) for k in x if x[k] != y[k]}


def test_each_arm_changes_exactly_its_terms():
    configs = {arm: script.arm_config(arm, depth=6, trainable_layers=2) for arm in script.ARMS}
    mic = configs["mic"]
    assert mic.mic and tuple(mic.layers) == (5, 6) and mic.trainable_layers == 2 and not mic.stsb_dev
    assert _differing(configs["mrl_scr"], mic) == {"lambda_sir": (0.0, 1.0), "lambda_distill": (0.0, 0.1)}
    assert _differing(configs["mrl_sir"], mic) == {
        "lambda_corr": (0.0, 100.0),
        "lambda_var": (0.0, 25.0),
        "lambda_distill": (0.0, 0.1),
    }
    assert _differing(configs["mrl"], mic) == {"mic": (False, True), "layers": (None, (5, 6))}
    assert _differing(configs["simcse"], configs["mrl"]) == {"dims": ((None,), script.DIMS)}
    assert _differing(configs["mic_gamma1"], mic) == {"gamma": (1.0, 0.1)}


@pytest.fixture(scope="module")
def three_layers(tmp_path_factory):
    """A 3-layer, 32-d random BERT: with the top 2 trained, layer 1 is frozen."""
    from bench.random_bert import build_random_bert
    from subspaces.models.encoder import load_encoder, portable

    folder = tmp_path_factory.mktemp("three-layers")
    model = build_random_bert(folder / "hf", num_layers=3, hidden_size=32, num_heads=2, max_position=64, seed=0)
    portable(model).save(str(folder / "st"))
    return load_encoder(str(folder / "st"))


def _triplets(n: int) -> list[tuple[str, str, str]]:
    rng = random.Random(0)
    return [tuple(" ".join(rng.choice(WORDS) for _ in range(6)) for _ in range(3)) for _ in range(n)]


@pytest.mark.parametrize("arm", script.ARMS)
def test_arm_check_under_partial_fine_tuning(three_layers, arm):
    config = script.arm_config(arm, depth=3, trainable_layers=2, dims=(8, 16, None), batch_size=8, max_length=16)
    # The random model embeds every sentence alike: at the default 0.05 the distillation KL is ~1e-9, below
    # rounding; at 1e-4 it is clearly positive, so the MIC arms' term is seen.
    config.distill_temperature = 1e-4
    report = script.check_arm(three_layers, config, _triplets(8))
    assert report["loss"] > 0 and len(report["grad_norm"]) == 2 and min(report["grad_norm"]) > 0
    if config.mic:  # MIC's terms reach the two trained layers' states (2 and 3 of 3) and shift their gradient
        assert set(report["regulariser_grad_norm"]) == {"2", "3"}
        assert min(report["regulariser_grad_norm"].values()) > 0
        terms = report["terms"]
        assert (terms["scr"] > 0) == (arm != "mrl_sir") and (terms["distill"] > 0) == arm.startswith("mic")
    assert all(p.grad is None for p in three_layers.parameters())  # the check leaves no gradient behind


def test_mic_on_a_frozen_layer_is_refused(three_layers):
    from subspaces.errors import DimensionError

    config = script.arm_config("mic", depth=3, trainable_layers=2, dims=(8, 16, None), batch_size=8, max_length=16)
    config.layers = (1, 3)  # layer 1 is below the trained top two
    with pytest.raises(DimensionError, match="layer 1 is frozen"):
        script.check_arm(three_layers, config, _triplets(8))


def test_geometry_reads_mic_terms_and_splits_the_gradient_by_piece(three_layers):
    from subspaces.train.matryoshka import build_loss
    from subspaces.train.sentence import loss_step

    rows = _triplets(8)
    report = script.geometry_of(three_layers, rows, batch_size=8, max_length=16, dims=(8, 16, None))
    assert report["batches"] == 1
    mic = build_loss(three_layers, script.arm_config("mic", depth=3, trainable_layers=2, dims=(8, 16, None)))
    with script.evaluating(three_layers, 16), torch.no_grad():
        loss_step(three_layers, mic)(rows)
    assert report["terms"] == pytest.approx(mic.last_terms, rel=1e-5)
    norms = report["gradient_norm"]
    assert set(norms) == {"mrl", *(name for _, name in script.GRADIENT_PIECES)} and min(norms.values()) > 0
    assert all(p.grad is None for p in three_layers.parameters())


def test_geometry_keeps_models_measured_before_and_adds_new_ones(three_layers, tmp_path, monkeypatch):
    # a fresh checkout has the committed geometry.json and results but not the git-ignored trained models
    data = tmp_path / "data"
    (data / "nli").mkdir(parents=True)
    lines = ["sent0,sent1,hard_neg,source"] + [",".join(t) + ",snli_dev" for t in _triplets(8)]
    (data / "nli" / "snli_devtest_triplets.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setenv("SUBSPACES_DATA", str(data))
    results, runs = tmp_path / "results", tmp_path / "runs"
    terms = dict.fromkeys(("scr_corr", "scr_var", "sir_cv", "sir_unif", "distill"), 0.5)
    before = {"terms": terms, "gradient_norm": dict.fromkeys(["mrl", *(n for _, n in script.GRADIENT_PIECES)], 1.0)}
    script.save_compact(results / "geometry.json", {"models": {"start": before, "mic seed 0": before}})
    for arm, seed in (("mic", 0), ("mrl", 1)):
        script.save_compact(results / f"{arm}-seed{seed}.json", {"arm": arm, "seed": seed})
    three_layers.save(str(runs / "mrl-seed1"))  # only this run's model is on disk
    real = script.geometry_of
    monkeypatch.setattr(script, "geometry_of", lambda *a, **k: real(*a, **k, dims=(8, 16, None)))
    args = script.parse_args(
        ["geometry", "--results", str(results), "--runs", str(runs), "--batch-size", "8", "--max-length", "16"]
    )
    script.geometry(args)
    models = json.loads((results / "geometry.json").read_text())["models"]
    assert list(models) == ["start", "mic seed 0", "mrl seed 1"]
    assert models["start"] == before and models["mic seed 0"] == before  # kept, not measured again
    expected = real(three_layers, _triplets(8), batch_size=8, max_length=16, dims=(8, 16, None))
    assert models["mrl seed 1"]["terms"] == pytest.approx(expected["terms"], rel=1e-5)
    assert "date" in models["mrl seed 1"]


def test_step_costs_time_every_arm_in_turns(three_layers):
    report = script.step_costs(
        three_layers,
        _triplets(16),
        ["mrl", "mic"],
        steps=2,
        repeats=2,
        batch_size=8,
        max_length=16,
        cache_dir=None,
        dims=(8, 16, None),
    )
    assert set(report["seconds_per_step"]) == {"mrl", "mic"} and all(len(t) == 2 for t in report["turns"].values())
    assert report["ratio_to_mrl"]["mrl"] == 1.0 and report["seconds_per_step"]["mic"] > 0
    assert all(p.grad is None or not p.requires_grad for p in three_layers.parameters())  # base left untouched


def test_metric_rows_spearman_matches_scipy():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    values, gold = rng.normal(size=(3, 40)).round(1), rng.integers(0, 5, size=(3, 40)).astype(float)  # ties
    expected = [100 * spearmanr(v, g).statistic for v, g in zip(values, gold, strict=True)]
    assert np.allclose(script.metric_rows(values, gold), expected)
    assert np.allclose(script.metric_rows(values, None), 100 * values.mean(axis=1))


def test_paired_difference_on_hand_made_rows():
    b = np.zeros((2, 50))
    a = b.copy()
    a[0, :5] = 1  # seed 0: +10 points
    a[1, 10:20] = 1  # seed 1: +20 points
    result = script.paired_difference(a, b, n=500)
    assert result["diff"] == pytest.approx(15.0) and result["seeds"] == 2
    assert 0 <= result["lo"] < 15 < result["hi"] and result["half_width"] == pytest.approx(
        (result["hi"] - result["lo"]) / 2
    )
    same = script.paired_difference(b, b, n=100)
    assert same["diff"] == same["lo"] == same["hi"] == 0.0
    gold = np.arange(50, dtype=float)
    ranked = script.paired_difference(gold[None], -gold[None], gold, n=100)  # Spearman +100 vs -100
    assert ranked["diff"] == pytest.approx(200.0)
    with pytest.raises(ValueError, match="same"):
        script.paired_difference(a, b[:1])


def _record(arm: str, seed: int, shift: float, gold: list[float]) -> dict:
    rng = np.random.default_rng(seed)
    rows: dict[str, dict[str, list[float]]] = {}
    for task in script.TASKS:
        rows[task] = {}
        for d in ("16", "32", "384"):
            if task == "STSB":
                rows[task][d] = (np.asarray(gold) + rng.normal(size=len(gold))).round(4).tolist()
            else:  # 0/1 rows; the shifted arm gets `shift` % of rows more right on the probes
                base = (rng.random(100) < 0.5).astype(float)
                if task in ("Banking77", "Emotion") and d != "384":
                    base[: int(shift)] = 1.0
                rows[task][d] = base.tolist()
    return {"arm": arm, "seed": seed, "scores": script.metrics(rows, gold), "rows": rows, "gold_sts": gold}


def test_summary_pairs_seeds_and_judges_the_claim(tmp_path):
    gold = [float(i % 7) for i in range(30)]
    for seed in (0, 1):
        script.save_compact(tmp_path / f"mrl-seed{seed}.json", _record("mrl", seed, 0, gold))
        mic = _record("mic", seed, 0, gold)  # the same rows as mrl's, then 30 rows set right on the probes
        for task in ("Banking77", "Emotion"):
            for d in ("16", "32"):
                mic["rows"][task][d][:30] = [1.0] * 30
        mic["scores"] = script.metrics(mic["rows"], gold)
        script.save_compact(tmp_path / f"mic-seed{seed}.json", mic)
    assert "\n" not in (tmp_path / "mic-seed0.json").read_text().rstrip("\n")  # compact
    summary = script.summarise(tmp_path, n_boot=200)
    diff = summary["differences"]["mic - mrl"]
    mrl_rows = [json.loads((tmp_path / f"mrl-seed{s}.json").read_text())["rows"] for s in (0, 1)]
    wrong = np.mean([30 - sum(r["Banking77"]["16"][:30]) for r in mrl_rows])
    assert diff["Banking77"]["16"]["diff"] == pytest.approx(wrong)  # 100 rows: a row is a point
    assert np.mean(diff["Banking77"]["16"]["per_seed"]) == pytest.approx(wrong)
    assert diff["STSB"]["16"]["diff"] == pytest.approx(0.0) and diff["STSB"]["16"]["half_width"] == 0.0
    claim = summary["claim"]
    assert claim["holds"] and claim["tasks_with_2_points_at_16_and_32"] == ["Banking77", "Emotion"]
    assert claim["of_which_interval_above_0"] == ["Banking77", "Emotion"]
    cell = summary["arms"]["mic"]["Banking77"]["16"]
    expected = [json.loads((tmp_path / f"mic-seed{s}.json").read_text())["scores"]["Banking77"]["16"] for s in (0, 1)]
    assert cell["mean"] == pytest.approx(np.mean(expected)) and cell["seeds"] == 2
    assert cell["std"] == pytest.approx(np.std(expected, ddof=1))
    lines = script.screen(summary).splitlines()
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| mrl", "| mic", "| Δ mic − mrl"]
    assert lines[-1].split(" | ")[2].startswith(f"{diff['Banking77']['16']['diff']:+.2f} [")


def test_finished_runs_are_skipped_and_other_settings_stop(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    (data / "nli").mkdir(parents=True)
    lines = ["sent0,sent1,hard_neg,source"]
    lines += [f"a{i},b{i},c{i},snli_dev" for i in range(10)] + [f"x{i},y{i},z{i},snli_test" for i in range(5)]
    (data / "nli" / "snli_devtest_triplets.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setenv("SUBSPACES_DATA", str(data))
    assert script.training_rows() == [(f"a{i}", f"b{i}", f"c{i}") for i in range(10)]  # SNLI dev only

    results = tmp_path / "results"
    args = script.parse_args(["run", "--results", str(results), "--arms", "mrl", "--seeds", "0"])
    expected = script.settings(args, 10)
    assert not script.finished(results / "mrl-seed0.json", expected)
    for name in ("start", "mrl-seed0"):
        script.save_compact(results / f"{name}.json", {"settings": expected})
    script.run(args)  # would load minilm-l6 and train if anything were left
    assert "every run is done already" in capsys.readouterr().out

    other = script.parse_args(["run", "--results", str(results), "--arms", "mrl", "--seeds", "0", "--lr", "1e-4"])
    with pytest.raises(SystemExit, match="other settings"):
        script.run(other)
