"""``store reembed``: replace a migration's mapped rows by true vectors of its model, a budget at a time, oldest
first, a commit a batch; then their ids are appended to ``native/SPACE.ids``, the record of true vectors (a run
killed in between re-encodes that batch, to the same vectors). Rows that change leave it (:func:`forget_native`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from subspaces.errors import SubspacesError
from subspaces.io import atomic_open
from subspaces.progress import Progress
from subspaces.store import quantized
from subspaces.store.encoders import encode
from subspaces.store.table import block_of

if TYPE_CHECKING:
    from subspaces.store.core import Store

FOLDER = "native"


def native_ids(store: Store, name: str) -> set[str]:
    """The ids of space ``name`` recorded as re-embedded (true vectors of its model)."""
    path = store.path / FOLDER / f"{name}.ids"
    if not path.is_file():
        return set()
    return {line for line in path.read_text(encoding="utf-8").splitlines() if line}


def forget_native(store: Store, name: str, ids: set[str] | None = None) -> None:
    """Drop ``ids`` (None: all) from space ``name``'s record of re-embedded rows, before those rows change."""
    path = store.path / FOLDER / f"{name}.ids"
    if ids is None:
        path.unlink(missing_ok=True)
        return
    if not path.is_file():
        return
    lines = path.read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if line and line not in ids]
    if len(kept) != len(lines):
        with atomic_open(path, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{row_id}\n" for row_id in kept))


def _mapped_space(store: Store, space: str | None) -> str:
    manifest = store.manifest
    if space is not None:
        name = space
    else:
        pending = manifest.pending()
        name = pending[0] if pending else manifest.active
    record = store._space(name)
    if record.source != "mapped":
        raise SubspacesError(
            f"space {name} holds its model's own vectors (nothing mapped to re-embed); reembed follows a rewrite "
            "migration (store migrate DIR --to MODEL)"
        )
    if record.state == "retired":
        raise SubspacesError(f"space {name} was retired by a migration; re-embed the active or a pending one")
    return name


def reembed(
    store: Store,
    *,
    budget: int | None = None,
    seconds: float | None = None,
    space: str | None = None,
    batch: int = 256,
    batch_size: int = 64,
    show_progress: bool = False,
) -> dict[str, Any]:
    """Re-encode up to ``budget`` mapped rows (or for about ``seconds``) of the mapped space (a pending migration's,
    else the active one); returns ``{"space", "reembedded", "native", "mapped", "without_text", "rows",
    "native_fraction", "seconds"}``."""
    if budget is None and seconds is None:
        raise SubspacesError("give --budget N (rows) or --seconds S (a time budget)")
    if (budget is not None and budget < 1) or (seconds is not None and seconds <= 0) or batch < 1:
        raise SubspacesError("--budget and --seconds must be positive")
    with store._writing("store reembed"):
        start = time.perf_counter()
        name = _mapped_space(store, space)
        record = store._space(name)
        rows = store._load_rows(name)
        done = native_ids(store, name)
        todo = [i for i, row_id in enumerate(rows.ids) if row_id not in done and rows.texts[i] is not None]
        without_text = int(sum(1 for i, t in enumerate(rows.texts) if t is None and rows.ids[i] not in done))
        if budget is not None:
            todo = todo[:budget]
        written = 0
        if todo:
            encoder = store._models.get(name) or store.model(name)
            quantized.invalidate(store, name, "rows were re-embedded (store reembed)")
            path = store.path / FOLDER / f"{name}.ids"
            path.parent.mkdir(parents=True, exist_ok=True)
            with Progress(len(todo), f"store reembed: space {name}", unit="row", enabled=show_progress) as bar:
                for first in range(0, len(todo), batch):
                    if seconds is not None and written and time.perf_counter() - start > seconds:
                        break
                    part = np.asarray(todo[first : first + batch])
                    texts = rows.texts[part].tolist()
                    prompt = record.prompts.get("document")
                    vectors = encode(encoder, texts, prompt, batch_size=batch_size, show_progress=None)
                    block = block_of(
                        record.model.dimension, rows.ids[part], rows.texts[part], vectors, list(rows.metadata[part])
                    )
                    store._append(name, [block], bar, replace=set(rows.ids[part].tolist()))
                    # the record after the rows: killed in between, the rerun re-encodes this batch (same vectors)
                    previous = path.read_text(encoding="utf-8") if path.is_file() else ""
                    with atomic_open(path, "w", encoding="utf-8") as handle:
                        handle.write(previous + "".join(f"{row_id}\n" for row_id in rows.ids[part]))
                    written += len(part)
        stored = store._ids(name)
        native = len(native_ids(store, name) & stored)
        return {
            "space": name,
            "reembedded": written,
            "native": native,
            "mapped": len(stored) - native,
            "without_text": without_text,
            "rows": len(stored),
            "native_fraction": round(native / len(stored), 4) if stored else None,
            "seconds": round(time.perf_counter() - start, 3),
        }
