"""The training engine (subspaces.train.engine.TrainingLoop) on a toy module, and the guards every recipe relies on."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from subspaces.errors import SubspacesError
from subspaces.eval.base import Evaluator
from subspaces.train.engine import FitConfig, TrainingLoop


class Toy:
    """A seeded regression batch source: batch(epoch, index) depends only on (seed, epoch, index)."""

    batch_size = 4

    def __init__(self, n: int = 32, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, generator=g)
        self.y = self.x @ torch.tensor([[1.0], [-2.0], [0.5]])
        self.seed = seed

    def __len__(self) -> int:
        return len(self.x) // self.batch_size

    def batch(self, epoch: int, index: int):
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.x))
        idx = order[index * self.batch_size : (index + 1) * self.batch_size]
        return self.x[idx], self.y[idx]

    def fingerprint(self) -> str:
        return f"toy {len(self.x)} {self.seed}"


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1))


def _step(model, stop_at: int | None = None):
    calls = {"n": 0}

    def step(batch):
        x, y = batch
        loss = ((model(x) - y) ** 2).mean()  # the forward draws dropout masks
        calls["n"] += 1
        if stop_at is not None and calls["n"] == stop_at:
            raise KeyboardInterrupt  # Ctrl-C in the middle of a step, after its random numbers were drawn
        return loss

    return step


def _config(out=None, **kw) -> FitConfig:
    base = {
        "output_dir": None if out is None else str(out),
        "lr": 1e-2,
        "max_steps": 12,
        "eval_steps": 0,
        "save_steps": 0,
        "show_progress": False,
    }
    base.update(kw)
    return FitConfig(**base)


class Scripted(Evaluator):
    """Returns a scripted sequence of scores (one per call)."""

    primary_metric = "acc"

    def __init__(self, scores, greater_is_better: bool = True) -> None:
        self.scores = list(scores)
        self.greater_is_better = greater_is_better
        self.calls = 0

    def __call__(self, model) -> dict[str, float]:
        self.calls += 1
        return {"acc": self.scores[self.calls - 1], "other": -1.0}


def test_resume_after_ctrl_c_mid_step_gives_exactly_the_uninterrupted_weights(tmp_path):
    straight = _model()
    TrainingLoop(straight, _step(straight), Toy(), _config(tmp_path / "a", save_steps=100)).run()

    interrupted = _model()
    with pytest.raises(KeyboardInterrupt):  # interrupted during the forward of step 8 (7 done)
        TrainingLoop(interrupted, _step(interrupted, stop_at=8), Toy(), _config(tmp_path / "b", save_steps=100)).run()
    assert torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)["step"] == 7
    resumed = _model()
    result = TrainingLoop(resumed, _step(resumed), Toy(), _config(tmp_path / "b", save_steps=100)).run()
    assert result.resumed_from == 7 and result.steps == 12
    for (name, p), q in zip(straight.named_parameters(), resumed.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_evaluation_does_not_move_the_training_random_numbers():
    """A run that evaluates (with an evaluator drawing random numbers) trains as one that does not evaluate."""
    plain = _model()
    TrainingLoop(plain, _step(plain), Toy(), _config()).run()

    class Noisy(Scripted):
        def __call__(self, model):
            torch.rand(3), np.random.rand()  # noqa: NPY002 - the global state is the point, __import__("random").random()
            return super().__call__(model)

    evaluated = _model()  # rising scores: the best state is the last one
    TrainingLoop(evaluated, _step(evaluated), Toy(), _config(eval_steps=3), Noisy([1.0, 2.0, 3.0, 4.0])).run()
    for p, q in zip(plain.parameters(), evaluated.parameters(), strict=True):
        assert torch.equal(p, q)


def test_model_is_saved_only_when_the_primary_metric_improves(tmp_path):
    saves = []
    model = _model()
    evaluator = Scripted([1.0, 3.0, 2.0, 5.0])  # evaluations at steps 3, 6, 9 and the end (12)

    def save_model(folder):
        folder.mkdir(parents=True)
        (folder / "weights.pt").write_bytes(b"x")
        saves.append(len(saves))

    result = TrainingLoop(
        model, _step(model), Toy(), _config(tmp_path / "run", eval_steps=3), evaluator, save_model=save_model
    ).run()
    assert evaluator.calls == 4
    assert len(saves) == 3  # at 1.0, 3.0 and 5.0; not at 2.0
    assert result.best_score == 5.0 and result.best_step == 12
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert [e["eval"]["acc"] for e in state["history"] if "eval" in e] == [1.0, 3.0, 2.0, 5.0]


def test_lower_is_better_and_best_state_is_restored_in_memory():
    model = _model()
    snapshots = []

    class Loss(Scripted):
        def __call__(self, m):
            snapshots.append([p.detach().clone() for p in m.parameters()])
            return super().__call__(m)

    result = TrainingLoop(
        model, _step(model), Toy(), _config(eval_steps=3), Loss([4.0, 1.0, 2.0, 3.0], greater_is_better=False)
    ).run()
    assert result.best_score == 1.0 and result.best_step == 6
    for p, q in zip(model.parameters(), snapshots[1], strict=True):
        assert torch.equal(p, q)


def test_in_memory_best_survives_a_resume(tmp_path):
    """With an output folder but no save_model, the best state lives in the checkpoint: a run interrupted after
    its best evaluation and resumed still ends on that best state, as an uninterrupted run does."""
    scores = [4.0, 1.0, 2.0, 3.0]  # lower is better: the best is at step 6

    def scripted():
        return Scripted(scores, greater_is_better=False)

    straight = _model()
    TrainingLoop(
        straight, _step(straight), Toy(), _config(tmp_path / "a", eval_steps=3, save_steps=1), scripted()
    ).run()

    model = _model()
    with pytest.raises(KeyboardInterrupt):  # stopped during step 8, after the best evaluation (step 6)
        TrainingLoop(
            model, _step(model, stop_at=8), Toy(), _config(tmp_path / "b", eval_steps=3, save_steps=1), scripted()
        ).run()
    resumed = _model()
    later = Scripted(scores[2:], greater_is_better=False)  # the evaluations still due: steps 9 and 12
    result = TrainingLoop(
        resumed, _step(resumed), Toy(), _config(tmp_path / "b", eval_steps=3, save_steps=1), later
    ).run()
    assert result.resumed_from == 7 and result.best_score == 1.0 and result.best_step == 6
    for p, q in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(p, q)
    again = _model()  # a rerun of the finished run returns at once, on the best state too
    assert (
        TrainingLoop(again, _step(again), Toy(), _config(tmp_path / "b", eval_steps=3, save_steps=1), later)
        .run()
        .already_complete
    )
    for p, q in zip(straight.parameters(), again.parameters(), strict=True):
        assert torch.equal(p, q)


def test_optimiser_steps_and_frozen_parameters_stay():
    model = _model()
    model[0].weight.requires_grad_(False)
    before = [p.detach().clone() for p in model.parameters()]
    TrainingLoop(model, _step(model), Toy(), _config(max_steps=2)).run()
    after = list(model.parameters())
    assert torch.equal(before[0], after[0])
    assert all(not torch.equal(a, b) for a, b in zip(before[1:], after[1:], strict=True))


def test_nothing_to_train_is_refused():
    model = _model()
    for p in model.parameters():
        p.requires_grad_(False)
    with pytest.raises(SubspacesError, match="nothing to train"):
        TrainingLoop(model, _step(model), Toy(), _config()).run()


def test_param_groups_keep_their_own_lr():
    model = _model()
    groups = [{"params": model[0].parameters(), "lr": 0.0}, {"params": model[2].parameters(), "lr": 1e-2}]
    first = model[0].weight.detach().clone()
    TrainingLoop(model, _step(model), Toy(), _config(max_steps=3), param_groups=groups).run()
    assert torch.equal(first, model[0].weight)


def test_nan_loss_is_a_user_error_with_a_checkpoint(tmp_path):
    model = _model()
    with pytest.raises(SubspacesError, match="loss became nan at step 0"):
        TrainingLoop(
            model, lambda b: torch.tensor(float("nan"), requires_grad=True), Toy(), _config(tmp_path / "n")
        ).run()
    assert (tmp_path / "n" / "checkpoint.pt").is_file()


def test_rerun_of_a_finished_run_says_so_and_a_longer_run_extends_it(tmp_path):
    model = _model()
    TrainingLoop(model, _step(model), Toy(), _config(tmp_path / "r", max_steps=4)).run()
    again = TrainingLoop(_model(), _step(model), Toy(), _config(tmp_path / "r", max_steps=4)).run()
    assert again.already_complete and again.steps == 4 and again.resumed_from == 4
    longer_model = _model()
    longer = TrainingLoop(longer_model, _step(longer_model), Toy(), _config(tmp_path / "r", max_steps=9)).run()
    assert longer.resumed_from == 4 and longer.steps == 9 and longer.extended_from == 4
    assert longer.history[-1]["lr"] == 0.0  # the schedule was re-planned to end at the new total
    assert not longer.already_complete


def test_resume_into_another_run_is_refused(tmp_path):
    model = _model()
    TrainingLoop(model, _step(model), Toy(), _config(tmp_path / "r", max_steps=2), settings={"batch_size": 4}).run()
    for kw, settings, data, what in (
        ({"lr": 0.5}, {"batch_size": 4}, Toy(), "setting lr"),
        ({}, {"batch_size": 8}, Toy(), "setting batch_size"),
        ({}, {"batch_size": 4}, Toy(seed=1), "data"),
    ):
        with pytest.raises(SubspacesError, match=f"differs in: .*{what}"):
            TrainingLoop(
                _model(), _step(model), data, _config(tmp_path / "r", max_steps=3, **kw), settings=settings
            ).run()


def test_a_folder_of_the_users_files_is_refused_and_left_alone(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "README.md").write_text("my notes")
    model = _model()
    with pytest.raises(SubspacesError, match="not a subspaces run.*--overwrite"):
        TrainingLoop(model, _step(model), Toy(), _config(folder)).run()
    assert sorted(p.name for p in folder.iterdir()) == ["README.md"]

    def save_model(staging):
        staging.mkdir()
        (staging / "README.md").write_text("model card")
        (staging / "model.bin").write_text("weights")

    # --overwrite lets the run write there: it replaces only the names it writes, and deletes nothing.
    (folder / "keep.txt").write_text("mine")
    TrainingLoop(model, _step(model), Toy(), _config(folder, max_steps=1, overwrite=True), save_model=save_model).run()
    assert (folder / "README.md").read_text() == "model card" and (folder / "keep.txt").read_text() == "mine"


def test_a_file_put_into_our_run_folder_is_not_replaced(tmp_path):
    model = _model()

    def save_model(staging):
        staging.mkdir()
        (staging / "config.json").write_text("{}")

    TrainingLoop(model, _step(model), Toy(), _config(tmp_path / "r", max_steps=1), save_model=save_model).run()
    (tmp_path / "r" / "notes.md").write_text("mine")
    TrainingLoop(
        _model(), _step(model), Toy(), _config(tmp_path / "r", max_steps=2), save_model=save_model
    ).run()  # ours: replaced
    assert (tmp_path / "r" / "notes.md").read_text() == "mine"

    def save_notes(staging):
        staging.mkdir()
        (staging / "notes.md").write_text("generated")

    with pytest.raises(SubspacesError, match="notes.md, not written by this run"):
        TrainingLoop(_model(), _step(model), Toy(), _config(tmp_path / "r", max_steps=3), save_model=save_notes).run()
    assert (tmp_path / "r" / "notes.md").read_text() == "mine"


def test_stale_temporaries_of_ours_are_removed_on_start(tmp_path):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "checkpoint.pt").write_bytes(b"")
    stale = [folder / ".checkpoint.pt.ab12cd.tmp.pt", folder / ".trainer_state.json.x.tmp.json"]
    for p in stale:
        p.write_bytes(b"half")
    (folder / ".other.tmp").write_bytes(b"not ours")
    model = _model()
    TrainingLoop(model, _step(model), Toy(), _config(folder, max_steps=1, resume=False)).run()
    assert not any(p.exists() for p in stale)
    assert (folder / ".other.tmp").exists()


def test_evaluator_check_runs_before_anything_is_written_or_trained(tmp_path):
    class Missing(Evaluator):
        def __call__(self, model):
            return {"score": 0.0}

        def check(self):
            raise SubspacesError("STS-B dev is missing")

    model = _model()
    steps = []
    with pytest.raises(SubspacesError, match="STS-B dev is missing"):
        TrainingLoop(
            model, lambda b: steps.append(1) or _step(model)(b), Toy(), _config(tmp_path / "o"), Missing()
        ).run()
    assert not steps and not (tmp_path / "o").exists()


def test_progress_prints_plain_lines_when_not_a_terminal(capsys):
    from subspaces.progress import Progress

    with Progress(10, "train simcse on wordnet30_examples", interval=0.0) as bar:
        bar.update(5, loss=0.25)
    err = capsys.readouterr().err
    assert "train simcse on wordnet30_examples: 5/10 steps (50%)" in err and "loss=0.25" in err
    assert "\r" not in err
    assert err.count("5/10 steps") == 1  # the closing line does not repeat a state already printed


# --- guards for every recipe on the engine ------------------------------------------------------------------------

SENTS = [f"sentence {i} about a {w}" for i, w in enumerate(["cat", "dog", "man", "park"] * 6)]


def test_matryoshka_keeps_the_model_best_on_the_mean_over_dims(tiny_model_dir, tiny_data, tmp_path):
    from subspaces.eval.sts import STSBDevEvaluator
    from subspaces.models.encoder import load_encoder
    from subspaces.train.matryoshka import MatryoshkaConfig, train_matryoshka

    real = STSBDevEvaluator(dims=[8, None])
    metrics = real(load_encoder(str(tiny_model_dir)))
    assert real.primary_metric == "mean"
    assert metrics["mean"] == pytest.approx((metrics["stsb_dev@8"] + metrics["stsb_dev@32"]) / 2)

    class Scripted(STSBDevEvaluator):
        # step 2: dim 8 at its best, mean low; step 4 (the end): dim 8 lower, mean best
        script = iter([{"stsb_dev@8": 90.0, "stsb_dev@32": 10.0}, {"stsb_dev@8": 60.0, "stsb_dev@32": 60.0}])

        def __call__(self, model):
            scores = next(self.script)
            return {**scores, "mean": float(np.mean(list(scores.values())))}

    config = MatryoshkaConfig(
        output_dir=str(tmp_path / "m"),
        dims=[8, None],
        batch_size=8,
        max_steps=4,
        eval_steps=2,
        save_steps=0,
        show_progress=False,
        lr=1e-3,
    )
    result = train_matryoshka(
        load_encoder(str(tiny_model_dir)), [(s,) for s in SENTS], config, Scripted(dims=[8, None])
    )
    assert result.best_step == 4 and result.best_score == 60.0


@pytest.mark.parametrize("recipe", ["simcse-unsup", "simcse-sup", "matryoshka", "mic"])
def test_every_recipe_steps_the_optimiser(tiny_model_dir, recipe):
    from subspaces.models.encoder import load_encoder
    from subspaces.train.matryoshka import MatryoshkaConfig, train_matryoshka
    from subspaces.train.simcse import SimCSEConfig, train_simcse

    model = load_encoder(str(tiny_model_dir))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    common = {"batch_size": 8, "max_steps": 2, "eval_steps": 0, "save_steps": 0, "show_progress": False, "lr": 1e-3}
    if recipe.startswith("simcse"):
        sup = recipe == "simcse-sup"
        rows = [(s, s.replace("a", "the"), "unrelated words") if sup else (s,) for s in SENTS]
        train_simcse(model, rows, SimCSEConfig(mode="sup" if sup else "unsup", stsb_dev=False, **common))
    else:
        config = MatryoshkaConfig(dims=[8, None], mic=recipe == "mic", layers=[-1], stsb_dev=False, **common)
        train_matryoshka(model, [(s,) for s in SENTS], config)
    moved = [n for n, p in model.named_parameters() if not torch.equal(before[n], p)]
    assert any("encoder.layer.1." in n for n in moved) and any("embeddings" in n for n in moved), moved


def test_resume_after_ctrl_c_during_evaluation_runs_that_evaluation(tmp_path):
    saves = []

    def save_model(folder):
        folder.mkdir(parents=True)
        (folder / "weights.pt").write_bytes(b"x")
        saves.append(len(saves))
        if len(saves) == 2:
            raise KeyboardInterrupt  # Ctrl-C while the evaluation at step 6 saves its new best model

    run, model = tmp_path / "run", _model()
    with pytest.raises(KeyboardInterrupt):  # evaluations at steps 3 and 6 (scores 1.0, 3.0)
        TrainingLoop(
            model, _step(model), Toy(), _config(run, eval_steps=3), Scripted([1.0, 3.0]), save_model=save_model
        ).run()
    resumed, evaluator = _model(), Scripted([3.0, 2.0, 5.0])
    result = TrainingLoop(
        resumed, _step(resumed), Toy(), _config(run, eval_steps=3), evaluator, save_model=save_model
    ).run()
    assert result.resumed_from == 6 and evaluator.calls == 3  # step 6 evaluated (and its model saved) again
    assert [(e["step"], e["eval"]["acc"]) for e in result.history if "eval" in e] == [
        (3, 1.0),
        (6, 3.0),
        (9, 2.0),
        (12, 5.0),
    ]
    assert len(saves) == 4 and result.best_score == 5.0 and result.best_step == 12


class _Planted:
    """A pickle that, when unpickled, creates a marker file (as a crafted checkpoint would run any code)."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def test_a_planted_checkpoint_is_refused_without_running_its_code(tmp_path):
    marker = tmp_path / "ran"
    # Someone else's checkpoint.pt in a run folder, with nothing beside it: refused before it is opened.
    planted = tmp_path / "p"
    planted.mkdir()
    torch.save({"step": 1, "payload": _Planted(marker)}, planted / "checkpoint.pt")
    model = _model()
    with pytest.raises(SubspacesError, match="checkpoint.json beside it.*not read.*--no-resume"):
        TrainingLoop(model, _step(model), Toy(), _config(planted, max_steps=2)).run()
    assert not marker.exists()

    # Beside a genuine checkpoint.json of this very run (its fingerprint copied): the pickle is still not run.
    TrainingLoop(model, _step(model), Toy(), _config(tmp_path / "r", max_steps=2)).run()
    assert (tmp_path / "r" / "checkpoint.json").is_file()
    torch.save({"step": 1, "payload": _Planted(marker)}, tmp_path / "r" / "checkpoint.pt")
    with pytest.raises(SubspacesError, match="not a checkpoint subspaces reads safely"):
        TrainingLoop(_model(), _step(model), Toy(), _config(tmp_path / "r", max_steps=3)).run()
    assert not marker.exists()


