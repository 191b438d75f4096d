"""Run an encoder's transformer on ONNX Runtime or OpenVINO, in fp32 or int8, exported once and cached.

The graph is exported with torch's own ONNX exporter (optimum, sentence-transformers' route, pins an older
transformers) and quantised with the runtimes' tools: ONNX Runtime's dynamic int8, OpenVINO's static int8 (nncf,
calibrated on ``calibration.txt``). Only the transformer moves; tokenisation, pooling and the rest stay
sentence-transformers' modules. Speeds and agreement: docs/inference.md.

Cache: ``cache_dir()/backends/<weights sha256[:16]>-<backend>-<precision>/`` holds the graph and ``manifest.json``
(the weights hash, each file's size and sha256). A folder that does not match is rebuilt; a build is renamed into
place whole, so an interrupted export leaves nothing that loads.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.resources
import importlib.util
import inspect
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from subspaces.config import cache_dir, encoding_threads
from subspaces.errors import SubspacesError
from subspaces.fingerprint import file_sha256, weights_hash
from subspaces.numerics import native_bfloat16, native_int8
from subspaces.state_folder import built_folder

if TYPE_CHECKING:
    import torch
    from sentence_transformers import SentenceTransformer

BACKENDS = ("torch", "onnx", "openvino")
AUTO = "auto"  # serve's default: the runtime measured fastest on this kind of CPU (:func:`fastest_runtime`)
PRECISIONS = ("fp32", "int8")
DTYPES = ("float32", "bfloat16", "auto")
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
FORMAT = 3  # bump when the export changes, so graphs built by older code are rebuilt
OPSET = 17

log = logging.getLogger(__name__)


def fastest_runtime(
    device: str = "cpu", precision: str | None = None, dtype: str | None = None
) -> tuple[str, str, str]:
    """``(backend, precision, dtype)`` for backend ``auto``, by rule from what was measured (docs/inference.md);
    ``precision``/``dtype``: what the user asked (``None``: nothing)."""
    openvino = all(importlib.util.find_spec(name) is not None for name in ("openvino", "nncf"))
    int8_graph = "openvino" if openvino and native_int8() else "onnx"
    if precision == "int8":
        if device != "cpu" or dtype not in (None, "float32"):
            raise SubspacesError(
                "--precision int8 runs an exported graph on the CPU, in float32 maths: drop --dtype or --device, "
                "or name --backend onnx or openvino"
            )
        return int8_graph, "int8", "float32"
    if device != "cpu" or precision == "fp32" or dtype is not None:
        return "torch", "fp32", dtype or "float32"
    if int8_graph == "openvino":
        return "openvino", "int8", "float32"
    if native_bfloat16():
        return "torch", "fp32", "bfloat16"
    return "onnx", "int8", "float32"


def check_backend(backend: str, precision: str = "fp32") -> None:
    if backend not in BACKENDS:
        raise SubspacesError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if precision not in PRECISIONS:
        raise SubspacesError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if backend == "torch" and precision != "fp32":
        raise SubspacesError("--precision int8 needs --backend onnx or openvino (the torch backend runs fp32)")


def check_dtype(dtype: str, backend: str = "torch") -> None:
    if dtype not in DTYPES:
        raise SubspacesError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if dtype == "bfloat16" and backend != "torch":
        raise SubspacesError(f"--dtype bfloat16 runs on --backend torch; {backend} runs fp32 or int8 (--precision)")


def resolve_dtype(dtype: str, backend: str = "torch") -> str:
    """``"float32"`` or ``"bfloat16"``: what ``dtype`` runs the model in on ``backend`` (``auto``: bfloat16 on torch
    where the CPU multiplies it natively; an exported graph runs fp32 or int8, ``precision``)."""
    check_dtype(dtype, backend)
    if backend != "torch":
        return "float32"
    if dtype == "auto":
        return "bfloat16" if native_bfloat16() else "float32"
    return dtype


def with_backend(
    model: SentenceTransformer,
    backend: str = "torch",
    precision: str = "fp32",
    *,
    dtype: str = "float32",
    threads: int | None = None,
) -> SentenceTransformer:
    """Run ``model``'s transformer (its first module) on ``backend`` at ``precision``, in place; returns ``model``.
    On torch, ``dtype`` bfloat16 casts the weights; else a runtime session on the cached graph replaces them, run on
    ``threads`` (default: :func:`subspaces.config.encoding_threads`, else torch's count)."""
    check_backend(backend, precision)
    if backend == "torch":
        if resolve_dtype(dtype) == "bfloat16":
            import torch

            if not native_bfloat16() and model.device.type == "cpu":
                log.warning(
                    "this CPU has no native bfloat16: emulated, it is slower than float32 (--dtype auto avoids it)"
                )
            model.to(torch.bfloat16)
        return model
    resolve_dtype(dtype, backend)
    transformer = _transformer_of(model, backend)
    folder = export(transformer, backend, precision)
    import torch

    n = threads or encoding_threads() or torch.get_num_threads()
    inputs = _input_names(transformer.model)
    run = _onnx_session(folder, n) if backend == "onnx" else _openvino_session(folder, n)
    transformer.model = runtime_model_class()(transformer.model.config, inputs, run, f"{backend}-{precision}")
    # The runtime's forward takes **features and picks its inputs; sentence-transformers then passes it everything.
    transformer.model_forward_params = None
    return model


def _transformer_of(model: SentenceTransformer, backend: str):
    from sentence_transformers.sentence_transformer.modules import Transformer

    first = model[0] if len(model) else None
    if not isinstance(first, Transformer) or isinstance(getattr(first, "model", None), runtime_model_class()):
        kind = type(getattr(first, "model", first)).__name__
        raise SubspacesError(
            f"backend {backend!r} cannot run this model: its first module is {kind}, not a torch transformer "
            "(a static embedding such as wordllama is a table lookup with no network to export); use --backend torch"
        )
    config = first.model.config
    if getattr(config, "output_hidden_states", False):
        raise SubspacesError(
            f"backend {backend!r} exports the last layer only; this model's pooler reads several layers "
            "(avg_first_last/avg_top2); use --backend torch"
        )
    return first


@functools.cache
def runtime_model_class() -> type:
    """The torch module that stands in for the transformers model (built on first use: torch is imported late,
    so that the CLI checks its options before paying for it)."""
    import torch

    class RuntimeModel(torch.nn.Module):
        """Stands in for a transformers model inside sentence-transformers' Transformer module: the same inputs,
        ``last_hidden_state`` out, computed by an exported graph."""

        def __init__(self, config: Any, inputs: tuple[str, ...], run: Callable[[dict], np.ndarray], name: str) -> None:
            super().__init__()
            self.config, self.inputs, self.run, self.name = config, inputs, run, name

        @property
        def device(self) -> torch.device:
            return torch.device("cpu")

        def forward(self, **features: Any) -> dict[str, torch.Tensor]:
            mask = features["attention_mask"]
            feed = {}
            for name in self.inputs:
                value = features.get(name)
                feed[name] = (torch.zeros_like(mask) if value is None else value).cpu().numpy().astype(np.int64)
            return {"last_hidden_state": torch.from_numpy(self.run(feed))}

        def extra_repr(self) -> str:
            return self.name

    return RuntimeModel


def graph_folder(weights: str, backend: str, precision: str) -> Path:
    return cache_dir() / "backends" / f"{weights[:16]}-{backend}-{precision}"


def export(transformer: Any, backend: str, precision: str) -> Path:
    """The cached graph folder of ``transformer`` (a sentence-transformers Transformer), built if missing or bad."""
    check_backend(backend, precision)
    weights = weights_hash(transformer.model)
    target = graph_folder(weights, backend, precision)
    if is_valid(target, weights):
        return target
    with _build_lock(target):  # another process may be building it: wait, then use its graph
        if is_valid(target, weights):
            return target
        if target.exists():
            log.warning("rebuilding %s: its graph is stale, truncated or built by another version", target)
        fp32 = None if backend == "onnx" and precision == "fp32" else export(transformer, "onnx", "fp32") / "model.onnx"
        feeds = _calibration_feeds(transformer) if backend == "openvino" and precision == "int8" else None
        with built_folder(target) as tmp:
            tmp.mkdir()
            if fp32 is None:
                _export_onnx(transformer.model, tmp / "model.onnx")
            elif backend == "onnx":
                _quantize_onnx(fp32, tmp / "model.onnx")
            else:
                _to_openvino(fp32, tmp / "model.xml", calibration=feeds)
            files = {p.name: {"size": p.stat().st_size, "sha256": file_sha256(p)} for p in sorted(tmp.iterdir())}
            meta = {"weights": weights, "backend": backend, "precision": precision, "format": FORMAT}
            (tmp / "manifest.json").write_text(json.dumps({**meta, "files": files}, indent=1))
    return target


@contextlib.contextmanager
def _build_lock(target: Path) -> Iterator[None]:
    """An exclusive lock on ``<target>.lock`` (POSIX ``flock``; released when the process dies); none elsewhere."""
    try:
        import fcntl
    except ImportError:  # not POSIX: builds are still atomic, a concurrent one may fail instead of waiting
        yield
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def is_valid(folder: Path, weights: str) -> bool:
    """Whether ``folder`` holds a whole graph of these weights: its manifest matches, and every file's size and
    sha256 match the manifest's."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        if manifest.get("weights") != weights or manifest.get("format") != FORMAT:
            return False
        files = manifest["files"]
        return bool(files) and all(
            (folder / name).stat().st_size == meta["size"] and file_sha256(folder / name) == meta["sha256"]
            for name, meta in files.items()
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _input_names(hf_model: Any) -> tuple[str, ...]:
    accepted = inspect.signature(hf_model.forward).parameters
    return tuple(name for name in MODEL_INPUTS if name in accepted)


def _export_onnx(hf_model: Any, path: Path) -> None:
    """torch's TorchScript-based exporter (the dynamo one needs onnxscript), batch and length dynamic."""
    import copy
    import warnings

    import torch

    names = _input_names(hf_model)
    # A copy: export switches modes back and forth, and the caller's model must keep its own.
    bert = copy.deepcopy(hf_model).eval()

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = bert

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            return self.inner(**dict(zip(names, args, strict=True)), return_dict=True).last_hidden_state

    # A padded row in the example, so the traced graph keeps the attention-mask path.
    example = {n: torch.ones(2, 8, dtype=torch.long) for n in names}
    example["attention_mask"][1, 5:] = 0
    if "token_type_ids" in example:
        example["token_type_ids"].zero_()
    axes = {n: {0: "batch", 1: "sequence"} for n in (*names, "last_hidden_state")}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer warnings about Python branches on shapes
        torch.onnx.export(
            LastHidden(),
            tuple(example.values()),
            str(path),
            input_names=list(names),
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )


def _quantize_onnx(source: Path, path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))  # its "run pre-processing" hint
    quantize_dynamic(str(source), str(path), weight_type=QuantType.QInt8, per_channel=True)


