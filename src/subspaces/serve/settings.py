"""What a server is told: the model, its optional head and store, where to listen, and its limits."""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from subspaces.errors import SubspacesError
from subspaces.models.backends import AUTO, BACKENDS, DTYPES, PRECISIONS, check_backend, check_dtype, fastest_runtime
from subspaces.settings import setting

TokenIds = Literal["tiktoken", "model"]
TOKEN_IDS: tuple[str, ...] = get_args(TokenIds)


@dataclass(frozen=True)
class ServeSettings:
    """Everything :func:`subspaces.serve.app.create_app` needs; ``subspaces serve`` derives its options from the
    fields (help in ``metadata["help"]``) and reads any field from ``--config FILE``. ``prompts`` go over the model
    folder's own."""

    model: str = field(metadata={"help": "Bundled model name or a local folder.", "flags": ("--model", "-m")})
    head: Path | None = setting(None, "A saved Hyper-CL tri-encoder folder, for /v1/similarity's condition.")
    store: Path | None = setting(None, "A store folder, for /v1/search.")
    device: str = setting("cpu", "Torch device: cpu, cuda, cuda:N or mps (checked before anything loads).")
    backend: Literal[(*BACKENDS, AUTO)] = setting(  # type: ignore[valid-type]
        AUTO,
        "auto: the fastest measured on this kind of CPU (OpenVINO int8 with VNNI/AMX, else torch bfloat16 where "
        "native, else ONNX Runtime int8; torch with --dtype or --precision fp32); or torch, onnx, openvino.",
    )
    precision: Literal[PRECISIONS] | None = setting(  # type: ignore[valid-type]
        None, "fp32 or int8 (an exported graph); default: the backend's (fp32), or auto's pick."
    )
    dtype: Literal[DTYPES] | None = setting(  # type: ignore[valid-type]
        None, "What torch runs in (auto: bfloat16 where native); default float32, or auto's pick."
    )
    model_id: str | None = setting(None, "The model name clients use (default: the model's name or folder name).")
    api_key: str | None = field(default=None, repr=False)
    max_batch_tokens: int = setting(16384, "Padded tokens (texts x longest) in one batch.")
    max_wait_ms: float = setting(0.0, "How long a batch waits for more requests to join it (0: take what has queued).")
    max_queue: int = setting(256, "Requests that may wait; more are answered 503.")
    max_inputs: int = setting(2048, "Texts (or pairs) in one request; more are answered 413.")
    max_body_bytes: int = setting(2 * 2**20, "Size of one request body in bytes (--max-body-mb); more is answered 413.")
    request_timeout_s: float = setting(30.0, "Seconds a request may take before it is answered 504.", "--timeout")
    cors_origins: tuple[str, ...] = setting(
        (), "An origin browsers may call the API from (repeatable); none by default.", "--cors-origin"
    )
    aliases: tuple[str, ...] = setting(
        (), "Another name requests may give as model (repeatable), e.g. text-embedding-3-small.", "--served-model-name"
    )
    accept_any_model: bool = setting(False, "Serve every request whatever model it names.", "--accept-any-model-name")
    prompts: dict[str, str] = field(default_factory=dict)
    adapter: Path | None = setting(
        None, "A fitted Matryoshka adapter folder (subspaces adapt fit): dimensions reads its prefix."
    )
    token_ids: TokenIds = setting(
        "tiktoken", "How token-id inputs are read: tiktoken (OpenAI's cl100k_base, as its SDKs send) or model."
    )

    def __post_init__(self) -> None:
        for name in ("cors_origins", "aliases"):  # a --config file's lists, too
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("max_batch_tokens", "max_queue", "max_inputs", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise SubspacesError(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if not self.max_wait_ms >= 0:  # NaN too
            raise SubspacesError(f"max-wait-ms must be 0 or more, got {self.max_wait_ms}")
        if not self.request_timeout_s > 0:
            raise SubspacesError(f"request timeout must be positive, got {self.request_timeout_s}")

        backend, precision, dtype = self.runtime
        check_backend(backend, precision)
        check_dtype(dtype, backend)
        if backend != "torch" and self.device != "cpu":
            raise SubspacesError(f"backend {backend!r} runs on the CPU; use --device cpu (or --backend torch)")
        if self.api_key is not None and not self.api_key:
            raise SubspacesError("the API key is empty")
        if self.token_ids not in TOKEN_IDS:
            raise SubspacesError(f"token ids must be read as one of {', '.join(TOKEN_IDS)}, got {self.token_ids!r}")
        if any(not name.strip() for name in self.aliases):
            raise SubspacesError("a served model name is empty")

    @property
    def runtime(self) -> tuple[str, str, str]:
        """``(backend, precision, dtype)`` the server runs: as given, or :func:`fastest_runtime`'s for ``auto``."""
        if self.backend != AUTO:
            return self.backend, self.precision or "fp32", self.dtype or "float32"
        return fastest_runtime(self.device, self.precision, self.dtype)

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
