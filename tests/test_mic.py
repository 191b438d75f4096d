"""MIC's regularisers against hand-computed values, and the MIC loss wired around MRL."""

from __future__ import annotations

import json
import math

import pytest
import torch

from subspaces.errors import DimensionError
from subspaces.losses.matryoshka import matryoshka_simcse_loss
from subspaces.losses.mic import (
    MICLoss,
    soft_collapse_regularization,
    spectral_isotropy_regularization,
    token_statistics,
)
from subspaces.models.pooling import masked_mean

# Two sequences of two real tokens and one padding token (absurd values, which must be ignored).
# With two tokens, a per-sequence standardised dimension is exactly (-1, +1) or (+1, -1):
#   seq A: dim0 (1, 3)  mean 2 std 1    -> z (-1, +1)     seq B: dim0 (0, 4) mean 2 std 2 -> z (-1, +1)
#          dim1 (5, 1)  mean 3 std 2    -> z (+1, -1)            dim1 (0, 2) mean 1 std 1 -> z (-1, +1)
#          dim2 (0, .5) mean .25 std .25 -> z (-1, +1)           dim2 (0, 2) mean 1 std 1 -> z (-1, +1)
# Averaged over the 4 real tokens: corr(0, 1) = (-1 - 1 + 1 + 1)/4 = 0, corr(0, 2) = 1, corr(1, 2) = 0.
HIDDEN = torch.tensor(
    [
        [[1.0, 5.0, 0.0], [3.0, 1.0, 0.5], [50.0, -50.0, 9.0]],
        [[0.0, 0.0, 0.0], [4.0, 2.0, 2.0], [-70.0, 30.0, 11.0]],
    ]
)
MASK = torch.tensor([[1, 1, 0], [1, 1, 0]])


def test_token_statistics_by_hand():
    correlation, std = token_statistics(HIDDEN, MASK, eps=0.0)
    assert torch.allclose(correlation[0, 1:], torch.tensor([0.0, 1.0]), atol=1e-6)
    assert torch.allclose(correlation[1, 2], torch.tensor(0.0), atol=1e-6)
    assert torch.allclose(torch.diagonal(correlation), torch.ones(3), atol=1e-6)
    assert torch.allclose(std, torch.tensor([[1.0, 2.0, 0.25], [2.0, 1.0, 1.0]]))


def test_scr_prefix_one_by_hand():
    # d = 1: C = [0, 1]; L_corr = ((0 - .1)_+^2 + (1 - .1)^2) / 2 = 0.405.
    # sigma_pre = mean(1, 2) = 1.5 and sigma_res = mean(2, .25, 1, 1) = 1.0625: both floors are inactive.
    value = soft_collapse_regularization(HIDDEN, MASK, 1, tau_corr=0.1, lambda_var=1.0, eps=0.0)
    assert value.item() == pytest.approx(0.405, abs=1e-6)


def test_scr_prefix_two_by_hand_with_variance_floor():
    # d = 2: C = [[1], [0]]; L_corr = (0.81 + 0) / 2 = 0.405.
    # sigma_pre = mean(1, 2, 2, 1) = 1.5 -> 0; sigma_res = mean(.25, 1) = .625 -> 0.5 * 0.375 = 0.1875.
    one = soft_collapse_regularization(HIDDEN, MASK, 2, tau_corr=0.1, lambda_var=1.0, eps=0.0)
    two = soft_collapse_regularization(HIDDEN, MASK, 2, tau_corr=0.1, lambda_var=2.0, eps=0.0)
    assert one.item() == pytest.approx(0.405 + 0.1875, abs=1e-6)
    assert two.item() == pytest.approx(0.405 + 0.375, abs=1e-6)


def test_scr_threshold():
    # |C| = 1 against tau 0.95 leaves (0.05)^2 / 2; at tau >= 1 nothing is penalised.
    assert soft_collapse_regularization(HIDDEN, MASK, 1, tau_corr=0.95, eps=0.0).item() == pytest.approx(
        0.00125, abs=1e-7
    )
    assert soft_collapse_regularization(HIDDEN, MASK, 1, tau_corr=1.0, eps=0.0).item() == pytest.approx(0.0, abs=1e-7)


def test_scr_ignores_padding():
    other = HIDDEN.clone()
    other[:, 2] = torch.randn(2, 3) * 1000
    a = soft_collapse_regularization(HIDDEN, MASK, 1)
    b = soft_collapse_regularization(other, MASK, 1)
    c = soft_collapse_regularization(HIDDEN[:, :2], MASK[:, :2], 1)
    assert a.item() == pytest.approx(b.item(), abs=1e-6)
    assert a.item() == pytest.approx(c.item(), abs=1e-6)
    # Counting the padding would change it: the check above can fail.
    d = soft_collapse_regularization(HIDDEN, torch.ones_like(MASK), 1)
    assert abs(d.item() - a.item()) > 1e-3


def test_scr_rejects_dims_without_residual():
    with pytest.raises(DimensionError):
        soft_collapse_regularization(HIDDEN, MASK, 3)


