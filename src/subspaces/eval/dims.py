"""How much of an embedding's quality its prefixes keep: probes and STS at truncated dimensions.

Texts are encoded once at full size; dimension d uses the first d coordinates, re-normalised. Classification is a
standardised logistic-regression probe (pairs on SentEval's ``[u, v, |u - v|, u * v]``), STS Spearman x 100 of the
prefix cosines; each task reports its own metric, every metric under ``details``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from subspaces.data import classification as cls_data
from subspaces.data.sts import STS_YEARS, load_task
from subspaces.data.sts import TASKS as STS_TASKS
from subspaces.errors import DimensionError, SubspacesError
from subspaces.eval.base import Evaluator
from subspaces.eval.sts import encode_sides, prefix_spearman
from subspaces.io import atomic_path
from subspaces.progress import progress
from subspaces.results import JSONResult
from subspaces.vectors import resolve_dims, unit_prefix


@dataclass(frozen=True)
class DimsTask:
    name: str
    metric: str  # accuracy | macro_f1 | f1 | macro_recall | spearman
    load: Callable[[str], Any] | None = None  # split -> labelled texts or pairs; None for STS (read by name)
    train: str = "train"
    note: str = ""


def _tweeteval(task: str, metric: str, train: str = "train", note: str = "") -> DimsTask:
    return DimsTask(f"TweetEval-{task}", metric, partial(cls_data.load_tweeteval, task), train, note)


TASKS = {
    t.name: t
    for t in [
        DimsTask("Banking77", "accuracy", cls_data.load_banking77),
        DimsTask("Emotion", "accuracy", cls_data.load_emotion),
        _tweeteval("emotion", "macro_f1"),
        _tweeteval("hate", "macro_f1"),
        _tweeteval("irony", "f1"),
        _tweeteval("offensive", "macro_f1"),
        _tweeteval("emoji", "macro_f1"),
        _tweeteval("sentiment", "macro_recall", "val", "probe trained on val: the train texts are missing"),
        DimsTask("MRPC", "accuracy", cls_data.load_mrpc),
        DimsTask("WiC", "accuracy", cls_data.load_wic_pairs),
        *[DimsTask(name, "spearman") for name in STS_TASKS],
    ]
}
DEFAULT_TASKS = tuple(name for name in TASKS if name != "TweetEval-emoji" and name not in STS_YEARS)


def known_tasks() -> list[str]:
    return list(TASKS)


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """SentEval's pair representation ``[u, v, |u - v|, u * v]``."""
    return np.concatenate([u, v, np.abs(u - v), u * v], axis=1)


def classification_scores(gold: Sequence[int], pred: Sequence[int]) -> dict[str, float]:
    """Accuracy, macro-F1, macro-recall and class 1's F1 (binary tasks), all x 100."""
    from sklearn.metrics import accuracy_score, f1_score, recall_score

    return {
        "accuracy": 100 * float(accuracy_score(gold, pred)),
        "macro_f1": 100 * float(f1_score(gold, pred, average="macro", zero_division=0)),
        "macro_recall": 100 * float(recall_score(gold, pred, average="macro", zero_division=0)),
        "f1": 100 * float(f1_score(gold, pred, pos_label=1, average="binary", zero_division=0))
        if len(set(gold) | set(pred)) <= 2
        else float("nan"),
    }


def _subsample(n: int, cap: int | None, seed: int) -> np.ndarray:
    if cap is None or n <= cap:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).permutation(n)[:cap])


@dataclass
class DimsReport(JSONResult):
    """What :meth:`DimsEvaluator.report` returns; :meth:`to_dict` is the JSON ``--json`` writes (dims as strings
    in ``scores``, ``full`` written as the model's size)."""

    model: str
    dims: list[int]
    scores: dict[str, dict[str, float]]  # task -> dim -> the task's own metric
    metrics: dict[str, str]  # task -> the name of that metric
    details: dict[str, Any]  # task -> dim -> every metric (and, when kept, the predictions)
    notes: dict[str, str]
    settings: dict[str, Any]


