"""The loaded model (and optional Hyper-CL head and store) and the computations the routes ask of it.

Everything here runs on the batcher's worker thread or in a route's thread pool, never on the event loop. A
request's texts are tokenised once, in its own thread (:meth:`Engine.tokenize`, which also counts the tokens); the
worker joins requests and runs them (:meth:`Engine.forward`) at full dimension, unnormalised, so each request
truncates and normalises its own rows: the served rows are ``encode(..., normalize=True, truncate_dim=d)``'s.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from subspaces.config import encoding_threads, set_threads
from subspaces.errors import DimensionError, SubspacesError
from subspaces.models.backends import AUTO, resolve_dtype, with_backend
from subspaces.serve.settings import ServeSettings
from subspaces.vectors import unit_prefix

log = logging.getLogger(__name__)

PASS_TOKENS = 4096  # padded tokens (texts x longest) in one forward pass of a length-sorted batch
MIN_AXES_ROWS = 2  # a store's principal axes need rows that differ: fewer, and ``dimensions`` has no basis


@dataclass(frozen=True)
class Tokenized:
    """A request's texts as the model will read them, tokenised once: ``inputs`` go to the batcher (which joins
    several requests' into one batch, :meth:`Engine.join`) and ``counts`` (tokens per text, after truncation)
    size the batch and the usage."""

    inputs: Any
    counts: list[int]


class Engine:
    """The encoder, and optionally a tri-encoder (``--head``) and a store (``--store``), loaded from settings."""

    def __init__(self, settings: ServeSettings) -> None:
        from subspaces.models.encoder import load_encoder

        # The server is an encoder: where the load-aware default gave cores up, encoding's rule (all of them) holds
        # for the process, set before an ONNX/OpenVINO session takes its count from torch's.
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
        self.store: Any | None = None
        if settings.store is not None:
            from subspaces.store import ModelFingerprint, Store

            self.store = Store.open(settings.store)
            # The route encodes queries with the served model: its vectors must be the store's kind.
            space = self.store.manifest.spaces[self.store.manifest.active]
            # Checked on the torch weights, before an exported graph replaces them (a graph has no parameters to
            # hash): an fp32 graph gives the same vectors to ~1e-6, an int8 one queries fp32 rows a little less well.
            space.model.check(ModelFingerprint.of(self.model, settings.model), what=f"--model {settings.model}")
        self.matryoshka = _matryoshka_trained(settings.model, self.dim)
        self.adapter: Any | None = None
        if settings.adapter is not None:
            from subspaces.adapt import MatryoshkaAdapter

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
                # The store's principal axes, the basis its own funnel reads for this model (one fit, shared with it).
                self.axes = self.store.principal_axes()
            else:  # no spread to read axes from: they would be an arbitrary basis (an empty store's: the identity)
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
        # A fast tokenizer keeps its truncation and padding settings in shared state that each call resets, so
        # request threads tokenise one at a time; the worker only pads and runs the network, never tokenises.
        self._tokenizer_lock = threading.Lock()
        self._padding = self._padding_of_features()

    # --- tokenise once (request threads), encode (the worker) ---------------------------------------------------
    def tokenize(self, texts: Sequence[str], prompt_name: str | None = None, *, prompt: str | None = None) -> Tokenized:
        """``texts`` tokenised as ``encode`` would, and their token counts read off the attention mask.

        ``prompt_name`` (default: the model's ``default_prompt_name``) or ``prompt`` (a text, ``""``: none) is put
        before each text, as ``encode`` does. A model whose inputs are not padded token tensors (a static embedding)
        keeps its texts, prompt in front; its counts are words."""
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
        """The prompt a ``/v1/search`` query is encoded after: the request's ``prompt_name``'s, else the query prompt
        the store's active space records (as ``store search`` encodes its queries; ``""``: none), else the model's
        default, as for any text."""
        if prompt_name is None and self.store is not None:
            recorded = self.store.prompt("query")
            if recorded is not None:
                return str(recorded)
        return self.prompt(prompt_name)

    def decode_ids(self, rows: list[list[int]]) -> list[str]:
        """Token-id inputs as texts, which are then tokenised by the model as any text (``--token-ids``):
        ``tiktoken`` reads them as OpenAI's (cl100k_base, what OpenAI's SDKs and LangChain's OpenAIEmbeddings
        send), ``model`` as the served model's own tokenizer's (special tokens dropped)."""
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
        """tiktoken's cl100k_base, loaded once; when it cannot be (no tiktoken, or its file is not cached and the
        machine is offline), the reason, kept so that no later request waits for a download again."""
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
        """Several requests' ``inputs`` as one batch: token tensors padded to the longest row and stacked. Requests
        whose shared features differ (another prompt's length) form consecutive groups, one forward pass each."""
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
        """Full-dimension, unnormalised float32 rows of a joined batch, in its order (the batcher's ``encode_fn``),
        as :func:`subspaces.models.encoder.encode` gives them; run in passes of similar lengths (:func:`passes`)."""
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
        """Tokens the model reads of each text (after truncation at its ``max_seq_length``)."""
        return self.tokenize(texts).counts

    def _padding_of_features(self) -> tuple[int, bool] | None:
        """(pad id, pads on the left) when the model's preprocessing gives padded token rows that requests can be
        joined from; None for anything else (then the worker encodes texts)."""
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
        """What ``dimensions`` reads: ``"adapter"`` (``--adapter``), ``"model"`` (a Matryoshka-trained model's own
        prefix), ``"pca"`` (the store's principal axes), or None: a prefix of this model's coordinates is not an
        embedding, so ``dimensions`` below the full size is refused."""
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
        """Unit rows at ``dimensions`` (checked by :meth:`check_dimensions`): full-size rows as the model gives
        them; a prefix of the adapted rows (``--adapter``), of the model's own (Matryoshka), or of the rows in
        the store's principal axes (an orthogonal rotation: full-size cosines are kept), L2-normalised again."""
        if dimensions is None or dimensions == self.dim:  # full size: the model's own vectors, however it is asked
            return truncate_rows(rows, None)
        if self.adapter is not None:
            rows = self.adapter.transform(np.asarray(rows, dtype=np.float32))
        elif self.axes is not None and not self.matryoshka:
            rows = np.asarray(rows, dtype=np.float32) @ self.axes
        return truncate_rows(rows, dimensions)

    def conditioned_similarity(self, pairs: Sequence[tuple[str, str]], condition: str) -> np.ndarray:
        """``cos(head(E(a), c), head(E(b), c))`` per pair, through the tri-encoder's caches."""
        assert self.tri is not None  # the route refuses a condition without a head
        first, second = [a for a, _ in pairs], [b for _, b in pairs]
        return self.tri.similarity(first, second, [condition] * len(pairs))

    def search(
        self,
        query: np.ndarray,
        k: int,
        dimensions: int | None = None,
        condition: str | None = None,
        basis: str | None = None,
    ) -> dict[str, Any]:
        """The ``k`` store rows nearest one unit query row: ``{"ids", "scores", "texts"}`` (a funnel with
        ``dimensions``: a shortlist on the prefix, re-ranked at full size). Under ``condition``, the store's
        conditional search: query and rows projected by the head's matrix for it, ranked exactly by cosine (the
        store checks the head sits on its model, and keeps the projected rows of recent conditions)."""
        assert self.store is not None and (condition is None or self.tri is not None)  # as the route checked
        if condition is None:
            return self.store.search_vectors(query[None, :], k, dims=dimensions, basis=basis)[0]
        return self.store.search_vectors(query[None, :], k, condition=condition, head=self.tri)[0]

    def cache_stats(self) -> dict[str, dict[str, Any]]:
        """Per-cache statistics (hits, lookups, bytes, ...) of the tri-encoder's caches, when one is loaded."""
        return {} if self.tri is None else self.tri.cache_stats()["caches"]


class _Groups(list):
    """A batch of request groups that cannot share one forward pass (:meth:`Engine.join`)."""


def passes(order: Any, lengths: list[int]) -> list[Any]:
    """``order`` (texts sorted longest first, ``lengths`` their token counts) cut into forward passes: a pass ends
    before it would exceed :data:`PASS_TOKENS` padded tokens, or take a text under half its longest (so padding
    stays under half of any pass)."""
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
    """Whether the model was trained for truncation, by the store's rule (:func:`subspaces.store.matryoshka.trained`:
    its folder's ``trainer_state.json`` names ``dims``, or its model card names ``MatryoshkaLoss``)."""
    try:
        from subspaces.store.fingerprint import ModelFingerprint
        from subspaces.store.matryoshka import trained
    except ImportError:  # an installation without the store: no way to tell, so not trained
        return False
    return trained(ModelFingerprint(name=model, weights="", dimension=dim, pooler="", normalize=True))


def truncate_rows(rows: np.ndarray, dimensions: int | None) -> np.ndarray:
    """The first ``dimensions`` coordinates of each row, L2-normalised again by torch, as the encoder's are."""
    import torch

    return unit_prefix(torch.from_numpy(np.ascontiguousarray(rows)), dimensions).numpy()


def _is_rows(value: Any, rows: int | None = None) -> bool:
    """Whether ``value`` is a 2-D tensor (of ``rows`` rows): one padded row of tokens per text."""
    import torch

    return isinstance(value, torch.Tensor) and value.dim() == 2 and (rows is None or value.shape[0] == rows)