def test_sir_orthogonal_pair_by_hand():
    # Equal variances (CV 0); cos 0, so each of the two ordered pairs gives exp(-2*2*(1-0)) = e^-4.
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert spectral_isotropy_regularization(z, t=2.0, eps=0.0).item() == pytest.approx(0.5 * (0.0 - 4.0), abs=1e-6)


def test_sir_three_points_by_hand():
    # Columns (1, 1, 0) and (0, 0, 2): variances 2/9 and 8/9, mean 5/9, std 3/9 -> CV 0.6.
    # cos: z1.z2 = 1, the other pairs 0; 6 ordered pairs -> mean exp = (2 + 4 e^-4) / 6.
    z = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    expected = 0.5 * (0.6 + math.log((2 + 4 * math.exp(-4)) / 6))
    assert spectral_isotropy_regularization(z, t=2.0, eps=0.0).item() == pytest.approx(expected, abs=1e-6)


def test_sir_needs_two_rows():
    with pytest.raises(DimensionError):
        spectral_isotropy_regularization(torch.ones(1, 4))


def test_regularisers_have_gradients():
    hidden = torch.randn(3, 5, 8, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]])
    loss = soft_collapse_regularization(hidden, mask, 3, tau_corr=0.0) + spectral_isotropy_regularization(
        masked_mean(hidden, mask)[:, :3]
    )
    loss.backward()
    assert torch.isfinite(hidden.grad).all()
    assert hidden.grad[:, :, :3].abs().sum() > 0
    assert hidden.grad[mask == 0].abs().sum() == 0  # padding receives no gradient


@pytest.fixture
def mrl(tiny_model):
    return matryoshka_simcse_loss(tiny_model, [8, 16, 32])


def test_mic_equals_mrl_plus_gamma_align(tiny_model, mrl):
    """In eval mode (no dropout) MIC = MRL + gamma * (mean SCR + mean SIR) recomputed from a separate forward."""
    tiny_model.eval()
    features = [tiny_model.preprocess(["a cat plays in the park", "the dog eats food", "a red house", "big man runs"])]
    mic = MICLoss(tiny_model, mrl, layers=[-1, 1], gamma=0.5)
    assert mic.layers == [1, 2] and mic.dims == [8, 16]
    value = mic(features, None)
    with torch.no_grad():
        plain = mrl(features, None)
        tiny_model[0].model.config.output_hidden_states = True
        out = tiny_model(dict(features[0]))
        tiny_model[0].model.config.output_hidden_states = False
        scr, sir = [], []
        for layer in (1, 2):
            h = out["all_layer_embeddings"][layer]
            for d in (8, 16):
                scr.append(soft_collapse_regularization(h, out["attention_mask"], d))
                sir.append(spectral_isotropy_regularization(masked_mean(h, out["attention_mask"])[:, :d]))
        expected = plain + 0.5 * (torch.stack(scr).mean() + torch.stack(sir).mean())
    assert value.item() == pytest.approx(expected.item(), rel=1e-5)
    assert mic.last_terms["mrl"] == pytest.approx(plain.item(), rel=1e-5)


def test_mic_gradients_reach_the_encoder_and_differ_from_mrl(tiny_model, mrl):
    tiny_model.eval()
    features = [tiny_model.preprocess(["a cat plays", "the dog eats food", "a red house", "big man runs quickly"])]

    def grads(loss):
        tiny_model.zero_grad(set_to_none=True)
        loss(features, None).backward()
        return {n: p.grad.clone() for n, p in tiny_model.named_parameters() if p.grad is not None}

    g_mrl = grads(mrl)
    g_mic = grads(MICLoss(tiny_model, mrl, gamma=1.0))
    layer_params = [n for n in g_mic if "encoder.layer.0." in n]
    assert layer_params, "no gradient reached the first transformer layer"
    assert all(torch.isfinite(g).all() for g in g_mic.values())
    assert any(not torch.allclose(g_mic[n], g_mrl[n]) for n in layer_params)


def test_mic_leaves_the_saved_model_alone(tiny_model, mrl, tmp_path):
    """Same config and modules saved before and after a MIC step: the regulariser only changes training."""
    tiny_model.save(str(tmp_path / "before"))
    tiny_model.train()
    mic = MICLoss(tiny_model, mrl)
    mic([tiny_model.preprocess(["a cat plays", "the dog eats", "a red house"])], None).backward()
    assert tiny_model[0].model.config.output_hidden_states is False
    tiny_model.save(str(tmp_path / "after"))
    for name in ("config.json", "modules.json"):
        before = json.loads((tmp_path / "before" / name).read_text())
        after = json.loads((tmp_path / "after" / name).read_text())
        assert before == after, name
    assert not json.loads((tmp_path / "after" / "config.json").read_text()).get("output_hidden_states", False)


def test_mic_argument_checks(tiny_model, mrl):
    with pytest.raises(DimensionError):
        MICLoss(tiny_model, mrl, layers=[3])  # the tiny model has 2 layers
    with pytest.raises(DimensionError):
        MICLoss(tiny_model, mrl, dims=[32])  # no residual at the full hidden size
    with pytest.raises(ValueError):
        MICLoss(tiny_model, mrl, t=0.0)
    assert MICLoss(tiny_model, mrl).layers == [1, 2]  # default: middle and last
