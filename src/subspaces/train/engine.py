"""The training loop every model uses: ``TrainingLoop(module, step, batches, config, evaluator).run()``.

A task supplies a seeded :class:`BatchSource` and ``step`` (batch -> scalar loss); the loop does AdamW with a linear
schedule and warm-up, clipping and DDP gradient sums, progress, history, evaluation with keep-best and checkpoints
(one :class:`TrainState`). Resuming is exact on the same device type and thread
count: the checkpoint holds module, optimiser, schedule, step and the RNG states of the last step boundary, and
batches are a pure function of (seed, epoch, index). ``checkpoint.pt`` holds only tensors and plain values
(``weights_only=True``); the run's fingerprint in ``checkpoint.json`` is compared before it is opened. The output
folder's layout: :mod:`subspaces.train.output`.
"""

from __future__ import annotations

import json
import pickle
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self

import numpy as np
import torch
from torch import nn

from subspaces.errors import SubspacesError
from subspaces.eval.base import Evaluator, as_evaluator
from subspaces.fingerprint import texts_sha256
from subspaces.io import atomic_path, save_json
from subspaces.progress import Progress
from subspaces.results import JSONResult
from subspaces.train import distributed as ddp
from subspaces.train import output as run_output
from subspaces.train.recipes import FitConfig


class BatchSource(Protocol):
    """Seeded and resumable: ``batch(epoch, index)`` is a pure function of (the source's seed, epoch, index),
    so a run resumed at step k replays exactly the batches an uninterrupted run sees."""

    batch_size: int  # rows per step and process (the throughput figure)

    def __len__(self) -> int: ...  # batches per epoch

    def batch(self, epoch: int, index: int) -> Any: ...  # whatever ``step`` takes

    def fingerprint(self) -> str: ...  # short hash of the data (a resume into another run is refused)


# Settings a resumed run may change: they do not alter the optimisation path up to the checkpoint (a new length
# re-plans the schedule from there on: FitResult.extended_from).
RESUMABLE_CHANGES = frozenset(
    {"output_dir", "resume", "show_progress", "eval_steps", "eval_every_epoch", "save_steps", "description"}
    | {"overwrite", "max_steps", "epochs"}
)


@dataclass
class FitResult(JSONResult):
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

    # A task's result (a subclass, with the task's fields) names its JSON's keys here (None: every field).
    SAVED: ClassVar[tuple[str, ...] | None] = None

    @classmethod
    def of(cls, result: FitResult, **task: Any) -> Self:
        """The loop's ``result`` as this task's result, with the task's own fields."""
        return cls(**{f.name: getattr(result, f.name) for f in fields(FitResult)}, **task)

    def to_dict(self) -> dict[str, Any]:
        if self.SAVED is None:
            return super().to_dict()
        values = {key: getattr(self, key) for key in self.SAVED}
        return {key: value for key, value in values.items() if value is not None or key not in self.OMIT_IF_NONE}


@lru_cache(maxsize=2)
def epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The shuffle of ``n`` items in ``epoch``: a pure function of (seed, epoch), so a resumed run replays it."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    order.setflags(write=False)  # cached and shared between callers: nobody may shuffle it in place
    return order


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - the global state is what libraries draw from
    torch.manual_seed(seed)  # also seeds every CUDA device


