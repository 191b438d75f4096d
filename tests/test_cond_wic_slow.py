"""Checks on the real WiC data and the bundled minilm-l6 (slow: run with `pytest -m slow`)."""

import numpy as np
import pytest

from subspaces.cond.metrics import choose_threshold, conditional_metrics
from subspaces.cond.tasks import get_task

pytestmark = pytest.mark.slow


def test_wic_splits_and_seen_share():
    task = get_task("wic")
    train, dev, test = task.load("train"), task.load("validation"), task.load("test")
    assert (len(train), len(dev), len(test)) == (5428, 638, 1400)
    keys = set(task.seen_keys(train))
    assert np.mean([task.seen_key(r) in keys for r in test]) == pytest.approx(0.41, abs=0.005)


def test_no_condition_floor_reproduces():
    """The issue's floor: plain minilm-l6 cosine, threshold from dev -> test accuracy 0.599, AUC 0.638."""
    from subspaces.models.encoder import encode, load_encoder

    task = get_task("wic")
    dev, test = task.load("validation"), task.load("test")
    model = load_encoder("minilm-l6")

    def cos(rows):
        a = encode(model, [r.sentence1 for r in rows], normalize=True)
        b = encode(model, [r.sentence2 for r in rows], normalize=True)
        return (a * b).sum(1)

    threshold = choose_threshold(cos(dev), np.array(task.scaled_labels(dev)))
    result = conditional_metrics(cos(test), task.scaled_labels(test), binary=True, threshold=threshold)
    assert result["metrics"]["accuracy"] == pytest.approx(0.599, abs=0.002)
    assert result["metrics"]["auc"] == pytest.approx(0.638, abs=0.002)
