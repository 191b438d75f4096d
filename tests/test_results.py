import json
from dataclasses import dataclass

from subspaces.results import JSONResult


@dataclass
class Inner(JSONResult):
    score: float


@dataclass
class Outer(JSONResult):
    OMIT_IF_NONE = frozenset({"note"})

    name: str
    inner: Inner
    note: str | None = None


def test_a_result_writes_its_json_form(tmp_path):
    result = Outer("run", Inner(0.5))
    assert result.to_dict() == {"name": "run", "inner": {"score": 0.5}}  # None left out where it does not apply
    assert list(Outer("run", Inner(0.5), note="unseen").to_dict()) == ["name", "inner", "note"]
    result.save(tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text()) == result.to_dict()


def test_a_saved_result_reads_back_without_the_keys_it_does_not_know():
    assert Outer.from_dict({"name": "run", "inner": Inner(0.5), "dropped": 1}) == Outer("run", Inner(0.5))
    assert Inner.from_dict(Inner(0.25).to_dict()) == Inner(0.25)