def rng_state() -> dict[str, Any]:
    """Every RNG's state, the numpy key array as a tensor (what ``torch.load(weights_only=True)`` reads back)."""
    legacy: Any = np.random.get_state()  # noqa: NPY002 - the global state is what libraries draw from
    name, keys, pos, has_gauss, cached = legacy
    numpy_state = (str(name), torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))
    state = {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    name, keys, pos, has_gauss, cached = state["numpy"]
    torch.set_rng_state(state["torch"])
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))  # noqa: NPY002
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars and arrays (an evaluator's metrics) as Python numbers and lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value] if isinstance(value, list) else tuple(_plain(v) for v in value)
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    return value


def _fingerprint(
    module: nn.Module, batches: BatchSource, config: FitConfig, settings: dict[str, Any], world: int
) -> dict[str, str]:
    """What a checkpoint must share with the run that resumes from it, one comparable value per aspect."""
    fixed = {k: v for k, v in asdict(config).items() if k not in RESUMABLE_CHANGES}
    return {
        **{f"setting {k}": repr(v) for k, v in {**fixed, **settings}.items()},
        "data": batches.fingerprint(),
        "model architecture": texts_sha256(
            (f"{n}:{tuple(p.shape)}" for n, p in module.state_dict().items()), b"\x1e", 16
        ),
        "processes": str(world),
    }


def _load_checkpoint(path: Path, fingerprint: dict[str, str]) -> dict[str, Any]:
    """The state in ``path``, once ``checkpoint.json`` beside it says it is this run's; read with
    ``weights_only=True``, so a planted or foreign file is refused without running code from it."""
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


def param_groups(
    parts: Iterable[tuple[Iterable[nn.Parameter], float | None]], weight_decay: float, *, decay_all: bool = False
) -> list[dict[str, Any]]:
    """AdamW groups for ``(parameters, lr)`` parts (lr None: the config's): per part, the matrices with weight
    decay and the biases and norms without (as Hugging Face's Trainer; ``decay_all``: one group, all decayed).
    Only parameters that require a gradient; empty groups are left out."""
    groups = []
    for params, lr in parts:
        trainable = [p for p in params if p.requires_grad]
        split = (
            [(trainable, weight_decay)]
            if decay_all
            else [
                ([p for p in trainable if p.ndim >= 2], weight_decay),
                ([p for p in trainable if p.ndim < 2], 0.0),
            ]
        )
        groups += [{"params": ps, "weight_decay": wd} | ({} if lr is None else {"lr": lr}) for ps, wd in split if ps]
    return groups


def _trainable_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of what training can change (frozen weights are left out: no copy of a frozen encoder per eval)."""
    keep = {n for n, p in module.named_parameters() if p.requires_grad} | {n for n, _ in module.named_buffers()}
    return {k: v.detach().clone() for k, v in module.state_dict().items() if k in keep}


@dataclass
class TrainState:
    """What the run holds between steps besides the weights and the optimiser (``checkpoint.pt`` keeps it)."""

    total: int  # steps the run makes
    step: int = 0  # optimiser steps done
    best: float | None = None  # the evaluator's best primary metric, and the step it was reached at
    best_step: int | None = None
    best_state: dict[str, torch.Tensor] | None = None  # the best trainable state, when no save_model writes it out
    history: list[dict[str, Any]] = field(default_factory=list)
    pending_eval: bool = False  # the evaluation due at ``step`` has not finished (an interrupt during it)
    resumed_from: int = 0
    extended_from: int | None = None
    loss: float = float("nan")  # the last step's loss
    epoch_losses: list[float] = field(default_factory=list)  # by epoch: the current epoch's step losses


class TrainingLoop:
    """Minimise ``step(batch)`` over ``batches``, optimising ``module`` (its parameters that require a gradient,
    unless ``param_groups``) and checkpointing its ``state_dict``.

    ``evaluator`` (an :class:`~subspaces.eval.base.Evaluator` or a ``module -> float | dict`` callable) runs every
    ``eval_steps``, at epoch ends if asked, and at the end. ``save_model(folder)`` writes the model when the primary
    metric improves (or once at the end without an evaluator); without it the best state is kept in memory.
    ``settings`` go into the checkpoint's fingerprint (a resume into another run is refused); ``on_step(step, loss)``
    runs after each step, before its evaluation and checkpoint (so a checkpoint holds what it wrote).

    The history (checkpointed, so a resumed run's is whole) logs the loss and lr every 10 steps and at the last,
    with ``log(step)``'s values (a loss's terms, a learnt temperature) and at step 1 too if ``log_first_step``, and
    each evaluation as it comes; ``by_epoch``: one entry per epoch instead, its last step and mean loss, with its
    evaluation under ``dev``.
    """

    def __init__(
        self,
        module: nn.Module,
        step: Callable[[Any], torch.Tensor],
        batches: BatchSource,
        config: FitConfig,
        evaluator: Evaluator | Callable[[Any], Any] | None = None,
        *,
        param_groups: list[dict] | None = None,
        save_model: Callable[[Path], None] | None = None,
        settings: dict[str, Any] | None = None,
        log: Callable[[int], dict[str, Any]] | None = None,
        log_first_step: bool = False,
        by_epoch: bool = False,
        on_step: Callable[[int, float], None] | None = None,
    ) -> None:
        self.rank, self.world = ddp.init_from_env()
        self.module, self.step_fn, self.batches, self.config = module, step, batches, config
        self.evaluator = as_evaluator(evaluator)
        self.param_groups, self.save_model, self.settings = param_groups, save_model, dict(settings or {})
        self.log, self.log_first_step, self.by_epoch, self.on_step = log, log_first_step, by_epoch, on_step
        self.per_epoch = len(batches)
        if self.per_epoch < 1:
            raise SubspacesError("no training batches: the data is smaller than one batch")
        if not config.lr > 0:
            raise SubspacesError(f"lr must be above 0, got {config.lr}")
        total = config.max_steps if config.max_steps is not None else self.per_epoch * config.epochs
        self.state = TrainState(total=total)
        if self.state.total < 1:
            raise SubspacesError("nothing to train: max_steps (or, without it, epochs) must be at least 1")
        self.out = Path(config.output_dir) if config.output_dir is not None else None
        self.ckpt_path = self.out / run_output.CHECKPOINT if self.out is not None else None
        # The best trainable state is kept in memory (and in the checkpoint) when no save_model writes it out.
        self.keep_in_memory = self.out is None or save_model is None
        self.boundary: dict[str, Any] = {}  # the RNG states at the current step boundary (what a checkpoint holds)

    def run(self) -> FitResult:
        self._prepare()
        state = self.state
        if state.step >= state.total:  # a finished run: nothing to train
            if state.best_state is not None:
                self.module.load_state_dict(state.best_state, strict=False)
            return self._result(0.0, 0, already_complete=True)
        self.module.train()
        start, samples = time.perf_counter(), 0
        self.boundary = rng_state()
        at_boundary = True  # False while an optimiser update is half-applied: an interrupt then must not checkpoint
        show = self.config.show_progress and ddp.is_main()
        bar = Progress(state.total, self.config.description, unit="step", initial=state.step) if show else None
        running: float | None = None  # the displayed loss, smoothed
        try:
            if state.pending_eval:  # the run this resumes was interrupted while evaluating: finish that first
                self.evaluate()
            while state.step < state.total:
                epoch, index = divmod(state.step, self.per_epoch)
                batch = self.batches.batch(epoch, index)
                loss = self.step_fn(batch)
                if not ddp.all_finite(loss):
                    self.checkpoint()
                    where = f"; the last good state is in {self.ckpt_path}" if self.ckpt_path is not None else ""
                    value = loss.item() if not torch.isfinite(loss) else "non-finite on another process"
                    raise SubspacesError(f"loss became {value} at step {state.step}{where} (try a lower lr)")
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                ddp.sum_gradients(self.module)
                if self.config.max_grad_norm:
                    torch.nn.utils.clip_grad_norm_(self.params, self.config.max_grad_norm)
                at_boundary = False
                self.optimizer.step()
                self.scheduler.step()
                state.step += 1
                self.boundary = rng_state()
                at_boundary = True
                samples += self.batches.batch_size * self.world
                state.loss = float(loss.detach())
                running = state.loss if running is None else 0.98 * running + 0.02 * state.loss
                if bar is not None:
                    bar.update(1, loss=round(running, 4), best="-" if state.best is None else round(state.best, 2))
                self._step_end()
        except KeyboardInterrupt:
            if at_boundary:
                self.checkpoint()
            raise
        finally:
            if bar is not None:
                bar.close()
        seconds = time.perf_counter() - start
        if self.evaluator is not None:
            self.evaluate()
        elif self.keep_in_memory:
            state.best_state = None  # the last state is the one to keep
        else:
            self.save()
        self.checkpoint()  # the last state, not the best: extending the run continues from where it stopped
        if state.best_state is not None:
            self.module.load_state_dict(state.best_state, strict=False)
        result = self._result(seconds, samples)
        if self.out is not None and ddp.is_main():
            recorded = json.loads(json.dumps(self.settings, default=str))
            save_json(
                self.out / run_output.STATE, {**result.to_dict(), "config": asdict(self.config), "settings": recorded}
            )
        return result

    def _step_end(self) -> None:
        """The history entry due, ``on_step``, the evaluation due and the checkpoint due."""
        state, config = self.state, self.config
        if self.by_epoch:
            state.epoch_losses.append(state.loss)
            if state.step % self.per_epoch == 0 or state.step == state.total:
                epoch, loss = (state.step - 1) // self.per_epoch, float(np.mean(state.epoch_losses))
                state.history.append({"epoch": epoch, "step": state.step, "loss": loss})
                state.epoch_losses = []
        elif state.step % 10 == 0 or state.step == state.total or (state.step == 1 and self.log_first_step):
            entry = {"step": state.step, "loss": state.loss, "lr": self.scheduler.get_last_lr()[0]}
            state.history.append(entry | self.log(state.step) if self.log is not None else entry)
        if self.on_step is not None:
            self.on_step(state.step, state.loss)
        if state.step < state.total and (
            (config.eval_steps and state.step % config.eval_steps == 0)
            or (config.eval_every_epoch and state.step % self.per_epoch == 0)
        ):
            self.evaluate()
        if config.save_steps and state.step % config.save_steps == 0:
            self.checkpoint()

    def _prepare(self) -> None:
        """Check every input before anything is written or trained; build the optimiser; resume if asked."""
        config, out = self.config, self.out
        if out is not None:
            run_output.check_output_dir(out, config.overwrite)
        if self.evaluator is not None and ddp.is_main():
            self.evaluator.check()
        if out is not None and ddp.is_main():
            out.mkdir(parents=True, exist_ok=True)
            run_output.remove_stale_temporaries(out)
        ddp.barrier()
        seed_everything(config.seed)
        ddp.broadcast_parameters(self.module)
        groups = self.param_groups
        if groups is None:
            groups = param_groups([(self.module.parameters(), None)], config.weight_decay)
        groups = [g for g in groups if list(g["params"])]
        if not groups:
            raise SubspacesError("nothing to train: no parameter requires a gradient (is everything frozen?)")
        self.optimizer = torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay)
        from transformers import get_linear_schedule_with_warmup

        total = self.state.total
        warmup = config.warmup_steps if config.warmup_steps is not None else int(config.warmup_ratio * total)
        self.scheduler = get_linear_schedule_with_warmup(self.optimizer, warmup, total)
        self.params = [p for g in self.optimizer.param_groups for p in g["params"]]
        self.fingerprint = _fingerprint(self.module, self.batches, config, self.settings, self.world)
        self.config_dict = json.loads(json.dumps(asdict(config), default=str))
        if self.ckpt_path is not None and config.resume and self.ckpt_path.is_file():
            self._resume(_load_checkpoint(self.ckpt_path, self.fingerprint))

    def _resume(self, saved: dict[str, Any]) -> None:
        state, done = self.state, saved["step"]
        self.module.load_state_dict(saved["module"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        state.step = state.resumed_from = done
        state.best, state.best_step, state.history = saved["best"], saved["best_step"], saved["history"]
        state.best_state = saved.get("best_state")
        state.epoch_losses = list(saved.get("epoch_losses", []))
        set_rng_state(saved["rng"][self.rank])
        state.pending_eval = bool(saved.get("pending_eval", False))
        if saved["total"] != state.total and done < state.total:
            # Extending (or shortening) a run: the linear schedule is re-planned for the new total from here on.
            state.extended_from = saved["total"]
            scheduler = self.scheduler
            for group, base, fn in zip(
                self.optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True
            ):
                group["lr"] = base * fn(done)

    def checkpoint(self) -> None:
        """Write ``checkpoint.pt`` (with the RNG states of the last step boundary); nothing without an output."""
        if self.ckpt_path is None:
            return
        rngs: list[Any] = [self.boundary]
        if self.world > 1:
            rngs = [None] * self.world
            torch.distributed.all_gather_object(rngs, self.boundary)
        if ddp.is_main():
            # Only tensors and plain values (weights_only=True reads them back); the fingerprint first, beside it.
            meta = {"fingerprint": self.fingerprint, "config": self.config_dict}
            save_json(self.ckpt_path.with_name(run_output.CHECKPOINT_META), meta)
            state = self.state
            saved = {
                "module": self.module.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "step": state.step,
                "total": state.total,
                "best": _plain(state.best),
                "best_step": state.best_step,
                "best_state": state.best_state,
                "history": _plain(state.history),
                "pending_eval": state.pending_eval,
                "epoch_losses": list(state.epoch_losses),
                "rng": rngs,
                **meta,
            }
            with atomic_path(self.ckpt_path) as tmp:
                torch.save(saved, tmp)
        ddp.barrier()

    def save(self) -> None:
        """Write the model into the output folder (through ``save_model``)."""
        if ddp.is_main() and self.out is not None and self.save_model is not None:
            run_output.save_model_files(self.out, self.save_model, overwrite=self.config.overwrite)
        ddp.barrier()

    def evaluate(self) -> None:
        """Evaluate (the random numbers training draws are put back after), record it, keep the model if best."""
        if self.evaluator is None:
            return
        module, state = self.module, self.state
        state.pending_eval = True  # a checkpoint written by an interrupt now finishes this evaluation on resume
        saved_rng, was_training = rng_state(), module.training
        module.eval()
        try:
            with torch.no_grad():
                metrics = self.evaluator(module) if ddp.is_main() else None
        finally:  # evaluation must not move the random numbers training draws (exact resume)
            module.train(was_training)
            set_rng_state(saved_rng)
        if self.world > 1:
            box = [metrics]
            torch.distributed.broadcast_object_list(box, src=0)
            metrics = box[0]
        assert metrics is not None
        score = self.evaluator.score(metrics)
        if self.evaluator.is_better(score, state.best):
            if self.keep_in_memory:
                state.best_state = _trainable_state(module)
            else:
                self.save()
            state.best, state.best_step = score, state.step  # only once saved: an interrupt before must not claim it
        if self.by_epoch and state.history and state.history[-1]["step"] == state.step:
            state.history[-1]["dev"] = metrics  # the epoch's entry
        else:
            state.history.append({"step": state.step, "epoch": (state.step - 1) // self.per_epoch, "eval": metrics})
        state.pending_eval = False

    def _result(self, seconds: float, samples: int, already_complete: bool = False) -> FitResult:
        state = self.state
        return FitResult(
            steps=state.step,
            seconds=seconds,
            best_score=state.best,
            best_step=state.best_step,
            history=state.history,
            resumed_from=state.resumed_from,
            samples_per_second=samples / seconds if seconds > 0 else 0.0,
            output_dir=str(self.out) if self.out is not None else None,
            already_complete=already_complete,
            extended_from=None if already_complete else state.extended_from,
        )
