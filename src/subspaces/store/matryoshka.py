"""Whether a store's model was trained for truncation (Matryoshka), which decides what ``--dims`` reads by default.

A Matryoshka-trained model's first ``d`` coordinates are what it was trained to be read by; any other model
spreads its variance over every coordinate, and the store's principal axes (``basis="pca"``) shortlist far
better. A model counts as trained for
truncation when its folder says so: ``trainer_state.json`` of ``subspaces matryoshka train`` (its ``settings``
name the ``dims``), or a sentence-transformers model card (``README.md``) that names ``MatryoshkaLoss``. Bundled
models, foreign vectors and models built in memory are not.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from subspaces.store.fingerprint import ModelFingerprint


def trained(model: ModelFingerprint) -> bool:
    """Whether the model that wrote a space's vectors was trained for truncation (see the module)."""
    if model.foreign or not model.name:
        return False
    return _folder_says(model.name)


@lru_cache(maxsize=64)
def _folder_says(name: str) -> bool:
    folder = Path(name)
    if not folder.is_dir():
        return False  # a bundled name
    state = folder / "trainer_state.json"
    try:
        if state.is_file():
            settings = json.loads(state.read_text(encoding="utf-8")).get("settings") or {}
            if isinstance(settings, dict) and settings.get("dims"):
                return True
        card = folder / "README.md"
        return card.is_file() and "MatryoshkaLoss" in card.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError, AttributeError):
        return False
