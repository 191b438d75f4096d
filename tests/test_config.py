"""Where data, caches and threads come from (subspaces.config)."""

from __future__ import annotations

import os

import pytest

from subspaces import config
from subspaces.errors import SubspacesError


@pytest.mark.parametrize(
    ("files", "quota"),
    [
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu.max": "150000 100000\n"}, 1.5),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.0),
        ({}, None),
    ],
)
def test_cgroup_cpu_quota_v1_and_v2(tmp_path, files, quota):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert config._cgroup_cpu_quota(tmp_path) == quota


def test_available_cpus_is_capped_by_affinity_and_quota(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(config, "_cgroup_cpu_quota", lambda: None)
    assert config.available_cpus() == 4
    monkeypatch.setattr(config, "_cgroup_cpu_quota", lambda: 1.5)
    assert config.available_cpus() == 1  # half a core is not worth a second busy thread
    monkeypatch.setattr(config, "_cgroup_cpu_quota", lambda: 0.5)
    assert config.available_cpus() == 1


def test_default_threads_order(monkeypatch):
    monkeypatch.setattr(config, "available_cpus", lambda: 8)
    monkeypatch.setattr(config, "idle_share", lambda: 1.0)
    for name in ("SUBSPACES_THREADS", "OMP_NUM_THREADS", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert config.default_threads() == 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun: two processes share the cores
    assert config.default_threads() == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert config.default_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "4,2")  # OpenMP's per-nesting-level list: the outer pool counts
    assert config.default_threads() == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "four")
    with pytest.raises(SubspacesError, match="OMP_NUM_THREADS must be a positive integer"):
        config.default_threads()
    monkeypatch.setenv("SUBSPACES_THREADS", "2")
    assert config.default_threads() == 2
    monkeypatch.setenv("SUBSPACES_THREADS", "lots")
    with pytest.raises(SubspacesError, match="SUBSPACES_THREADS must be a positive integer"):
        config.default_threads()


def test_default_threads_leave_the_cores_that_other_work_keeps_busy(monkeypatch):
    for name in ("SUBSPACES_THREADS", "OMP_NUM_THREADS", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(config, "available_cpus", lambda: 2)
    monkeypatch.setattr(config.os, "cpu_count", lambda: 2)
    for load, threads in ((0.0, 2), (0.4, 2), (1.0, 1), (2.0, 1), (9.0, 1)):
        monkeypatch.setattr(config.os, "getloadavg", lambda load=load: (load, load, load))
        assert config.default_threads() == threads, load
    # A container allowed 4 of a 64-core host's cores, the host half busy: half of its 4.
    monkeypatch.setattr(config, "available_cpus", lambda: 4)
    monkeypatch.setattr(config.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(config.os, "getloadavg", lambda: (32.0, 32.0, 32.0))
    assert config.default_threads() == 2
    monkeypatch.setattr(config.os, "getloadavg", lambda: (_ for _ in ()).throw(OSError("no loadavg")))
    assert config.default_threads() == 4  # unreadable: all the cores it may use


def test_set_threads_sets_torch_blas_faiss_and_the_environment(monkeypatch):
    import faiss
    import numpy  # noqa: F401 - its BLAS is one of the pools
    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    with threadpool_limits(limits=1):  # on exit, the limits from before the test come back
        assert config.set_threads(2) == 2
        assert torch.get_num_threads() == 2 and faiss.omp_get_max_threads() == 2
        assert threadpool_info() and all(p["num_threads"] == 2 for p in threadpool_info())
        assert os.environ["OMP_NUM_THREADS"] == os.environ["OPENBLAS_NUM_THREADS"] == "2"
        assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
        faiss.omp_set_num_threads(1)
    with pytest.raises(SubspacesError, match="at least 1"):
        config.set_threads(0)


def test_scoped_threads_puts_back_every_pool_and_variable(monkeypatch):
    """A library call's thread count must not outlive the call (issue 51): torch, faiss, BLAS and the variables
    default_threads reads are as they were afterwards, also when the block raises."""
    import faiss
    import numpy  # noqa: F401 - its BLAS is one of the pools
    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    with threadpool_limits(limits=2):
        torch.set_num_threads(2)
        faiss.omp_set_num_threads(2)
        before = [p["num_threads"] for p in threadpool_info()]
        with config.scoped_threads(1) as n:
            assert n == 1 and torch.get_num_threads() == 1 and faiss.omp_get_max_threads() == 1
            assert all(p["num_threads"] == 1 for p in threadpool_info())
            assert os.environ["OMP_NUM_THREADS"] == "1" and config.default_threads() == 1
        assert torch.get_num_threads() == 2 and faiss.omp_get_max_threads() == 2
        assert [p["num_threads"] for p in threadpool_info()] == before
        assert "OMP_NUM_THREADS" not in os.environ and "OMP_WAIT_POLICY" not in os.environ
        assert os.environ["OPENBLAS_NUM_THREADS"] == "3"
        with pytest.raises(RuntimeError, match="inside"), config.scoped_threads(1):
            raise RuntimeError("inside")
        assert torch.get_num_threads() == 2 and "OMP_NUM_THREADS" not in os.environ
        with pytest.raises(SubspacesError, match="at least 1"), config.scoped_threads(0):
            pass
        assert torch.get_num_threads() == 2


def test_encoding_uses_every_core_only_where_the_load_aware_default_gave_some_up(monkeypatch):
    """Issue 51: on a busy machine the load-aware default (1 of 2 cores) made encoding slower than 2 threads; the
    rule: encoding takes every usable core when the count is that default, and keeps any count asked for."""
    import torch
    from threadpoolctl import threadpool_limits

    monkeypatch.setattr(config, "_encoding_cores", None)
    for name in ("SUBSPACES_THREADS", "OMP_NUM_THREADS", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(config, "available_cpus", lambda: 2)
    before = torch.get_num_threads()
    with threadpool_limits(limits=1):
        monkeypatch.setattr(config, "idle_share", lambda: 0.2)  # a busy machine: the default keeps 1 of 2
        assert config.set_threads() == 1 and config.encoding_threads() == 2
        with config.scoped_threads(1):  # an explicit count inside: kept
            assert config.encoding_threads() is None
        assert config.encoding_threads() == 2  # and the default's rule is back after it
        monkeypatch.delenv("OMP_NUM_THREADS")  # as before set_threads wrote it
        monkeypatch.setattr(config, "idle_share", lambda: 1.0)  # idle: the default gave nothing up
        assert config.set_threads() == 2 and config.encoding_threads() is None
        assert config.set_threads(1) == 1 and config.encoding_threads() is None  # asked for: kept
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.setenv("SUBSPACES_THREADS", "1")
        assert config.set_threads() == 1 and config.encoding_threads() is None
    torch.set_num_threads(before)
