"""Folders written whole: :func:`built_folder` (built beside, renamed into place), and a fitted estimator's folder:
``state.npz`` beside a JSON config recording its SHA-256 (and, with ``hash_config``, that of its own fields). Each
file is replaced atomically, the state first, so an interrupted save or a hand-edited config is refused on reading.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from subspaces.errors import DataError
from subspaces.fingerprint import json_sha256, sha256_hex
from subspaces.io import atomic_open

STATE_FILE = "state.npz"


@contextlib.contextmanager
def built_folder(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a path in a scratch folder beside ``target`` to build a folder at; without error it replaces ``target``
    in one rename, and the scratch is always deleted (an interrupted build never leaves half a folder)."""
    final = Path(target)
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        yield scratch / "out"
        if final.exists():
            shutil.rmtree(final)
        os.replace(scratch / "out", final)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_state_folder(
    path: str | os.PathLike[str],
    config_file: str,
    arrays: Mapping[str, Any],
    config: Mapping[str, Any],
    *,
    format_version: int,
    hash_config: bool = False,
) -> Path:
    """Write ``arrays`` to ``path/state.npz``, then ``{"format_version", **config, "state_sha256"}`` (and, with
    ``hash_config``, ``"config_sha256"``) to ``path/config_file``; returns the folder."""
    import numpy as np

    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise DataError("exists and is not a folder", path=folder)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    state = buffer.getvalue()
    record = {"format_version": format_version, **config, "state_sha256": sha256_hex(state)}
    record = json.loads(json.dumps(record))  # as it will be read back (tuples as lists), so the hash is of that
    if hash_config:
        record["config_sha256"] = config_sha256(record)
    text = json.dumps(record, indent=2)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_open(folder / STATE_FILE, "wb") as handle:
        handle.write(state)
    with atomic_open(folder / config_file, "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    return folder


def read_state_folder(
    path: str | os.PathLike[str],
    config_file: str,
    *,
    versions: Collection[int],
    written_by: str,
    config_hashed_from: int | None = None,
) -> tuple[dict[str, Any], bytes]:
    """The config (``format_version`` one of ``versions``) and the state's bytes, checked against ``state_sha256``
    and ``config_sha256`` (required from ``config_hashed_from`` on); ``written_by`` names the command that writes it."""
    folder = Path(path)
    config_path, state_path = folder / config_file, folder / STATE_FILE
    for p in (config_path, state_path):
        if not p.is_file():
            raise DataError(f"not found; is this a folder written by `subspaces {written_by}`?", path=p)
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise DataError(f"not valid JSON: {exc}", path=config_path) from exc
    version = config.get("format_version") if isinstance(config, dict) else None
    if version not in versions:
        readable = " or ".join(str(v) for v in sorted(versions))
        raise DataError(f"unsupported format_version {version!r} (this subspaces reads {readable})", path=config_path)
    recorded = config.get("config_sha256")
    must = config_hashed_from is not None and isinstance(version, int) and version >= config_hashed_from
    if (must or recorded is not None) and recorded != config_sha256(config):
        why = "has no config_sha256" if recorded is None else "was edited after it was written"
        raise DataError(
            f"{why} (its fields no longer match the fitted state, and would change the output); refit with "
            f"`subspaces {written_by}`",
            path=config_path,
        )
    state = state_path.read_bytes()
    expected = config.get("state_sha256")
    if sha256_hex(state) != expected:
        raise DataError(f"does not belong to {config_file} beside it (an interrupted save?); refit", path=state_path)
    return config, state


def config_sha256(config: Mapping[str, Any]) -> str:
    """SHA-256 of every field of ``config`` but ``config_sha256`` itself, in a canonical JSON form (sorted keys,
    no spaces), so the hash is of the values, not of the file's layout."""
    return json_sha256({k: v for k, v in config.items() if k != "config_sha256"}, compact=True)
