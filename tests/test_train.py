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
    from subspaces.train.recipes import SIMCSE_MODE_DEFAULTS as DEFAULTS

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


# --- the command line: issue 23's defects in the training path ---------------------------------------------------


def _cli(*args):
    from typer.testing import CliRunner

    from subspaces.cli.app import app

    return CliRunner().invoke(app, [args[0], "train", *args[1:]])


def _corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(SENTS) + "\n", encoding="utf-8")
    return path


def _simcse(model_dir, corpus, out, *extra):
    return _cli(
        "simcse",
        "--model",
        str(model_dir),
        "--data",
        str(corpus),
        "--output",
        str(out),
        "--batch-size",
        "8",
        "--max-steps",
        "2",
        "--eval-steps",
        "0",
        "--save-steps",
        "0",
        *extra,
    )


@pytest.mark.parametrize("command", ["simcse", "matryoshka"])
def test_a_folder_of_the_users_files_is_refused_before_anything_loads(tmp_path, command):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "README.md").write_text("my notes")
    result = _cli(command, "--model", "no-such-model", "--data", str(_corpus(tmp_path)), "--output", str(folder))
    assert result.exit_code == 2 and "--overwrite" in result.output, result.output
    assert (folder / "README.md").read_text() == "my notes" and len(list(folder.iterdir())) == 1


def test_overwrite_writes_into_the_users_folder_and_keeps_what_it_does_not_write(tiny_model_dir, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    result = _simcse(tiny_model_dir, _corpus(tmp_path), folder, "--no-eval", "--overwrite")
    assert result.exit_code == 0, result.output
    assert (folder / "notes.txt").read_text() == "mine" and (folder / "modules.json").is_file()


@pytest.mark.parametrize("command", ["simcse", "matryoshka"])
def test_a_bad_data_setting_fails_before_training_and_writes_nothing(tiny_model_dir, tmp_path, monkeypatch, command):
    monkeypatch.setenv("SUBSPACES_DATA", str(tmp_path / "nowhere"))
    out = tmp_path / "run"
    result = _cli(
        command,
        "--model",
        str(tiny_model_dir),
        "--data",
        str(_corpus(tmp_path)),
        "--output",
        str(out),
        "--batch-size",
        "8",
        "--max-steps",
        "2",
    )
    assert result.exit_code == 2 and "SUBSPACES_DATA" in result.output, result.output
    assert not out.exists()


def test_saved_model_keeps_the_base_max_seq_length_and_pooling(tiny_model_dir, tmp_path):
    from subspaces.models.encoder import load_encoder

    base = load_encoder(str(tiny_model_dir), pooler="mean")  # a base model with mean pooling and 64 tokens
    base.max_seq_length = 64
    base.save(str(tmp_path / "base"))
    out = tmp_path / "run"
    result = _simcse(tmp_path / "base", _corpus(tmp_path), out, "--no-eval", "--max-length", "16")
    assert result.exit_code == 0, result.output
    assert "pooling: mean (the base model's)" in result.output
    trained = load_encoder(str(out))
    assert trained.max_seq_length == 64
    assert json.loads((out / "1_Pooling" / "config.json").read_text())["pooling_mode"] == "mean"
    card = (out / "README.md").read_text()
    assert "pooling: mean (the base model's)" in card and "max_seq_length 64 (trained on 16 tokens)" in card


def test_seed_reproduces_a_run_whose_pooler_is_built_fresh(tiny_model_dir, tmp_path):
    """--pooler cls builds a random MLP (used in training): it must be drawn after seeding."""
    from safetensors.torch import load_file

    corpus = _corpus(tmp_path)
    for name in ("a", "b"):
        result = _simcse(tiny_model_dir, corpus, tmp_path / name, "--no-eval", "--pooler", "cls", "--seed", "3")
        assert result.exit_code == 0, result.output
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_rerun_of_a_finished_run_says_so_and_more_steps_extend_it(tiny_model_dir, tiny_data, tmp_path):
    corpus, out = _corpus(tmp_path), tmp_path / "run"
    first = _simcse(tiny_model_dir, corpus, out)
    assert first.exit_code == 0, first.output
    best = json.loads((out / "trainer_state.json").read_text())["best_score"]
    assert f"best STS-B dev {best:.2f};" in " ".join(first.output.split())  # rounded, not 80.92779535091468
    again = _simcse(tiny_model_dir, corpus, out)
    assert again.exit_code == 0 and "already complete" in again.output and "trained 0 steps" not in again.output
    longer = _simcse(tiny_model_dir, corpus, out, "--max-steps", "4")
    assert longer.exit_code == 0, longer.output
    assert "trained 2 steps (resumed at step 2)" in " ".join(longer.output.split())
    assert json.loads((out / "trainer_state.json").read_text())["steps"] == 4


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (["--device", "nonsense"], "unknown device"),
        (["--trainable-layers", "0"], "at least 1"),
        (["--trainable-layers", "x"], "whole number"),
        (["--trainable-layers", "3"], "depth, 2"),
    ],
)
def test_bad_device_and_trainable_layers_are_one_line_errors(tiny_model_dir, tmp_path, bad, message):
    result = _simcse(tiny_model_dir, _corpus(tmp_path), tmp_path / "o", "--no-eval", *bad)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output
    assert not (tmp_path / "o" / "checkpoint.pt").exists()


def test_partial_fine_tuning_trains_only_the_top_layers_and_saves_the_whole_model(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    out = tmp_path / "run"
    result = _simcse(tiny_model_dir, _corpus(tmp_path), out, "--no-eval", "--trainable-layers", "1", "--device", "cpu")
    assert result.exit_code == 0, result.output
    before, after = load_file(tiny_model_dir / "model.safetensors"), load_file(out / "model.safetensors")
    assert before.keys() == after.keys()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("encoder.layer.1.") for k in changed), sorted(changed)
    assert "top 1 of 2 transformer layers" in (out / "README.md").read_text()


def test_resume_under_partial_fine_tuning_is_exact(tiny_model_dir, tmp_path):
    rows = unsup_examples(SENTS)
    config = {"trainable_layers": 1}
    straight = load_encoder(str(tiny_model_dir))
    train_simcse(straight, rows, _config(tmp_path / "a", **config))

    def crash_at_3(step, loss):
        if step == 3:
            raise Crash

    with pytest.raises(Crash):
        train_simcse(load_encoder(str(tiny_model_dir)), rows, _config(tmp_path / "b", **config), callback=crash_at_3)
    resumed = load_encoder(str(tiny_model_dir))
    result = train_simcse(resumed, rows, _config(tmp_path / "b", **config))
    assert result.resumed_from == 2
    for (name, p), q in zip(straight.named_parameters(), resumed.parameters(), strict=True):
        assert torch.equal(p, q), name
