"""One answer per input whatever the CPU: the precision setting, its record, and float32 fits that give an equally
good map on another CPU's kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from subspaces import numerics
from subspaces.errors import SubspacesError

TESTS = Path(__file__).parent

# A fit on the aligner tests' clustered data, the map and the fitted record printed as JSON.
FIT = """
import json, sys, warnings
import numpy as np
sys.path.insert(0, {tests!r})
warnings.simplefilter("ignore")
from dataclasses import replace
from test_align import FAST, clustered
from subspaces.align import MiniVec2Vec, evaluate_alignment
from subspaces.align.params import SearchParams
from scipy.stats import ortho_group
rng = np.random.default_rng(0)
q = ortho_group.rvs(8, random_state=1)
source, target, held = clustered(rng, 1200), clustered(rng, 1200) @ q, clustered(rng, 300)
settings = FAST | {{"n_restarts": 1, "search": SearchParams(probe_size=500, precision={precision!r})}}
aligner = MiniVec2Vec(**settings).fit(source, target)
print(json.dumps({{"matrix": aligner.matrix_.tolist(), "top1": evaluate_alignment(aligner, held, held @ q).top1,
                  "trusted": aligner.converged_, "precision": aligner.diagnostics_.precision}}))
"""

# Kernels of an older CPU, on any CPU: OpenBLAS's SSE3 kernels, MKL's SSE4.2 path, oneDNN's SSE4.1 path and ATen's
# unvectorised one. Whatever CPU runs the test, these differ from its own kernels (AVX2, AVX-512, AMX).
OTHER_KERNELS = {
    "OPENBLAS_CORETYPE": "Prescott",
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "ATEN_CPU_CAPABILITY": "default",
}


@pytest.fixture
def no_setting(monkeypatch):
    monkeypatch.delenv(numerics.PRECISION_ENV, raising=False)
    numerics.set_precision(None)
    yield
    numerics.set_precision(None)


def test_the_default_is_float32_and_the_environment_or_the_call_can_change_it(no_setting, monkeypatch):
    assert numerics.default_precision() == "float32" == numerics.resolve()
    monkeypatch.setenv(numerics.PRECISION_ENV, "bfloat16")
    assert numerics.resolve() == "bfloat16"
    assert numerics.resolve("float32") == "float32"  # an explicit setting wins over the process's
    numerics.set_precision("float32")
    assert numerics.resolve() == "float32"  # set_precision wins over the environment
    expected = "bfloat16" if numerics.native_bfloat16() else "float32"
    assert numerics.resolve("auto") == expected


def test_a_bad_precision_is_one_clear_error(no_setting, monkeypatch):
    with pytest.raises(SubspacesError, match="precision must be one of float32, bfloat16, auto, got 'fp8'"):
        numerics.resolve("fp8")
    monkeypatch.setenv(numerics.PRECISION_ENV, "half")
    with pytest.raises(SubspacesError, match=r"\$SUBSPACES_PRECISION must be one of"):
        numerics.resolve()


def test_the_record_names_the_precision_and_the_cpu(no_setting):
    record = numerics.cpu_record("bfloat16")
    assert record["precision"] == "bfloat16" and isinstance(record["native_bfloat16"], bool)
    assert record["cpu"] and record["cpu"] == numerics.cpu_model()


def _fit(precision: str, **env: str) -> dict:
    script = FIT.format(tests=str(TESTS), precision=precision)
    environment = {k: v for k, v in os.environ.items() if k != numerics.PRECISION_ENV} | env
    done = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_float32_fit_on_another_cpus_kernels_gives_an_equally_good_map():
    """What ``precision="float32"`` promises across CPUs, tested on this one by running the fit again on an older
    CPU's kernels: the same verdict and the same top-1, with maps that send rows to the same places.

    The same bits only up to near-ties: the fit makes discrete choices (cluster swaps, which of two agreeing maps to
    keep, a trust margin), and a near-tie there follows the products' last bit, which differs between BLAS
    kernels. Here the two maps agree to 3e-7; on the same data with an unrotated target (the identity the right
    map) the check pass's structural stage stopped a round earlier on the older kernels, the other of two agreeing
    maps (entries 0.04 apart) was kept, and the trust lift, a hair from its margin, changed sign."""
    here, other = _fit("float32"), _fit("float32", **OTHER_KERNELS)
    assert here["precision"] == other["precision"] == "float32"
    assert here["trusted"] is other["trusted"] is True
    assert here["top1"] == other["top1"] > 0.99
    # Held-out rows mapped by each map: unit vectors that must point the same way (cosine 1 - O(0.04^2)).
    rows = np.random.default_rng(1).normal(size=(200, 8))  # (a map of centred unit rows: any directions do)
    a, b = rows @ np.array(here["matrix"]), rows @ np.array(other["matrix"])
    cosines = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosines.min() > 0.99, cosines.min()
