"""A resumable training loop for a sentence-transformers model and an ST-style loss.

Why our own loop rather than ``SentenceTransformerTrainer``: checkpoints that resume to the same weights as an
uninterrupted run (model, optimiser, schedule, data position and RNG states in one atomically written file),
SimCSE's gradient-carrying negative gather under DDP, and low per-step overhead on CPU. The losses are plain
sentence-transformers losses, so they also run in its trainer; ``BENCHMARKS.md`` compares the two loops' throughput.

Layout of ``output_dir``: the best model (by the evaluator) or the last one, as a sentence-transformers folder;
``checkpoint.pt`` (resume state); ``trainer_state.json`` (history: losses, evaluations, throughput).
"""

from __future__ import annotations

import hashlib
import math
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from subspaces.errors import SubspacesError
from subspaces.io import atomic_path, save_json
from subspaces.train import distributed as ddp

Example = tuple[str, ...]
Evaluator = Callable[[Any], "float | dict[str, float]"]


@dataclass
class TrainConfig:
    """Hyper-parameters of a run. SimCSE's defaults are set by the recipes in :mod:`subspaces.train.simcse`."""

    output_dir: str
    batch_size: int = 64  # per process
    lr: float = 3e-5
    epochs: int = 1
    max_steps: int | None = None  # stop after this many optimiser steps (over all epochs)
    max_length: int = 32
    warmup_ratio: float = 0.0
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0
    seed: int = 42
    eval_steps: int = 125  # SimCSE evaluates on STS-B dev every 125 steps
    save_steps: int = 125  # write checkpoint.pt every this many steps
    metric: str = "score"  # which key of a dict-valued evaluator decides the best model
    resume: bool = True
    drop_last: bool = True  # in-batch negatives: a ragged last batch changes the task; SimCSE's loader drops it too
    show_progress: bool = True


@dataclass
class TrainResult:
    output_dir: str
    steps: int
    best_score: float | None
    history: list[dict[str, Any]] = field(default_factory=list)
    samples_per_second: float = 0.0
    seconds: float = 0.0
    resumed_from: int = 0


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    # A fixed permutation per (seed, epoch): resuming at step k replays exactly the batches an uninterrupted run sees.
    return np.random.default_rng([seed, epoch]).permutation(n)


def _batches(n: int, global_batch: int, drop_last: bool) -> int:
    return n // global_batch if drop_last else math.ceil(n / global_batch)


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def _save_model(model: Any, folder: Path, export: Callable[[Any], Any] | None) -> None:
    """Save the model folder atomically: write beside it, then swap (an interrupt keeps the old one)."""
    to_save = export(model) if export is not None else model
    tmp = folder.with_name(folder.name + ".saving")
    if tmp.exists():
        shutil.rmtree(tmp)
    to_save.save(str(tmp))
    # Move the new files over the old ones; checkpoint.pt and trainer_state.json live beside them untouched.
    folder.mkdir(parents=True, exist_ok=True)
    for item in tmp.iterdir():
        dest = folder / item.name
        if dest.is_dir():
            shutil.rmtree(dest)
        item.replace(dest)
    tmp.rmdir()


# Settings a resumed run may change: they do not alter the optimisation path. (Evaluator settings such as
# ``metric`` do not either, but they decide which model is kept as best, so they must match like the rest.)
RESUMABLE_CHANGES = frozenset({"output_dir", "resume", "show_progress", "eval_steps", "save_steps"})


def _run_fingerprint(model: Any, loss: nn.Module, examples: Sequence[Example], config: TrainConfig) -> dict[str, Any]:
    """What a checkpoint must share with the run that resumes from it, one comparable value per aspect."""

    def digest(parts) -> str:
        h = hashlib.sha256()
        for part in parts:
            h.update(str(part).encode("utf-8", "surrogatepass"))
            h.update(b"\x1e")
        return h.hexdigest()[:16]

    settings = {k: v for k, v in asdict(config).items() if k not in RESUMABLE_CHANGES}
    loss_config = loss.get_config_dict() if hasattr(loss, "get_config_dict") else {}
    return {
        **{f"setting {k}": repr(v) for k, v in settings.items()},
        "loss": f"{type(loss).__name__} {sorted(loss_config.items())!r}",
        "data": digest("\x1f".join(row) for row in examples),
        "model architecture": digest(f"{name}:{tuple(p.shape)}" for name, p in model.state_dict().items()),
    }


