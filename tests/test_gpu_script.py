"""The GPU run (benchmarks/gpu): a dry run of its driver on CPU at toy scale, its time box, and what it carries."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "benchmarks" / "gpu"
sys.path.insert(0, str(GPU))
import prep  # noqa: E402


def toy_wn18rr(folder: Path, n: int = 40, triples: int = 200) -> None:
    """A WN18RR-layout graph: ``n`` entities with short definitions, three relations, train/valid/test."""
    rng = random.Random(0)
    folder.mkdir(parents=True)
    ids = [f"{i:08d}" for i in rng.sample(range(10**7, 10**8), n)]
    (folder / "wordnet-mlj12-definitions.txt").write_text(
        "".join(f"{ids[i]}\t__word{i}_NN_1\ta thing of kind {i % 7}\n" for i in range(n))
    )
    relations = ["_hypernym", "_has_part", "_derivationally_related_form"]
    edges = sorted({(rng.randrange(n), rng.randrange(3), rng.randrange(n)) for _ in range(triples)})
    rows = [f"{ids[h]}\t{relations[r]}\t{ids[t]}\n" for h, r, t in edges if h != t]
    for name, part in (("train", rows[:-20]), ("valid", rows[-20:-10]), ("test", rows[-10:])):
        (folder / f"{name}.txt").write_text("".join(part))


@pytest.fixture
def toy_data(tiny_data_dir, tmp_path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(tiny_data_dir, data)
    toy_wn18rr(data / "wn18rr")
    return data


def _driver(out: Path, data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"SUBSPACES_DATA": str(data), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(GPU / "driver.py"), "--out", str(out), "--device", "cpu", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.mark.slow  # ~100 s on 2 cores: a full toy run of both stages, in make test-slow (CI runs it)
def test_driver_dry_run_writes_each_stage_and_the_environment(toy_data, tiny_model_dir, tmp_path):
    out = tmp_path / "out"
    tiny = ["--model", str(tiny_model_dir), "--probe-steps", "2", "--kgc-batch", "32", "--kgc-max-epochs", "1"]
    tiny += ["--simcse-layers", "1", "--simcse-hidden", "64", "--simcse-batch", "8", "--simcse-max-sentences", "80"]
    tiny += ["--simcse-max-steps", "3", "--seconds", "500", "--kgc-seconds", "300", "--simcse-seconds", "200"]
    done = _driver(out, toy_data, *tiny)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    env = json.loads((out / "environment.json").read_text())
    assert {"cpu", "versions", "git", "gpu", "device", "install", "command"} <= env.keys()
    assert env["device"] == "cpu" and env["gpu"]["cuda_available"] in (True, False)

    kgc = json.loads((out / "kgc.json").read_text())
    assert kgc["status"] == "done" and kgc["recipe"] == "hypercl-wn18rr"
    assert [(r["arm"], r["seed"]) for r in kgc["runs"]] == [
        ("bi-simkgc", 0),
        ("tri-hypernet-full", 0),
        ("bi-simkgc", 1),
        ("tri-hypernet-full", 1),
    ]
    steps = kgc["plan"]["steps"]
    assert all(r["steps"] == steps for r in kgc["runs"]) and steps <= kgc["plan"]["steps_per_epoch"]
    assert all(0 < r["mrr"] <= 1 and r["mrr_rerank"] is not None for r in kgc["runs"])
    assert set(kgc["ratios"]["mrr"]["per_seed"]) == {"0", "1"}  # JSON keys
    assert kgc["ratios"]["mrr"]["mean"] > 0

    simcse = json.loads((out / "simcse.json").read_text())
    assert simcse["status"] == "done" and list(simcse["arms"]) == ["dropout", "none", "delete_one_word"]
    assert simcse["plan"]["steps"] == 3
    assert "before" in simcse["arms"]["dropout"] and "before" not in simcse["arms"]["none"]
    assert all(a["after"]["sts"]["avg"] is not None for a in simcse["arms"].values())

    summary = json.loads((out / "summary.json").read_text())
    assert {s: v["status"] for s, v in summary["stages"].items()} == {"kgc": "done", "simcse": "done"}
    assert summary["stages"]["kgc"]["ratios"] == kgc["ratios"]


def test_a_stage_past_its_box_is_stopped_and_said_so(toy_data, tmp_path):
    out = tmp_path / "out"
    done = _driver(out, toy_data, "--stages", "simcse", "--simcse-seconds", "1", "--min-stage-seconds", "0")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stages"]["simcse"]["status"].startswith("stopped at its")
    none_left = _driver(out, toy_data, "--stages", "kgc", "--seconds", "5")
    assert none_left.returncode == 0
    assert json.loads((out / "summary.json").read_text())["stages"]["kgc"]["status"].startswith("not started")


def test_prep_carries_data_and_half_precision_weights_and_restores_them(toy_data, tiny_model_dir, tmp_path):
    import torch
    from safetensors.torch import load_file

    carry = tmp_path / "carry"
    manifest = prep.build(toy_data, tiny_model_dir, carry)
    assert manifest["sizes"]["total"] == manifest["sizes"]["tree"] + manifest["sizes"]["carry"] < prep.LIMIT
    (weights,) = (carry / "model").glob("*.safetensors")
    assert all(v.dtype == torch.float16 for v in load_file(weights).values() if v.is_floating_point())

    paths = prep.restore(tmp_path / "there", carry)
    assert (paths["data"] / "wn18rr" / "train.txt").read_text() == (toy_data / "wn18rr" / "train.txt").read_text()
    assert (paths["data"] / "stsb" / "original" / "sts-dev.csv").is_file()
    restored = load_file(paths["site"] / prep.MODEL_FOLDER / weights.name)
    original = load_file(next(tiny_model_dir.glob("*.safetensors")))
    for name, tensor in original.items():
        assert restored[name].dtype == tensor.dtype
        torch.testing.assert_close(restored[name], tensor, rtol=2e-3, atol=1e-4)
    # the rebuilt folder is the installed distribution the registry resolves minilm-l6 through
    probe = "from subspaces.models.registry import resolve; print(resolve('minilm-l6'))"
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(paths["site"]), os.environ.get("PYTHONPATH", "")])}
    found = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert Path(found.stdout.strip()) == (paths["site"] / prep.MODEL_FOLDER).resolve()


def test_the_size_check_refuses_a_call_over_the_limit(tmp_path):
    carry = tmp_path / "carry"
    carry.mkdir()
    with open(carry / "big", "wb") as fh:  # sparse: its size counts, no disk is used
        fh.truncate(prep.LIMIT)
    with pytest.raises(SystemExit, match="over 64 MiB"):
        prep.check(carry)


@pytest.mark.skipif(not (prep.CARRY / "manifest.json").is_file(), reason="runs/gpu-carry not built (prep.py build)")
def test_the_built_carry_fits_the_device_call():
    sizes = prep.check()
    assert sizes["total"] <= prep.LIMIT - prep.MARGIN
    manifest = json.loads((prep.CARRY / "manifest.json").read_text())
    assert manifest["model"]["dtype"] == "float16" and set(manifest["data"]["folders"]) == set(prep.DATA)
