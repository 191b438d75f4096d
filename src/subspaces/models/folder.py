"""The one model-folder format of the conditional and KGC models (tri-encoders, heads, their bi-encoder baselines).

A folder holds ``subspaces_model.json`` and the weights it names::

    {"format_version": 1, "task": "cond" | "kgc", "arch": "tri" | "bi",
     "encoder": "encoder" | "<bundled name or absolute path>",   # a sub-folder, or a reference to unchanged weights
     "condition_encoder": ..., "tail_encoder": ...,               # optional second encoders (same rule)
     "head": {"kind": ..., "dim": ..., ...},  "head.pt" beside    # tri-encoders only
     "freeze_encoder": bool, "max_seq_length": int | null, "encode_batch_size": int, "metadata": {...}}

The config is written last, so a folder with a config is complete.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from subspaces.errors import ModelNotFoundError
from subspaces.io import save_json
from subspaces.models import registry
from subspaces.state_folder import built_folder

CONFIG_NAME = "subspaces_model.json"
FORMAT_VERSION = 1
TASK_FOLDERS = {"cond": "conditional model folder", "kgc": "KGC model folder"}


def is_model_folder(path: str | Path) -> bool:
    return (Path(str(path)) / CONFIG_NAME).is_file()


def read_config(folder: str | Path, task: str | None = None) -> dict[str, Any]:
    """The folder's config; ``task`` checks what it holds."""
    folder = Path(folder)
    if not (folder / CONFIG_NAME).is_file():
        raise ModelNotFoundError(f"{folder} is not a {TASK_FOLDERS.get(task or '', 'model folder')} (no {CONFIG_NAME})")
    try:
        config = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelNotFoundError(f"{folder / CONFIG_NAME} is not valid JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise ModelNotFoundError(f"{folder / CONFIG_NAME} does not hold a JSON object")
    version = config.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ModelNotFoundError(
            f"{folder / CONFIG_NAME} has format_version {version!r}; this subspaces reads up to {FORMAT_VERSION}"
        )
    if config.get("arch") not in ("tri", "bi"):
        raise ModelNotFoundError(f"{folder}: unknown architecture {config.get('arch')!r}; expected tri or bi")
    if task is not None and config.get("task") != task:
        raise ModelNotFoundError(
            f"{folder} holds a {config.get('task')} model, not a {task} one; use `subspaces {config.get('task')} eval`"
        )
    return config


def write_config(folder: Path, config: dict[str, Any]) -> None:
    save_json(folder / CONFIG_NAME, {"format_version": FORMAT_VERSION, **config})


def encoder_reference(name_or_path: str) -> str:
    """What a config stores for unchanged weights: a bundled name as is, a local folder as an absolute path."""
    text = str(name_or_path)
    if text in registry.known_models():
        return text
    path = Path(text).expanduser()
    return str(path.resolve()) if path.is_dir() else text


def load_referenced_encoder(
    folder: Path, ref: str, max_seq_length: int | None = None, device: str = "cpu"
) -> tuple[Any, str | None]:
    """The encoder a config names (``folder/ref`` when that is a sub-folder, else a bundled name or a path) and the
    reference to keep for it (None: its weights are saved in ``folder``)."""
    from subspaces.models.encoder import load_encoder

    here = not Path(ref).is_absolute() and (folder / ref).is_dir()
    encoder = load_encoder(folder / ref if here else ref, max_seq_length=max_seq_length, device=device)
    return encoder, None if here else ref


def save_encoder(encoder: Any, folder: Path) -> None:
    """Write a sentence-transformers folder so that an interrupted save never leaves half of one in place."""
    with built_folder(folder) as build:
        encoder.save(str(build))
