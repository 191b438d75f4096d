"""The store's Ray Data path on a local runtime of 2 CPUs: the same rows as a single-process add, resumable, and a
migration mapped by actors equal to the aligner's own map."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from subspaces.errors import ConvergenceWarning, SubspacesError
from subspaces.store import Store
from vocabulary import WORDS

ray = pytest.importorskip("ray")
# A Ray runtime and its actor processes take minutes on 2 busy cores: `make test-slow` (CI runs it) has these.
pytestmark = pytest.mark.slow


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + f" {i}" for i in range(n)]


@pytest.fixture(scope="module")
def runtime():
    from subspaces.store import scaleout

    scaleout.start("local", num_cpus=2)
    yield
    ray.shutdown()


def rows_by_id(store: Store, space: str = "0") -> dict[str, tuple[str, np.ndarray]]:
    loaded = store._load_rows(space)
    return {i: (t, v) for i, t, v in zip(loaded.ids, loaded.texts, loaded.vectors, strict=True)}


def test_a_ray_add_writes_the_rows_of_a_single_process_add_and_resumes(runtime, tmp_path, tiny_model_dir):
    import json

    from subspaces.cli.app import app

    texts = sentences(70)
    meta = [{"n": i} if i % 3 == 0 else None for i in range(70)]
    here = Store.create(tmp_path / "here", str(tiny_model_dir))
    here.add(texts, ids=range(70), metadata=meta, write_batch=16)
    there = Store.create(tmp_path / "ray", str(tiny_model_dir))
    assert there.add(texts[:30], ids=range(30), metadata=meta[:30], write_batch=16, ray=True, actors=2) == {
        "added": 30,
        "skipped": 0,
    }
    # a rerun (after a kill, say) adds exactly the missing rows: here from the CLI
    data = tmp_path / "rows.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": str(i), "text": t} | (m or {})) + "\n"
            for i, (t, m) in enumerate(zip(texts, meta, strict=True))
        )
    )
    args = ["store", "add", str(there.path), "--input", str(data), "--ray", "--actors", "2", "--write-batch", "16"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and "added 40 rows, skipped 30" in result.output, result.output
    there = Store.open(there.path)
    a, b = rows_by_id(here), rows_by_id(there)
    assert sorted(a) == sorted(b) == sorted(str(i) for i in range(70))  # no lost and no duplicated id
    for row_id, (text, vector) in a.items():
        assert b[row_id][0] == text
        np.testing.assert_allclose(b[row_id][1], vector, atol=1e-5)
    table = there._table("0").to_arrow().to_pylist()
    assert {r["id"]: r["metadata"] for r in table}["63"] == '{"n": 63}'
    assert there.info()["spaces"]["0"]["version"] > 2  # one commit per block, not one for all


def test_a_ray_add_refuses_a_model_that_is_not_the_stores_before_writing(runtime, tmp_path, tiny_model_dir):
    from subspaces.models.encoder import build_random_bert, portable

    other = tmp_path / "other"
    portable(build_random_bert(tmp_path / "hf", num_layers=1, hidden_size=32, num_heads=2, seed=3)).save(str(other))
    made = Store.create(tmp_path / "s", str(tiny_model_dir))
    with pytest.raises(SubspacesError, match="not the store's model"):
        made.add(["a cat"], model=str(other), ray=True)
    assert made.count() == 0


def test_a_migration_on_ray_maps_every_row_by_the_fitted_aligner(runtime, tmp_path, tiny_model_dir):
    from subspaces.align import MiniVec2Vec
    from subspaces.models.encoder import build_random_bert, portable
    from subspaces.store import search as ops

    store = Store.create(tmp_path / "s", str(tiny_model_dir))
    store.add(sentences(300), ids=range(300), write_batch=300)
    other = tmp_path / "other"
    portable(build_random_bert(tmp_path / "hf", num_layers=1, hidden_size=32, num_heads=2, seed=3)).save(str(other))
    params = {"anchors": {"n_runs": 1, "n_clusters": 4, "sample": 100, "n_pseudo_pairs": 100}, "n_restarts": 1}
    # 200 pairs may be too few for a trustworthy map (and with the paired defaults the structural stage, which
    # warned here before, is off): only the mapping is tested
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        report = store.migrate(str(other), pairs=200, heldout=50, params=params, ray=True, actors=2)
    assert report["pairs"] == 200 and store.count("1") == 300
    aligner = MiniVec2Vec.load(store.path / store.manifest.spaces["1"].aligner)
    source, mapped = rows_by_id(store, "0"), rows_by_id(store, "1")
    ids = sorted(source)
    assert sorted(mapped) == ids
    expected = ops.unit_prefix(aligner.transform(np.stack([source[i][1] for i in ids])))
    np.testing.assert_allclose(np.stack([mapped[i][1] for i in ids]), expected, atol=1e-5)


def test_a_ray_add_killed_mid_run_loses_and_duplicates_no_row(tmp_path, tiny_model_dir):
    """A real kill: `store add --ray` in its own process group (its own Ray runtime), SIGKILLed once some blocks
    are in; readers meanwhile see whole blocks only, and a rerun adds exactly the missing rows."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    import psutil  # a dependency of Ray's

    texts = sentences(3000)
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(texts) + "\n")
    folder = tmp_path / "s"
    Store.create(folder, str(tiny_model_dir))
    ray_tmp = tempfile.mkdtemp(prefix="rk", dir="/tmp")  # short: Ray's socket paths must fit AF_UNIX's limit
    cli = "from subspaces.cli.app import main; main()"
    command = [sys.executable, "-c", cli, "store", "add", str(folder), "--input", str(source)]
    command += ["--ray", "--actors", "2", "--write-batch", "8", "--batch-size", "8"]
    errors = tmp_path / "add.err"
    with errors.open("w") as stderr:
        writer = subprocess.Popen(
            command,
            start_new_session=True,
            env=os.environ | {"RAY_TMPDIR": ray_tmp, "RAY_ADDRESS": ""},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    seen: list[int] = []
    try:
        deadline = time.monotonic() + 300  # Ray's start-up on 2 busy cores
        while writer.poll() is None and time.monotonic() < deadline:
            seen.append(Store.open(folder).count())
            if seen[-1] >= 64:
                break
            time.sleep(0.2)
    finally:
        os.killpg(writer.pid, signal.SIGKILL)
        writer.wait()
        # Ray daemons that left the process group: every process whose command line names this runtime's folder
        leftovers = [p for p in psutil.process_iter(["cmdline"]) if ray_tmp in " ".join(p.info["cmdline"] or [])]
        for process in leftovers:
            process.kill()
        psutil.wait_procs(leftovers, timeout=30)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    tail = errors.read_text()[-2000:]
    assert writer.returncode == -signal.SIGKILL, f"the add ended by itself before the kill:\n{tail}"
    killed_at = Store.open(folder).count()
    assert killed_at >= 64, f"no blocks written in 300 s (seen {seen[-5:]}):\n{tail}"
    assert killed_at < len(texts), "the add finished before the kill"
    # one committed write a block of 8 rows (Ray Data is handed the blocks whole and does not re-block them)
    assert all(count % 8 == 0 for count in [*seen, killed_at]), seen
    result = Store.open(folder).add(texts, write_batch=500)  # ids from the texts, as the CLI's from a .txt
    assert result == {"added": len(texts) - killed_at, "skipped": killed_at}
    ids = Store.open(folder)._load_rows("0").ids.tolist()
    assert len(ids) == len(set(ids)) == len(texts)
