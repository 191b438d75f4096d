"""WordLlama as a sentence-transformers :class:`StaticEmbedding`.

WordLlama embeds a text as the mean of its tokens' vectors (LLaMA-2 tokenizer, no special tokens, float16
weights promoted to float32). ``StaticEmbedding`` computes exactly that with an ``EmbeddingBag`` in mean mode, so
the converted model reproduces ``WordLlama.embed`` and trains like any sentence-transformers model.
"""

from __future__ import annotations

import os
from pathlib import Path

from subspaces.state_folder import built_folder


def convert_wordllama(
    weights_path: str | os.PathLike[str],
    tokenizer_path: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    truncate_dim: int | None = None,
) -> Path:
    """Write a sentence-transformers folder holding WordLlama's token table (``truncate_dim``: a Matryoshka prefix
    of it) and tokenizer."""
    from safetensors import safe_open
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from tokenizers import Tokenizer

    with safe_open(str(weights_path), framework="np", device="cpu") as handle:
        table = handle.get_tensor("embedding.weight").astype("float32")
    if truncate_dim is not None:
        table = table[:, :truncate_dim]
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.no_truncation()
    module = StaticEmbedding(tokenizer, embedding_weights=table)

    target = Path(output_dir)
    with built_folder(target) as build:
        model = SentenceTransformer(modules=[module], device="cpu")
        model.model_card_data.local_files_only = True  # saving it looks nothing up on the hub
        model.save(str(build))
    return target
