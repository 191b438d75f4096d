"""How the store loads a model and encodes with it, in one place. A model is fingerprinted on its float32 torch
weights before a backend or a bfloat16 cast replaces them, so the same weights match whatever runs them. A space
records the prompts its model puts before stored rows (``"document"``) and queries (``"query"``), chosen when it
is made; a space recorded without them encodes as the model does by default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from subspaces.errors import SubspacesError
from subspaces.models.backends import check_backend, check_dtype, with_backend
from subspaces.store.fingerprint import ModelFingerprint
from subspaces.store.inputs import unicode_problem

ROLES = ("query", "document")
# sentence-transformers' convention: a model folder's prompts named "query" and "document" (or "passage", E5's)
FOLDER_NAMES = {"query": ("query",), "document": ("document", "passage")}


@dataclass(frozen=True)
class Runtime:
    """Where and how the store runs its encoders: a torch ``device``, ``backend``/``precision`` and torch ``dtype``
    (``float32``, the default; ``bfloat16``; ``auto``). Lower precisions approximate the float32 vectors of the same
    weights (the same fingerprint), so a store may be written in one and searched in another."""

    device: str | None = "cpu"
    backend: str = "torch"
    precision: str = "fp32"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        check_backend(self.backend, self.precision)
        check_dtype(self.dtype, self.backend)
        if self.backend != "torch" and self.device not in (None, "cpu"):
            raise SubspacesError(f"backend {self.backend!r} runs on the CPU; use --device cpu (or --backend torch)")
        if self.device not in (None, "cpu"):  # the CPU is always there: no torch import for `store info` and co.
            from subspaces.models.encoder import resolve_device

            resolve_device(self.device)  # an unknown or absent device fails before anything loads


def load(model: Any, name: str | None = None, runtime: Runtime | None = None) -> tuple[Any, ModelFingerprint]:
    """``model`` (a name, a folder or a loaded model) and its fingerprint, recorded under ``name``."""
    from subspaces.models.encoder import load_encoder

    runtime = runtime or Runtime()
    if not isinstance(model, (str, os.PathLike)):
        return model, ModelFingerprint.of(model, name or "")
    encoder = load_encoder(model, device=runtime.device)
    fingerprint = ModelFingerprint.of(encoder, name or str(model))  # of the float32 weights, before any cast
    if runtime.backend != "torch" or runtime.dtype != "float32":
        encoder = with_backend(encoder, runtime.backend, runtime.precision, dtype=runtime.dtype)
    return encoder, fingerprint


def folder_prompts(encoder: Any) -> dict[str, str]:
    """The model folder's non-empty prompts by role (``"document"``: also ``"passage"``)."""
    prompts = getattr(encoder, "prompts", None) or {}
    found = {}
    for role, names in FOLDER_NAMES.items():
        for name in names:
            if isinstance(prompts.get(name), str) and prompts[name]:
                found[role] = prompts[name]
                break
    return found


def choose_prompts(
    encoder: Any,
    *,
    query: str | None = None,
    document: str | None = None,
    query_name: str | None = None,
    document_name: str | None = None,
) -> dict[str, str]:
    """A space's prompts by role: the text given (``""``: none), else the named prompt, else the folder's."""
    chosen = folder_prompts(encoder)
    own = getattr(encoder, "prompts", None) or {}
    for role, text, name in (("query", query, query_name), ("document", document, document_name)):
        if text is not None and name is not None:
            raise SubspacesError(f"give the {role} prompt's text or its name, not both")
        if name is not None:
            if name not in own:
                known = ", ".join(repr(n) for n in own) or "none"
                raise SubspacesError(f"--{role}-prompt-name {name!r} is not one of the model's prompts: {known}")
            text = own[name]
        if text is not None:
            check_prompt(text, role)
            chosen[role] = text
    return chosen


def check_prompt(text: Any, role: str) -> None:
    if not isinstance(text, str):
        raise SubspacesError(f"the {role} prompt must be a string, not {type(text).__name__}")
    problem = unicode_problem(text)
    if problem is not None:
        raise SubspacesError(f"the {role} prompt holds {problem}")


def encode(
    encoder: Any, texts: list[str], prompt: str | None, *, batch_size: int = 64, show_progress: bool | None = False
) -> np.ndarray:
    """Unit vectors of ``texts`` after ``prompt`` (None: the model's default prompt)."""
    from subspaces.models.encoder import encode as encode_texts

    return encode_texts(
        encoder, texts, batch_size=batch_size, normalize=True, show_progress=show_progress, prompt=prompt
    )
