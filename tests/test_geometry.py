"""Alignment/uniformity and the trajectory plot drawn from a run's JSON history (SimCSE's Figure 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.analysis import plot_alignment_uniformity
from subspaces.eval.geometry import alignment, uniformity


def test_alignment_and_uniformity_by_hand():
    x = np.array([[1.0, 0.0], [0.0, 1.0]])
    y = np.array([[1.0, 0.0], [1.0, 0.0]])
    assert alignment(x, y) == pytest.approx((0.0 + 2.0) / 2)  # ||(0,1)-(1,0)||^2 = 2
    assert uniformity(x) == pytest.approx(-2.0 * 2.0)  # one pair at squared distance 2, t = 2


def test_trajectory_plot_is_made_from_the_json_history(tmp_path):
    history = {
        "dropout (seed 0)": [{"step": s, "alignment": 0.2 + s / 100, "uniformity": -1 - s / 50} for s in (0, 10, 20)],
        "none (seed 0)": [{"step": s, "alignment": 0.1, "uniformity": -0.5 - s / 100} for s in (0, 10, 20)],
    }
    source = tmp_path / "runs.json"
    source.write_text(json.dumps(history))
    out = plot_alignment_uniformity(json.loads(source.read_text()), tmp_path / "plot.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert not list(tmp_path.glob(".plot.png.*"))  # written atomically, no temporary left


def test_trajectory_plot_refuses_an_empty_history(tmp_path):
    with pytest.raises(ValueError, match="no alignment"):
        plot_alignment_uniformity({"x": []}, tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()
