"""A training forward pass through a sentence encoder, keeping gradients (:func:`subspaces.models.encoder.encode`
is for inference). It needs only torch: importing it does not load sentence-transformers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def embed_with_grad(model: Any, texts: Sequence) -> torch.Tensor:
    """The sentence embeddings of ``texts`` (strings or (text, text) pairs) by ``model`` (a
    ``SentenceTransformer``, truncating to its ``max_seq_length``), keeping gradients."""
    features = model.preprocess(list(texts))
    features = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}
    return model(features)["sentence_embedding"]
