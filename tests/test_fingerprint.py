"""Every content hash the package records on disk or keys a cache by keeps its value: store row ids (of texts and
of imported vectors), the digests `store import` compares stored rows by, query-map options, checkpoints' data and
model fingerprints, embedding-cache and activation-cache keys, fitted folders' hashes, exported graphs' weight
hashes. A changed value orphans what users have on disk, so each is pinned here for fixed inputs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from subspaces.cond.sampler import PairSampler, RowSampler
from subspaces.data.csts import ConditionalPair
from subspaces.fingerprint import content_key, file_sha256, model_fingerprint, tensors_sha256, texts_key, weights_hash
from subspaces.kgc.train import TripleBatches
from subspaces.state_folder import config_sha256, write_state_folder
from subspaces.store import shrink, transfer
from subspaces.store.inputs import text_id
from subspaces.store.unpaired import texts_digest
from subspaces.train.sentence import RowBatches

CONDITIONAL = [
    ConditionalPair("a cat sleeps", "a dog runs", "the animal", 4.0, 0),
    ConditionalPair("a cat sleeps", "a dog runs", "the action", 1.0, 1),
    ConditionalPair("rain falls", "snow falls", "the weather", 3.0, 2),
    ConditionalPair("rain falls", "snow falls", "the colour", None, 3),
]


def _tensors() -> list[tuple[str, torch.Tensor]]:
    return [
        ("weight", torch.arange(6, dtype=torch.float32).reshape(2, 3) / 7),
        ("bias", torch.tensor([0.5, -1.25], dtype=torch.float32)),
        ("steps", torch.tensor([3], dtype=torch.int64)),
    ]


class _Settings(torch.nn.Module):
    """A child module with settings but no weights, like a pooling layer."""

    def get_config_dict(self) -> dict:
        return {"pooling_mode": "cls", "normalize": True}


def _module() -> torch.nn.Module:
    model = torch.nn.Module()
    model.layer = torch.nn.Linear(3, 2)
    model.pool = _Settings()
    model.register_buffer("steps", torch.tensor([3]))
    with torch.no_grad():
        model.layer.weight.copy_(_tensors()[0][1])
        model.layer.bias.copy_(_tensors()[1][1])
    model.max_seq_length = 32
    model.truncate_dim = 16
    model.prompts = {"query": "query: "}
    model.config = SimpleNamespace(to_json_string=lambda use_diff: '{"hidden_size": 3}')
    return model


def _query_digest() -> str:
    space = SimpleNamespace(model=SimpleNamespace(foreign=False))
    store = SimpleNamespace(_space=lambda name: space, encode=lambda texts, kind, name: np.zeros((len(texts), 2)))
    return shrink._judged(store, "s", {"q2": "a cat", "q1": "ünïcode"}, None)["digest"]


def _file(tmp_path) -> str:
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 5000)  # more than one block
    return file_sha256(path)


def _vector_ids() -> str:
    """The ids `store import` gives rows that have neither ids nor texts (of their unit vectors)."""
    chunk = transfer.Chunk(0, np.array([[3.0, 4.0], [0.0, 2.0]], dtype=np.float32))
    return ",".join(transfer._rows(chunk, "t", None).ids)


def _row_digests(tmp_path) -> str:
    """What `store import` compares an already stored id's text, metadata and vector by (absent ones included)."""
    np.save(tmp_path / "v.npy", np.array([[3.0, 4.0], [0.0, 2.0]], dtype=np.float32))
    (tmp_path / "ids.txt").write_text("a\nb\n")
    (tmp_path / "texts.jsonl").write_text('"red house \\u00fc"\nnull\n')
    (tmp_path / "meta.jsonl").write_text('{"n": 1, "w": "\\u00fc"}\nnull\n')
    sides = {
        side: tmp_path / name
        for side, name in (("ids", "ids.txt"), ("texts", "texts.jsonl"), ("metadata", "meta.jsonl"))
    }
    plan = transfer.validate(transfer.Source(tmp_path / "v.npy", **sides), dimension=None, stored={"a", "b"}, known={})
    return ",".join(plan.overlap[row_id].hex() for row_id in ("a", "b"))


