"""What a server is told: the model, its optional head and store, where to listen, and its limits."""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from pathlib import Path

from subspaces.errors import SubspacesError
from subspaces.models.backends import check_backend, check_dtype

TOKEN_IDS = ("tiktoken", "model")


@dataclass(frozen=True)
class ServeSettings:
    """Everything :func:`subspaces.serve.app.create_app` needs; the CLI builds one from its options.

    Args:
        model: a bundled model name or a local folder (what ``subspaces model encode --model`` takes).
        head: a saved Hyper-CL tri-encoder folder (``subspaces cond train``'s output), for conditioned similarity.
        store: a :class:`subspaces.store.Store` folder, for ``/v1/search``.
        device: the torch device the model runs on.
        backend, precision: how the transformer runs (:func:`subspaces.models.encoder.load_encoder`): torch, or an
            exported ONNX Runtime / OpenVINO graph, fp32 or int8 (those two on the CPU only).
        dtype: what the torch backend runs in: ``float32``, ``bfloat16``, or ``auto`` (bfloat16 where the CPU
            multiplies it natively; :func:`subspaces.models.backends.resolve_dtype`). Rows are served as float32.
        model_id: the id ``/v1/models`` lists and requests may name (default: the model's name or folder name).
        api_key: when set, every route but ``/health`` needs ``Authorization: Bearer <api_key>``.
        max_batch_tokens: the padded size of one batch (texts x longest text, in tokens).
        max_wait_ms: how long the first request of a batch waits for others to join it. 0 (greedy): a batch is
            whatever queued while the previous one ran, which already coalesces under load and adds nothing to a
            lone request's latency (a 5 ms wait cost a lone request more than half its speed on the tiny model).
        max_queue: requests waiting for the worker; one more is refused with 503.
        max_inputs: texts (or pairs) in one request; more is refused with 413.
        max_body_bytes: the size of one request body; more is refused with 413.
        request_timeout_s: how long a request may wait for its result (queue and encoding) before a 504.
        cors_origins: origins allowed to call the API from a browser; none (CORS off) by default.
        aliases: more names requests may give as ``model`` (``--served-model-name``), e.g. an SDK's default name.
        accept_any_model: serve every request whatever ``model`` it names (``--accept-any-model-name``).
        prompts: prompts by name (``--query-prompt`` is ``query``, ``--document-prompt`` is ``document``), over the
            model folder's own (``config_sentence_transformers.json``'s ``prompts``); requests pick one by
            ``prompt_name``.
        adapter: a fitted :class:`~subspaces.adapt.MatryoshkaAdapter` folder: ``dimensions`` then reads the adapted
            rows' prefix (``adapter.transform``, then the first ``d``, then L2-normalised).
        token_ids: how token-id inputs are read: ``"tiktoken"`` (OpenAI's ids, cl100k_base, decoded to text; what
            OpenAI's SDKs and LangChain send) or ``"model"`` (the served model's own tokenizer's ids).
    """

    model: str
    head: Path | None = None
    store: Path | None = None
    device: str = "cpu"
    backend: str = "torch"
    precision: str = "fp32"
    dtype: str = "float32"
    model_id: str | None = None
    api_key: str | None = field(default=None, repr=False)
    max_batch_tokens: int = 16384
    max_wait_ms: float = 0.0
    max_queue: int = 256
    max_inputs: int = 2048
    max_body_bytes: int = 2 * 2**20
    request_timeout_s: float = 30.0
    cors_origins: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    accept_any_model: bool = False
    prompts: dict[str, str] = field(default_factory=dict)
    adapter: Path | None = None
    token_ids: str = "tiktoken"

    def __post_init__(self) -> None:
        for name in ("max_batch_tokens", "max_queue", "max_inputs", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise SubspacesError(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.max_wait_ms < 0:
            raise SubspacesError(f"max-wait-ms must be 0 or more, got {self.max_wait_ms}")
        if self.request_timeout_s <= 0:
            raise SubspacesError(f"request timeout must be positive, got {self.request_timeout_s}")

        check_backend(self.backend, self.precision)
        check_dtype(self.dtype, self.backend)
        if self.backend != "torch" and self.device != "cpu":
            raise SubspacesError(f"backend {self.backend!r} runs on the CPU; use --device cpu (or --backend torch)")
        if self.api_key is not None and not self.api_key:
            raise SubspacesError("the API key is empty")
        if self.token_ids not in TOKEN_IDS:
            raise SubspacesError(f"token ids must be read as one of {', '.join(TOKEN_IDS)}, got {self.token_ids!r}")
        if any(not name.strip() for name in self.aliases):
            raise SubspacesError("a served model name is empty")

    @property
    def served_id(self) -> str:
        return self.model_id or Path(self.model).name or self.model

    @property
    def served_names(self) -> tuple[str, ...]:
        """Every name a request may give as ``model``: the served id first, then the aliases."""
        return tuple(dict.fromkeys((self.served_id, *self.aliases)))

    def key_matches(self, presented: str) -> bool:
        """Constant-time comparison, so the time a wrong key takes says nothing about the right one."""
        return self.api_key is not None and hmac.compare_digest(presented.encode(), self.api_key.encode())


def read_api_key(path: Path) -> str:
    """The key in ``path``: its first line, stripped. Refused when empty or unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SubspacesError(f"--api-key-file {path}: {exc.strerror or exc}") from None
    key = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not key:
        raise SubspacesError(f"--api-key-file {path} is empty")
    return key
