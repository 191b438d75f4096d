"""Process-group helpers for ``torchrun`` / ``accelerate launch`` (gloo on CPU, nccl on GPU)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def init_from_env() -> tuple[int, int]:
    """Join the process group that ``torchrun`` describes in the environment; (rank, world size)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)
    return rank(), world_size()


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main() -> bool:
    return rank() == 0


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def all_finite(value: torch.Tensor) -> bool:
    """Whether ``value`` is finite on every process (all-reduced: a NaN on one rank stops every rank at once)."""
    flag = torch.isfinite(value.detach()).all().to(torch.int32).reshape(1)
    if world_size() > 1:
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def broadcast_parameters(module: torch.nn.Module) -> None:
    """Start every process from rank 0's weights."""
    if world_size() > 1:
        for tensor in module.state_dict().values():
            dist.broadcast(tensor, src=0)


def sum_gradients(module: torch.nn.Module) -> None:
    """Sum gradients over processes: each one's loss over the gathered batch has gradient through its own slice,
    so the sum is the single-process gradient (DDP's average would scale it by 1/world)."""
    if world_size() == 1:
        return
    for p in module.parameters():
        if p.requires_grad:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
