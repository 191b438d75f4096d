"""subspaces: sentence embeddings that adapt.

Four methods share one spine, texts -> encoder -> (optional head) -> embeddings -> loss or evaluator:

* SimCSE contrastive training (:mod:`subspaces.losses.simcse`, :mod:`subspaces.train.simcse`)
* Hyper-CL conditional subspaces (:mod:`subspaces.cond`, :mod:`subspaces.kgc`)
* Matryoshka + MIC regularisers (:mod:`subspaces.losses.matryoshka`)
* mini-vec2vec unsupervised alignment (:mod:`subspaces.align`)

Heavy dependencies (torch, transformers) are imported lazily, so ``import subspaces`` is cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "load_encoder": "subspaces.models.encoder",
    "encode": "subspaces.models.encoder",
    "SimCSELoss": "subspaces.losses.simcse",
    "STSEvaluator": "subspaces.eval.sts",
    "data_dir": "subspaces.config",
    "SubspacesError": "subspaces.errors",
}

if TYPE_CHECKING:  # pragma: no cover
    from subspaces.config import data_dir
    from subspaces.errors import SubspacesError
    from subspaces.eval.sts import STSEvaluator
    from subspaces.losses.simcse import SimCSELoss
    from subspaces.models.encoder import encode, load_encoder


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'subspaces' has no attribute {name!r}")


__all__ = ["STSEvaluator", "SimCSELoss", "SubspacesError", "__version__", "data_dir", "encode", "load_encoder"]
