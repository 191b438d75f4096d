"""Shared fixtures: a tiny random BERT and a tiny data folder laid out like ../shared/data."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from vocabulary import WORDS

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Commands set their threads from this (subspaces.config.set_threads); one, like the one_thread fixture below.
os.environ.setdefault("SUBSPACES_THREADS", "1")


def _home_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "subspaces"


def _snapshot(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in [folder, *folder.rglob("*")] if p.exists()} if folder.exists() else {}


@pytest.fixture(scope="session", autouse=True)
def temporary_cache(tmp_path_factory):
    """Tests convert models and cache embeddings under a temporary $SUBSPACES_CACHE, never the user's cache."""
    home, before = _home_cache(), _snapshot(_home_cache())
    cache = tmp_path_factory.mktemp("subspaces-cache")
    saved = os.environ.get("SUBSPACES_CACHE")
    os.environ["SUBSPACES_CACHE"] = str(cache)
    yield cache
    if saved is None:
        os.environ.pop("SUBSPACES_CACHE", None)
    else:
        os.environ["SUBSPACES_CACHE"] = saved
    assert _snapshot(home) == before, f"the tests wrote into {home}; use the SUBSPACES_CACHE they set"


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """Tiny models: thread hand-offs cost more than the maths, so every test runs torch on one thread. The
    variables a command's set_threads writes are restored after each test."""
    import torch

    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"):
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _sentence(rng: random.Random, n: int = 6) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer, 32-d random BERT saved as a sentence-transformers folder (cls pooler, MLP in training)."""
    from bench.random_bert import build_random_bert
    from subspaces.models.encoder import portable

    folder = tmp_path_factory.mktemp("tiny-bert")
    model = build_random_bert(folder / "hf", num_layers=2, hidden_size=32, num_heads=2, max_position=64, seed=0)
    portable(model).save(str(folder / "st"))
    return folder / "st"


@pytest.fixture
def tiny_model(tiny_model_dir):
    from subspaces.models.encoder import load_encoder

    return load_encoder(str(tiny_model_dir))


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory) -> Path:
    """STS-B, STS12-16, SICK, NLI and a text corpus with a few dozen rows each, in the shared-data layout."""
    from subspaces.data.sts import STS_YEARS

    root = tmp_path_factory.mktemp("data")
    rng = random.Random(0)

    def pairs(n: int) -> list[tuple[str, str, float]]:
        return [(_sentence(rng), _sentence(rng), round(rng.uniform(0, 5), 2)) for _ in range(n)]

    for variant in ("original", "senteval"):
        d = root / "stsb" / variant
        d.mkdir(parents=True)
        for split in ("train", "dev", "test"):
            lines = [
                f"main-captions\tMSRvid\t2012test\t{i:04d}\t{s}\t{a}\t{b}" for i, (a, b, s) in enumerate(pairs(40))
            ]
            (d / f"sts-{split}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        for year, subsets in STS_YEARS.items():
            yd = root / "sts12-16" / variant / year
            yd.mkdir(parents=True)
            for subset in subsets:
                rows = pairs(12)
                (yd / f"STS.input.{subset}.txt").write_text(
                    "".join(f"{a}\t{b}\n" for a, b, _ in rows), encoding="utf-8"
                )
                # The last gold line is empty: an unscored pair, which the loader must skip.
                golds = [str(s) for _, _, s in rows[:-1]] + [""]
                (yd / f"STS.gs.{subset}.txt").write_text("\n".join(golds) + "\n", encoding="utf-8")
    sick = root / "sick"
    sick.mkdir()
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
    for name in ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"):
        body = "".join(f"{i}\t{a}\t{b}\t{1 + s * 0.8:.1f}\tNEUTRAL\n" for i, (a, b, s) in enumerate(pairs(40)))
        (sick / name).write_text(header + body, encoding="utf-8")
    nli = root / "nli"
    nli.mkdir()
    rows = ["sent0,sent1,hard_neg,source"] + [
        f'"{_sentence(rng)}","{_sentence(rng)}","{_sentence(rng)}",dev' for _ in range(64)
    ]
    (nli / "snli_devtest_triplets.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    corpus = root / "wordnet_sentences"
    corpus.mkdir()
    import gzip

    with gzip.open(corpus / "wordnet30_definitions.txt.gz", "wt", encoding="utf-8") as fh:
        fh.write("\n".join(_sentence(rng, rng.randint(3, 9)) for _ in range(150)) + "\n")
    with gzip.open(corpus / "wordnet30_examples.txt.gz", "wt", encoding="utf-8") as fh:
        fh.write("\n".join(_sentence(rng, rng.randint(3, 9)) for _ in range(50)) + "\n")
    return root


@pytest.fixture
def tiny_data(tiny_data_dir, monkeypatch) -> Path:
    monkeypatch.setenv("SUBSPACES_DATA", str(tiny_data_dir))
    return tiny_data_dir