COMPUTED = {
    "text_id": lambda tmp: text_id("red house \u00fc"),
    "texts_digest": lambda tmp: texts_digest(["a cat", "\u00fcn\u00efcode", ""]),
    "row_batches": lambda tmp: RowBatches([("a", "b"), ("c", "\u00fc")], 1, 0).fingerprint(),
    "pair_sampler": lambda tmp: PairSampler(CONDITIONAL, 2, seed=3).fingerprint(),
    "row_sampler": lambda tmp: RowSampler(CONDITIONAL, 2, seed=3).fingerprint(),
    "triples": lambda tmp: TripleBatches(np.arange(6, dtype=np.int64).reshape(2, 3), 1, 7).fingerprint(),
    "content_key": lambda tmp: content_key("m", "sentence", "\u00fc", 3),
    "texts_key": lambda tmp: texts_key("fp", ["a", ("b", "c"), "\u00fc"]),
    "file_sha256": _file,
    "config_sha256": lambda tmp: config_sha256({"b": [1, 2.5], "a": "\u00fc", "config_sha256": "x", "n": None}),
    "query_digest": lambda tmp: _query_digest(),
    "tensors_sha256": lambda tmp: tensors_sha256(_tensors(), "seed"),
    "weights_hash": lambda tmp: weights_hash(_module()),
    "model_fingerprint": lambda tmp: model_fingerprint(_module(), "extra"),
    "vector_ids": lambda tmp: _vector_ids(),
    "row_digests": _row_digests,
}

PINNED = {
    "text_id": "b5424246c980604e",
    "texts_digest": "0653f87bbcc90026",
    "row_batches": "d4d477624cbf5943",
    "pair_sampler": "7e221f3715339fd8",
    "row_sampler": "78301e2d6c78d1c2",
    "triples": "4eae1f0ba57e2a7f",
    "content_key": "a60b7893fbd626613fa189509f7d98d8c8411d2e",
    "texts_key": "5df107c058cbd5c42080c0c3ed5c3f4d",
    "file_sha256": "7d471e4af16db5a30ce10aebbc29f5178b2edbad6c7dc2e8ff8ee6e4848a726f",
    "config_sha256": "df600b0d3c02657c7238d0d3eb7abaf8ae64f09c5bbd155e86118b98b16ef6b5",
    "query_digest": "f60b2db8275e27a283ed682afe8c6af204e6fff58080d0fde8e11f51e5d2d71a",
    "tensors_sha256": "0eaa48eff9c35c0ec8b0ad5813876162f0971666bc3a61f30d837065e47a8a71",
    "weights_hash": "729767a3708b5724e191b5b3a9d781a6dcdbe61c55e942c7dc182445eabde7de",
    "model_fingerprint": "a4ddcfd8a12c4af4310f318d",
    "vector_ids": "9d2c143dc5e2c8df,22b6f43bd8d27738",
    "row_digests": "20be075507a4f5fff9279481533d4aeb,b81155b2c2d926b92b1d4d1818cff503",
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_digest_is_pinned(name, tmp_path):
    assert COMPUTED[name](tmp_path) == PINNED[name]


def test_state_folder_records_its_hashes(tmp_path):
    """The recorded hashes are those of the state's bytes and of the config's fields (values pinned above)."""
    folder = write_state_folder(
        tmp_path / "fit", "config.json", {"w": np.arange(3.0)}, {"dims": [4, 2]}, format_version=2, hash_config=True
    )
    config = json.loads((folder / "config.json").read_text())
    assert config["state_sha256"] == file_sha256(folder / "state.npz")
    assert config["config_sha256"] == config_sha256(config)


def test_encoder_keys_are_pinned(tiny_model, tmp_path):
    """A sentence-transformers model's fingerprint (store and embedding-cache key) and the activation cache's
    folder (keyed by the frozen bottom) and row keys (tokens) keep their values."""
    from subspaces.models.partial import PartialFineTuning

    with torch.no_grad():
        for parameter in tiny_model.parameters():
            parameter.copy_(torch.linspace(-1, 1, parameter.numel()).reshape(parameter.shape))
    assert model_fingerprint(tiny_model) == "d3b09438046138f09b8c1bc0"
    partial = PartialFineTuning(tiny_model, 1, cache_dir=tmp_path, keyed=True, show_progress=False)
    try:
        keys, lengths = partial._ensure(tiny_model.preprocess(["A cat.", "The dog runs."]))
    finally:
        partial.detach()
    assert partial.cache.folder.name == "e78a4566188f31b2"
    assert keys == [
        "37736a107cc45f33bead633ae662678678b486e9f515852ab497a5dab28ed0c2",
        "94ffb29d99872f5e1a28ca33cb5dee75c99fcf6c7bb52ef77d3c1f717dcce340",
    ]
    assert lengths == [5, 6]
