import os

import numpy as np
import pytest
import torch

from subspaces.errors import DimensionError, ModelNotFoundError
from subspaces.models.encoder import encode, load_encoder
from subspaces.vectors import unit_prefix


def test_unknown_name_lists_known_models():
    with pytest.raises(ModelNotFoundError, match="minilm-l6"):
        load_encoder("no-such-model")


def test_folder_without_model(tmp_path):
    with pytest.raises(ModelNotFoundError, match="holds no model"):
        load_encoder(str(tmp_path))


def test_bundled_path_resolves_through_metadata():
    from subspaces.models.registry import resolve

    path = resolve("minilm-l6")
    assert (path / "modules.json").is_file() and "site-packages" in str(path)


def test_encode_keeps_input_order_and_normalises(tiny_model):
    texts = ["a much longer sentence about a cat that plays the guitar", "dog", "a man runs in the park"]
    batch = encode(tiny_model, texts, batch_size=2, normalize=True)
    singles = np.stack([encode(tiny_model, [t], normalize=True)[0] for t in texts])
    assert np.allclose(batch, singles, atol=1e-5)
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)


def test_truncate_then_normalise(tiny_model):
    full = torch.from_numpy(encode(tiny_model, ["a cat", "a dog"]))
    short = torch.from_numpy(encode(tiny_model, ["a cat", "a dog"], truncate_dim=8, normalize=True))
    assert short.shape == (2, 8)
    assert torch.allclose(short, torch.nn.functional.normalize(full[:, :8], dim=-1), atol=1e-5)
    with pytest.raises(DimensionError):
        encode(tiny_model, ["a"], truncate_dim=1000)
    with pytest.raises(DimensionError):
        unit_prefix(full, 0)


def test_save_load_round_trip_gives_same_outputs(tiny_model, tmp_path):
    from sentence_transformers import SentenceTransformer

    tiny_model.save(str(tmp_path / "m"))
    texts = ["a cat plays", "the dog"]
    assert np.allclose(encode(load_encoder(str(tmp_path / "m")), texts), encode(tiny_model, texts), atol=1e-6)
    # The portable folder loads in plain sentence-transformers, with no trust_remote_code.
    assert np.allclose(SentenceTransformer(str(tmp_path / "m")).encode(texts), encode(tiny_model, texts), atol=1e-6)


@pytest.mark.parametrize("pooler", ["cls", "cls_before_pooler", "mean", "avg_first_last", "avg_top2"])
def test_every_pooler_encodes_and_round_trips(tiny_model_dir, tmp_path, pooler):
    model = load_encoder(str(tiny_model_dir), pooler=pooler)
    emb = encode(model, ["a cat plays", "the dog"])
    assert emb.shape == (2, 32) and np.isfinite(emb).all()
    model.save(str(tmp_path / pooler))
    assert np.allclose(encode(load_encoder(str(tmp_path / pooler)), ["a cat plays", "the dog"]), emb, atol=1e-6)


def test_nan_embeddings_are_rejected():
    from subspaces.vectors import check_finite

    with pytest.raises(DimensionError, match="1 row"):
        check_finite(np.array([[0.0, 1.0], [np.nan, 0.0]]))


@pytest.mark.slow
def test_minilm_reproduces_sentence_transformers_sts_table():
    """The figures the issue measured with sentence-transformers for all-MiniLM-L6-v2 on the original files."""
    from subspaces.eval.sts import STSEvaluator

    scores = STSEvaluator(geometry=False)(load_encoder("minilm-l6"))
    expected = {
        "STS12": 72.37,
        "STS13": 80.60,
        "STS14": 75.60,
        "STS15": 85.39,
        "STS16": 78.99,
        "STSBenchmark": 82.03,
        "SICKRelatedness": 77.15,
        "avg": 78.87,
    }
    for task, value in expected.items():
        assert scores[task] == pytest.approx(value, abs=0.01), task


def test_a_folder_that_ships_code_is_not_trusted(tiny_model_dir, tmp_path):
    """Our own pooling module needs trust_remote_code; a folder's own Python must never ride along with it."""
    import json

    from subspaces.errors import ModelNotFoundError

    load_encoder(str(tiny_model_dir), pooler="avg_top2").save(str(tmp_path / "ours"))
    assert load_encoder(str(tmp_path / "ours")).encode(["a cat"]).shape[0] == 1  # our module: trusted, loads
    for name, plant in (
        ("py", lambda f: (f / "modeling_evil.py").write_text("raise SystemExit('ran')\n")),
        (
            "auto_map",
            lambda f: (f / "config.json").write_text(
                json.dumps(json.loads((f / "config.json").read_text()) | {"auto_map": {"AutoModel": "x.Y"}})
            ),
        ),
    ):
        folder = tmp_path / name
        load_encoder(str(tiny_model_dir), pooler="avg_top2").save(str(folder))
        plant(folder)
        with pytest.raises(ModelNotFoundError, match="ships its own code"):
            load_encoder(str(folder))


def _copy(folder, tmp_path, name):
    import shutil

    return shutil.copytree(folder, tmp_path / name)


