"""The training loop every model uses: ``fit(module, step, batches, config, evaluator)``.

A recipe supplies a seeded batch source and a ``step`` that turns a batch into a scalar loss; the engine does the
rest: AdamW with a linear schedule and warm-up, clipping, DDP gradient sums (:mod:`subspaces.train.distributed`),
keep-best on the evaluator's primary metric, progress, a JSON history, and checkpoints that resume exactly.

Why resuming is exact (``torch.equal`` on every weight, tested): the checkpoint holds the module, optimiser,
schedule, step, and the torch/numpy/python RNG states *as they were at the step boundary* -- an interrupt in the
middle of a step's forward pass (whose dropout draws random numbers) checkpoints the state captured before that
step, not the half-consumed one. Evaluation runs with the RNG states saved and put back, so whether or not a run
evaluated at some step cannot change the random numbers its training draws. Batches are a pure function of
(seed, epoch, index). What is *not* exact: a resume on another device type or thread count (float order), or one
that changes the run's length (then the schedule is re-planned for the new total; see ``FitResult.extended_from``).

Why resuming is safe: ``checkpoint.pt`` holds only tensors and plain values (the numpy RNG state as a tensor), so
it is read with ``torch.load(weights_only=True)``, which runs no code from the file; and ``checkpoint.json`` beside
it records the run's fingerprint, compared *before* ``checkpoint.pt`` is opened, so a checkpoint of another run (or
a planted file) is refused unread. Everything that changes from step to step stays in the one ``.pt`` file, so an
interrupt between the two writes cannot pair one step's weights with another step's RNG states.

Layout of ``output_dir`` (see :mod:`subspaces.train.output`): the best model (or the last, without an evaluator),
``checkpoint.pt``, ``checkpoint.json``, ``trainer_state.json`` and ``.subspaces-run.json``.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from subspaces.errors import SubspacesError
from subspaces.eval.base import Evaluator, as_evaluator
from subspaces.io import atomic_path, save_json
from subspaces.train import distributed as ddp
from subspaces.train import output as run_output


class BatchSource(Protocol):
    """Seeded and resumable: ``batch(epoch, index)`` is a pure function of (the source's seed, epoch, index),
    so a run resumed at step k replays exactly the batches an uninterrupted run sees."""

    def __len__(self) -> int: ...  # batches per epoch

    def batch(self, epoch: int, index: int) -> Any: ...  # whatever ``step`` takes

    def fingerprint(self) -> str: ...  # short hash of the data (a resume into another run is refused)


@dataclass
class FitConfig:
    output_dir: str | None = None  # None: nothing is written; the best trainable state is kept in memory and restored
    lr: float = 3e-5
    epochs: int = 1
    max_steps: int | None = None  # wins over epochs
    warmup_ratio: float = 0.0
    warmup_steps: int | None = None  # wins over warmup_ratio
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0
    seed: int = 42
    eval_steps: int | None = 125  # 0/None: no mid-epoch evaluation
    eval_every_epoch: bool = False  # evaluate at each epoch end as well
    save_steps: int | None = 125  # checkpoint.pt cadence (only when output_dir is set)
    resume: bool = True
    show_progress: bool = True
    description: str = "train"  # progress label, e.g. "train simcse on wordnet30_examples"
    overwrite: bool = False  # write into a non-empty folder that is not a run of ours


# Settings a resumed run may change: they do not alter the optimisation path up to the checkpoint. (Changing the
# run's length re-plans the schedule from there on: that is extending a run, reported in FitResult.extended_from.)
RESUMABLE_CHANGES = frozenset(
    {
        "output_dir",
        "resume",
        "show_progress",
        "eval_steps",
        "eval_every_epoch",
        "save_steps",
        "description",
        "overwrite",
        "max_steps",
        "epochs",
    }
)


@dataclass
class FitResult:
    steps: int
    seconds: float
    best_score: float | None
    best_step: int | None
    history: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: int = 0
    samples_per_second: float = 0.0
    output_dir: str | None = None
    already_complete: bool = False  # the checkpoint had already reached the requested steps: nothing was trained
    extended_from: int | None = None  # the total steps of the run this one extended (its schedule was re-planned)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - the global state is what libraries draw from
    torch.manual_seed(seed)  # also seeds every CUDA device


def rng_state() -> dict[str, Any]:
    numpy_state = np.random.get_state()  # noqa: NPY002 - the global state is what libraries draw from
    state = {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])  # noqa: NPY002
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _rng_to_plain(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with the numpy state's key array as a tensor: what ``torch.load(weights_only=True)`` reads."""
    name, keys, pos, has_gauss, cached = state["numpy"]
    return {
        **state,
        "numpy": (str(name), torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)),
    }


