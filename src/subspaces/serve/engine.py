"""The loaded model (and optional Hyper-CL head and store) and what the routes compute with it.

Runs in a route's thread pool (tokenising) or on the batcher's worker (the forward pass), never on the event loop.
The worker returns full-size unnormalised rows; each request truncates and normalises its own, so the served rows
are ``encode(..., normalize=True, truncate_dim=d)``'s.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from subspaces.adapt import MatryoshkaAdapter
from subspaces.config import encoding_threads, set_threads
from subspaces.errors import DimensionError, SubspacesError
from subspaces.models.backends import AUTO, resolve_dtype, with_backend
from subspaces.serve.settings import ServeSettings
from subspaces.store import ModelFingerprint, Store
from subspaces.store.matryoshka import trained
from subspaces.store.results import SearchResult
from subspaces.vectors import unit_prefix

log = logging.getLogger(__name__)

PASS_TOKENS = 4096  # padded tokens (texts x longest) in one forward pass of a length-sorted batch
MIN_AXES_ROWS = 2  # a store's principal axes need rows that differ: fewer, and ``dimensions`` has no basis


@dataclass(frozen=True)
class Tokenized:
    """A request's texts tokenised once: ``inputs`` for the batcher, ``counts`` (tokens per text, truncated)."""

    inputs: Any
    counts: list[int]