def test_a_foreign_module_type_is_refused_with_one_message(tiny_model_dir, tmp_path):
    import json

    folder = _copy(tiny_model_dir, tmp_path, "foreign")
    modules = json.loads((folder / "modules.json").read_text())
    modules[1]["type"] = "some_package.pooling.Pooling"
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ModelNotFoundError, match=r"ships its own code \(module type 'some_package.pooling.Pooling'\)"):
        load_encoder(str(folder))


def test_auto_map_with_only_sentence_transformers_modules_is_refused(tiny_model_dir, tmp_path):
    """Without the refusal this folder loaded as a plain BERT, silently ignoring the model its auto_map names."""
    import json

    folder = _copy(tiny_model_dir, tmp_path, "auto_map")
    modules = json.loads((folder / "modules.json").read_text())
    assert all(m["type"].startswith("sentence_transformers.") for m in modules)
    config = folder / modules[0]["path"] / "config.json" if modules[0]["path"] else folder / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"auto_map": {"AutoModel": "modeling.Mine"}}))
    with pytest.raises(ModelNotFoundError, match="auto_map in"):
        load_encoder(str(folder))


def test_batch_size_below_one_is_refused(tiny_model):
    from subspaces.errors import SubspacesError

    with pytest.raises(SubspacesError, match="at least 1, got 0"):
        encode(tiny_model, ["a"], batch_size=0)


def test_count_truncated_counts_texts_past_the_length_limit(tiny_model_dir):
    from subspaces.models.encoder import count_truncated

    model = load_encoder(str(tiny_model_dir), max_seq_length=4)
    assert count_truncated(model, ["a", "a b", "a b c", "a b c d e f"], chunk=2) == 2  # [CLS] and [SEP] count


def test_encode_progress_names_the_task_off_a_terminal(tiny_model, capsys):
    """Issue 23 item 14: progress says what is encoded (not sentence-transformers' bare "Batches"), also in a log."""
    from subspaces.models.encoder import encode

    texts = [f"sentence number {i}" for i in range(40)]
    emb = encode(tiny_model, texts, batch_size=8, show_progress=True, description="encode corpus.txt with tiny")
    err = capsys.readouterr().err
    assert "encode corpus.txt with tiny: 40/40 texts" in err
    assert "Batches" not in err
    # Chunking for the display must not change the rows or their order.
    whole = tiny_model.encode(texts, batch_size=8, convert_to_numpy=True)
    assert emb.shape == whole.shape and abs(emb - whole).max() < 1e-5


def test_a_thread_count_given_to_encode_does_not_outlive_the_call(tiny_model, monkeypatch):
    """``encode(..., threads=1)`` runs on one thread and leaves the caller's setting as it was (issue 51)."""
    seen = []
    inner = tiny_model.encode

    def recording(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return inner(*args, **kwargs)

    monkeypatch.setattr(tiny_model, "encode", recording)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(2)
    out = encode(tiny_model, ["a cat", "a dog"], threads=1)
    assert seen == [1] and torch.get_num_threads() == 2 and "OMP_NUM_THREADS" not in os.environ
    np.testing.assert_allclose(out, encode(tiny_model, ["a cat", "a dog"]), atol=1e-6)


def test_a_lone_surrogate_is_refused_with_its_position(tiny_model):
    """Legal in JSON (``"\\ud800"``) and in a Python string, refused by every tokenizer with a bare TypeError."""
    from subspaces.errors import DataError

    with pytest.raises(DataError, match=r"text 1 holds a lone surrogate \(U\+D800\) at character 2"):
        encode(tiny_model, ["fine", "ab\ud800c"])


def test_encoding_on_the_load_aware_default_uses_every_core_for_the_call(tiny_model, monkeypatch):
    """Where set_threads' default gave cores up to other work (1 of 2 here), encode runs on all of them (a forward
    pass still gains from a busy core; align fit did not) and leaves the process's count as it was."""
    from subspaces import config

    seen = []
    inner = tiny_model.encode

    def recording(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return inner(*args, **kwargs)

    monkeypatch.setattr(tiny_model, "encode", recording)
    monkeypatch.setattr(config, "_encoding_cores", 2)  # what set_threads() records on a busy 2-core machine
    torch.set_num_threads(1)
    encode(tiny_model, ["a cat"])
    assert seen == [2] and torch.get_num_threads() == 1
    encode(tiny_model, ["a cat"], threads=1)  # a count asked for is kept
    assert seen == [2, 1] and torch.get_num_threads() == 1


def test_the_sts_evaluator_takes_the_arguments_a_sentence_transformers_trainer_passes(tiny_model):
    from subspaces.data.sts import STSPairs
    from subspaces.eval.sts import STSEvaluator

    pairs = STSPairs("STSBenchmark", ["a cat", "a dog", "a car"], ["a cat sits", "a bird", "a bus"], [5.0, 1.0, 3.0])
    evaluator = STSEvaluator(tasks=["STSBenchmark"], geometry=False, pairs={"STSBenchmark": pairs})
    scores = evaluator(tiny_model)
    assert evaluator(tiny_model, None, 1, 10) == scores  # SequentialEvaluator's positional call
    assert evaluator(tiny_model, output_path=None, epoch=1, steps=10) == scores  # the trainer's