def test_a_checkpoint_holds_only_what_weights_only_loading_reads(tmp_path):
    model = _model()
    TrainingLoop(
        model, _step(model), Toy(), _config(tmp_path / "r", max_steps=3), evaluator=lambda m: np.float64(0.5)
    ).run()
    state = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=True)
    assert state["step"] == 3 and state["best"] == 0.5


def test_history_by_epoch_is_whole_after_a_resume(tmp_path):
    """``by_epoch``: one entry per epoch (its last step, mean loss, evaluation under "dev"); a run resumed in the
    middle of an epoch ends with the history of a run never interrupted."""

    def run(folder, stop_at=None):
        model = _model()
        config = _config(folder, eval_every_epoch=True, save_steps=1)
        evaluator = lambda module: {"score": float(module[0].weight.sum())}  # noqa: E731 - weights, bit for bit
        return TrainingLoop(model, _step(model, stop_at), Toy(), config, evaluator, by_epoch=True).run()

    straight = run(tmp_path / "a")
    assert [(e["epoch"], e["step"]) for e in straight.history] == [(0, 8), (1, 12)]  # Toy: 8 batches an epoch
    assert all(set(e) == {"epoch", "step", "loss", "dev"} for e in straight.history)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "b", stop_at=11)  # 10 steps done: 2 of epoch 1
    resumed = run(tmp_path / "b")
    assert resumed.resumed_from == 10 and resumed.history == straight.history
