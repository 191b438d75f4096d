"""The package's import graph has no cycle, and no module imports from a layer above its own.

Every import of every module under src/subspaces counts, function-local ones included (a lazy import still ties
two modules together); imports under ``if TYPE_CHECKING:`` do not, since they never run. ``from pkg import name``
is an import of ``pkg.name`` where that is a module, else of ``pkg``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "subspaces"

# The layers, from the top; a module may import from its own layer and those below it. A module is placed by the
# first name under the package (``subspaces.store.core`` -> ``store``); the package itself is the top.
LAYERS: dict[str, int] = {
    "": 0,
    "cli": 0,
    "serve": 0,
    "store": 1,
    "cond": 2,
    "kgc": 2,
    "align": 2,
    "adapt": 2,
    "train": 3,
    "eval": 3,
    "models": 4,
    "losses": 4,
    "data": 4,
    "vectors": 5,
    "topk": 5,
    **dict.fromkeys(
        (
            "errors",
            "io",
            "config",
            "progress",
            "numerics",
            "results",
            "cache",
            "fingerprint",
            "settings",
            "state_folder",
            "vectors_file",
            "quantize",
        ),
        6,
    ),
}

Edge = tuple[str, str, str, int]  # importer, imported, file, line
Graph = dict[str, dict[str, list[tuple[str, int]]]]  # importer -> imported -> where


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement at any depth, less the bodies of ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _type_checking_only(node):
            for other in node.orelse:
                yield from _imports(ast.Module(body=[other], type_ignores=[]))
        else:
            yield from _imports(node)


def imported_modules(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, known: set[str]) -> set[str]:
    """The package modules one import statement of ``importer`` loads."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name.split(".")[0] == PACKAGE}
    if node.level:  # relative: from the importer's package, one level up per extra dot
        base = importer.split(".") if is_package else importer.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    if target.split(".")[0] != PACKAGE:
        return set()
    found = set()
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        found.add(sub if sub in known else target)
    return found


def build_graph(root: Path) -> Graph:
    """The import graph of the package under ``root`` (src/), with where each import is (file under ``root``)."""
    files = {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}
    known = set(files)
    graph: Graph = {name: {} for name in files}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _imports(tree):
            for target in imported_modules(node, name, path.name == "__init__.py", known):
                if target != name:
                    where = (str(path.relative_to(root)), node.lineno)
                    graph[name].setdefault(target, []).append(where)
    return graph


def groups(graph: Graph) -> list[set[str]]:
    """The strongly connected groups of two or more modules (Tarjan): each module of one reaches every other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:  # recursion depth is bounded by the module count
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def cycles(graph: Graph) -> list[list[str]]:
    """One cycle through each strongly connected group, as a path ``[a, b, ..., a]``."""
    return [_cycle_in(graph, group) for group in groups(graph)]


def _cycle_in(graph: Graph, group: set[str]) -> list[str]:
    """The shortest cycle through the group's first module (breadth first, within the group)."""
    start = min(group)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph.get(node, {})):
                if nxt not in group:
                    continue
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if nxt not in parents:
                    parents[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle in {group}")  # a strongly connected group of two or more always has one


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def upward_imports(graph: Graph) -> list[str]:
    """``file:line: a (layer) imports b (layer above)`` for each import against the layer order (a module without
    a layer is left to :func:`test_every_module_has_a_layer`)."""
    found = []
    for importer, targets in sorted(graph.items()):
        for target, places in sorted(targets.items()):
            if not {layer(importer), layer(target)} <= set(LAYERS):
                continue
            if LAYERS[layer(target)] < LAYERS[layer(importer)]:
                found += [
                    f"{file}:{line}: {importer} ({layer(importer) or PACKAGE}) imports {target} ({layer(target)})"
                    for file, line in places
                ]
    return found


def describe(cycle: list[str], graph: Graph, group: set[str] | None = None) -> str:
    """``a -> b (file:line) | b -> a (file:line)``, then the other modules of the cycle's group, if any."""
    steps = [
        f"{a} -> {b} ({', '.join(f'{f}:{n}' for f, n in graph[a][b])})" for a, b in zip(cycle, cycle[1:], strict=False)
    ]
    others = sorted((group or set()) - set(cycle))
    return " | ".join(steps) + (f"\n  (its group also holds {', '.join(others)})" if others else "")


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph(SRC)


def test_every_module_has_a_layer(graph):
    unplaced = sorted({layer(m) for m in graph} - set(LAYERS))
    assert not unplaced, f"put {unplaced} in LAYERS (tests/test_layering.py), the one home of the layer order"


def test_no_import_cycles(graph):
    found = groups(graph)
    message = "\n".join(describe(_cycle_in(graph, group), graph, group) for group in found)
    assert not found, f"{len(found)} import cycle(s):\n{message}"


def test_no_module_imports_from_a_layer_above_it(graph):
    found = upward_imports(graph)
    assert not found, f"{len(found)} import(s) from a layer above:\n" + "\n".join(found)


# -- the checker itself -------------------------------------------------------------------------------------------
def test_the_checker_finds_a_cycle_and_an_upward_import(tmp_path):
    package = tmp_path / PACKAGE
    (package / "eval").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "eval" / "__init__.py").write_text("")
    (package / "eval" / "dims.py").write_text("def f():\n    from . import sts\n")
    (package / "eval" / "sts.py").write_text("from subspaces.eval import dims\nfrom ..vectors import unit_prefix\n")
    (package / "vectors.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from subspaces.store import core\n"
        "def g():\n    import subspaces.eval.dims\n"
    )
    graph = build_graph(tmp_path)
    assert graph["subspaces.eval.dims"] == {"subspaces.eval.sts": [("subspaces/eval/dims.py", 2)]}
    assert set(graph["subspaces.eval.sts"]) == {"subspaces.eval.dims", "subspaces.vectors"}
    assert set(graph["subspaces.vectors"]) == {"subspaces.eval.dims"}  # the TYPE_CHECKING import is not counted
    assert cycles(graph) == [["subspaces.eval.dims", "subspaces.eval.sts", "subspaces.eval.dims"]]
    assert upward_imports(graph) == [
        "subspaces/vectors.py:5: subspaces.vectors (vectors) imports subspaces.eval.dims (eval)"
    ]
    assert cycles({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}, "d": {"a": []}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b": []}, "b": {}}) == []