class Engine:
    """The encoder, and optionally a tri-encoder (``--head``) and a store (``--store``), loaded from settings."""

    def __init__(self, settings: ServeSettings) -> None:
        from subspaces.models.encoder import load_encoder

        # Encoding's thread count for the process, before an ONNX/OpenVINO session copies torch's.
        if (wider := encoding_threads()) is not None:
            set_threads(wider)
        self.backend, self.precision, dtype = settings.runtime
        self.dtype = resolve_dtype(dtype, self.backend)  # float32 or bfloat16, as /v1/models reports
        self.model = load_encoder(settings.model, device=settings.device)
        self.model.eval()
        self.dim = int(self.model.get_embedding_dimension() or 0)
        self.tri: Any | None = None
        if settings.head is not None:
            from subspaces.models.triencoder import TriEncoder

            self.tri = TriEncoder.load(settings.head, device=settings.device)
        self.store: Store | None = None
        if settings.store is not None:
            self.store = Store.open(settings.store)
            # Queries are encoded by the served model, so it must be the store's: checked on the torch weights,
            # before an exported graph (which has no parameters to hash) replaces them.
            space = self.store.manifest.spaces[self.store.manifest.active]
            space.model.check(ModelFingerprint.of(self.model, settings.model), what=f"--model {settings.model}")
        self.matryoshka = _matryoshka_trained(settings.model, self.dim)
        self.adapter: MatryoshkaAdapter | None = None
        if settings.adapter is not None:
            self.adapter = MatryoshkaAdapter.load(settings.adapter)
            if self.adapter.n_features_in_ != self.dim:
                raise SubspacesError(
                    f"--adapter {settings.adapter} was fitted on {self.adapter.n_features_in_}-d rows; "
                    f"the model gives {self.dim}"
                )
        self.axes: np.ndarray | None = None
        self._no_axes: str | None = None  # why --store gives no basis, for the 422 of ``dimensions``
        if self.adapter is None and not self.matryoshka and self.store is not None:
            rows = self.store.count()
            if rows >= MIN_AXES_ROWS:
                self.axes = self.store.principal_axes()  # the basis the store's own funnel reads
            else:  # no spread to read axes from
                self._no_axes = (
                    f"--store {settings.store} holds {rows} row(s), too few for principal axes (restart the server "
                    f"once it holds {MIN_AXES_ROWS} or more)"
                )
        self.prompts: dict[str, str] = {**(getattr(self.model, "prompts", None) or {}), **settings.prompts}
        self.default_prompt_name: str | None = getattr(self.model, "default_prompt_name", None)
        self.token_ids = settings.token_ids
        self._tiktoken: Any = None
        self._tiktoken_failure: str | None = None
        self._tiktoken_lock = threading.Lock()
        try:
            with_backend(self.model, self.backend, self.precision, dtype=self.dtype)
        except Exception as exc:  # auto is a preference: a model with no graph (a static embedding) serves on torch
            if settings.backend != AUTO or self.backend == "torch":
                raise
            log.warning("--backend auto: %s; serving on torch", str(exc).splitlines()[0] if str(exc) else exc)
            self.backend, self.precision, self.dtype = "torch", "fp32", resolve_dtype("auto", "torch")
            with_backend(self.model, self.backend, self.precision, dtype=self.dtype)
        # A fast tokenizer's truncation and padding settings are shared state: request threads tokenise one at a time.
        self._tokenizer_lock = threading.Lock()
        self._padding = self._padding_of_features()

    def tokenize(self, texts: Sequence[str], prompt_name: str | None = None, *, prompt: str | None = None) -> Tokenized:
        """``texts`` after the prompt ``prompt_name`` (default: the model's) or the text ``prompt``, tokenised as
        ``encode`` would; a model without padded token inputs (a static embedding) keeps the texts, counted in words."""
        texts = list(texts)
        if prompt is None:
            prompt = self.prompt(prompt_name)
        if self._padding is None:
            texts = [prompt + t for t in texts] if prompt else texts
            return Tokenized(texts, [max(1, len(t.split())) for t in texts])
        with self._tokenizer_lock:
            features = self.model.preprocess(texts, prompt=prompt or None)
        return Tokenized(features, [int(n) for n in features["attention_mask"].sum(dim=1).tolist()])

    def prompt(self, name: str | None) -> str:
        """The text of the prompt ``name`` (None: the model's default prompt, or none)."""
        if name is None:
            name = self.default_prompt_name
            if name is None:
                return ""
        if name not in self.prompts:
            known = ", ".join(repr(n) for n in self.prompts) or "none (--query-prompt and --document-prompt add them)"
            raise SubspacesError(f"prompt_name {name!r} is not one of this model's prompts: {known}")
        return self.prompts[name]

    def query_prompt(self, prompt_name: str | None) -> str:
        """A ``/v1/search`` query's prompt: ``prompt_name``'s, else the store's recorded query prompt (as ``store
        search``), else the model's default."""
        if prompt_name is None and self.store is not None:
            recorded = self.store.prompt("query")
            if recorded is not None:
                return str(recorded)
        return self.prompt(prompt_name)

    def decode_ids(self, rows: list[list[int]]) -> list[str]:
        """Token-id inputs as texts: OpenAI's cl100k_base ids (``--token-ids tiktoken``) or the served model's own
        tokenizer's (``model``, special tokens dropped)."""
        if self.token_ids == "model":
            tokenizer = getattr(self.model, "tokenizer", None)
            if tokenizer is None or not callable(getattr(tokenizer, "decode", None)):
                raise SubspacesError("this model has no tokenizer to read token ids with; send texts")
            size = len(tokenizer)
            for i, row in enumerate(rows):
                bad = next((t for t in row if t >= size), None)
                if bad is not None:
                    raise SubspacesError(f"input {i}: token id {bad} is outside the model's vocabulary of {size}")
            return [tokenizer.decode(row, skip_special_tokens=True) for row in rows]
        encoding = self._openai_encoding()
        texts = []
        for i, row in enumerate(rows):
            try:
                texts.append(encoding.decode(row))
            except (KeyError, ValueError, OverflowError):
                raise SubspacesError(f"input {i} holds a token id that is not {encoding.name}'s") from None
        return texts

    def _openai_encoding(self) -> Any:
        """tiktoken's cl100k_base, loaded once; a failure is kept, so no later request waits for a download again."""
        with self._tiktoken_lock:
            if self._tiktoken is None and self._tiktoken_failure is None:
                try:
                    import tiktoken

                    self._tiktoken = tiktoken.get_encoding("cl100k_base")
                except Exception as exc:  # noqa: BLE001 - ImportError, a failed download: a 422 saying what to do
                    why = "tiktoken is not installed" if isinstance(exc, ImportError) else f"{type(exc).__name__}"
                    self._tiktoken_failure = why
        if self._tiktoken is None:
            raise SubspacesError(
                f"token-id input is read as OpenAI's cl100k_base ids, which this server cannot decode "
                f"({self._tiktoken_failure}): send texts instead (LangChain's OpenAIEmbeddings: "
                "check_embedding_ctx_length=False), or start the server with --token-ids model if the ids are "
                "the served model's own"
            )
        return self._tiktoken

    def join(self, parts: list[Any]) -> Any:
        """Several requests' ``inputs`` as one batch, padded to the longest row; requests whose shared features
        differ (another prompt's length) form groups, one forward pass each."""
        if self._padding is None:
            return [t for part in parts for t in part]
        if len(parts) == 1:
            return parts[0]
        groups: list[list[Any]] = []
        for part in parts:
            if groups and _shared(groups[-1][0]) == _shared(part):
                groups[-1].append(part)
            else:
                groups.append([part])
        if len(groups) > 1:
            return _Groups(self.join(group) for group in groups)
        import torch
        import torch.nn.functional as F

        pad_id, left = self._padding
        width = max(int(part["attention_mask"].shape[1]) for part in parts)
        joined: dict[str, Any] = {}
        for key, first in parts[0].items():
            if not _is_rows(first):
                joined[key] = first  # what every request shares ("modality": "text")
                continue
            value = pad_id if key == "input_ids" else 0
            padded = []
            for part in parts:
                short = width - int(part[key].shape[1])
                padded.append(F.pad(part[key], (short, 0) if left else (0, short), value=value))
            joined[key] = torch.cat(padded)
        return joined

    def forward(self, inputs: Any) -> np.ndarray:
        """Full-size unnormalised float32 rows of a joined batch, in order, run in passes of similar lengths."""
        import torch

        from subspaces.models.encoder import check_finite, encode

        if isinstance(inputs, _Groups):
            return np.concatenate([self.forward(group) for group in inputs])
        if self._padding is None:
            with torch.inference_mode():
                return encode(self.model, inputs, batch_size=max(1, len(inputs)), normalize=False)
        device, left = self.model.device, self._padding[1]
        mask = inputs["attention_mask"]
        lengths = mask.sum(dim=1)
        order = torch.argsort(lengths, descending=True, stable=True)
        parts = []
        with torch.inference_mode():
            for rows_of in passes(order, lengths[order].tolist()):
                width = max(1, int(lengths[rows_of[0]]))
                cut = slice(-width, None) if left else slice(0, width)
                features = {
                    k: v[rows_of][:, cut].to(device) if _is_rows(v) and v.shape == mask.shape else v
                    for k, v in inputs.items()
                }
                parts.append(self.model(features)["sentence_embedding"].float().cpu())
        sorted_rows = torch.cat(parts)
        rows = torch.empty_like(sorted_rows)
        rows[order] = sorted_rows  # back in the batch's order
        if self.model.truncate_dim:  # as sentence-transformers' encode applies a model's own truncation
            rows = rows[:, : self.model.truncate_dim]
        check_finite(rows, "encoded embeddings")
        return rows.numpy()

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        return self.tokenize(texts).counts

    def _padding_of_features(self) -> tuple[int, bool] | None:
        """(pad id, pads on the left) when the model gives padded token rows; None: the worker encodes texts."""
        import torch

        tokenizer = getattr(self.model, "tokenizer", None)
        if not callable(tokenizer):
            return None
        try:
            probe = self.model.preprocess(["a", "a b c d"])
        except Exception:  # noqa: BLE001 - a model that cannot preprocess plain texts: the texts path
            return None
        rows = [v for v in probe.values() if isinstance(v, torch.Tensor)]
        if "input_ids" not in probe or "attention_mask" not in probe or not all(_is_rows(v, 2) for v in rows):
            return None
        if not all(isinstance(v, (torch.Tensor, str)) for v in probe.values()):
            return None
        pad_id = getattr(tokenizer, "pad_token_id", None)
        return (int(pad_id or 0), getattr(tokenizer, "padding_side", "right") == "left")

    @property
    def dimensions_basis(self) -> str | None:
        """What ``dimensions`` reads a prefix of: ``adapter``, ``model`` (Matryoshka-trained), ``pca`` (the store's
        principal axes), or None (refused below the full size)."""
        if self.adapter is not None:
            return "adapter"
        if self.matryoshka:
            return "model"
        return "pca" if self.axes is not None else None

    def check_dimensions(self, dimensions: int | None) -> None:
        if dimensions is not None and not 0 < dimensions <= self.dim:
            raise DimensionError(f"dimensions must be between 1 and {self.dim}, got {dimensions}")
        if dimensions is not None and dimensions < self.dim and self.dimensions_basis is None:
            store = f"; {self._no_axes}" if self._no_axes else ""
            raise DimensionError(
                f"dimensions {dimensions} refused: this model was not trained for truncation (Matryoshka), so its "
                f"first {dimensions} coordinates are not an embedding; start the server with --adapter DIR (a "
                f"fitted Matryoshka adapter) or --store DIR (its principal axes), or ask for all {self.dim}{store}"
            )

    def prefix(self, rows: np.ndarray, dimensions: int | None) -> np.ndarray:
        """Unit rows at ``dimensions``, a prefix in :attr:`dimensions_basis` (full size: the model's own rows),
        L2-normalised again by torch, as the encoder's are."""
        import torch

        if dimensions == self.dim:
            dimensions = None
        elif dimensions is not None and self.adapter is not None:
            rows = self.adapter.transform(np.asarray(rows, dtype=np.float32))
        elif dimensions is not None and self.axes is not None:
            rows = np.asarray(rows, dtype=np.float32) @ self.axes
        return unit_prefix(torch.from_numpy(np.ascontiguousarray(rows)), dimensions).numpy()

    def search(
        self, query: np.ndarray, k: int, dimensions: int | None, condition: str | None, basis: str | None
    ) -> SearchResult:
        """The ``k`` store rows nearest one unit query row (``ids``, ``scores``, ``texts``): the store's funnel at
        ``dimensions``, or its search under ``condition`` by the head."""
        assert self.store is not None
        if condition is None:
            return self.store.search_vectors(query[None, :], k, dims=dimensions, basis=basis)[0]
        return self.store.search_vectors(query[None, :], k, condition=condition, head=self.tri)[0]

    def cache_stats(self) -> dict[str, dict[str, Any]]:
        """Per-cache statistics (hits, lookups, bytes, ...) of the tri-encoder's caches, when one is loaded."""
        return {} if self.tri is None else self.tri.cache_stats()["caches"]


