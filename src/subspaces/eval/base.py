"""The evaluator contract: ``evaluator(model) -> dict[str, float]``, one key of which is the ``primary_metric`` that
picks the best model (``greater_is_better``); ``check()`` reports a missing input before training, not after it.
"""

from __future__ import annotations

from typing import Any

from subspaces.errors import SubspacesError


class Evaluator:
    """Base class: subclasses set ``primary_metric`` (and ``greater_is_better``) and implement ``__call__``."""

    primary_metric: str = "score"
    greater_is_better: bool = True

    def __call__(self, model: Any) -> dict[str, float]:
        raise NotImplementedError

    def check(self) -> None:
        """Raise a user error now if an input the evaluation needs is missing (default: nothing to check)."""

    def score(self, metrics: dict[str, float]) -> float:
        """The primary metric of a result; a clear error if the evaluator did not return it."""
        if self.primary_metric not in metrics:
            raise SubspacesError(
                f"{type(self).__name__} returned {sorted(metrics)} without its primary metric {self.primary_metric!r}"
            )
        return float(metrics[self.primary_metric])

    def is_better(self, score: float, best: float | None) -> bool:
        if best is None:
            return True
        return score > best if self.greater_is_better else score < best


class FunctionEvaluator(Evaluator):
    """Wrap a plain ``model -> float | dict`` function (a float becomes ``{name: value}``)."""

    def __init__(self, function: Any, primary_metric: str = "score", greater_is_better: bool = True) -> None:
        self.function = function
        self.primary_metric = primary_metric
        self.greater_is_better = greater_is_better

    def __call__(self, model: Any) -> dict[str, float]:
        result = self.function(model)
        if isinstance(result, dict):
            return {k: float(v) for k, v in result.items()}
        return {self.primary_metric: float(result)}

    def check(self) -> None:
        if hasattr(self.function, "check"):
            self.function.check()


def as_evaluator(evaluator: Any) -> Evaluator | None:
    """An :class:`Evaluator` as is; None stays None; any other callable wrapped in :class:`FunctionEvaluator`, keeping
    the ``primary_metric`` and ``greater_is_better`` it declares (a duck-typed evaluator from another package)."""
    if evaluator is None or isinstance(evaluator, Evaluator):
        return evaluator
    metric = getattr(evaluator, "primary_metric", "score")
    return FunctionEvaluator(evaluator, metric, getattr(evaluator, "greater_is_better", True))
