"""Load a sentence encoder (bundled name, sentence-transformers folder, or plain transformers folder) and encode.

The encoder *is* a :class:`sentence_transformers.SentenceTransformer`: it trains with sentence-transformers'
losses and trainer, saves as a plain folder, and loads back with ``SentenceTransformer(path)``. What this
module adds is offline resolution of bundled names, SimCSE's poolers, and checked, truncatable encoding.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

# Nothing here reaches for the hub: names resolve to local folders (or fail) before anything loads, saved
# folders load with local_files_only, and every model built here has local-only model-card data (else saving
# one looks its base model up on the hub). The command line also sets HF_HUB_OFFLINE for its process.
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

from subspaces.config import encoding_threads, scoped_threads
from subspaces.errors import DataError, DimensionError, ModelNotFoundError, SubspacesError
from subspaces.models import registry
from subspaces.models.backends import check_backend, check_dtype, with_backend
from subspaces.models.pooling import LAYER_POOLERS, POOLERS, SimCSEPooling
from subspaces.progress import Progress
from subspaces.vectors import check_finite, truncate, unit_prefix


def resolve_model_path(name_or_path: str | os.PathLike[str]) -> Path:
    """A bundled short name or a local folder -> the folder to load. Unknown names list the known ones."""
    text = str(name_or_path)
    registry.check_model(text)
    return registry.resolve(text) if text in registry.known_models() else Path(text).expanduser()


def load_encoder(
    name_or_path: str | os.PathLike[str] | SentenceTransformer,
    *,
    pooler: str | None = None,
    max_seq_length: int | None = None,
    mlp_only_train: bool = False,
    device: str | None = "cpu",
    backend: str = "torch",
    precision: str = "fp32",
    dtype: str = "float32",
) -> SentenceTransformer:
    """Load a sentence encoder offline: a bundled short name, a sentence-transformers folder, a plain transformers
    folder (mean pooling unless ``pooler``), or a built model (returned with ``pooler``/``max_seq_length`` applied).

    ``pooler``: one of SimCSE's (:mod:`subspaces.models.pooling`) instead of the model's own; ``mlp_only_train``:
    with ``cls``, its MLP in training only. ``backend``/``precision``: ``onnx``/``openvino`` run the transformer as
    a cached exported graph (fp32 or int8, CPU only); ``dtype``: what the torch backend runs in
    (:func:`subspaces.models.backends.resolve_dtype`).
    """
    if pooler is not None and pooler not in POOLERS:
        raise SubspacesError(f"unknown pooler {pooler!r}; choose one of {', '.join(POOLERS)}")
    check_backend(backend, precision)
    check_dtype(dtype, backend)
    if backend != "torch" and device not in (None, "cpu"):
        raise SubspacesError(f"backend {backend!r} runs on the CPU; use --device cpu (or --backend torch)")
    device = resolve_device(device)
    if isinstance(name_or_path, SentenceTransformer):
        model = name_or_path
    else:
        path = resolve_model_path(name_or_path)
        trust_own = _check_folder_code(path)
        if (path / "modules.json").is_file():
            model = SentenceTransformer(str(path), device=device, local_files_only=True, trust_remote_code=trust_own)
        else:
            transformer = Transformer(str(path), max_seq_length=max_seq_length)
            model = SentenceTransformer(
                modules=[transformer, _make_pooler(transformer, pooler or "mean")], device=device
            )
            pooler = None
    if pooler is not None:
        model = with_pooler(model, pooler, mlp_only_train=mlp_only_train)
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    return local_only(with_backend(model, backend, precision, dtype=dtype))


def local_only(model: SentenceTransformer) -> SentenceTransformer:
    """Keep the model card from looking anything up on the hub when the model is saved."""
    model.model_card_data.local_files_only = True
    return model


def _check_folder_code(path: Path) -> bool:
    """Refuse a folder that would run code other than sentence-transformers' and ours (``auto_map``, or a module
    type from another package); True when it lists one of our modules, which needs ``trust_remote_code``."""
    types: list[str] = []
    if (path / "modules.json").is_file():
        try:
            types = [str(e.get("type", "")) for e in json.loads((path / "modules.json").read_text())]
        except (OSError, ValueError, AttributeError) as exc:
            raise ModelNotFoundError(f"{path / 'modules.json'} is unreadable: {exc}") from exc
    reasons = [f"module type {t!r}" for t in types if not t.startswith(("sentence_transformers.", "subspaces."))]
    reasons += [f"Python file {f.relative_to(path)}" for f in sorted(path.rglob("*.py"))][:3]
    for config in sorted(path.rglob("config.json")):
        try:
            if "auto_map" in json.loads(config.read_text()):
                reasons.append(f"auto_map in {config.relative_to(path)}")
        except (OSError, ValueError, TypeError):
            pass  # transformers will say what is wrong with it
    if reasons:
        raise ModelNotFoundError(
            f"{path} ships its own code ({', '.join(reasons)}); subspaces will not run it. If you trust it, load it "
            "with SentenceTransformer(path, trust_remote_code=True) and pass that model."
        )
    return any(t.startswith("subspaces.") for t in types)


def resolve_device(device: str | None) -> str | None:
    """Check a torch device name (``cpu``, ``cuda``, ``cuda:1``, ``mps``) and that this machine has it."""
    if device is None:
        return None
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise SubspacesError(f"unknown device {device!r}: use cpu, cuda, cuda:N or mps") from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0:
            raise SubspacesError(f"device {device!r}: this torch ({torch.__version__}) sees no CUDA device")
        if parsed.index is not None and parsed.index >= count:
            raise SubspacesError(f"device {device!r}: only {count} CUDA device(s), cuda:0..cuda:{count - 1}")
    elif parsed.type == "mps" and not torch.backends.mps.is_available():
        raise SubspacesError(f"device {device!r}: MPS is not available here")
    elif parsed.type not in ("cpu", "cuda", "mps"):
        raise SubspacesError(f"device {device!r}: use cpu, cuda, cuda:N or mps")
    return device


def portable(model: SentenceTransformer) -> SentenceTransformer:
    """Swap :class:`SimCSEPooling` for sentence-transformers' own modules where they compute the same thing
    (``cls``: ``Pooling('cls')`` + the ``Dense(Tanh)`` MLP unless train-only; ``cls_before_pooler``), so the saved
    folder loads without ``trust_remote_code``; the layer-averaging poolers stay."""
    from sentence_transformers.sentence_transformer.modules import Dense

    modules = list(model)
    if len(modules) < 2 or not isinstance(modules[1], SimCSEPooling) or modules[1].pooler in LAYER_POOLERS:
        return model
    pooling: SimCSEPooling = modules[1]
    new = [modules[0], Pooling(pooling.hidden_size, pooling_mode="cls")]
    if pooling.mlp is not None and not pooling.mlp_only_train:
        dense = Dense(pooling.hidden_size, pooling.hidden_size, activation_function=torch.nn.Tanh())
        dense.linear.load_state_dict(pooling.mlp[0].state_dict())
        new.append(dense)
    return local_only(SentenceTransformer(modules=[*new, *modules[2:]], device=str(model.device)))


def _make_pooler(transformer: Transformer, pooler: str, mlp_only_train: bool = False):
    dim = transformer.get_embedding_dimension()
    if pooler == "mean":
        return Pooling(dim, pooling_mode="mean")
    if pooler in LAYER_POOLERS:
        transformer.model.config.output_hidden_states = True
    return SimCSEPooling(dim, pooler=pooler, mlp_only_train=mlp_only_train)


def with_pooler(model: SentenceTransformer, pooler: str, *, mlp_only_train: bool = False) -> SentenceTransformer:
    """Replace the pooling module (the one right after the transformer) of ``model``; later modules are kept."""
    modules = list(model)
    transformer = modules[0]
    if not isinstance(transformer, Transformer):
        raise SubspacesError(f"pooler {pooler!r} needs a transformer encoder, got {type(transformer).__name__}")
    rest = modules[2:] if len(modules) > 1 and isinstance(modules[1], (Pooling, SimCSEPooling)) else modules[1:]
    return local_only(
        SentenceTransformer(
            modules=[transformer, _make_pooler(transformer, pooler, mlp_only_train), *rest], device=str(model.device)
        )
    )


def encode(
    model: SentenceTransformer,
    texts: Sequence[str],
    *,
    batch_size: int = 64,
    normalize: bool = False,
    truncate_dim: int | None = None,
    show_progress: bool | None = None,
    description: str = "encoding",
    threads: int | None = None,
    prompt: str | None = None,
) -> np.ndarray:
    """Embed ``texts`` in input order, as float32 rows: sentence-transformers' ``encode`` plus truncation *before*
    normalisation (prefixes are unit vectors), a progress display, and a check that no row is NaN or a text a
    tokenizer cannot read (a lone surrogate).

    ``threads``: CPU threads for this call only (None: the process's setting, or
    :func:`subspaces.config.encoding_threads`). ``prompt``: the text put before each one (``""``: none, not even
    the model's default prompt; None: the model's default prompt, if it has one).
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string")
    check_batch_size(batch_size)
    texts = list(texts)
    check_unicode(texts)
    if threads is None:
        wider = encoding_threads()
        threads = wider if wider is not None and wider != torch.get_num_threads() else None
    with scoped_threads(threads) if threads is not None else contextlib.nullcontext():
        dim = model.get_embedding_dimension()
        if truncate_dim is not None and not 0 < truncate_dim <= (dim or truncate_dim):
            raise DimensionError(f"truncate dim {truncate_dim} is outside 1..{dim}")
        if not texts:
            return torch.empty(0, truncate_dim or dim or 0).numpy()
        if show_progress is None:
            show_progress = len(texts) >= 2048

        # Chunks of many batches: sentence-transformers still length-sorts within each, and our display can update.
        chunk = max(batch_size * 16, 1024)
        parts = []
        with Progress(len(texts), description, unit="text", enabled=show_progress) as bar:
            for lo in range(0, len(texts), chunk):
                part = texts[lo : lo + chunk]
                embedded = model.encode(
                    part,
                    batch_size=batch_size,
                    show_progress_bar=False,
                    convert_to_tensor=True,
                    normalize_embeddings=False,
                    prompt=prompt,
                )
                parts.append(embedded.float().cpu())
                bar.update(len(part))
        emb = torch.cat(parts)
        emb = unit_prefix(emb, truncate_dim) if normalize else truncate(emb, truncate_dim)
        check_finite(emb, "encoded embeddings")
        return emb.numpy()


