"""The store's manifest, ``store.json``: format version, the vector spaces (one table each) and the active one. A
space is ``encoded`` by its model or ``mapped`` into it by a migration; a mapped space not yet active is
*pending* until ``store migrate --commit`` makes it active and *retires* the old one. Replaced atomically, and
written last on create: a folder without it is not a store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from subspaces.errors import SubspacesError
from subspaces.io import save_json
from subspaces.store.fingerprint import ModelFingerprint

FORMAT = "subspaces-store"
VERSION = 1
MANIFEST = "store.json"


@dataclass
class Space:
    table: str
    model: ModelFingerprint
    source: str = "encoded"  # or "mapped"
    mapped_from: str | None = None  # the space a mapped one was mapped from
    aligner: str | None = None  # folder of the fitted aligner, relative to the store
    state: str = "active"  # active | pending | retired
    report: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # a migration's fit options (pairs, anchors, ...)
    # query-side migrations: key -> {"model", "map" (folder), "report", "options", "prompts"}: that model's queries
    query_maps: dict[str, dict[str, Any]] = field(default_factory=dict)
    # ``store shrink``: {"choice": {dims: basis}, "adapter", "version", "rows", "options", "report"} (:mod:`.shrink`)
    shrink: dict[str, Any] = field(default_factory=dict)
    # role ("query", "document") -> the prompt put before such texts (a role absent: the model's default)
    prompts: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"model": self.model.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Space:
        return cls(
            table=str(data["table"]),
            model=ModelFingerprint.from_dict(data["model"]),
            source=str(data.get("source", "encoded")),
            mapped_from=data.get("mapped_from"),
            aligner=data.get("aligner"),
            state=str(data.get("state", "active")),
            report=dict(data.get("report") or {}),
            options=dict(data.get("options") or {}),
            query_maps={str(k): dict(v) for k, v in (data.get("query_maps") or {}).items()},
            shrink=dict(data.get("shrink") or {}),
            prompts={str(k): str(v) for k, v in (data.get("prompts") or {}).items()},
        )


@dataclass
class Manifest:
    spaces: dict[str, Space]
    active: str
    version: int = VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": self.version,
            "active": self.active,
            "spaces": {name: s.to_dict() for name, s in self.spaces.items()},
        }

    def save(self, folder: Path) -> None:
        save_json(folder / MANIFEST, self.to_dict())

    @classmethod
    def load(cls, folder: Path) -> Manifest:
        path = folder / MANIFEST
        if not folder.is_dir():
            raise SubspacesError(f"{folder}: no such store (folder not found); create it with `subspaces store create`")
        if not path.is_file():
            raise SubspacesError(f"{folder} is not a subspaces store (no {MANIFEST})")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SubspacesError(f"{path} is unreadable or corrupted: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise SubspacesError(f"{path} is not a subspaces store manifest")
        if not isinstance(data.get("version"), int) or data["version"] > VERSION:
            raise SubspacesError(
                f"{path} has format version {data.get('version')!r}; this subspaces reads up to {VERSION} (upgrade it)"
            )
        try:
            spaces = {str(name): Space.from_dict(s) for name, s in data["spaces"].items()}
            active = str(data["active"])
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise SubspacesError(f"{path} is corrupted ({exc!r})") from exc
        if active not in spaces:
            raise SubspacesError(f"{path} is corrupted: its active space {active!r} is not among its spaces")
        return cls(spaces=spaces, active=active, version=data["version"])

    def pending(self) -> list[str]:
        return [name for name, s in self.spaces.items() if s.state == "pending"]
