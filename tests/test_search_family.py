"""The three search commands (``vectors search`` over vector files, ``store search`` over a store, ``cond search``
over a corpus under a condition) are one family: an option they share has one name, one default, one type and one
help text (declared once: a field of ``SearchSettings`` where it is a search setting, else in
``subspaces.cli.search``), and every one prints and writes its results in one shape."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Annotated, Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from subspaces.cli.app import app
from subspaces.cli.search import KOpt, query_texts
from subspaces.errors import SubspacesError
from subspaces.store.plans import SearchSettings

FAMILY = ("vectors search", "store search", "cond search")
VECTORS, STORE, COND = FAMILY

# A shared option (its parameter) -> the commands it applies to.
SHARED: dict[str, tuple[str, ...]] = {
    "query": (STORE, COND),
    "queries": (STORE, COND),
    "query_vectors": (VECTORS, STORE),
    "corpus": (VECTORS, COND),
    "k": FAMILY,
    "json_path": FAMILY,
    "dims": (VECTORS, STORE),
    "shortlist": (VECTORS, STORE),
    "basis": (VECTORS, STORE),
    "rescore": (VECTORS, STORE),
    "condition": (STORE, COND),
    "head": (STORE, COND),
    "device": (STORE, COND),
    "threads": FAMILY,
}

# (option, command) -> why its default is not the family's.
OWN_DEFAULT = {
    ("basis", VECTORS): "model: a vector file has no `store shrink` choice nor model to read, which a store's "
    "default (None: decided by the store) reads",
}
# (option, command): what the command cannot run without (no default); elsewhere the option is optional.
REQUIRED = {("corpus", VECTORS), ("condition", COND), ("head", COND)}


def commands(root: typer.Typer) -> dict[str, Any]:
    """``"group verb"`` -> click command, for every command of ``root``."""
    group = typer.main.get_command(root)
    return {f"{g} {v}": c for g, sub in group.commands.items() for v, c in getattr(sub, "commands", {}).items()}


def declaration(param: Any) -> dict[str, Any]:
    """What must agree between two commands' copies of one option (its default aside)."""
    return {
        "kind": param.param_type_name,
        "flags": (param.opts, param.secondary_opts),
        "help": getattr(param, "help", None),
        "type": plain(param.type_descriptor.annotation),  # choices included
        "range": (getattr(param, "min", None), getattr(param, "max", None)),
        "multiple": getattr(param, "multiple", False),
        "show_default": param.show_default,
        "hidden": getattr(param, "hidden", False),
    }


def plain(annotation: Any) -> Any:
    """``Optional[X]`` -> ``X``: a command that requires an option gives it the type without None."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1
    return args[0] if optional else annotation


def differences(
    found: dict[str, Any], shared: dict[str, tuple[str, ...]], own_default: dict, required: set
) -> list[str]:
    """``"option: ..."`` for every shared option missing from a command it applies to, or declared differently
    from its first command's: flags, help, type, default (but ``own_default``), required (only ``required``)."""
    out = []
    for name, paths in shared.items():
        params = {}
        for path in paths:
            param = next((p for p in found[path].params if p.name == name), None)
            if param is None:
                out.append(f"{name}: missing from {path}")
            else:
                params[path] = param
        if not params:
            continue
        first, reference = next(iter(params.items()))
        for path, param in params.items():
            if declaration(param) != declaration(reference):
                out.append(f"{name}: {path} declares {declaration(param)}, {first} {declaration(reference)}")
            if param.required != ((name, path) in required):
                out.append(f"{name}: required in {path} is {param.required}")
        defaults = {
            path: p.default for path, p in params.items() if (name, path) not in own_default | dict.fromkeys(required)
        }
        if len({json.dumps(d, default=str) for d in defaults.values()}) > 1:
            out.append(f"{name}: defaults differ: {defaults}")
    return out


def test_the_family_declares_each_shared_option_once():
    assert differences(commands(app), SHARED, OWN_DEFAULT, REQUIRED) == []


def test_the_family_options_are_the_search_settings_fields():
    """An option the family shares with ``SearchSettings`` takes its flags, help and default (but ``OWN_DEFAULT``)
    from the field, in every command that has it."""
    found = commands(app)
    for field in dataclasses.fields(SearchSettings):
        for path in SHARED.get(field.name, ()):
            param = next(p for p in found[path].params if p.name == field.name)
            assert param.opts == list(field.metadata.get("flags", ["--" + field.name.replace("_", "-")]))
            assert param.help == field.metadata["help"]
            assert (field.name, path) in OWN_DEFAULT or param.default == field.default, (path, field.name)


def test_the_check_catches_an_option_declared_again_differently():
    planted = typer.Typer()
    group = typer.Typer()
    planted.add_typer(group, name="x")

    @group.command("one")
    def one(k: KOpt = 10) -> None: ...

    @group.command("two")
    def two(k: Annotated[int, typer.Option("-k", help="Hits per query.")] = 10) -> None: ...

    @group.command("three")
    def three(k: KOpt = 5) -> None: ...

    @group.command("four")
    def four() -> None: ...

    found = commands(planted)
    assert differences(found, {"k": ("x one", "x one")}, {}, set()) == []
    drifted = differences(found, {"k": ("x one", "x two")}, {}, set())
    assert len(drifted) == 1 and drifted[0].startswith("k: x two declares") and "Hits per query." in drifted[0]
    assert differences(found, {"k": ("x one", "x three")}, {}, set()) == [
        "k: defaults differ: {'x one': 10, 'x three': 5}"
    ]
    assert differences(found, {"k": ("x one", "x three")}, {("k", "x three"): "why"}, set()) == []
    assert differences(found, {"k": ("x one", "x four")}, {}, set()) == ["k: missing from x four"]


