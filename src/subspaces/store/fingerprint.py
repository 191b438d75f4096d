"""What identifies the model that wrote a store's vectors: name, weights hash, dimension, pooler, normalisation.

Two models give comparable vectors only if their weights, pipeline and normalisation agree; the name is kept to
reload the model and to say which one it was, never to decide a match (a folder can be retrained in place).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from subspaces.errors import DimensionError, SubspacesError
from subspaces.fingerprint import model_fingerprint


@dataclass(frozen=True)
class ModelFingerprint:
    name: str  # the bundled name or folder it was loaded from ("" for a model built in memory)
    weights: str  # subspaces.fingerprint.model_fingerprint: a hash of every parameter and buffer, and the max length
    dimension: int
    pooler: str  # the modules after the transformer, e.g. "Pooling(mean)" or "Pooling(cls)+Dense"
    normalize: bool  # whether the stored vectors are unit length (cosine = inner product)
    foreign: bool = False  # vectors of a model this machine cannot run (an import): searchable by vector only

    @classmethod
    def of_foreign(cls, label: str, dimension: int) -> ModelFingerprint:
        """Imported vectors of a model that is not here, named ``label``: never equal to a loadable one."""
        if not label.strip():
            raise SubspacesError("a foreign model needs a label (--foreign LABEL), e.g. the name of the model")
        return cls(
            name=label, weights=f"foreign:{label}", dimension=dimension, pooler="foreign", normalize=True, foreign=True
        )

    @classmethod
    def of(cls, model: Any, name: str = "", *, normalize: bool = True) -> ModelFingerprint:
        return cls(
            name=name,
            weights=model_fingerprint(model),
            dimension=int(model.get_embedding_dimension()),
            pooler=_pipeline(model),
            normalize=normalize,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelFingerprint:
        try:
            return cls(
                name=str(data["name"]),
                weights=str(data["weights"]),
                dimension=int(data["dimension"]),
                pooler=str(data["pooler"]),
                normalize=bool(data["normalize"]),
                foreign=bool(data.get("foreign", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SubspacesError(f"the store's model record is malformed ({exc!r})") from exc

    def matches(self, other: ModelFingerprint) -> bool:
        """Whether ``other`` writes the same vectors: every field but the name (never what decides a match)."""
        return all(
            getattr(self, f) == getattr(other, f) for f in ("weights", "dimension", "pooler", "normalize", "foreign")
        )

    def check(self, other: ModelFingerprint, what: str = "the query model") -> None:
        """Raise unless ``other`` (e.g. the query model) writes vectors comparable with this one's."""
        if other.dimension != self.dimension:
            raise DimensionError(
                f"{what} {other.label()} gives {other.dimension}-d vectors; the store holds {self.dimension}-d "
                f"vectors of {self.label()}"
            )
        if not self.matches(other):
            differ = [f for f in ("weights", "pooler", "normalize") if getattr(self, f) != getattr(other, f)]
            raise SubspacesError(
                f"{what} {other.label()} is not the store's model {self.label()} ({', '.join(differ)} differ); "
                "search with the store's model, or migrate the store (subspaces store migrate DIR --to MODEL)"
            )

    def label(self) -> str:
        if self.foreign:
            return f"{self.name} [foreign]"
        return f"{self.name or '<in-memory model>'} [{self.weights[:12]}]"


def _pipeline(model: Any) -> str:
    """The modules after the first (the transformer or static embedding), with their pooling mode."""
    parts = []
    for module in list(model)[1:]:
        mode = getattr(module, "pooling_mode", None) or getattr(module, "pooler", None)
        parts.append(f"{type(module).__name__}({mode})" if mode else type(module).__name__)
    return "+".join(parts) or type(list(model)[0]).__name__