def train(
    model: Any,
    loss: nn.Module,
    examples: Sequence[Example],
    config: TrainConfig,
    evaluator: Evaluator | None = None,
    *,
    export: Callable[[Any], Any] | None = None,
    callback: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Train ``model`` by minimising ``loss`` over ``examples`` (tuples of strings, one per loss column).

    Args:
        model: a ``SentenceTransformer`` (the one ``loss`` holds).
        loss: an ST-style loss: ``loss(list_of_tokenised_columns, labels=None) -> scalar``.
        examples: the training rows; every row has the same number of columns.
        config: see :class:`TrainConfig`.
        evaluator: called as ``evaluator(model)`` every ``eval_steps`` and at the end; a float or a dict with
            ``config.metric``; the best-scoring model is the one kept in ``output_dir``.
        export: turns the training model into the one saved (e.g. :func:`subspaces.models.encoder.portable`).
        callback: called as ``callback(step, loss)`` after each optimiser step (progress hooks, tests).
    """
    rank, world = ddp.init_from_env()
    out = Path(config.output_dir)
    n = len(examples)
    if n == 0:
        raise SubspacesError("no training examples")
    if config.batch_size < 1 or not config.lr > 0:
        raise SubspacesError(f"batch size must be at least 1 and lr above 0, got {config.batch_size} and {config.lr}")
    if (config.max_steps if config.max_steps is not None else config.epochs) < 1:
        raise SubspacesError("nothing to train: max_steps (or, without it, epochs) must be at least 1")
    width = len(examples[0])
    if any(len(row) != width for row in examples):
        raise SubspacesError("training rows have different numbers of columns")
    global_batch = config.batch_size * world
    if global_batch > n:
        raise SubspacesError(f"batch size {config.batch_size} x {world} process(es) is larger than the data ({n} rows)")
    per_epoch = _batches(n, global_batch, config.drop_last)
    # max_steps, when given, wins over epochs (as in Hugging Face's Trainer).
    total = config.max_steps if config.max_steps is not None else per_epoch * config.epochs

    seed_everything(config.seed)
    ddp.broadcast_parameters(model)
    model.max_seq_length = config.max_length
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=config.lr
    )
    from transformers import get_linear_schedule_with_warmup

    scheduler = get_linear_schedule_with_warmup(optimizer, int(config.warmup_ratio * total), total)

    step, best, history = 0, None, []
    ckpt_path = out / "checkpoint.pt"
    resumed_from = 0
    fingerprint = _run_fingerprint(model, loss, examples, config)
    if config.resume and ckpt_path.is_file():
        state = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        if state.get("world_size", 1) != world or state.get("batch_size") != config.batch_size:
            raise SubspacesError(
                f"{ckpt_path} was written with batch {state.get('batch_size')} x {state.get('world_size')} processes; "
                f"resume with the same settings or pass --no-resume"
            )
        stored = state.get("fingerprint", fingerprint)  # checkpoints from before fingerprints: batch check only
        differ = sorted(k for k in {*stored, *fingerprint} if stored.get(k) != fingerprint.get(k))
        if differ:
            raise SubspacesError(
                f"{ckpt_path} belongs to another run (it differs in: {', '.join(differ)}); resume with the same "
                f"model, data and settings, or pass --no-resume (starts over) or another output folder"
            )
        try:
            model.load_state_dict(state["model"])
        except RuntimeError as exc:  # a checkpoint from before fingerprints, of another architecture
            raise SubspacesError(f"{ckpt_path} holds another model's weights; pass --no-resume or another "
                                 f"output folder ({str(exc).splitlines()[0]})") from exc
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step, best, history = state["step"], state["best"], state["history"]
        _set_rng_state(state["rng"][rank] if isinstance(state["rng"], list) else state["rng"])
        resumed_from = step

    def checkpoint() -> None:
        rngs: Any = _rng_state()
        if world > 1:
            gathered: list[Any] = [None] * world
            torch.distributed.all_gather_object(gathered, rngs)
            rngs = gathered
        if ddp.is_main():
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "step": step,
                "best": best,
                "history": history,
                "rng": rngs,
                "world_size": world,
                "batch_size": config.batch_size,
                "config": asdict(config),
                "fingerprint": fingerprint,
            }
            with atomic_path(ckpt_path) as tmp:
                torch.save(state, tmp)
        ddp.barrier()

    def evaluate() -> None:
        nonlocal best
        if evaluator is None:
            return
        was_training = model.training
        model.eval()
        with torch.no_grad():
            result = evaluator(model) if ddp.is_main() else None
        model.train(was_training)
        if world > 1:
            box = [result]
            torch.distributed.broadcast_object_list(box, src=0)
            result = box[0]
        score = float(result[config.metric] if isinstance(result, dict) else result)
        entry = {"step": step, "eval": result if isinstance(result, dict) else {config.metric: score}}
        history.append(entry)
        if best is None or score > best:
            best = score
            if ddp.is_main():
                _save_model(model, out, export)
        ddp.barrier()

    out.mkdir(parents=True, exist_ok=True)
    model.train()
    progress = None
    if config.show_progress and ddp.is_main():
        from tqdm.auto import tqdm

        progress = tqdm(total=total, initial=step, desc="train", unit="step", dynamic_ncols=True)
    start, samples, running = time.perf_counter(), 0, None
    at_boundary = True  # False while an optimiser step is half-applied: an interrupt then must not checkpoint
    try:
        while step < total:
            epoch, in_epoch = divmod(step, per_epoch)
            order = _epoch_order(n, config.seed, epoch)
            lo = in_epoch * global_batch + rank * config.batch_size
            idx = order[lo : lo + config.batch_size]
            rows = [examples[i] for i in idx]
            columns = [[row[c] for row in rows] for c in range(width)]
            features = [model.preprocess(col) for col in columns]
            value = loss(features, None)
            if not torch.isfinite(value):
                checkpoint()
                raise SubspacesError(f"loss became {value.item()} at step {step}; last good state is in {ckpt_path}")
            at_boundary = False
            optimizer.zero_grad(set_to_none=True)
            value.backward()
            ddp.sum_gradients(model)
            if config.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            step += 1
            at_boundary = True
            samples += len(rows) * world
            loss_value = float(value.detach())
            running = loss_value if running is None else 0.98 * running + 0.02 * loss_value
            if progress is not None:
                progress.update(1)
                progress.set_postfix(loss=f"{running:.4f}", best="-" if best is None else f"{best:.2f}")
            if step % 10 == 0 or step == total:
                history.append({"step": step, "loss": loss_value, "lr": scheduler.get_last_lr()[0]})
            if callback is not None:
                callback(step, loss_value)
            if config.eval_steps and step % config.eval_steps == 0 and step < total:
                evaluate()
            if config.save_steps and step % config.save_steps == 0:
                checkpoint()
    except KeyboardInterrupt:
        if at_boundary:
            checkpoint()
        raise
    finally:
        if progress is not None:
            progress.close()
    seconds = time.perf_counter() - start
    evaluate()
    if evaluator is None and ddp.is_main():
        _save_model(model, out, export)
    checkpoint()
    result = TrainResult(
        output_dir=str(out),
        steps=step,
        best_score=best,
        history=history,
        samples_per_second=samples / seconds if seconds > 0 else 0.0,
        seconds=seconds,
        resumed_from=resumed_from,
    )
    if ddp.is_main():
        save_json(out / "trainer_state.json", {**asdict(result), "config": asdict(config)})
    return result