@dataclass
class DimsEvaluator(Evaluator):
    """Every task at every prefix size: ``DimsEvaluator(dims=[16, None])(model)`` -> ``{"Banking77@16": .., ...,
    "mean": ..}`` (the primary metric: over every task and dim); :meth:`report` gives the whole :class:`DimsReport`.

    ``dims``: ``None`` is the full size; ``max_train``, ``max_test``: cap each split's rows (a seeded subset);
    ``C``, ``max_iter``: the logistic-regression probe's; ``keep_predictions``: also keep the test rows' predicted
    and gold labels in ``details``, what a paired bootstrap between two models resamples.
    """

    tasks: Sequence[str] = DEFAULT_TASKS
    dims: Sequence[int | None] = (16, 32, 64, 128, None)
    max_train: int | None = None
    max_test: int | None = None
    C: float = 1.0
    max_iter: int = 1000
    batch_size: int = 64
    random_state: int = 0
    show_progress: bool = False
    keep_predictions: bool = False
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    primary_metric = "mean"

    def __post_init__(self) -> None:
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown:
            raise SubspacesError(f"unknown task(s) {unknown}; choose from {', '.join(TASKS)}")
        if not self.dims:
            raise SubspacesError("no dimensions given")

    def check(self) -> None:
        for task in self.tasks:
            self._data(TASKS[task])

    def resolve_dims(self, full: int) -> list[int]:
        return resolve_dims(self.dims, full, order="given")

    def _data(self, task: DimsTask) -> tuple[Any, Any]:
        if task.name not in self._cache:
            load = task.load
            self._cache[task.name] = (None, load_task(task.name)) if load is None else (load(task.train), load("test"))
        return self._cache[task.name]

    def _probe(self, x_train: np.ndarray, y_train: Sequence[int], x_test: np.ndarray, y_test: Sequence[int]):
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        probe = make_pipeline(StandardScaler(), LogisticRegression(C=self.C, max_iter=self.max_iter))
        probe.fit(x_train, np.asarray(y_train))
        predicted = probe.predict(x_test)
        scores: dict[str, Any] = classification_scores(list(y_test), list(predicted))
        if self.keep_predictions:
            scores["predictions"] = predicted.tolist()
        return scores

    def evaluate_task(self, model, task_name: str, dims: Sequence[int]) -> tuple[dict[str, float], dict[str, Any]]:
        """Scores of one task at each dim: ``({"16": main metric, ...}, {"16": every metric, ...})``."""
        task = TASKS[task_name]
        train, test = self._data(task)
        if task.load is None:  # STS
            e1, e2 = encode_sides(model, (test.sentences1, test.sentences2), self.batch_size, normalize=False)
            return {str(d): prefix_spearman(e1, e2, test.scores, d) for d in dims}, {}
        tr = _subsample(len(train), self.max_train, self.random_state)
        te = _subsample(len(test), self.max_test, self.random_state + 1)
        y_train, y_test = [train.labels[i] for i in tr], [test.labels[i] for i in te]
        x_train = encode_sides(model, [[side[i] for i in tr] for side in train.sides], self.batch_size, normalize=False)
        x_test = encode_sides(model, [[side[i] for i in te] for side in test.sides], self.batch_size, normalize=False)
        scores: dict[str, float] = {}
        details: dict[str, Any] = {}
        for d in dims:
            result = self._probe(_features(x_train, d), y_train, _features(x_test, d), y_test)
            scores[str(d)] = result[task.metric]
            details[str(d)] = result
        if self.keep_predictions:
            details["gold"] = np.asarray(y_test).tolist()
        return scores, details

    def __call__(self, model: Any) -> dict[str, float]:
        scores = {f"{task}@{d}": s for task, by_dim in self.report(model).scores.items() for d, s in by_dim.items()}
        return {**scores, "mean": float(np.mean(list(scores.values())))}

    def report(self, model: Any, name: str | None = None) -> DimsReport:
        """Run every task at every dim; ``name`` names the model in the report and the progress display."""
        full = model.get_embedding_dimension()
        if full is None:
            raise DimensionError("the model does not report its embedding size")
        dims = self.resolve_dims(int(full))
        report = DimsReport(
            model=name or "model",
            dims=dims,
            scores={},
            metrics={t: TASKS[t].metric for t in self.tasks},
            details={},
            notes={t: TASKS[t].note for t in self.tasks if TASKS[t].note},
            settings={
                "max_train": self.max_train,
                "max_test": self.max_test,
                "C": self.C,
                "random_state": self.random_state,
            },
        )
        for task in progress(self.tasks, f"eval dims {name or 'model'}", unit="task", enabled=self.show_progress):
            scores, details = self.evaluate_task(model, task, dims)
            report.scores[task] = scores
            if details:
                report.details[task] = details
        return report


def _features(sides: Sequence[np.ndarray], dim: int) -> np.ndarray:
    """A text's unit prefix, or a pair's SentEval features of its sides' unit prefixes."""
    parts = [unit_prefix(x, dim) for x in sides]
    return parts[0] if len(parts) == 1 else pair_features(*parts)


def plot_dims(reports: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Score against dimension, one panel per task and one line per model (reports in their JSON form, as
    :meth:`DimsReport.to_dict` gives and ``--json`` writes); written atomically as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(t for r in reports for t in r["scores"]))
    if not tasks:
        raise SubspacesError("nothing to plot: the reports hold no scores")
    cols = min(4, len(tasks))
    rows = -(-len(tasks) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False)
    for ax, task in zip(axes.flat, tasks, strict=False):  # the grid may have more panels than tasks
        for report in reports:
            if task not in report["scores"]:
                continue
            points = sorted((int(d), s) for d, s in report["scores"][task].items())
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=report["model"])
        ax.set_xscale("log", base=2)
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("dimension", fontsize=8)
        metric = next((r["metrics"].get(task) for r in reports if task in r.get("metrics", {})), "")
        ax.set_ylabel(metric, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(tasks) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, len(reports)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    target = Path(path)
    with atomic_path(target) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return target