def test_query_texts_takes_one_source_and_refuses_both(tmp_path):
    lines = tmp_path / "q.txt"
    lines.write_text("first\nsecond\n")
    assert query_texts("a query", None) == ["a query"]
    assert query_texts(None, lines) == ["first", "second"]
    for query, queries, message in (("a query", lines, "not both"), (None, None, "give a QUERY")):
        with pytest.raises(SubspacesError, match=message):
            query_texts(query, queries)


def test_every_search_writes_and_prints_one_shape(tiny_model_dir, tmp_path):
    """Per query, ``hits``: rank, id and score (row numbers for files, also as ``row``; text where known); the
    older keys each command wrote are kept; a table per query: rank, id (or row), score, text."""
    from subspaces.models.conditional import build_model

    runner = CliRunner()

    def run(*args: Any) -> Any:
        result = runner.invoke(app, [str(a) for a in args])
        assert result.exit_code == 0, result.output
        return result

    texts = ["a red car", "a blue sea", "a small dog", "a large house", "a green tree"]
    (tmp_path / "corpus.txt").write_text("\n".join(texts) + "\n")
    (tmp_path / "q.txt").write_text("a car\na house\n")
    rng = np.random.default_rng(0)
    np.save(tmp_path / "c.npy", rng.normal(size=(20, 8)).astype(np.float32))
    np.save(tmp_path / "q.npy", rng.normal(size=(2, 8)).astype(np.float32))
    build_model(str(tiny_model_dir), head="hypernet", rank=4, seed=0).save(tmp_path / "head")
    run("store", "create", tmp_path / "s", "--model", tiny_model_dir)
    run("store", "add", tmp_path / "s", "--input", tmp_path / "corpus.txt")

    vectors = ["vectors", "search", "--corpus", tmp_path / "c.npy", "--query-vectors", tmp_path / "q.npy", "-k", 3]
    store = ["store", "search", tmp_path / "s", "--queries", tmp_path / "q.txt", "-k", 3]
    cond = ["cond", "search", "--queries", tmp_path / "q.txt", "-c", "the colour", "--head", tmp_path / "head"]
    cond += ["--corpus-texts", tmp_path / "corpus.txt", "-k", 3]
    shapes = {"vectors": (vectors, "row", False), "store": (store, "id", True), "cond": (cond, "row", True)}
    for name, (args, id_column, has_text) in shapes.items():
        run(*args, "--json", tmp_path / f"{name}.json")
        report = json.loads((tmp_path / f"{name}.json").read_text())
        assert [r["query"] for r in report["results"]] == (
            ["vector 0", "vector 1"] if name == "vectors" else ["a car", "a house"]
        )
        for result in report["results"]:
            hits = result["hits"]
            assert [h["rank"] for h in hits] == [1, 2, 3]
            assert all({"rank", "id", "score"} <= set(h) and ("text" in h) == has_text for h in hits)
            assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
            if id_column == "row":
                assert all(h["row"] == h["id"] and isinstance(h["id"], int) for h in hits)
        header = next(line for line in run(*args).stdout.splitlines() if "┃" in line)
        header = " ".join(header.replace("┃", " ").split())
        assert header == f"rank {id_column} score" + (" text" if has_text else ""), header
    # the older keys: vectors search's rows and scores, store search's columns per query
    report = json.loads((tmp_path / "vectors.json").read_text())
    assert report["rows"] == [[h["id"] for h in r["hits"]] for r in report["results"]]
    store_result = json.loads((tmp_path / "store.json").read_text())["results"][0]
    assert store_result["ids"] == [h["id"] for h in store_result["hits"]]
    assert store_result["texts"] == [h["text"] for h in store_result["hits"]]


def test_vectors_search_keeps_its_older_spellings_hidden(tmp_path, monkeypatch):
    """``--queries`` (now ``--query-vectors``) and ``--shortlist-factor`` (now ``--shortlist``) still work, unlisted;
    both spellings of one option together are refused."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    np.save("c.npy", rng.normal(size=(50, 8)).astype(np.float32))
    np.save("q.npy", rng.normal(size=(2, 8)).astype(np.float32))
    runner = CliRunner()

    def rows(*args: str) -> Any:
        result = runner.invoke(app, ["vectors", "search", "--corpus", "c.npy", "-k", "3", "--dims", "4", *args])
        assert result.exit_code == 0, result.output
        return json.loads(open("r.json").read())["rows"]

    new = rows("--query-vectors", "q.npy", "--shortlist", "2", "--json", "r.json")
    assert rows("--queries", "q.npy", "--shortlist-factor", "2", "--json", "r.json") == new
    both = (["--queries", "q.npy", "--query-vectors", "q.npy"], ["--query-vectors", "q.npy", "--shortlist", "2"])
    for args in (both[0], [*both[1], "--shortlist-factor", "2"]):
        result = runner.invoke(app, ["vectors", "search", "--corpus", "c.npy", "--dims", "4", *args])
        assert result.exit_code == 2 and "older spelling" in result.output, result.output
    help_text = runner.invoke(app, ["vectors", "search", "--help"]).output
    assert "--shortlist-factor" not in help_text and "--queries" not in help_text
