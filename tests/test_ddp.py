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


def _train_worker(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    from subspaces.models.encoder import load_encoder
    from subspaces.train.simcse import SimCSEConfig, set_dropout, train_simcse, unsup_examples

    try:
        model = load_encoder(model_dir)
        set_dropout(model, 0.0)  # make the run deterministic so it can be compared with one process
        rows = unsup_examples([f"sentence {i} about a cat" for i in range(32)])
        cfg = SimCSEConfig(
            output_dir=out,
            batch_size=8 // world,
            max_steps=3,
            eval_steps=0,
            save_steps=0,
            stsb_dev=False,
            show_progress=False,
            lr=1e-3,
            resume=False,
        )
        train_simcse(model, rows, cfg)
        if rank == 0:
            torch.save(model.state_dict(), os.path.join(out, "weights.pt"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.slow
def test_train_loop_under_two_processes_matches_one(tiny_model_dir, tmp_path):
    """torchrun-style run of the real training loop: 2 x batch 4 gives the weights of 1 x batch 8."""
    two = str(tmp_path / "two")
    mp.spawn(_train_worker, args=(2, _free_port(), str(tiny_model_dir), two), nprocs=2, join=True)
    one = str(tmp_path / "one")
    _train_worker(0, 1, _free_port(), str(tiny_model_dir), one)
    from subspaces.models.encoder import load_encoder

    start = load_encoder(str(tiny_model_dir)).state_dict()
    a, b = torch.load(os.path.join(two, "weights.pt")), torch.load(os.path.join(one, "weights.pt"))
    assert a.keys() == b.keys()
    # Adam amplifies float round-off on near-zero gradients, so compare the *updates* as whole vectors.
    da = torch.cat([(a[k] - start[k]).flatten() for k in a])
    db = torch.cat([(b[k] - start[k]).flatten() for k in b])
    assert db.norm() > 0
    assert (da - db).norm() / db.norm() < 1e-2


def _nan_worker(rank: int, world: int, port: int, out: str) -> None:
    """Rank 1's loss turns NaN at its third step; every rank must stop there with the user error."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    from subspaces.errors import SubspacesError
    from subspaces.train.engine import FitConfig, TrainingLoop

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 3, generator=g)

    class Batches:
        batch_size = 4

        def __len__(self) -> int:
            return 8

        def batch(self, epoch: int, index: int):
            return x[index * 4 : (index + 1) * 4]

        def fingerprint(self) -> str:
            return "nan-test"

    calls = {"n": 0}

    def step(batch):
        calls["n"] += 1
        loss = model(batch).pow(2).mean()
        return loss * float("nan") if rank == 1 and calls["n"] == 3 else loss

    config = FitConfig(lr=1e-2, max_steps=6, eval_steps=0, save_steps=0, show_progress=False)
    try:
        TrainingLoop(model, step, Batches(), config).run()
        message = "finished"
    except SubspacesError as exc:
        message = str(exc)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    with open(os.path.join(out, f"rank{rank}.txt"), "w") as f:
        f.write(message)


def test_a_nan_on_one_process_stops_every_process_with_the_user_error(tmp_path):
    """No rank is left waiting in a collective: both see the error at the same step (here within 60 s)."""
    context = mp.spawn(_nan_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=False)
    for _ in range(60):
        if context.join(timeout=1):
            break
    else:
        for process in context.processes:
            process.kill()
        pytest.fail("a process hung after the other's NaN loss")
    assert (tmp_path / "rank1.txt").read_text() == "loss became nan at step 2 (try a lower lr)"
    assert (tmp_path / "rank0.txt").read_text() == (
        "loss became non-finite on another process at step 2 (try a lower lr)"
    )