def unicode_problem(text: str) -> str | None:
    """Why ``text`` is not valid Unicode, or None. JSON's ``\\ud800`` escapes and Python strings may hold a lone
    surrogate (half of a UTF-16 pair), which no UTF-8 encoder, and so no tokenizer, takes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate (U+{ord(text[exc.start]):04X}) at character {exc.start}; it is not valid Unicode"
    return None


def check_unicode(texts: Sequence[str], what: str = "text") -> None:
    """Refuse, naming the first, a text that is not valid Unicode (the tokenizer would fail with a TypeError)."""
    for i, text in enumerate(texts):
        if isinstance(text, str) and not text.isascii() and (problem := unicode_problem(text)) is not None:
            raise DataError(f"{what} {i} holds {problem}")


def check_batch_size(batch_size: int, what: str = "batch size") -> int:
    if batch_size < 1:
        raise SubspacesError(f"{what} must be at least 1, got {batch_size}")
    return batch_size


def count_truncated(model: SentenceTransformer, texts: Sequence[str], chunk: int = 4096) -> int | None:
    """How many ``texts`` are longer than ``model.max_seq_length`` tokens; None when the model has no limit."""
    limit = model.max_seq_length
    tokenizer = getattr(model, "tokenizer", None)
    if not isinstance(limit, int) or not callable(tokenizer):  # StaticEmbedding: no limit (inf), a raw Tokenizer
        return None
    over = 0
    for start in range(0, len(texts), chunk):  # in chunks: the token ids of a whole large file are not kept
        # verbose=False: the tokenizer would warn about each long text, which is what is being counted
        ids = tokenizer(list(texts[start : start + chunk]), truncation=False, verbose=False)["input_ids"]
        over += sum(len(i) > limit for i in ids)
    return over
