import json

import pytest
import torch

from subspaces.errors import SubspacesError
from subspaces.models.encoder import load_encoder
from subspaces.train.simcse import SimCSEConfig, delete_one_word, train_simcse, unsup_examples

SENTS = [f"sentence number {i} about a {w}" for i, w in enumerate(["cat", "dog", "man", "park", "house"] * 8)]


class Crash(Exception):
    pass


def _config(out, **kw):
    base = {
        "output_dir": str(out),
        "batch_size": 8,
        "max_steps": 4,
        "eval_steps": 0,
        "save_steps": 2,
        "stsb_dev": False,
        "show_progress": False,
        "lr": 1e-3,
    }
    base.update(kw)
    return SimCSEConfig(**base)


def test_resume_after_interrupt_matches_uninterrupted_run(tiny_model_dir, tmp_path):
    rows = unsup_examples(SENTS)
    straight = load_encoder(str(tiny_model_dir))
    train_simcse(straight, rows, _config(tmp_path / "a"))

    def crash_at_3(step, loss):
        if step == 3:
            raise Crash

    interrupted = load_encoder(str(tiny_model_dir))
    with pytest.raises(Crash):
        train_simcse(interrupted, rows, _config(tmp_path / "b"), callback=crash_at_3)
    assert torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)["step"] == 2

    resumed = load_encoder(str(tiny_model_dir))
    result = train_simcse(resumed, rows, _config(tmp_path / "b"))
    assert result.resumed_from == 2 and result.steps == 4
    for (name, p), q in zip(straight.named_parameters(), resumed.parameters(), strict=True):
        assert torch.equal(p, q), name
    state = json.loads((tmp_path / "b" / "trainer_state.json").read_text())
    assert state["steps"] == 4


def test_training_changes_weights_and_saves_loadable_model(tiny_model_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    model = load_encoder(str(tiny_model_dir))
    before = [p.detach().clone() for p in model.parameters()]
    calls = []
    result = train_simcse(
        model,
        unsup_examples(SENTS),
        _config(tmp_path / "m", max_steps=3, eval_steps=2, save_steps=0),
        evaluator=lambda m: calls.append(1) or float(len(calls)),
    )
    assert len(calls) == 2 and result.best_score == 2.0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert SentenceTransformer(str(tmp_path / "m")).encode(["a cat"]).shape == (1, 32)


def test_supervised_triplets_train(tiny_model_dir, tmp_path):
    model = load_encoder(str(tiny_model_dir), pooler="cls")
    rows = [(s, s.replace("a", "the"), "unrelated words here") for s in SENTS]
    result = train_simcse(model, rows, _config(tmp_path / "s", mode="sup", max_steps=2, hard_negative_weight=0.5))
    assert result.steps == 2


def test_batch_larger_than_data_is_a_clear_error(tiny_model_dir, tmp_path):
    with pytest.raises(SubspacesError, match="larger than the data"):
        train_simcse(load_encoder(str(tiny_model_dir)), unsup_examples(SENTS[:4]), _config(tmp_path / "x"))


def test_resume_with_other_batch_size_is_refused(tiny_model_dir, tmp_path):
    rows = unsup_examples(SENTS)
    train_simcse(load_encoder(str(tiny_model_dir)), rows, _config(tmp_path / "r", max_steps=2))
    with pytest.raises(SubspacesError, match="differs in: .*setting batch_size"):
        train_simcse(load_encoder(str(tiny_model_dir)), rows, _config(tmp_path / "r", batch_size=4))


def test_delete_one_word():
    import random

    rng = random.Random(0)
    assert len(delete_one_word("a b c d", rng).split()) == 3
    assert delete_one_word("word", rng) == "word"
    assert all(len(r) == 2 for r in unsup_examples(["a b c"], "delete_one_word"))


def test_train_config_defaults_follow_paper():
    from subspaces.train.simcse import DEFAULTS

    assert DEFAULTS["unsup"]["batch_size"] == 64 and DEFAULTS["unsup"]["lr"] == 3e-5
    assert DEFAULTS["sup"]["batch_size"] == 512 and DEFAULTS["sup"]["lr"] == 5e-5 and DEFAULTS["sup"]["epochs"] == 3
    assert SimCSEConfig(output_dir="x").max_length == 32


def test_resume_into_another_runs_folder_is_refused(tiny_model_dir, tmp_path):
    rows = unsup_examples(SENTS)
    train_simcse(load_encoder(str(tiny_model_dir)), rows, _config(tmp_path / "r", max_steps=2))
    for change, rows_now, kw in (
        ("setting lr", rows, {"lr": 5e-4}),
        ("data", rows[::-1], {}),
        ("loss", rows, {"temperature": 0.1}),
    ):
        with pytest.raises(SubspacesError, match=f"differs in: .*{change}"):
            train_simcse(load_encoder(str(tiny_model_dir)), rows_now, _config(tmp_path / "r", max_steps=2, **kw))
    # Only where it is written, how often it evaluates or saves, and progress bars may change on resume.
    result = train_simcse(
        load_encoder(str(tiny_model_dir)), rows, _config(tmp_path / "r", max_steps=2, save_steps=1, show_progress=False)
    )
    assert result.resumed_from == 2


@pytest.mark.parametrize("bad", [{"batch_size": 0}, {"lr": 0.0}, {"max_steps": 0}, {"max_steps": None, "epochs": 0}])
def test_settings_that_cannot_train_are_refused(tiny_model_dir, tmp_path, bad):
    with pytest.raises(SubspacesError):
        train_simcse(load_encoder(str(tiny_model_dir)), unsup_examples(SENTS), _config(tmp_path / "z", **bad))
