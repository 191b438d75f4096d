"""SimCSE: unsupervised (dropout views of one sentence) and supervised (NLI triplets), the recipe
(``SimCSEConfig``) in :mod:`subspaces.train.recipes`; the checkpoint best on STS-B dev is kept."""

from __future__ import annotations

import random
from collections.abc import Sequence

from subspaces.eval.sts import STSBDevEvaluator
from subspaces.losses.simcse import SimCSELoss
from subspaces.train.engine import FitResult
from subspaces.train.recipes import Augmentation, SimCSEConfig
from subspaces.train.sentence import train_sentence_loss

POOLER = "cls"  # what a plain transformers base pools with (unsup: with the MLP in training only)


def delete_one_word(sentence: str, rng: random.Random) -> str:
    """SimCSE Table 1's discrete augmentation: drop one word at random (sentences of one word are kept)."""
    words = sentence.split()
    if len(words) < 2:
        return sentence
    del words[rng.randrange(len(words))]
    return " ".join(words)


def unsup_examples(
    sentences: Sequence[str], augmentation: Augmentation = "dropout", seed: int = 0
) -> list[tuple[str, ...]]:
    """Rows for unsupervised SimCSE: one column (``dropout``; ``none``, with dropout switched off by
    :func:`set_dropout`), or the sentence and a copy with one word deleted (``delete_one_word``)."""
    if augmentation == "delete_one_word":
        rng = random.Random(seed)
        return [(s, delete_one_word(s, rng)) for s in sentences]
    return [(s,) for s in sentences]


def set_dropout(model, p: float) -> None:
    """Set every dropout probability of ``model`` to ``p`` (SimCSE's "no dropout" ablation uses p = 0)."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p


def train_simcse(
    model, examples: Sequence[tuple[str, ...]], config: SimCSEConfig, evaluator=None, *, card_notes=(), callback=None
) -> FitResult:
    """Train ``model`` with SimCSE's InfoNCE on ``examples`` (1, 2 or 3 columns); ``evaluator`` defaults to STS-B
    dev Spearman when ``config.stsb_dev``."""
    loss = SimCSELoss(model, temperature=config.temperature, hard_negative_weight=config.hard_negative_weight)
    if evaluator is None and config.stsb_dev:
        evaluator = STSBDevEvaluator(config.stsb_variant)
    return train_sentence_loss(model, loss, examples, config, evaluator, card_notes=card_notes, callback=callback)
