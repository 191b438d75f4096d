"""How the store loads a model, in one place: the active space's, a query model, a migration's target, a Ray
worker's. A model is fingerprinted on its torch weights *before* a backend (ONNX Runtime, OpenVINO) replaces its
transformer, so the same weights match the store whichever backend or precision runs them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from subspaces.errors import SubspacesError
from subspaces.store.fingerprint import ModelFingerprint


@dataclass(frozen=True)
class Runtime:
    """Where and how the store runs its encoders: a torch ``device``, and ``backend``/``precision`` (issue 22).

    int8 runs the same weights quantised: its vectors approximate the fp32 ones (the fingerprint, which names the
    weights, is the same), so a store written in fp32 can be searched in int8 and the other way round.
    """

    device: str | None = "cpu"
    backend: str = "torch"
    precision: str = "fp32"

    def __post_init__(self) -> None:
        from subspaces.models.backends import check_backend

        check_backend(self.backend, self.precision)
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
    fingerprint = ModelFingerprint.of(encoder, name or str(model))
    if runtime.backend != "torch":
        from subspaces.models.backends import with_backend

        encoder = with_backend(encoder, runtime.backend, runtime.precision)
    return encoder, fingerprint
