"""MRL around SimCSE's InfoNCE, truncation + re-normalisation, and `train matryoshka` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from subspaces.errors import DimensionError
from subspaces.losses.matryoshka import matryoshka_simcse_loss
from subspaces.losses.simcse import SimCSELoss, info_nce

SENTENCES = ["a cat plays in the park", "the dog eats food", "a red house", "big man runs", "the woman sleeps"]


def _embed(model, features):
    return model(dict(features))["sentence_embedding"]


def test_mrl_with_full_dim_only_equals_simcse(tiny_model):
    tiny_model.eval()  # no dropout: both losses see identical views
    features = [tiny_model.preprocess(SENTENCES)]
    plain = SimCSELoss(tiny_model)(features, None)
    mrl = matryoshka_simcse_loss(tiny_model, [None])(features, None)
    assert mrl.item() == pytest.approx(plain.item(), rel=1e-6)


def test_mrl_is_the_weighted_sum_over_renormalised_prefixes(tiny_model):
    tiny_model.eval()
    features = [tiny_model.preprocess(SENTENCES)]
    value = matryoshka_simcse_loss(tiny_model, [8, 32], weights=[2.0, 0.5], temperature=0.1)(features, None)
    with torch.no_grad():
        e = _embed(tiny_model, features[0])
        expected = 2.0 * info_nce(e[:, :8], e[:, :8], temperature=0.1) + 0.5 * info_nce(e, e, temperature=0.1)
    assert value.item() == pytest.approx(expected.item(), rel=1e-5)


def test_mrl_reuses_the_same_dropout_views_at_every_dim(tiny_model):
    """Unsupervised: the two dropout views made at the largest dim are the ones truncated for the smaller dims."""
    tiny_model.train()
    features = [tiny_model.preprocess(SENTENCES)]
    torch.manual_seed(7)
    value = matryoshka_simcse_loss(tiny_model, [32, 8])(features, None)
    torch.manual_seed(7)
    with torch.no_grad():
        v1, v2 = _embed(tiny_model, features[0]), _embed(tiny_model, features[0])
    assert not torch.allclose(v1, v2)  # dropout really makes two views
    expected = info_nce(v1, v2) + info_nce(v1[:, :8], v2[:, :8])
    assert value.item() == pytest.approx(expected.item(), rel=1e-5)


def test_mrl_gradients_flow(tiny_model):
    tiny_model.train()
    loss = matryoshka_simcse_loss(tiny_model, [8, 16, None])
    loss([tiny_model.preprocess(SENTENCES)], None).backward()
    grads = [p.grad for n, p in tiny_model.named_parameters() if "encoder.layer" in n]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)


def test_truncate_and_renormalise_matches_encode(tiny_model):
    from subspaces.models.encoder import encode
    from subspaces.vectors import unit_prefix as prefix

    full = encode(tiny_model, SENTENCES, normalize=False)
    short = encode(tiny_model, SENTENCES, truncate_dim=8, normalize=True)
    assert short.shape == (len(SENTENCES), 8)
    np.testing.assert_allclose(np.linalg.norm(short, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(prefix(full, 8), short, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        short, full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True), rtol=1e-5, atol=1e-6
    )


def test_dim_checks(tiny_model):
    with pytest.raises(DimensionError):
        matryoshka_simcse_loss(tiny_model, [8, 64])
    with pytest.raises(DimensionError):
        matryoshka_simcse_loss(tiny_model, [8, 16], weights=[1.0])
    with pytest.raises(DimensionError):
        matryoshka_simcse_loss(tiny_model, [8, 8])


@pytest.mark.parametrize("mic", [False, True])
def test_train_matryoshka_cli(tiny_model_dir, tiny_data, tmp_path, mic):
    from subspaces.cli.app import app
    from subspaces.models.encoder import load_encoder

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"{s} number {i}" for i, s in enumerate(SENTENCES * 8)) + "\n", encoding="utf-8")
    out = tmp_path / ("mic" if mic else "mrl")
    args = [
        "matryoshka",
        "train",
        "--model",
        str(tiny_model_dir),
        "--data",
        str(corpus),
        "--output",
        str(out),
        "--dims",
        "8,16,full",
        "--batch-size",
        "8",
        "--max-steps",
        "3",
        "--eval-steps",
        "0",
        "--save-steps",
        "0",
    ]
    mic_args = ["--mic", "--gamma", "0.5", "--tau-corr", "0.1", "--lambda-var", "1", "--t", "2", "--layers", "1,-1"]
    mic_args += ["--layer-prefix-mapping", "paired", "--lambda-corr", "10", "--var-floor", "0.4", "--absolute-floor"]
    mic_args += ["--lambda-sir", "0.5", "--lambda-distill", "0.5", "--distill-temperature", "0.1"]
    result = CliRunner().invoke(app, args + (mic_args if mic else []))
    assert result.exit_code == 0, result.output
    assert ("MIC terms at step 1:" in result.output and "at step 3:" in result.output) == mic, result.output
    settings = json.loads((out / "trainer_state.json").read_text())["settings"]
    if mic:
        assert settings["layer_prefix_mapping"] == "paired" and settings["relative_floor"] is False
        assert "'layers', [1, 2]" in settings["loss"] and settings["lambda_distill"] == 0.5
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["steps"] == 3
    assert "stsb_dev@8" in state["history"][-1]["eval"]
    reloaded = load_encoder(str(out))
    assert reloaded.get_embedding_dimension() == 32
    assert not json.loads((out / "config.json").read_text()).get("output_hidden_states", False)


def test_train_matryoshka_cli_bad_dims(tiny_model_dir, tiny_data, tmp_path):
    from subspaces.cli.app import app

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES * 4) + "\n", encoding="utf-8")
    result = CliRunner().invoke(
        app,
        [
            "matryoshka",
            "train",
            "--model",
            str(tiny_model_dir),
            "--data",
            str(corpus),
            "--output",
            str(tmp_path / "o"),
            "--dims",
            "8,64",
            "--max-steps",
            "1",
        ],
    )
    assert result.exit_code == 2
    assert "outside 1..32" in result.output


def test_train_matryoshka_records_the_mic_terms(tiny_model_dir, tmp_path):
    import json

    from subspaces.models.encoder import load_encoder
    from subspaces.train.matryoshka import MatryoshkaConfig, train_matryoshka

    config = MatryoshkaConfig(
        output_dir=str(tmp_path / "run"),
        dims=[8, None],
        mic=True,
        stsb_dev=False,
        batch_size=4,
        max_steps=2,
        eval_steps=0,
        save_steps=0,
    )
    config.show_progress = False
    result = train_matryoshka(load_encoder(str(tiny_model_dir)), [(s,) for s in SENTENCES * 2], config)
    recorded = [entry for entry in result.history if "terms" in entry]
    assert [entry["step"] for entry in recorded] == [1, 2]
    expected = {"mrl", "scr_corr", "scr_var", "scr", "sir_cv", "sir_unif", "sir", "distill", "total"}
    assert all(set(entry["terms"]) == expected for entry in recorded)
    assert recorded[0]["terms"]["distill"] > 0
    written = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["history"]
    assert [entry["terms"] for entry in written if "terms" in entry] == [entry["terms"] for entry in recorded]
