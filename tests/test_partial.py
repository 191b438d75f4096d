"""Partial fine-tuning over cached activations (subspaces.models.partial) on tiny random BERTs."""

from __future__ import annotations

import pytest
import torch

from subspaces.errors import DataError, SubspacesError
from subspaces.models.partial import STATES, partial_fine_tuning

# Different lengths, so batches are padded; one repeat, so the cache holds one entry per distinct input.
TEXTS = [
    "A cat.",
    "The big dog plays the red guitar in the small park quickly.",
    "A woman eats food.",
    "A cat.",
    "The man runs to the house and sleeps.",
]
COS = 0.9999  # float16 storage of the bottom states; the module docstring says why this holds


@pytest.fixture(scope="module")
def deep_model_dir(tmp_path_factory):
    """A 4-layer, 32-d random BERT, so that N=1 and N=all-but-one (3) differ."""
    from bench.random_bert import build_random_bert
    from subspaces.models.encoder import portable

    folder = tmp_path_factory.mktemp("deep-bert")
    model = build_random_bert(folder / "hf", num_layers=4, hidden_size=32, num_heads=2, max_position=64, seed=1)
    portable(model).save(str(folder / "st"))
    return folder / "st"


def _load(path):
    from subspaces.models.encoder import load_encoder

    return load_encoder(str(path))


def _embed(model, texts=TEXTS):
    return model.encode(list(texts), convert_to_tensor=True)


def _layer_index(name: str) -> int | None:
    """The transformer layer a parameter name belongs to, or None (embeddings, pooler, heads)."""
    marker = "encoder.layer."
    return int(name.split(marker)[1].split(".")[0]) if marker in name else None


def test_bad_layer_counts_name_the_depth(tiny_model):
    assert partial_fine_tuning(tiny_model, None) is None
    assert partial_fine_tuning(tiny_model, "all") is None
    for bad in (0, 3, -1, "3"):
        with pytest.raises(SubspacesError, match="depth, 2"):
            partial_fine_tuning(tiny_model, bad)
    with pytest.raises(SubspacesError, match="whole number or 'all'"):
        partial_fine_tuning(tiny_model, "two")
    assert "forward" not in tiny_model[0].__dict__  # nothing attached by a refused call


def test_static_model_has_no_layers(tiny_model):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    static = SentenceTransformer(modules=[StaticEmbedding(tiny_model.tokenizer, embedding_dim=8)], device="cpu")
    with pytest.raises(SubspacesError, match="StaticEmbedding, which has no layers"):
        partial_fine_tuning(static, 1)


@pytest.mark.parametrize(("which", "layers"), [("tiny", 1), ("tiny", 2), ("deep", 1), ("deep", 3)])
def test_cached_forward_matches_full_forward(which, layers, tiny_model_dir, deep_model_dir):
    path = tiny_model_dir if which == "tiny" else deep_model_dir
    full = _embed(_load(path))
    model = _load(path)
    with partial_fine_tuning(model, layers, show_progress=False) as pft:
        pft.prepare(TEXTS)
        assert pft.computed == 4  # distinct texts
        assert (pft.total_layers, pft.trainable_layers) == ((2, 4)[which == "deep"], layers)
        cached = _embed(model)
        # The same through the training paths (dropout off): model(features) and embed_with_grad.
        from subspaces.models.forward import embed_with_grad

        model.eval()
        features = model.preprocess(TEXTS)
        assert features[STATES].dtype == torch.float16
        by_call = model(features)["sentence_embedding"]
        by_grad = embed_with_grad(model, TEXTS)
        assert pft.computed == 4  # all of these came from the cache
    for got in (cached, by_call, by_grad):
        cos = torch.nn.functional.cosine_similarity(full, got.detach())
        assert cos.min() > COS, cos


def test_inputs_not_prepared_are_computed_on_the_fly(tiny_model):
    full = _embed(tiny_model)
    with partial_fine_tuning(tiny_model, 1, show_progress=False) as pft:
        pft.prepare(TEXTS[:1])
        assert pft.computed == 1
        cached = _embed(tiny_model)
        assert pft.computed == 4
        _embed(tiny_model)
        assert pft.computed == 4
        # Features built without the states (another collator, say) are looked up in forward.
        tiny_model.eval()
        features = tiny_model.preprocess(TEXTS)
        del features[STATES]
        looked_up = tiny_model(features)["sentence_embedding"]
    assert torch.nn.functional.cosine_similarity(full, cached).min() > COS
    assert torch.equal(looked_up.detach(), cached)


