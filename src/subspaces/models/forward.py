"""A training forward pass through a sentence encoder, keeping gradients.

:func:`subspaces.models.encoder.encode` is for inference (no gradients, batching, NumPy out). The conditional and
KGC models train through this instead. It needs only torch: importing it does not load sentence-transformers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def embed_with_grad(model: Any, texts: Sequence) -> torch.Tensor:
    """``model``'s sentence embeddings of ``texts`` (strings or (text, text) pairs), keeping gradients.

    ``model`` is a ``SentenceTransformer``; inputs are truncated to its ``max_seq_length``.
    """
    features = model.preprocess(list(texts))
    features = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}
    return model(features)["sentence_embedding"]
