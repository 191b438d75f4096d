"""Whether a store's model was trained for truncation (Matryoshka), which decides what ``--dims`` reads by default:
its first coordinates if so, else the store's principal axes. It is when its folder says so: a
``trainer_state.json`` whose ``settings`` name ``dims``, or a model card (``README.md``) naming ``MatryoshkaLoss``.
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
