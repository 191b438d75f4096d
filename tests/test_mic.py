"""MIC's regularisers against hand-computed values, and the MIC loss wired around MRL."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from subspaces.errors import DimensionError
from subspaces.losses.matryoshka import matryoshka_simcse_loss
from subspaces.losses.mic import (
    MICLoss,
    dimension_spread,
    paired_layers,
    scr_terms,
    self_distillation,
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


def test_scr_terms_by_hand():
    # s = per-dim stds averaged over the sequences: (1.5, 1.5, .625). Absolute floor 1: hinges (0, 0, .375).
    correlation, std = token_statistics(HIDDEN, MASK, eps=0.0)
    spread = dimension_spread(std, relative=False)
    assert torch.allclose(spread, torch.tensor([1.5, 1.5, 0.625]))
    # d = 1: C = [0, 1]; L_corr = ((0 - .1)_+^2 + (1 - .1)^2) / 2 = 0.405; L_var = 1/2 (0 + (0 + .375) / 2).
    l_corr, l_var = scr_terms(correlation, spread, 1, tau_corr=0.1, var_floor=1.0)
    assert (l_corr.item(), l_var.item()) == pytest.approx((0.405, 0.09375), abs=1e-6)
    # d = 2: C = [[1], [0]]; L_corr = (0.81 + 0) / 2; L_var = 1/2 ((0 + 0) / 2 + .375).
    l_corr, l_var = scr_terms(correlation, spread, 2, tau_corr=0.1, var_floor=1.0)
    assert (l_corr.item(), l_var.item()) == pytest.approx((0.405, 0.1875), abs=1e-6)
    # Relative: s / mean(s) = (1.5, 1.5, .625) / (3.625 / 3); floor .6 leaves only the last dim's .6 - .517241.
    relative = dimension_spread(std)
    assert relative[2].item() == pytest.approx(0.625 * 3 / 3.625, abs=1e-6)
    _, l_var = scr_terms(correlation, relative, 2, var_floor=0.6)
    assert l_var.item() == pytest.approx(0.5 * (0.6 - 0.625 * 3 / 3.625), abs=1e-6)


def test_scr_weights_its_two_terms():
    value = soft_collapse_regularization(
        HIDDEN, MASK, 2, tau_corr=0.1, lambda_corr=3.0, lambda_var=2.0, var_floor=1.0, relative_floor=False, eps=0.0
    )
    assert value.item() == pytest.approx(3.0 * 0.405 + 2.0 * 0.1875, abs=1e-6)


def test_variance_floor_catches_one_collapsed_dimension_the_mean_hinge_misses():
    # 4 tokens; dims 0-2 have stds 1, 2, 3, dim 3 is constant in every sequence, dim 4 (residual) has std 2.
    pattern = torch.tensor([-1.0, 1.0, -1.0, 1.0])
    other = torch.tensor([1.0, 1.0, -1.0, -1.0])
    seq = torch.stack([pattern, 2 * pattern, 3 * pattern, torch.full((4,), 7.0), 2 * other], dim=-1)
    hidden, mask = torch.stack([seq, seq + 1.0]), torch.ones(2, 4)
    correlation, std = token_statistics(hidden, mask, eps=1e-12)
    assert std[:, :4].mean().item() == pytest.approx(1.5, abs=1e-5)  # the mean std is above 1 ...
    assert F.relu(1 - std[:, :4].mean()).item() == 0.0  # ... so a hinge on the mean sees nothing
    # Per dimension, absolute floor 1: the collapsed dim costs 1 of the prefix's 4 -> 1/2 * 1/4.
    _, l_var = scr_terms(correlation, dimension_spread(std, relative=False), 4, var_floor=1.0)
    assert l_var.item() == pytest.approx(0.125, abs=1e-5)
    # Relative: s = (1, 2, 3, 0, 2) / 1.6; floor .5 -> only the collapsed dim, by .5.
    _, l_var = scr_terms(correlation, dimension_spread(std), 4, var_floor=0.5)
    assert l_var.item() == pytest.approx(0.5 * 0.5 / 4, abs=1e-5)
    # Without the collapse nothing is below the floor.
    healthy = hidden.clone()
    healthy[..., 3] = 1.5 * pattern
    correlation, std = token_statistics(healthy, mask, eps=1e-12)
    assert scr_terms(correlation, dimension_spread(std), 4, var_floor=0.5)[1].item() == 0.0


def test_scr_threshold():
    # |C| = 1 against tau 0.95 leaves (0.05)^2 / 2; at tau >= 1 nothing is penalised.
    correlation, std = token_statistics(HIDDEN, MASK, eps=0.0)
    assert scr_terms(correlation, std.mean(0), 1, tau_corr=0.95)[0].item() == pytest.approx(0.00125, abs=1e-7)
    assert scr_terms(correlation, std.mean(0), 1, tau_corr=1.0)[0].item() == pytest.approx(0.0, abs=1e-7)


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


def _kl_rows(teacher_logits, student_logits):
    """KL(softmax(teacher) || softmax(student)) for one row, in plain Python."""
    p = [math.exp(x) / sum(math.exp(y) for y in teacher_logits) for x in teacher_logits]
    q = [math.exp(x) / sum(math.exp(y) for y in student_logits) for x in student_logits]
    return sum(pi * math.log(pi / qi) for pi, qi in zip(p, q, strict=True))


def test_self_distillation_by_hand():
    # Full cosines: (1,2) = 2/sqrt5, (1,3) = -1/sqrt10, (2,3) = 1/sqrt50; the 1-d prefixes are +1, +1, -1.
    e = torch.tensor([[1.0, 0.0], [2.0, 1.0], [-1.0, 3.0]])
    c12, c13, c23 = 2 / math.sqrt(5), -1 / math.sqrt(10), 1 / math.sqrt(50)
    rows = [([c12, c13], [1, -1]), ([c12, c23], [1, -1]), ([c13, c23], [-1, -1])]
    tau = 0.5
    expected = sum(_kl_rows([x / tau for x in t], [x / tau for x in s]) for t, s in rows) / 3
    assert self_distillation(e, 1, temperature=tau).item() == pytest.approx(expected, abs=1e-6)


def test_self_distillation_is_zero_when_the_prefix_matches_the_teacher():
    torch.manual_seed(0)
    prefix = torch.randn(6, 4)
    nested = torch.cat([prefix, torch.zeros(6, 3)], dim=1)  # the residual adds nothing: same cosines
    assert self_distillation(nested, 4).item() == pytest.approx(0.0, abs=1e-6)
    assert self_distillation(nested, 7).item() == pytest.approx(0.0, abs=1e-6)  # the full vector is its own teacher
    assert self_distillation(torch.randn(6, 7), 4).item() > 1e-3


def test_self_distillation_teaches_only_the_student():
    torch.manual_seed(1)
    e = torch.randn(5, 6, requires_grad=True)
    self_distillation(e, 2).backward()
    assert e.grad[:, 2:].abs().sum() == 0  # the teacher (the full vector) is detached
    assert e.grad[:, :2].abs().sum() > 0


def test_paired_layers_spread_up_to_the_last():
    assert paired_layers(6, 4) == [2, 3, 5, 6]
    assert paired_layers(2, 2) == [1, 2]
    assert paired_layers(2, 3) == [1, 2, 2]


def _states(model, features):
    with torch.no_grad():
        model[0].model.config.output_hidden_states = True
        out = model(dict(features[0]))
        model[0].model.config.output_hidden_states = False
    return out


def _align(out, pairs):
    """Mean SCR and mean SIR over (layer, dim) pairs, from the plain functions."""
    mask = out["attention_mask"]
    scr, sir = [], []
    for layer, d in pairs:
        h = out["all_layer_embeddings"][layer]
        scr.append(soft_collapse_regularization(h, mask, d))
        sir.append(spectral_isotropy_regularization(masked_mean(h, mask)[:, :d]))
    return torch.stack(scr).mean(), torch.stack(sir).mean()


def test_mic_equals_mrl_plus_align_plus_distillation(tiny_model, mrl):
    """In eval mode (no dropout) MIC = MRL + gamma (SCR + lambda_sir SIR) + beta KD, recomputed from a forward."""
    tiny_model.eval()
    features = [tiny_model.preprocess(["a cat plays in the park", "the dog eats food", "a red house", "big man runs"])]
    # The random model embeds every sentence alike (cosines ~0.99997): at the default 0.05 the distillation KL is
    # ~1e-9, below rounding, so total would not show it. At 1e-4 it is ~1e-3 and its term is checked for real.
    tau = 1e-4
    mic = MICLoss(
        tiny_model, mrl, layers=[-1, 1], gamma=0.5, lambda_sir=2.0, lambda_distill=0.3, distill_temperature=tau
    )
    assert mic.layers == [1, 2] and mic.dims == [8, 16] and mic.distill_dims == [8, 16]
    value = mic(features, None)
    with torch.no_grad():
        plain = mrl(features, None)
        out = _states(tiny_model, features)
        scr, sir = _align(out, [(1, 8), (1, 16), (2, 8), (2, 16)])
        e = out["sentence_embedding"]
        kd = (self_distillation(e, 8, temperature=tau) + self_distillation(e, 16, temperature=tau)) / 2
        expected = plain + 0.5 * (scr + 2.0 * sir) + 0.3 * kd
    assert value.item() == pytest.approx(expected.item(), rel=1e-5)
    terms = mic.last_terms
    assert terms["mrl"] == pytest.approx(plain.item(), rel=1e-5)
    assert terms["scr"] == pytest.approx(scr.item(), rel=1e-5) and terms["sir"] == pytest.approx(sir.item(), rel=1e-5)
    assert terms["distill"] == pytest.approx(kd.item(), rel=1e-5) and terms["distill"] > 1e-4
    assert terms["scr"] == pytest.approx(100 * terms["scr_corr"] + 25 * terms["scr_var"], rel=1e-5)
    assert terms["total"] == pytest.approx(value.item(), rel=1e-6)


def test_mic_paired_mapping_uses_shallow_layer_for_small_prefix(tiny_model):
    tiny_model.eval()
    mrl = matryoshka_simcse_loss(tiny_model, [4, 8, 16, 32])
    features = [tiny_model.preprocess(["a cat plays in the park", "the dog eats food", "a red house", "big man runs"])]
    paired = MICLoss(tiny_model, mrl, dims=[16, 8], layer_prefix_mapping="paired", lambda_distill=0.0)
    assert paired.pairs == [(1, 8), (2, 16)]
    assert MICLoss(tiny_model, mrl, layer_prefix_mapping="paired").pairs == [(1, 4), (2, 8), (2, 16)]
    explicit = MICLoss(tiny_model, mrl, dims=[8, 16], layers=[-1, 1], layer_prefix_mapping="paired")
    assert explicit.pairs == [(1, 8), (2, 16)]
    with pytest.raises(DimensionError, match="one layer per dim"):
        MICLoss(tiny_model, mrl, dims=[8, 16], layers=[2], layer_prefix_mapping="paired")
    with pytest.raises(ValueError):
        MICLoss(tiny_model, mrl, layer_prefix_mapping="diagonal")
    value = paired(features, None)
    with torch.no_grad():
        scr, sir = _align(_states(tiny_model, features), [(1, 8), (2, 16)])
        crossed = _align(_states(tiny_model, features), [(1, 16), (2, 8)])
        expected = mrl(features, None) + 0.1 * (scr + sir)
    assert value.item() == pytest.approx(expected.item(), rel=1e-5)
    assert abs((crossed[0] + crossed[1] - scr - sir).item()) > 1e-4  # the other pairing would give another value


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
