"""The conditional models both tasks share, built and loaded by one pair of functions: the tri-encoder
(:mod:`subspaces.models.triencoder`) and :class:`BiEncoder` (C-STS's baseline, SimKGC), which encodes each
``(text, condition)`` pair together and plain texts (KGC's tails) with a tail encoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import torch

from subspaces.cache import LRUCache
from subspaces.errors import ModelNotFoundError, SubspacesError
from subspaces.models.embedding_cache import CacheSettings, EmbeddingCache
from subspaces.models.folder import TASK_FOLDERS, encoder_reference, is_model_folder, read_config
from subspaces.models.forward import embed_with_grad
from subspaces.models.heads import make_head
from subspaces.models.triencoder import ConditionalEncoder, EncoderAt, TriEncoder

ARCHS = ("tri", "bi")


class BiEncoder(ConditionalEncoder):
    """``E(text, condition)`` as one text pair; plain texts by ``tail_encoder`` (default: ``encoder``)."""

    arch = "bi"

    def __init__(
        self,
        encoder: Any,
        tail_encoder: Any = None,
        *,
        task: str = "cond",
        freeze_encoder: bool = True,
        encoder_name: str | None = None,
        encode_batch_size: int = 64,
        cache: CacheSettings = CacheSettings(),
    ) -> None:
        super().__init__(encoder, task, freeze_encoder, encoder_name, encode_batch_size)
        self.tail_encoder = None if tail_encoder is encoder else tail_encoder  # None: shared
        self._freeze_encoders()
        self.store = EmbeddingCache({"pair": encoder, "sentence": self.encoders()[-1]}, cache, encode_batch_size)

    @property
    def dim(self) -> int:
        return int(self.encoder.get_embedding_dimension())

    def encoders(self) -> list[Any]:
        return [e for e in (self.encoder, self.tail_encoder) if e is not None]

    def caches(self) -> dict[str, LRUCache]:
        return {"sentence_condition_pairs": self.store.memory["pair"]}

    def _embed(self, kind: str, texts: Sequence[Any], description: str | None) -> torch.Tensor:
        if self.freeze_encoder or not self.training:
            return self.store.embed(kind, texts, description)
        return embed_with_grad(self.store.encoders[kind], list(texts))

    def project(self, texts: Sequence[str], conditions: Sequence[str], description: str | None = None) -> torch.Tensor:
        return self._embed("pair", list(zip(texts, conditions, strict=True)), description)

    def project_pairs(
        self, s1: Sequence[str], s2: Sequence[str], c: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.project([*s1, *s2], [*c, *c])
        return z[: len(s1)], z[len(s1) :]

    def save(self, path: str | Path) -> None:
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        sub = "hr_encoder" if self.task == "kgc" else "encoder"  # KGC's reads (head, relation) pairs
        ref = self._saved(folder, self.encoder, self.encoder_name, sub)
        tail = None if self.tail_encoder is None else self._saved(folder, self.tail_encoder, None, "tail_encoder")
        self._write_config(folder, {"encoder": ref, "tail_encoder": tail})

    @classmethod
    def _rebuild(
        cls, folder: Path, config: dict[str, Any], encoder_at: EncoderAt, *, device: str, **options: Any
    ) -> Self:
        encoder, name = encoder_at("encoder")
        return cls(encoder, encoder_at("tail_encoder")[0], encoder_name=name, **options)


ConditionalModel = TriEncoder | BiEncoder  # the two implementations of ConditionalEncoder, as tasks annotate them


def build_model(
    model: str,
    arch: str = "tri",
    *,
    task: str = "cond",
    head: str = "hypernet",
    rank: int | str | None = "auto",
    head_options: dict[str, Any] | None = None,
    freeze_encoder: bool = True,
    condition_encoder: str | None = None,
    shared_encoder: bool = True,
    max_length: int | None = None,
    cache: CacheSettings = CacheSettings(),
    seed: int | None = None,
    device: str = "cpu",
) -> TriEncoder | BiEncoder:
    """A fresh conditional model on ``model`` (a bundled name or a folder). ``rank`` and ``head_options`` go to
    :func:`~subspaces.models.heads.make_head`; ``condition_encoder`` (tri): a separate encoder for conditions;
    ``shared_encoder=False`` (bi): a separate tail encoder, as SimKGC; ``max_length`` (None: the encoder's limit);
    ``cache``: the model's caches' settings; ``seed`` seeds the head's initialisation.
    """
    from subspaces.models.encoder import load_encoder

    if arch not in ARCHS:
        hint = " (the encoder comes first: build_model(model, arch))" if model in ARCHS else ""
        raise SubspacesError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}{hint}")
    if arch == "bi" and condition_encoder is not None:
        raise SubspacesError("a separate condition encoder applies to the tri-encoder only")
    encoder = load_encoder(model, max_seq_length=max_length, device=device)
    if arch == "bi":
        tail = None if shared_encoder else load_encoder(model, max_seq_length=max_length, device=device)
        return BiEncoder(
            encoder, tail, task=task, freeze_encoder=freeze_encoder, encoder_name=encoder_reference(model), cache=cache
        )
    cond = load_encoder(condition_encoder, max_seq_length=max_length, device=device) if condition_encoder else None
    if seed is not None:
        torch.manual_seed(seed)
    return TriEncoder(
        encoder,
        make_head(head, int(encoder.get_embedding_dimension() or 0), rank, **(head_options or {})).to(device),
        condition_encoder=cond,
        freeze_encoder=freeze_encoder,
        encoder_name=encoder_reference(model),
        condition_encoder_name=encoder_reference(condition_encoder) if condition_encoder else None,
        task=task,
        cache=cache,
    )


def load_model(
    path: str | Path,
    *,
    task: str | None = None,
    max_length: int | None = None,
    cache: CacheSettings = CacheSettings(),
    device: str = "cpu",
) -> TriEncoder | BiEncoder:
    """Load a folder written by ``cond train`` or ``kgc train`` onto ``device``;
    ``task`` checks which it holds. ``max_length`` overrides the saved token limit."""
    config = read_config(path, task=task)
    kind = TriEncoder if config["arch"] == "tri" else BiEncoder
    return kind.load(path, config, max_length=max_length, device=device, cache=cache)


def is_trained_folder(path: str | Path, task: str) -> bool:
    """Whether ``path`` is a folder ``task``'s training wrote (False: a plain encoder, a bundled name or a folder);
    a :class:`ModelNotFoundError` if it is neither."""
    from subspaces.models.encoder import resolve_model_path

    if is_model_folder(path):
        return True
    try:
        resolve_model_path(path)
    except ModelNotFoundError as exc:
        raise ModelNotFoundError(
            f"{path} is not a {TASK_FOLDERS[task]} (from `{task} train`) nor an encoder: {exc}"
        ) from exc
    return False


def load_or_zero_shot(
    path: str | Path,
    *,
    task: str,
    max_length: int | None = None,
    zero_shot_max_length: int | None = None,
    cache: CacheSettings = CacheSettings(),
    device: str = "cpu",
) -> TriEncoder | BiEncoder:
    """A folder ``task``'s training wrote, or a plain encoder as the zero-shot bi-encoder (its metadata
    ``{"zero_shot": True}``). ``max_length`` overrides the token limit; a plain encoder's default is
    ``zero_shot_max_length`` (None: its own)."""
    if is_trained_folder(path, task):
        return load_model(path, task=task, max_length=max_length, cache=cache, device=device)
    length = max_length or zero_shot_max_length
    model = build_model(str(path), "bi", task=task, max_length=length, cache=cache, device=device)
    model.metadata = {"zero_shot": True}
    return model
