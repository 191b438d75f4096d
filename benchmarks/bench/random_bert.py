"""A randomly initialised BERT with the bundled uncased vocabulary, as a sentence encoder: the start of SimCSE
from scratch (no raw BERT checkpoint is reachable offline), and the tiny models of the tests and smoke runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def build_random_bert(
    output_dir: str | os.PathLike[str],
    *,
    num_layers: int = 4,
    hidden_size: int = 256,
    num_heads: int = 4,
    max_position: int = 512,
    dropout: float = 0.1,
    pooler: str = "cls",
    seed: int = 0,
) -> Any:
    """The model (pooler MLP in training only), with its BERT and minilm-l6's tokenizer in ``output_dir``."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Transformer
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from subspaces.models.encoder import resolve_model_path, with_pooler

    torch.manual_seed(seed)
    tokenizer = BertTokenizerFast.from_pretrained(str(resolve_model_path("minilm-l6")))
    sizes: dict[str, Any] = {"hidden_size": hidden_size, "num_hidden_layers": num_layers}
    sizes |= {"num_attention_heads": num_heads, "intermediate_size": 4 * hidden_size}
    sizes["max_position_embeddings"] = max_position
    dropouts: dict[str, Any] = {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    config = BertConfig(vocab_size=tokenizer.vocab_size, **sizes, **dropouts)
    folder = Path(output_dir)
    BertModel(config).save_pretrained(folder)  # makes the folder
    tokenizer.save_pretrained(folder)
    transformer = Transformer(str(folder), max_seq_length=max_position)
    return with_pooler(SentenceTransformer(modules=[transformer], device="cpu"), pooler, mlp_only_train=True)
