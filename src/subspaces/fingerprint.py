"""Content hashes: what caches, stores, checkpoints and saved folders key or check their contents by.

Each is recorded on disk (store manifests and row ids, query-map options, embedding and activation shards,
checkpoints, fitted folders, exported graphs): computing one differently orphans what was recorded, so
tests/test_fingerprint.py pins their values.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

Text = str | tuple[str, str]


def sha256_hex(chunks: bytes | Iterable[bytes], length: int = 64) -> str:
    """The first ``length`` hex digits of the SHA-256 of ``chunks`` (bytes, or byte strings hashed as one)."""
    digest = hashlib.sha256()
    for chunk in [chunks] if isinstance(chunks, bytes) else chunks:
        digest.update(chunk)
    return digest.hexdigest()[:length]


def texts_sha256(texts: Iterable[str], end: bytes, length: int = 64) -> str:
    """:func:`sha256_hex` of each text's UTF-8 (lone surrogates kept) followed by ``end``."""
    return sha256_hex((text.encode("utf-8", "surrogatepass") + end for text in texts), length)


def row_digest(text: str | None, metadata: str | None, vector: bytes) -> bytes:
    """A 16-byte BLAKE2b of a row's content: its text and metadata JSON (None told apart from "") and its vector's
    float32 bytes; `store import` compares rows with ids already stored by it."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (text, metadata):
        digest.update(b"\x00" if part is None else b"\x01" + part.encode("utf-8") + b"\x00")
    digest.update(vector)
    return digest.digest()


def json_sha256(value: Any, *, compact: bool = False) -> str:
    """The hex SHA-256 of ``value`` as JSON with sorted keys (``compact``: no spaces), so of its values, not of the
    layout of a file that holds it."""
    return sha256_hex(json.dumps(value, sort_keys=True, separators=(",", ":") if compact else None).encode())


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of a file's bytes, read a block at a time."""
    with open(path, "rb") as fh:
        return sha256_hex(iter(lambda: fh.read(1 << 20), b""))


def content_key(*parts: object) -> str:
    """A short stable key for content: SHA-1 of the parts (e.g. model name, kind, text), unambiguously joined."""
    digest = hashlib.sha1()
    for part in parts:
        data = str(part).encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))  # length prefix: ("ab", "c") != ("a", "bc")
        digest.update(data)
    return digest.hexdigest()


def texts_key(fingerprint: str, texts: Sequence[Text]) -> str:
    """The key of a shard of ``texts`` (strings or pairs) encoded by the model of ``fingerprint``."""
    joined = ("\x1f".join(text) if isinstance(text, tuple) else text for text in texts)
    return sha256_hex(itertools.chain([fingerprint.encode()], (b"\x1e" + text.encode() for text in joined)), 32)


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """A tensor's raw bytes, read on the CPU in row-major order."""
    import torch

    return tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def tensors_sha256(named: Iterable[tuple[str, torch.Tensor]], seed: str = "") -> str:
    """The hex SHA-256 of ``seed`` and each named tensor's name, dtype, shape and bytes, in order (one tensor's bytes
    in memory at a time)."""
    parts = (part for name, t in named for part in (f"{name}:{t.dtype}:{tuple(t.shape)}".encode(), tensor_bytes(t)))
    return sha256_hex(itertools.chain([seed.encode()], parts))


def weights_hash(module: Any) -> str:
    """:func:`tensors_sha256` of a transformers model's state, seeded with its config."""
    return tensors_sha256(sorted(module.state_dict().items()), module.config.to_json_string(use_diff=False))


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
