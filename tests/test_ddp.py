"""The cross-process negative gather: 2 CPU processes (gloo) give the single-process gradient of the global batch."""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from subspaces.losses.simcse import info_nce
from subspaces.train.distributed import sum_gradients


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, 6, generator=g), torch.randn(8, 6, generator=g), torch.randn(8, 6, generator=g)


def _model():
    torch.manual_seed(1)
    return torch.nn.Linear(6, 4)


def _worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        x, y, z = (t.chunk(world)[rank] for t in _data())
        model = _model()
        loss = info_nce(model(x), model(y), model(z), temperature=0.1, hard_negative_weight=0.5)
        loss.backward()
        sum_gradients(model)
        if rank == 0:
            torch.save({"loss": loss.detach(), "grad": model.weight.grad.clone()}, out)
    finally:
        dist.destroy_process_group()


def test_two_process_gather_matches_single_process(tmp_path):
    out = str(tmp_path / "ddp.pt")
    mp.spawn(_worker, args=(2, _free_port(), out), nprocs=2, join=True)
    got = torch.load(out)
    x, y, z = _data()
    model = _model()
    loss = info_nce(model(x), model(y), model(z), temperature=0.1, hard_negative_weight=0.5)
    loss.backward()
    assert got["loss"].item() == pytest.approx(loss.item(), rel=1e-5)
    assert torch.allclose(got["grad"], model.weight.grad, atol=1e-6)


def test_without_gather_the_gradient_differs(tmp_path):
    """Guard that the test above can fail: local-only negatives give another gradient."""
    x, y, z = _data()
    model = _model()
    info_nce(model(x), model(y), model(z), temperature=0.1).backward()
    full = model.weight.grad.clone()
    model.zero_grad()
    for half in range(2):
        xs, ys, zs = (t.chunk(2)[half] for t in (x, y, z))
        (0.5 * info_nce(model(xs), model(ys), model(zs), temperature=0.1)).backward()
    assert not torch.allclose(model.weight.grad, full, atol=1e-4)
