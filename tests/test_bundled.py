"""Bundled models of ``subspaces.models.registry``: conversions match their reference runtimes."""

from __future__ import annotations

import numpy as np
import pytest

from subspaces.errors import ModelNotFoundError
from subspaces.models import registry
from subspaces.models.onnx_bert import read_onnx_bert
from subspaces.models.registry import known_models, package_path

TEXTS = [
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog, twice, at dawn!",
    "hello",
    "Antidisestablishmentarianism is rarely tokenised as one piece.",
]


def test_models_are_registered():
    models = known_models()
    assert {"paraphrase-l3", "wordllama", "mpnet-base"} <= set(models)
    assert models["paraphrase-l3"].dim == 384 and models["wordllama"].dim == 256 and models["mpnet-base"].dim == 768


def test_mpnet_names_missing_parts(monkeypatch, tmp_path):
    monkeypatch.setenv("SUBSPACES_CACHE", str(tmp_path))
    monkeypatch.setattr(registry, "MPNET_PARTS", ("no-such-part-001", "no-such-part-002"))
    with pytest.raises(ModelNotFoundError, match="no-such-part-001, no-such-part-002.*--no-deps"):
        registry._mpnet_base()


def max_token_difference(onnx_path, model_dir, texts) -> float:
    """Largest absolute difference between onnxruntime's and the converted model's token outputs (``texts``)."""
    import onnxruntime as ort
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir)).eval()
    batch = tokenizer(list(texts), padding=True, truncation=True, max_length=128, return_tensors="np")
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    token_output = read_onnx_bert(onnx_path).token_output
    (expected,) = session.run(
        [token_output],
        {"input_ids": batch["input_ids"].astype(np.int64), "attention_mask": batch["attention_mask"].astype(np.int64)},
    )
    with torch.no_grad():
        got = model(
            input_ids=torch.from_numpy(batch["input_ids"]).long(),
            attention_mask=torch.from_numpy(batch["attention_mask"]).long(),
        ).last_hidden_state.numpy()
    mask = batch["attention_mask"].astype(bool)  # padded positions are not outputs anyone reads
    return float(np.abs(expected - got)[mask].max())


@pytest.mark.slow
def test_paraphrase_l3_converts_to_the_same_model_on_every_machine(tmp_path):
    """Two conversions are one model to the store's fingerprint (BERT's unused pooler is zeroed, not random)."""
    from subspaces.fingerprint import model_fingerprint
    from subspaces.models.encoder import load_encoder
    from subspaces.models.onnx_bert import convert_onnx_bert
    from subspaces.models.registry import resolve

    onnx_path = package_path(registry.PARAPHRASE_PACKAGE, registry.PARAPHRASE_ONNX)
    prints = []
    for name in ("a", "b"):
        folder = convert_onnx_bert(onnx_path, tmp_path / name, tokenizer_dir=resolve("minilm-l6"), max_seq_length=128)
        model = load_encoder(str(folder))
        assert all(not p.any() for n, p in model[0].auto_model.named_parameters() if n.startswith("pooler."))
        prints.append(model_fingerprint(model))
    assert prints[0] == prints[1]


@pytest.mark.slow
def test_paraphrase_l3_matches_onnxruntime(monkeypatch, tmp_path):
    import onnxruntime as ort

    from subspaces.models.encoder import encode, load_encoder

    monkeypatch.setenv("SUBSPACES_CACHE", str(tmp_path))
    onnx_path = package_path(registry.PARAPHRASE_PACKAGE, registry.PARAPHRASE_ONNX)
    folder = registry._paraphrase_l3()
    assert max_token_difference(onnx_path, folder, TEXTS) < 1e-4

    model = load_encoder("paraphrase-l3")
    got = encode(model, TEXTS)
    batch = model.tokenizer(TEXTS, padding=True, return_tensors="np")
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    pooled = [o.name for o in session.get_outputs()][3]  # mean-pooled sentence output of the ST export
    (expected,) = session.run([pooled], {k: batch[k].astype(np.int64) for k in ("input_ids", "attention_mask")})
    np.testing.assert_allclose(got, expected, atol=1e-4)
    # A trainable BertModel, not an inference-only wrapper.
    assert any(p.requires_grad for p in model.parameters())


@pytest.mark.slow
def test_wordllama_matches_package(monkeypatch, tmp_path):
    from safetensors import safe_open
    from tokenizers import Tokenizer
    from wordllama.inference import WordLlamaInference

    from subspaces.models.encoder import encode, load_encoder

    monkeypatch.setenv("SUBSPACES_CACHE", str(tmp_path))
    weights = package_path("wordllama", "wordllama/weights/l2_supercat_256.safetensors")
    tokenizer = package_path("wordllama", "wordllama/tokenizers/l2_supercat_tokenizer_config.json")
    with safe_open(str(weights), framework="np") as handle:
        table = handle.get_tensor("embedding.weight")
    reference = WordLlamaInference(table, Tokenizer.from_file(str(tokenizer))).embed(TEXTS)
    got = encode(load_encoder("wordllama"), TEXTS)
    assert got.shape == (len(TEXTS), 256)
    np.testing.assert_allclose(got, reference, atol=1e-5)


@pytest.mark.slow
def test_mpnet_base_unpacks_and_ranks_paraphrases_first(monkeypatch, tmp_path):
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        for part in registry.MPNET_PARTS:
            distribution(part)
    except PackageNotFoundError:
        pytest.skip("mpnet-base parts not installed (make install-mpnet)")
    from subspaces.models.encoder import encode, load_encoder

    monkeypatch.setenv("SUBSPACES_CACHE", str(tmp_path))
    model = load_encoder("mpnet-base")
    emb = encode(model, ["A man is playing a guitar.", "Someone plays an instrument.", "The stock market fell."])
    assert emb.shape == (3, 768)
    emb = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    sims = emb @ emb.T
    assert sims[0, 1] > 0.5 > sims[0, 2]