def _calibration_feeds(transformer: Any) -> list[dict[str, np.ndarray]]:
    """The model's inputs for the bundled calibration sentences: batches of 8 sentences, of 4 paragraphs (6
    sentences joined) and of 4 texts of 40 sentences (as long as the model reads, so every position's ranges are
    seen), all cut at the length the model reads."""
    text = importlib.resources.files("subspaces.models").joinpath("calibration.txt").read_text("utf-8")
    lines = [line for line in text.splitlines() if line]
    paragraphs = [" ".join(lines[i : i + 6]) for i in range(0, len(lines), 6)]
    longest = [" ".join((lines * 2)[i : i + 40]) for i in range(0, len(lines), len(lines) // 8)]
    names = _input_names(transformer.model)
    limits = [
        transformer.max_seq_length,
        getattr(transformer.tokenizer, "model_max_length", None),
        getattr(transformer.model.config, "max_position_embeddings", None),
    ]
    limit = min([n for n in limits if isinstance(n, int) and 0 < n < 100_000] or [512])
    feeds = []
    for texts, size in ((lines, 8), (paragraphs, 4), (longest, 4)):
        for start in range(0, len(texts), size):
            encoded = transformer.tokenizer(
                texts[start : start + size], padding=True, truncation=True, max_length=limit, return_tensors="np"
            )
            feeds.append({name: np.asarray(encoded[name], dtype=np.int64) for name in names if name in encoded})
            if "token_type_ids" in names and "token_type_ids" not in encoded:
                feeds[-1]["token_type_ids"] = np.zeros_like(feeds[-1]["input_ids"])
    return feeds


def _to_openvino(source: Path, path: Path, *, calibration: list[dict[str, np.ndarray]] | None) -> None:
    """The ONNX graph in OpenVINO's format; with ``calibration`` (model inputs), statically quantised to int8."""
    ov = _openvino()
    model = ov.convert_model(str(source))
    if calibration is not None:
        try:
            import nncf
        except ImportError:
            raise SubspacesError("OpenVINO int8 needs nncf: pip install 'subspaces[openvino]'") from None
        model = nncf.quantize(
            model,
            nncf.Dataset(calibration),
            model_type=nncf.ModelType.TRANSFORMER,
            subset_size=len(calibration),
        )
    ov.save_model(model, str(path), compress_to_fp16=False)


def _onnx_session(folder: Path, threads: int) -> Callable[[dict], np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":  # set_threads' choice: idle threads sleep
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
    return lambda feed: session.run(["last_hidden_state"], feed)[0]


def _openvino() -> Any:
    try:
        import openvino
    except ImportError:
        raise SubspacesError("--backend openvino needs OpenVINO: pip install 'subspaces[openvino]'") from None
    return openvino


def _openvino_session(folder: Path, threads: int) -> Callable[[dict], np.ndarray]:
    ov = _openvino()
    # f32 maths: on CPUs with bf16 units OpenVINO would otherwise pick bf16, which is not what fp32 promises.
    compiled = ov.Core().compile_model(
        str(folder / "model.xml"), "CPU", {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}
    )
    request = compiled.create_infer_request()
    # copy: the request reuses its output buffer on the next call
    return lambda feed: np.array(request.infer(feed)[0], copy=True)
