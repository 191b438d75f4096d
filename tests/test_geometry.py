"""Alignment and uniformity (SimCSE's Figure 2 measures), by hand."""

from __future__ import annotations

import numpy as np
import pytest

from subspaces.eval.geometry import alignment, uniformity


def test_alignment_and_uniformity_by_hand():
    x = np.array([[1.0, 0.0], [0.0, 1.0]])
    y = np.array([[1.0, 0.0], [1.0, 0.0]])
    assert alignment(x, y) == pytest.approx((0.0 + 2.0) / 2)  # ||(0,1)-(1,0)||^2 = 2
    assert uniformity(x) == pytest.approx(-2.0 * 2.0)  # one pair at squared distance 2, t = 2
