"""Fingerprints: what caches and stores key vectors by, so a changed model never reads a stale vector.

Each is recorded on disk (store manifests, embedding shards, exported graphs, activation caches): computing one
differently orphans what was recorded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

Text = str | tuple[str, str]


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """A tensor's raw bytes, read on the CPU in row-major order."""
    import torch

    return tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def model_fingerprint(model: torch.nn.Module, extra: str = "") -> str:
    """A hex digest of the model's parameters and buffers (names, shapes, values), its modules' settings, max
    length, truncation and prompts, and ``extra``; hashing the weights keys right a fine-tuned model in memory."""
    digest = hashlib.sha256(extra.encode())
    digest.update(str(getattr(model, "max_seq_length", "")).encode())
    # Settings that hold no weights change the vectors too: pooling mode, normalisation, truncation, prompts.
    for name, child in model.named_children():
        get_config = getattr(child, "get_config_dict", None)
        config = get_config() if callable(get_config) else {}
        digest.update(f"{name}:{type(child).__name__}:{sorted(config.items())!r}".encode())
    digest.update(repr((getattr(model, "truncate_dim", None), getattr(model, "prompts", None))).encode())
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor_bytes(tensor))
    return digest.hexdigest()[:24]


def weights_hash(module: Any) -> str:
    """sha256 of a transformers model's config and every tensor of its state (names, dtypes, shapes, bytes)."""
    return tensors_sha256(sorted(module.state_dict().items()), module.config.to_json_string(use_diff=False))


def tensors_sha256(named: Iterable[tuple[str, torch.Tensor]], seed: str = "") -> str:
    """sha256 of ``seed`` and each named tensor's name, dtype, shape and bytes, in order."""
    digest = hashlib.sha256(seed.encode())
    for name, tensor in named:
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor_bytes(tensor))
    return digest.hexdigest()


def texts_key(fingerprint: str, texts: Sequence[Text]) -> str:
    """The key of a shard of ``texts`` (strings or pairs) encoded by the model of ``fingerprint``."""
    digest = hashlib.sha256(fingerprint.encode())
    for text in texts:
        digest.update(b"\x1e")
        digest.update("\x1f".join(text).encode() if isinstance(text, tuple) else text.encode())
    return digest.hexdigest()[:32]


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file's bytes, read a block at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