def test_prompts_and_pairs_are_their_own_entries(tiny_model_dir):
    from subspaces.models.forward import embed_with_grad

    pairs = [(TEXTS[0], TEXTS[1]), (TEXTS[2], TEXTS[4])]
    reference = _load(tiny_model_dir).eval()
    with torch.no_grad():
        expected = [
            reference.encode(TEXTS, prompt="query: ", convert_to_tensor=True),
            embed_with_grad(reference, pairs),
        ]
    model = _load(tiny_model_dir).eval()
    with partial_fine_tuning(model, 1, show_progress=False) as pft:
        pft.prepare(TEXTS)
        with torch.no_grad():
            got = [model.encode(TEXTS, prompt="query: ", convert_to_tensor=True), embed_with_grad(model, pairs)]
        assert pft.computed == 4 + 4 + 2  # the prompted texts and the pairs tokenise differently
    for want, have in zip(expected, got, strict=True):
        assert torch.nn.functional.cosine_similarity(want, have).min() > COS


def test_training_moves_only_the_top_layers(tiny_model):
    from subspaces.losses.simcse import SimCSELoss

    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    with partial_fine_tuning(tiny_model, 1, show_progress=False):
        _embed(tiny_model)  # cache filled under encode's inference mode; training on those states must work
        frozen = {n for n, p in tiny_model.named_parameters() if not p.requires_grad}
        assert frozen == {n for n, _ in tiny_model.named_parameters() if "embeddings." in n or _layer_index(n) == 0}
        loss_fn = SimCSELoss(tiny_model)
        optimizer = torch.optim.AdamW([p for p in tiny_model.parameters() if p.requires_grad], lr=1e-2)
        tiny_model.train()
        features = tiny_model.preprocess(TEXTS[1:])
        loss = loss_fn([features])
        loss.backward()
        with_grad = {n for n, p in tiny_model.named_parameters() if p.grad is not None}
        assert with_grad and all(_layer_index(n) == 1 for n in with_grad)
        optimizer.step()
    assert all(p.requires_grad for p in tiny_model.parameters())  # detach gave the flags back
    after = tiny_model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(_layer_index(k) == 1 for k in changed)
    assert any(k.endswith("attention.self.query.weight") for k in changed)


def test_dropout_acts_only_in_the_top_layers(tiny_model_dir):
    reference = _load(tiny_model_dir).eval()  # the bottom layer's output without dropout, by the model itself
    inputs = reference.preprocess(TEXTS)
    with torch.no_grad():
        bottom = (
            reference[0]
            .auto_model(**{k: v for k, v in inputs.items() if k != "modality"}, output_hidden_states=True)
            .hidden_states[1]
        )
    model = _load(tiny_model_dir)
    with partial_fine_tuning(model, 1, show_progress=False):
        model.train()
        features = model.preprocess(TEXTS)  # the bottom runs now, while the model is in train mode
        assert all(m.training for m in model.modules())  # ... in eval mode, and the flags came back
        first = model(dict(features))["sentence_embedding"]
        second = model(dict(features))["sentence_embedding"]
    mask = inputs["attention_mask"].bool()
    assert torch.allclose(features[STATES][mask].float(), bottom[mask], atol=2e-3, rtol=1e-3)
    assert not torch.equal(first, second)  # the top layer's dropout acts


def test_state_dropout_adds_noise_only_in_training(tiny_model_dir):
    """Dropout on the cached states widens the gap between two training views; eval mode is untouched."""
    import torch.nn.functional as F

    model = _load(tiny_model_dir)
    for module in model.modules():  # only the new noise acts: the top layer's own dropout off
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    with partial_fine_tuning(model, 1, show_progress=False, state_dropout=0.3):
        model.eval()
        features = model.preprocess(TEXTS)
        clean = model(dict(features))["sentence_embedding"]
        assert torch.equal(clean, model(dict(features))["sentence_embedding"])
        model.train()
        torch.manual_seed(0)
        first = model(dict(features))["sentence_embedding"]
        second = model(dict(features))["sentence_embedding"]
    assert F.cosine_similarity(first, second).mean() < 0.999
    with pytest.raises(SubspacesError, match="state dropout"):
        partial_fine_tuning(_load(tiny_model_dir), 1, state_dropout=1.0)