def _rng_from_plain(state: dict[str, Any]) -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = state["numpy"]
    return {**state, "numpy": (name, keys.numpy().astype(np.uint32), pos, has_gauss, cached)}


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars and arrays (an evaluator's metrics) as Python numbers and lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value] if isinstance(value, list) else tuple(_plain(v) for v in value)
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    return value


def digest(parts: Any) -> str:
    """A short stable hash of an iterable of values (their ``str``)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(str(part).encode("utf-8", "surrogatepass"))
        h.update(b"\x1e")
    return h.hexdigest()[:16]


def total_steps(config: FitConfig, per_epoch: int) -> int:
    return config.max_steps if config.max_steps is not None else per_epoch * config.epochs


def _fingerprint(
    module: nn.Module, batches: BatchSource, config: FitConfig, settings: dict[str, Any], world: int
) -> dict[str, str]:
    """What a checkpoint must share with the run that resumes from it, one comparable value per aspect."""
    fixed = {k: v for k, v in asdict(config).items() if k not in RESUMABLE_CHANGES}
    return {
        **{f"setting {k}": repr(v) for k, v in {**fixed, **settings}.items()},
        "data": batches.fingerprint(),
        "model architecture": digest(f"{name}:{tuple(p.shape)}" for name, p in module.state_dict().items()),
        "processes": str(world),
    }


def _load_checkpoint(path: Path, fingerprint: dict[str, str]) -> dict[str, Any]:
    """The state in ``path``, once ``checkpoint.json`` beside it says it is this run's; read with
    ``weights_only=True``, so a planted or foreign file is refused without running code from it."""
    import pickle

    meta_path = path.with_name(run_output.CHECKPOINT_META)
    start_over = "pass --no-resume (starts over) or another output folder"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SubspacesError(
            f"{path} has no {meta_path.name} beside it, so whose run it is cannot be checked without opening it "
            f"(not a checkpoint of this run, or of an older subspaces); it was not read: {start_over}"
        ) from None
    except (OSError, ValueError) as exc:
        raise SubspacesError(f"{meta_path} is unreadable ({exc}); {path} was not read: {start_over}") from None
    stored = meta.get("fingerprint") if isinstance(meta, dict) else None
    stored = stored if isinstance(stored, dict) else {}
    differ = sorted(k for k in {*stored, *fingerprint} if stored.get(k) != fingerprint.get(k))
    if differ:
        raise SubspacesError(
            f"{path} belongs to another run (it differs in: {', '.join(differ)}); resume with the same "
            f"model, data and settings, or {start_over}"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, OSError, EOFError, ValueError, TypeError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SubspacesError(
            f"{path} is not a checkpoint subspaces reads safely (tensors and plain values only): {first}; {start_over}"
        ) from None
    if not isinstance(state, dict) or state.get("fingerprint") != fingerprint:
        raise SubspacesError(f"{path} does not match {meta_path.name} beside it; {start_over}")
    return state


def _optimizer(module: nn.Module, config: FitConfig, param_groups: list[dict] | None) -> torch.optim.AdamW:
    if param_groups is None:
        params = [p for p in module.parameters() if p.requires_grad]
        # No weight decay on biases and norms (as Hugging Face's Trainer).
        param_groups = [
            {"params": [p for p in params if p.ndim >= 2], "weight_decay": config.weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        ]
    groups = [g for g in param_groups if list(g["params"])]
    if not groups:
        raise SubspacesError("nothing to train: no parameter requires a gradient (is everything frozen?)")
    return torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay)


def _trainable_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of what training can change (frozen weights are left out: no copy of a frozen encoder per eval)."""
    keep = {n for n, p in module.named_parameters() if p.requires_grad} | {n for n, _ in module.named_buffers()}
    return {k: v.detach().clone() for k, v in module.state_dict().items() if k in keep}


def _batch_len(batches: BatchSource, batch: Any) -> int:
    size = getattr(batches, "batch_size", None)
    if size is not None:
        return int(size)
    return len(batch) if hasattr(batch, "__len__") else 0


def fit(
    module: nn.Module,
    step: Callable[[Any], torch.Tensor],
    batches: BatchSource,
    config: FitConfig,
    evaluator: Evaluator | Callable[[Any], Any] | None = None,
    *,
    param_groups: list[dict] | None = None,
    save_model: Callable[[Path], None] | None = None,
    settings: dict[str, Any] | None = None,
    callback: Callable[[int, float], None] | None = None,
    loss_terms: Callable[[], dict[str, float]] | None = None,
) -> FitResult:
    """Minimise ``step(batch)`` over ``batches``; see the module docstring and ``/work/notes/engine_api.md``.

    Args:
        module: what is optimised (its parameters with ``requires_grad``, unless ``param_groups``) and checkpointed
            (its ``state_dict``); ``evaluator(module)`` is what is evaluated.
        step: ``batch -> scalar loss``; the engine does zero_grad, backward, the DDP gradient sum, clipping, AdamW
            and the schedule.
        batches: a :class:`BatchSource` (the same on every DDP rank; each rank's ``batch`` is its own slice).
        config: see :class:`FitConfig`.
        evaluator: an :class:`~subspaces.eval.base.Evaluator` (or a plain ``module -> float | dict`` callable,
            whose primary metric is ``score``); run every ``eval_steps``, at epoch ends if asked, and at the end.
        param_groups: AdamW groups with their own lr / weight decay (e.g. head vs encoder).
        save_model: ``save_model(folder)`` writes the model into ``folder`` (a staging folder, moved into
            ``output_dir`` entry by entry). Called when the primary metric improves, or once at the end without an
            evaluator. Without it (or without ``output_dir``) the best trainable state is kept in memory and
            loaded back at the end.
        settings: values recorded in the checkpoint's fingerprint (loss and model settings, batch size), so a
            resume into another run's folder is refused.
        callback: ``callback(step, loss)`` after each optimiser step.
        loss_terms: the size of each term of the last loss (e.g. ``MICLoss.last_terms``); recorded as ``"terms"``
            in the history at step 1 (the start weights), every 10 steps and the last, so the JSON history and
            the checkpoint carry them.
    """
    rank, world = ddp.init_from_env()
    evaluator = as_evaluator(evaluator)
    settings = dict(settings or {})
    per_epoch = len(batches)
    if per_epoch < 1:
        raise SubspacesError("no training batches: the data is smaller than one batch")
    if not config.lr > 0:
        raise SubspacesError(f"lr must be above 0, got {config.lr}")
    total = total_steps(config, per_epoch)
    if total < 1:
        raise SubspacesError("nothing to train: max_steps (or, without it, epochs) must be at least 1")
    out = Path(config.output_dir) if config.output_dir is not None else None
    # Every input is checked before anything is written or trained.
    if out is not None:
        run_output.check_output_dir(out, config.overwrite)
    if evaluator is not None and ddp.is_main():
        evaluator.check()
    if out is not None and ddp.is_main():
        out.mkdir(parents=True, exist_ok=True)
        run_output.remove_stale_temporaries(out)
    ddp.barrier()

    seed_everything(config.seed)
    ddp.broadcast_parameters(module)
    optimizer = _optimizer(module, config, param_groups)
    from transformers import get_linear_schedule_with_warmup

    def make_scheduler(n_total: int):
        warmup = config.warmup_steps if config.warmup_steps is not None else int(config.warmup_ratio * n_total)
        return get_linear_schedule_with_warmup(optimizer, warmup, n_total)

    scheduler = make_scheduler(total)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    fingerprint = _fingerprint(module, batches, config, settings, world)
    config_dict = json.loads(json.dumps(asdict(config), default=str))
    ckpt_path = out / run_output.CHECKPOINT if out is not None else None

    done, best, best_step, resumed_from, extended_from = 0, None, None, 0, None
    pending_eval = False  # the evaluation due at step ``done`` has not finished (an interrupt during it)
    history: list[dict[str, Any]] = []
    # The best trainable state, when no save_model writes it out: it goes into the checkpoint as well, so a
    # resumed run still ends on the best state it reports.
    best_state: dict[str, torch.Tensor] | None = None
    keep_in_memory = out is None or save_model is None
    if ckpt_path is not None and config.resume and ckpt_path.is_file():
        state = _load_checkpoint(ckpt_path, fingerprint)
        module.load_state_dict(state["module"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        done, best, best_step, history = state["step"], state["best"], state["best_step"], state["history"]
        best_state = state.get("best_state")
        set_rng_state(_rng_from_plain(state["rng"][rank]))
        pending_eval = bool(state.get("pending_eval", False))
        resumed_from = done
        if state["total"] != total and done < total:
            # Extending (or shortening) a run: the linear schedule is re-planned for the new total from here on.
            extended_from = state["total"]
            for group, base, fn in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True):
                group["lr"] = base * fn(done)
        if done >= total:
            if best_state is not None:
                module.load_state_dict(best_state, strict=False)
            return FitResult(
                done,
                0.0,
                best,
                best_step,
                history,
                resumed_from,
                0.0,
                str(out) if out is not None else None,
                already_complete=True,
            )

    def checkpoint(rng: dict[str, Any]) -> None:
        if ckpt_path is None:
            return
        rngs: list[Any] = [rng]
        if world > 1:
            rngs = [None] * world
            torch.distributed.all_gather_object(rngs, rng)
        if ddp.is_main():
            # Only tensors and plain values (weights_only=True reads them back); the fingerprint first, beside it.
            save_json(
                ckpt_path.with_name(run_output.CHECKPOINT_META), {"fingerprint": fingerprint, "config": config_dict}
            )
            state = {
                "module": module.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "step": done,
                "total": total,
                "best": _plain(best),
                "best_step": best_step,
                "best_state": best_state,
                "history": _plain(history),
                "pending_eval": pending_eval,
                "rng": [_rng_to_plain(r) for r in rngs],
                "fingerprint": fingerprint,
                "config": config_dict,
            }
            with atomic_path(ckpt_path) as tmp:
                torch.save(state, tmp)
        ddp.barrier()

    def save() -> None:
        if ddp.is_main() and out is not None and save_model is not None:
            run_output.save_model_files(out, save_model, overwrite=config.overwrite)
        ddp.barrier()

    def evaluate(epoch: int) -> None:
        nonlocal best, best_step, best_state
        if evaluator is None:
            return
        saved_rng, was_training = rng_state(), module.training
        module.eval()
        try:
            with torch.no_grad():
                metrics = evaluator(module) if ddp.is_main() else None
        finally:  # evaluation must not move the random numbers training draws (exact resume)
            module.train(was_training)
            set_rng_state(saved_rng)
        if world > 1:
            box = [metrics]
            torch.distributed.broadcast_object_list(box, src=0)
            metrics = box[0]
        assert metrics is not None
        score = evaluator.score(metrics)
        if evaluator.is_better(score, best):
            if keep_in_memory:
                best_state = _trainable_state(module)
            else:
                save()
            best, best_step = score, done  # only once saved: an interrupt before must not claim this best
        history.append({"step": done, "epoch": epoch, "eval": metrics})

    module.train()
    bar = None
    if config.show_progress and ddp.is_main():
        from subspaces.progress import Progress

        bar = Progress(total, config.description, unit="step", initial=done)
    start, samples, running = time.perf_counter(), 0, None
    boundary = rng_state()  # the RNG state at the current step boundary (what a checkpoint records)
    at_boundary = True  # False while an optimiser update is half-applied: an interrupt then must not checkpoint
    try:
        if pending_eval:  # the run this resumes was interrupted while evaluating: the uninterrupted run evaluates
            evaluate((done - 1) // per_epoch)
            pending_eval = False
        while done < total:
            epoch, index = divmod(done, per_epoch)
            batch = batches.batch(epoch, index)
            loss = step(batch)
            if not ddp.all_finite(loss):
                checkpoint(boundary)
                where = f"; the last good state is in {ckpt_path}" if ckpt_path is not None else ""
                value = loss.item() if not torch.isfinite(loss) else "non-finite on another process"
                raise SubspacesError(f"loss became {value} at step {done}{where} (try a lower lr)")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            ddp.sum_gradients(module)
            if config.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            at_boundary = False
            optimizer.step()
            scheduler.step()
            done += 1
            boundary = rng_state()
            at_boundary = True
            samples += _batch_len(batches, batch) * world
            value = float(loss.detach())
            running = value if running is None else 0.98 * running + 0.02 * value
            if bar is not None:
                bar.update(1, loss=round(running, 4), best="-" if best is None else round(best, 2))
            if done % 10 == 0 or done == total or (done == 1 and loss_terms is not None):
                entry = {"step": done, "loss": value, "lr": scheduler.get_last_lr()[0]}
                if loss_terms is not None:
                    entry["terms"] = dict(loss_terms())
                history.append(entry)
            if callback is not None:
                callback(done, value)
            if done < total and (
                (config.eval_steps and done % config.eval_steps == 0)
                or (config.eval_every_epoch and done % per_epoch == 0)
            ):
                pending_eval = True
                evaluate(epoch)
                pending_eval = False
            if config.save_steps and done % config.save_steps == 0:
                checkpoint(boundary)
    except KeyboardInterrupt:
        if at_boundary:
            checkpoint(boundary)
        raise
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - start
    evaluate((done - 1) // per_epoch)
    if evaluator is None:
        if keep_in_memory:
            best_state = None  # the last state is the one to keep
        else:
            save()
    checkpoint(boundary)  # the last state, not the best: extending the run continues from where it stopped
    if best_state is not None:
        module.load_state_dict(best_state, strict=False)
    result = FitResult(
        steps=done,
        seconds=seconds,
        best_score=best,
        best_step=best_step,
        history=history,
        resumed_from=resumed_from,
        samples_per_second=samples / seconds if seconds > 0 else 0.0,
        output_dir=str(out) if out is not None else None,
        extended_from=extended_from,
    )
    if out is not None and ddp.is_main():
        recorded = json.loads(json.dumps(settings, default=str))
        save_json(out / run_output.STATE, {**result.to_dict(), "config": asdict(config), "settings": recorded})
    return result
