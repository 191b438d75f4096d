"""Partial fine-tuning over cached activations: train only the top N transformer layers of a sentence encoder.

The embeddings and bottom layers are frozen, so their output for an input is computed once (eval mode, no
gradient) and stored as float16. While attached, the ``Transformer`` module's ``preprocess`` adds the cached bottom
states to the features (``STATES``) and its ``forward`` runs only the top layers on them. Entries are keyed by
SHA-256 over the frozen part's identity and the input's token ids; on disk a folder holds ``manifest.json`` (the
identity) and ``shard-<sha256>.pt`` files, written atomically and checked when read.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from subspaces.config import cache_dir as cache_root
from subspaces.errors import DataError, SubspacesError
from subspaces.fingerprint import file_sha256, sha256_hex, tensors_sha256
from subspaces.io import atomic_open
from subspaces.progress import Progress

FORMAT_VERSION = 1
STATES = "subspaces_bottom_states"  # the features key that carries the cached bottom-layer outputs
MANIFEST = "manifest.json"
SHARD_BYTES = 64 * 2**20  # pending entries are written as one shard once they reach this size
_ATTACHED = "_subspaces_partial"  # marks a Transformer module that is under partial fine-tuning
_HALF_MAX = torch.finfo(torch.float16).max


def partial_fine_tuning(model: Any, trainable_layers: int | str | None, **options: Any) -> PartialFineTuning | None:
    """:class:`PartialFineTuning` of ``model``'s top ``trainable_layers`` (an int or its string), or None for
    ``None``/``"all"`` (the model trains whole)."""
    if trainable_layers is None or trainable_layers == "all":
        return None
    if isinstance(trainable_layers, str) and trainable_layers.strip().lstrip("-").isdigit():
        trainable_layers = int(trainable_layers)
    if isinstance(trainable_layers, bool) or not isinstance(trainable_layers, int):
        raise SubspacesError(f"trainable layers must be a whole number or 'all', got {trainable_layers!r}")
    return PartialFineTuning(model, trainable_layers, **options)


@contextmanager
def partially_trained(
    encoders: Sequence[tuple[Any, Iterable[Any]]],
    trainable_layers: int | str | None,
    *,
    cache_dir: str | os.PathLike[str] | bool | None = None,
    show_progress: bool = True,
    description: str = "caching activations",
    state_dropout: float = 0.0,
) -> Iterator[list[PartialFineTuning]]:
    """Train only the top ``trainable_layers`` of each distinct encoder over cached bottom activations.

    ``encoders`` pairs each encoder with the texts it will see (cached before the first step). Leaving the block
    restores the encoders' own forward, keeping their trained weights. ``None``/``"all"``: nothing is attached. Two
    distinct encoders share a ``cache_dir`` path, one subfolder each (``keyed``).
    """
    by_encoder: dict[int, tuple[Any, list[Any]]] = {}
    for encoder, texts in encoders:  # a shared encoder is attached once, for all the texts it reads
        by_encoder.setdefault(id(encoder), (encoder, []))[1].extend(texts)
    keyed = len(by_encoder) > 1
    attached: list[PartialFineTuning] = []
    try:
        for encoder, texts in by_encoder.values():
            pft = partial_fine_tuning(
                encoder,
                trainable_layers,
                cache_dir=cache_dir,
                show_progress=show_progress,
                state_dropout=state_dropout,
                keyed=keyed,
            )
            if pft is None:
                break
            attached.append(pft)
            pft.prepare(texts, description=description)
        yield attached
    finally:
        for pft in attached:
            pft.detach()


class PartialFineTuning:
    """Train only the top ``trainable_layers`` (1..depth) of ``model`` (a ``SentenceTransformer``) over cached outputs
    of its frozen bottom; ``computed`` counts the inputs whose bottom states this instance computed.

    ``cache_dir``: ``None``/``False`` in memory only; ``True`` under ``cache_dir()/activations/<key>``; a path: that
    folder (refused if built for another model or setting), or with ``keyed`` one subfolder per frozen bottom so
    that several encoders share it. ``state_dropout``: dropout on the cached states while the top layers train,
    the noise the frozen bottom no longer adds (SimCSE's dropout views need it).
    """

    batch_size = 64  # inputs per bottom forward in prepare

    def __init__(
        self,
        model: Any,
        trainable_layers: int,
        *,
        cache_dir: str | os.PathLike[str] | bool | None = None,
        show_progress: bool = True,
        state_dropout: float = 0.0,
        keyed: bool = False,
    ) -> None:
        if not 0.0 <= state_dropout < 1.0:
            raise SubspacesError(f"state dropout must be in [0, 1), got {state_dropout!r}")
        self.state_dropout = state_dropout
        self.transformer, self._hf, layers = _transformer_layers(model)
        if getattr(self.transformer, _ATTACHED, None) is not None:
            raise SubspacesError("this model is already under partial fine-tuning; detach that first")
        self.total_layers = len(layers)
        if not 1 <= trainable_layers <= self.total_layers:
            raise SubspacesError(
                f"trainable layers must be between 1 and the model's depth, {self.total_layers}; "
                f"got {trainable_layers!r}"
            )
        self.trainable_layers = trainable_layers
        self.frozen_layers = self.total_layers - trainable_layers
        self._bottom = [self._hf.embeddings, *layers[: self.frozen_layers]]
        self._top = list(layers[self.frozen_layers :])
        self.show_progress = show_progress
        self.computed = 0
        self._preprocess_depth = 0
        self.identity = self._identity()
        self._key_seed = json.dumps(self.identity, sort_keys=True).encode()
        key = sha256_hex(self._key_seed, 16)
        if cache_dir is None or cache_dir is False:
            folder = None
        elif cache_dir is True:
            folder = cache_root() / "activations" / key
        else:
            folder = Path(cache_dir).expanduser() / key if keyed else Path(cache_dir).expanduser()
        self.cache = ActivationStore(folder, self.identity)
        module = self.transformer
        self._saved_requires_grad = [(p, p.requires_grad) for m in self._bottom for p in m.parameters()]
        for p, _ in self._saved_requires_grad:
            p.requires_grad_(False)
        self._own_attributes = {name: module.__dict__.get(name) for name in ("forward", "preprocess")}
        self._preprocess_tokens = module.preprocess
        module.forward = self._forward
        module.preprocess = self._preprocess
        setattr(module, _ATTACHED, self)
        self.attached = True

    def detach(self) -> None:
        """Restore the model's own forward and preprocess and its parameters' ``requires_grad``; write the cache."""
        if not self.attached:
            return
        module = self.transformer
        try:
            self.cache.flush()
        finally:
            for name, value in self._own_attributes.items():
                if value is None:
                    delattr(module, name)
                else:
                    setattr(module, name, value)
            delattr(module, _ATTACHED)
            for p, flag in self._saved_requires_grad:
                p.requires_grad_(flag)
            self.attached = False

    def __enter__(self) -> PartialFineTuning:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    # -- the cache -----------------------------------------------------------------------------------------------

    def prepare(self, texts: Iterable[str], description: str = "caching activations") -> None:
        """Compute and cache the bottom states of the distinct ``texts`` that are not cached yet."""
        distinct = list(dict.fromkeys(texts))
        distinct.sort(key=len)  # similar lengths share a batch: less padding (sentence-transformers does the same)
        before = self.computed
        try:
            with Progress(len(distinct), description, unit="text", enabled=self.show_progress) as bar:
                for start in range(0, len(distinct), self.batch_size):
                    batch = distinct[start : start + self.batch_size]
                    self._ensure(self._preprocess_tokens(batch))
                    bar.update(len(batch), computed=self.computed - before)
        finally:
            self.cache.flush()  # an interrupted prepare keeps what it computed

    def _identity(self) -> dict[str, Any]:
        """What the cached states depend on besides the tokens (also the manifest of a cache folder)."""
        frozen = ((f"{i}.{name}", t) for i, m in enumerate(self._bottom) for name, t in m.state_dict().items())
        config = self._hf.config
        return {
            "format": FORMAT_VERSION,
            "architecture": type(self._hf).__name__,
            "frozen_weights_sha256": tensors_sha256(frozen),
            "frozen_layers": self.frozen_layers,
            "max_seq_length": self.transformer.max_seq_length,
            "hidden_size": config.hidden_size,
            "hidden_act": str(getattr(config, "hidden_act", "")),
            "layer_norm_eps": getattr(config, "layer_norm_eps", None),
            "position_embedding_type": getattr(config, "position_embedding_type", None),
        }

    def _ensure(self, features: dict[str, Any]) -> tuple[list[str], list[int]]:
        """Cache keys and token counts of the rows of ``features``; computes the rows not cached yet."""
        ids = features["input_ids"].cpu()
        mask = features["attention_mask"].cpu()
        types = features.get("token_type_ids")
        types = types.cpu() if types is not None else None
        lengths = mask.sum(1)
        if not torch.equal(mask.bool(), torch.arange(ids.shape[1]) < lengths[:, None]):
            raise SubspacesError("partial fine-tuning needs right-padded inputs (each row's tokens first)")
        lengths_list = lengths.tolist()
        keys = []
        for i, n in enumerate(lengths_list):
            row = [self._key_seed, ids[i, :n].numpy().tobytes()]
            if types is not None:
                row.append(b"|" + types[i, :n].numpy().tobytes())
            keys.append(sha256_hex(row))
        missing: dict[str, int] = {}  # the first row of each key not cached
        for i, key in enumerate(keys):
            if key not in self.cache.entries and key not in missing:
                missing[key] = i
        if missing:
            self._compute(missing, ids, mask, types, lengths_list)
        return keys, lengths_list

    def _compute(
        self,
        missing: dict[str, int],
        ids: torch.Tensor,
        mask: torch.Tensor,
        types: torch.Tensor | None,
        lengths: list[int],
    ) -> None:
        """Run the frozen bottom on the rows ``missing`` maps keys to, and cache each row's states."""
        rows = list(missing.values())
        width = max(lengths[r] for r in rows)
        # Normal tensors even when called under model.encode's inference mode: they are trained on later.
        with torch.inference_mode(False), torch.no_grad():
            batch = {"input_ids": ids[rows, :width], "attention_mask": mask[rows, :width]}
            if types is not None:
                batch["token_type_ids"] = types[rows, :width]
            states = self._run_bottom(batch).cpu()
            if not (torch.isfinite(states).all() and states.abs().max() <= _HALF_MAX):
                raise SubspacesError("the frozen layers' outputs exceed float16's range; they cannot be cached")
            states = states.half()
            for j, (key, r) in enumerate(missing.items()):
                self.cache.add(key, states[j, : lengths[r]].clone())  # a copy: the batch is not kept alive
        self.computed += len(rows)

    def _states(self, features: dict[str, Any]) -> torch.Tensor:
        """The cached bottom states of ``features``' rows, right-padded with zeros: (batch, seq, hidden), float16."""
        keys, lengths = self._ensure(features)
        out = torch.zeros(len(keys), features["input_ids"].shape[1], self._hf.config.hidden_size, dtype=torch.float16)
        for i, (key, n) in enumerate(zip(keys, lengths, strict=True)):
            out[i, :n] = self.cache.entries[key]
        return out

    # -- the forward -------------------------------------------------------------------------------------------

    def _mask(self, attention_mask: torch.Tensor, hidden: torch.Tensor) -> Any:
        """The attention mask the model's own forward builds for the layers (None where none is needed)."""
        return self._hf._create_attention_masks(
            attention_mask=attention_mask,
            encoder_attention_mask=None,
            embedding_output=hidden,
            encoder_hidden_states=None,
            cache=None,
        )[0]

    def _run_bottom(self, features: dict[str, torch.Tensor]) -> torch.Tensor:
        """The frozen embeddings + bottom layers, in eval mode, without gradient."""
        device = next(self._hf.parameters()).device
        features = {k: v.to(device) for k, v in features.items()}
        modes = [m.training for m in self._bottom]
        try:
            with torch.no_grad():
                for m in self._bottom:
                    m.eval()
                hidden = self._hf.embeddings(
                    input_ids=features["input_ids"], token_type_ids=features.get("token_type_ids")
                )
                mask = self._mask(features["attention_mask"], hidden)
                for layer in self._bottom[1:]:
                    hidden = layer(hidden, mask)
        finally:
            for m, mode in zip(self._bottom, modes, strict=True):
                m.train(mode)
        return hidden

    def _preprocess(self, inputs: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        # preprocess calls itself to measure a prompt; only the outer call's rows are embedded.
        self._preprocess_depth += 1
        try:
            features = self._preprocess_tokens(inputs, *args, **kwargs)
        finally:
            self._preprocess_depth -= 1
        if self._preprocess_depth == 0 and features.get("modality", "text") == "text" and "input_ids" in features:
            features[STATES] = self._states(features)
        return features

    def _forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if features.get("modality", "text") != "text":
            raise SubspacesError(f"partial fine-tuning handles text inputs only, got {features['modality']!r}")
        states = features.get(STATES)
        if states is None or tuple(states.shape[:2]) != tuple(features["input_ids"].shape):
            states = self._states(features)
        weight = next(self._top[0].parameters())
        hidden = states.to(device=weight.device, dtype=weight.dtype)
        if self.state_dropout and self._top[0].training:
            hidden = nn.functional.dropout(hidden, self.state_dropout, training=True)
        mask = self._mask(features["attention_mask"].to(weight.device), hidden)
        # A loss asking for every layer's states (MICLoss) gets the trained layers' ones; the embeddings' and the
        # frozen layers' are None: they were not run, and would carry no gradient.
        every: list[torch.Tensor | None] | None = (
            [None] * (self.frozen_layers + 1) if self._hf.config.output_hidden_states else None
        )
        for layer in self._top:
            hidden = layer(hidden, mask)
            if every is not None:
                every.append(hidden)
        features[self.transformer.module_output_name] = hidden
        if every is not None:
            features["all_layer_embeddings"] = tuple(every)
        return features


class ActivationStore:
    """Bottom-layer states by key: in memory, and in shards under ``folder`` when one is given."""

    def __init__(self, folder: Path | None, identity: dict[str, Any]) -> None:
        self.folder = folder
        self.hidden_size = int(identity["hidden_size"])
        self.shard_bytes = SHARD_BYTES
        self.entries: dict[str, torch.Tensor] = {}
        self._pending: dict[str, torch.Tensor] = {}
        self._pending_bytes = 0
        if folder is not None:
            self._open(identity)

    def add(self, key: str, states: torch.Tensor) -> None:
        self.entries[key] = states
        if self.folder is not None:
            self._pending[key] = states
            self._pending_bytes += states.numel() * states.element_size()
            if self._pending_bytes >= self.shard_bytes:
                self.flush()

    def flush(self) -> None:
        """Write the entries added since the last flush as one shard (nothing without a folder)."""
        if self.folder is None or not self._pending:
            return
        tensors = list(self._pending.values())
        payload = {
            "keys": list(self._pending),
            "lengths": torch.tensor([len(t) for t in tensors], dtype=torch.long),
            "states": torch.cat(tensors),
        }
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        data = buffer.getvalue()
        with atomic_open(self.folder / f"shard-{sha256_hex(data, 32)}.pt", "wb") as handle:
            handle.write(data)  # never half-written: a killed writer leaves no shard
        self._pending.clear()
        self._pending_bytes = 0

    def _open(self, identity: dict[str, Any]) -> None:
        folder = self.folder
        assert folder is not None
        if folder.exists() and not folder.is_dir():
            raise DataError("the activation cache is not a folder", path=folder)
        manifest = folder / MANIFEST
        if manifest.is_file():
            try:
                found = json.loads(manifest.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise DataError(f"unreadable activation-cache manifest ({exc})", path=manifest) from exc
            differs = [
                f"{k} is {found.get(k)!r}, this model's is {v!r}" for k, v in identity.items() if found.get(k) != v
            ]
            if differs:
                raise DataError(
                    "this activation cache was built for another model or setting: " + "; ".join(differs), path=folder
                )
        elif folder.is_dir() and any(folder.glob("shard-*.pt")):
            raise DataError(f"activation-cache shards without a {MANIFEST}; delete the folder to rebuild", path=folder)
        else:
            folder.mkdir(parents=True, exist_ok=True)
            with atomic_open(manifest, "wb") as handle:
                handle.write(json.dumps(identity, indent=1, sort_keys=True).encode())
        for shard in sorted(folder.glob("shard-*.pt")):
            for key, states in _read_shard(shard, self.hidden_size):
                self.entries.setdefault(key, states)


def _read_shard(path: Path, hidden_size: int) -> Iterator[tuple[str, torch.Tensor]]:
    """The (key, states) entries of one shard, after checking its bytes against the hash in its name."""
    expected = path.stem.removeprefix("shard-")
    try:
        digest = file_sha256(path)
    except OSError as exc:
        raise DataError(f"unreadable activation-cache shard ({exc})", path=path) from exc
    if len(expected) != 32 or not digest.startswith(expected):
        raise DataError(
            "activation-cache shard is corrupted or truncated (its bytes do not match its name's hash); "
            "delete it to recompute",
            path=path,
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        keys, lengths, states = payload["keys"], payload["lengths"], payload["states"]
        well_formed = (
            len(keys) == len(lengths)
            and states.dtype == torch.float16
            and tuple(states.shape) == (int(lengths.sum()), hidden_size)
        )
    except Exception as exc:  # any failure to unpickle is a damaged file, whatever torch raises
        raise DataError(f"unreadable activation-cache shard ({exc})", path=path) from exc
    if not well_formed:
        raise DataError("activation-cache shard has inconsistent contents; delete it to recompute", path=path)
    return zip(keys, torch.split(states, lengths.tolist()), strict=True)


def _transformer_layers(model: Any) -> tuple[Any, Any, nn.ModuleList]:
    """The model's Transformer module, its Hugging Face model and that model's layer list; refuses what partial
    fine-tuning cannot run (not BERT-like, a layer-reading pooler, flash attention, left padding)."""
    from sentence_transformers.base.modules import Transformer

    first = model[0] if len(model) else None
    if not isinstance(first, Transformer):
        raise SubspacesError(
            f"partial fine-tuning needs a transformer encoder; this model's first module is {type(first).__name__}, "
            "which has no layers to freeze"
        )
    hf = first.auto_model
    encoder: Any = getattr(hf, "encoder", None)
    layers: Any = getattr(encoder, "layer", None)
    bert_like = (
        hasattr(hf, "embeddings")
        and hasattr(hf, "_create_attention_masks")
        and isinstance(layers, nn.ModuleList)
        and len(layers) > 0
        and not getattr(hf.config, "is_decoder", False)
        # an encoder with weights of its own outside the layers (a final norm, say) computes more than the layers
        and sum(p.numel() for p in encoder.parameters()) == sum(p.numel() for p in layers.parameters())
    )
    if not bert_like:
        raise SubspacesError(
            f"partial fine-tuning supports BERT-like encoders (embeddings, then encoder.layer); {type(hf).__name__} "
            "is not one"
        )
    text = first.modality_config.get("text", {})
    output = text.get("method_output_name")
    if text.get("method") != "forward" or output not in ("last_hidden_state", ["last_hidden_state"]):
        raise SubspacesError("partial fine-tuning needs a model whose text output is the last hidden state")
    if getattr(hf.config, "output_hidden_states", False):
        raise SubspacesError(
            "partial fine-tuning cannot run a pooler that reads every layer's states (avg_first_last, avg_top2): "
            "the frozen layers are not run"
        )
    if str(getattr(hf.config, "_attn_implementation", "")).startswith("flash"):
        raise SubspacesError("partial fine-tuning needs padded inputs; flash attention flattens them")
    if first.tokenizer is not None and getattr(first.tokenizer, "padding_side", "right") != "right":
        raise SubspacesError("partial fine-tuning needs a right-padding tokenizer")
    return first, hf, layers