def test_disk_cache_is_reused_across_instances(tiny_model_dir, tmp_path):
    folder = tmp_path / "acts"
    first = _load(tiny_model_dir)
    with partial_fine_tuning(first, 1, cache_dir=folder, show_progress=False) as pft:
        pft.prepare(TEXTS)
        assert pft.computed == 4
        expected = _embed(first)
    assert (folder / "manifest.json").is_file() and len(list(folder.glob("shard-*.pt"))) == 1
    second = _load(tiny_model_dir)
    with partial_fine_tuning(second, 1, cache_dir=folder, show_progress=False) as pft:
        pft.prepare(TEXTS)
        assert pft.computed == 0
        assert torch.equal(_embed(second), expected)
        _embed(second, ["A text seen first here."])
        assert pft.computed == 1
    assert len(list(folder.glob("shard-*.pt"))) == 2  # the on-the-fly entry was written at detach
    assert not list(folder.glob(".*.tmp"))


def test_default_cache_folder_is_under_the_cache_root(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("SUBSPACES_CACHE", str(tmp_path))
    with partial_fine_tuning(tiny_model, 1, cache_dir=True, show_progress=False) as pft:
        pft.prepare(TEXTS)
    (folder,) = (tmp_path / "activations").iterdir()
    assert pft.cache.folder == folder and list(folder.glob("shard-*.pt"))


def test_interrupted_prepare_keeps_finished_shards(tiny_model_dir, tmp_path, monkeypatch):
    folder = tmp_path / "acts"
    model = _load(tiny_model_dir)
    pft = partial_fine_tuning(model, 1, cache_dir=folder, show_progress=False)
    pft.batch_size = 2
    pft.cache.shard_bytes = 1  # a shard per computed entry
    run_bottom, calls = pft._run_bottom, []

    def interrupted(features):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return run_bottom(features)

    monkeypatch.setattr(pft, "_run_bottom", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pft.prepare(TEXTS)
    pft.detach()
    assert len(list(folder.glob("shard-*.pt"))) == 2 and not list(folder.glob(".*.tmp"))
    with partial_fine_tuning(_load(tiny_model_dir), 1, cache_dir=folder, show_progress=False) as resumed:
        resumed.prepare(TEXTS)
        assert resumed.computed == 2  # 4 distinct texts, 2 were in the finished shard


def test_cache_from_another_model_or_length_is_refused(tiny_model_dir, tmp_path):
    folder = tmp_path / "acts"
    with partial_fine_tuning(_load(tiny_model_dir), 1, cache_dir=folder, show_progress=False) as pft:
        pft.prepare(TEXTS)
    shorter = _load(tiny_model_dir)
    shorter.max_seq_length = 16
    with pytest.raises(DataError, match=rf"{folder}.*max_seq_length is 64, this model's is 16"):
        partial_fine_tuning(shorter, 1, cache_dir=folder)
    other = _load(tiny_model_dir)
    with torch.no_grad():
        other[0].auto_model.embeddings.word_embeddings.weight[100] += 1.0
    with pytest.raises(DataError, match=rf"{folder}.*frozen_weights_sha256"):
        partial_fine_tuning(other, 1, cache_dir=folder)
    with pytest.raises(DataError, match="frozen_layers is 1, this model's is 0"):
        partial_fine_tuning(_load(tiny_model_dir), 2, cache_dir=folder)
    assert "forward" not in other[0].__dict__ and all(p.requires_grad for p in other.parameters())


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupted_shard_is_named(damage, tiny_model_dir, tmp_path):
    folder = tmp_path / "acts"
    with partial_fine_tuning(_load(tiny_model_dir), 1, cache_dir=folder, show_progress=False) as pft:
        pft.prepare(TEXTS)
    (shard,) = folder.glob("shard-*.pt")
    data = bytearray(shard.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[-200] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(DataError, match=rf"{shard}: activation-cache shard is corrupted or truncated"):
        partial_fine_tuning(_load(tiny_model_dir), 1, cache_dir=folder)


def test_detach_restores_the_model_exactly(tiny_model_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    fresh = _embed(_load(tiny_model_dir))
    model = _load(tiny_model_dir)
    with partial_fine_tuning(model, 1, show_progress=False) as pft:
        pft.prepare(TEXTS)
        assert not torch.equal(_embed(model), fresh)  # float16 states: close, not bit-equal
        with pytest.raises(SubspacesError, match="already under partial fine-tuning"):
            partial_fine_tuning(model, 1)
    assert not pft.attached
    assert {"forward", "preprocess"}.isdisjoint(model[0].__dict__)
    assert torch.equal(_embed(model), fresh)
    assert STATES not in model.preprocess(TEXTS)
    model.save(str(tmp_path / "saved"))
    assert torch.equal(_embed(SentenceTransformer(str(tmp_path / "saved"), device="cpu")), fresh)
