"""How the store loads a model and encodes with it, in one place. A model is fingerprinted on its float32 torch
weights *before* a backend (ONNX Runtime, OpenVINO) or a bfloat16 cast replaces them, so the same weights match
the store whichever backend, precision or dtype runs them.

A space records the prompts its model puts before texts (``"document"`` for stored rows, ``"query"`` for
queries), chosen once when the space is made, so every later ``add`` and ``search`` encodes the same way; a space
recorded without them encodes as the model does by default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from subspaces.errors import SubspacesError
from subspaces.store.fingerprint import ModelFingerprint
from subspaces.store.inputs import unicode_problem

ROLES = ("query", "document")
# sentence-transformers' convention: a model folder's prompts named "query" and "document" (or "passage", E5's)
FOLDER_NAMES = {"query": ("query",), "document": ("document", "passage")}


@dataclass(frozen=True)
class Runtime:
    """Where and how the store runs its encoders: a torch ``device``, ``backend``/``precision`` and the
    torch ``dtype`` (``float32``, the default: the same vectors on every CPU; ``bfloat16``; ``auto``).

    int8 and bfloat16 run the same weights at lower precision: their vectors approximate the float32 ones (the
    fingerprint, which names the weights, is the same), so a store written in float32 can be searched in int8 or
    bfloat16 and the other way round.
    """

    device: str | None = "cpu"
    backend: str = "torch"
    precision: str = "fp32"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        from subspaces.models.backends import check_backend, check_dtype

        check_backend(self.backend, self.precision)
        check_dtype(self.dtype, self.backend)
        if self.backend != "torch" and self.device not in (None, "cpu"):
            raise SubspacesError(f"backend {self.backend!r} runs on the CPU; use --device cpu (or --backend torch)")
        if self.device not in (None, "cpu"):  # the CPU is always there: no torch import for `store info` and co.
            from subspaces.models.encoder import resolve_device

            resolve_device(self.device)  # an unknown or absent device fails before anything loads


def load(model: Any, name: str | None = None, runtime: Runtime | None = None) -> tuple[Any, ModelFingerprint]:
    """``model`` (a bundled name or folder, or a loaded SentenceTransformer used as given) and its fingerprint,
    recorded under ``name`` (default: the name or folder given; ``""`` for a model built in memory)."""
    from subspaces.models.encoder import load_encoder

    runtime = runtime or Runtime()
    if not isinstance(model, (str, os.PathLike)):
        return model, ModelFingerprint.of(model, name or "")
    encoder = load_encoder(model, device=runtime.device)
    fingerprint = ModelFingerprint.of(encoder, name or str(model))  # of the float32 weights, before any cast
    if runtime.backend != "torch" or runtime.dtype != "float32":
        from subspaces.models.backends import with_backend

        encoder = with_backend(encoder, runtime.backend, runtime.precision, dtype=runtime.dtype)
    return encoder, fingerprint


def folder_prompts(encoder: Any) -> dict[str, str]:
    """The model folder's prompts by role: ``"query"`` and ``"document"`` (or ``"passage"``), where it has them.
    An empty one is none (sentence-transformers gives every model empty ``query`` and ``document`` prompts)."""
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
    """A space's prompts by role: the text given (``""``: none), else the named prompt of the model folder, else
    the folder's own by convention (:func:`folder_prompts`). A role left without one is absent."""
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
    encoder: Any, texts: list[str], prompt: str | None, *, batch_size: int = 64, show_progress: bool = False
) -> np.ndarray:
    """Unit vectors of ``texts``, each encoded after ``prompt`` (None: as the model does by default)."""
    from subspaces.models.encoder import encode as encode_texts

    return encode_texts(
        encoder, texts, batch_size=batch_size, normalize=True, show_progress=show_progress, prompt=prompt
    )