class _Groups(list):
    """A batch of request groups that cannot share one forward pass (:meth:`Engine.join`)."""


def passes(order: Any, lengths: list[int]) -> list[Any]:
    """``order`` (longest first; ``lengths`` its token counts) cut into passes of at most :data:`PASS_TOKENS` padded
    tokens, none taking a text under half its longest."""
    cuts, start = [], 0
    for i in range(1, len(lengths) + 1):
        width = max(1, lengths[start])
        if i == len(lengths) or (i - start + 1) * width > PASS_TOKENS or 2 * lengths[i] < width:
            cuts.append(order[start:i])
            start = i
    return cuts


def _shared(features: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The features every row of a request shares (``modality``, ``prompt_length``), to tell groups apart."""
    return tuple(sorted((k, v) for k, v in features.items() if not _is_rows(v)))


def _matryoshka_trained(model: str, dim: int) -> bool:
    """Whether the model was trained for truncation (:func:`subspaces.store.matryoshka.trained`)."""
    return trained(ModelFingerprint(name=model, weights="", dimension=dim, pooler="", normalize=True))


def _is_rows(value: Any, rows: int | None = None) -> bool:
    """Whether ``value`` is a 2-D tensor (of ``rows`` rows): one padded row of tokens per text."""
    import torch

    return isinstance(value, torch.Tensor) and value.dim() == 2 and (rows is None or value.shape[0] == rows)
