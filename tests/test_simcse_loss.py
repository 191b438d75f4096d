import math

import pytest
import torch

from subspaces.losses.simcse import SimCSELoss, info_nce


def _hand_info_nce(a, p, n=None, tau=0.05, w=0.0):
    """InfoNCE written out with loops, straight from the SimCSE paper's equations."""
    cos = torch.nn.functional.cosine_similarity
    total = 0.0
    for i in range(len(a)):
        num = math.exp(cos(a[i], p[i], dim=0).item() / tau)
        den = sum(math.exp(cos(a[i], p[j], dim=0).item() / tau) for j in range(len(a)))
        if n is not None:
            den += sum(
                math.exp(cos(a[i], n[j], dim=0).item() / tau) * (math.exp(w) if i == j else 1.0) for j in range(len(a))
            )
        total += -math.log(num / den)
    return total / len(a)


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(5, 8, generator=g, dtype=torch.float64) for _ in range(3)]


def test_info_nce_matches_hand_computation(batch):
    a, p, _ = batch
    assert info_nce(a, p, temperature=0.05).item() == pytest.approx(_hand_info_nce(a, p), rel=1e-9)
    assert info_nce(a, p, temperature=0.5).item() == pytest.approx(_hand_info_nce(a, p, tau=0.5), rel=1e-9)


@pytest.mark.parametrize("weight", [0.0, 1.0, -2.0])
def test_info_nce_with_hard_negatives_and_weights(batch, weight):
    a, p, n = batch
    got = info_nce(a, p, n, temperature=0.1, hard_negative_weight=weight).item()
    assert got == pytest.approx(_hand_info_nce(a, p, n, tau=0.1, w=weight), rel=1e-9)


def test_hard_negative_weight_changes_the_loss(batch):
    a, p, n = batch
    assert info_nce(a, p, n, hard_negative_weight=1.0) > info_nce(a, p, n, hard_negative_weight=0.0)


def test_shape_mismatch_is_an_error(batch):
    a, p, _ = batch
    with pytest.raises(ValueError, match="same shape"):
        info_nce(a, p[:3])


def test_equals_sentence_transformers_mnrl(tiny_model):
    """With weight 0, SimCSELoss is MultipleNegativesRankingLoss at scale 1/temperature (dropout off)."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    tiny_model.eval()
    cols = [
        ["a cat plays", "the dog eats", "a man runs"],
        ["a cat sleeps", "dog food", "woman runs"],
        ["red house", "big park", "small guitar"],
    ]
    feats = [tiny_model.preprocess(c) for c in cols]
    ours = SimCSELoss(tiny_model, temperature=0.05)(feats, None)
    theirs = MultipleNegativesRankingLoss(tiny_model, scale=20.0)(feats, torch.zeros(3))
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-5)


def test_unsupervised_views_differ_only_by_dropout(tiny_model):
    feats = [tiny_model.preprocess(["a cat plays", "the dog eats", "a man runs", "red house"])]
    loss = SimCSELoss(tiny_model)
    tiny_model.eval()
    # Without dropout both views are identical: the positive logit is 1/τ, the loss is small but not zero.
    no_dropout = loss(feats).item()
    emb = tiny_model(tiny_model.preprocess(["a cat plays", "the dog eats", "a man runs", "red house"]))[
        "sentence_embedding"
    ]
    assert no_dropout == pytest.approx(info_nce(emb, emb).item(), rel=1e-5)
    tiny_model.train()
    torch.manual_seed(0)
    assert loss(feats).item() != pytest.approx(no_dropout, rel=1e-6)


def test_temperature_must_be_positive(tiny_model):
    with pytest.raises(ValueError):
        SimCSELoss(tiny_model, temperature=0.0)


@pytest.mark.parametrize("columns", [("anchor",), ("anchor", "positive"), ("anchor", "positive", "negative")])
def test_trains_in_sentence_transformers_trainer(tiny_model, tmp_path, columns):
    """The README's claim: the loss works in SentenceTransformerTrainer (the `train` extra brings its needs)."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    texts = [f"sentence number {i} about a {w}" for i, w in enumerate(["cat", "dog", "park", "house"] * 4)]
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        max_steps=2,
        learning_rate=1e-3,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        dataloader_drop_last=True,
    )
    before = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    data = Dataset.from_dict(dict.fromkeys(columns, texts))
    SentenceTransformerTrainer(model=tiny_model, args=args, train_dataset=data, loss=SimCSELoss(tiny_model)).train()
    assert any(not torch.equal(before[n], p) for n, p in tiny_model.named_parameters())
