"""Text pools for the alignment benchmark, embedded once and cached on disk.

The paper's protocol: shuffle a pool of ``size`` texts; the last ``n_eval`` are held out as pairs (embedded by
both models); the rest is cut into two disjoint halves, the first embedded only by the source model, the
second only by the target model. Embeddings go to ``cache_dir()/align_bench/<pool>-<size>-<seed>/``.

    nice -n 5 .venv/bin/python benchmarks/align_pools.py --pool wordnet --size 40000 \
        --models minilm-l6,paraphrase-l3,wordllama
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from subspaces.config import cache_dir, dataset_dir
from subspaces.data.text import read_corpus, wordnet_sentences
from subspaces.io import save_json, save_npy

SOURCE_MODEL = "minilm-l6"


APT_LISTS = Path("/var/lib/apt/lists")


def debian_descriptions() -> list[str]:
    """Debian bookworm packages' one-line descriptions (a dev pool, issue 57): short technical texts ("Perl interface
    to Bzip2 compression library"), the kind on which the default once fell below the paper recipe. Read from this
    machine's apt lists (``lz4 -dc``; ``apt-cache dumpavail`` where lz4 or the list is missing): the ``Description:``
    line of each package, those of three words or more, distinct."""
    import shutil
    import subprocess

    lists = sorted(APT_LISTS.glob("*bookworm_main_binary-amd64_Packages.lz4"))
    if lists and shutil.which("lz4"):
        text = subprocess.run(["lz4", "-dc", str(lists[0])], capture_output=True, check=True, text=True).stdout
    else:
        text = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, check=True, text=True).stdout
    lines = (line[len("Description:") :].strip() for line in text.splitlines() if line.startswith("Description:"))
    return list(dict.fromkeys(t for t in lines if len(t.split()) >= 3))


def pool_texts(pool: str, size: int, seed: int) -> list[str]:
    if pool == "wordnet":
        texts = wordnet_sentences()
    elif pool == "tweets":
        folder = dataset_dir("tweeteval")
        texts = []
        for path in sorted(folder.rglob("*_text.txt")):
            texts += read_corpus(path)
        texts = list(dict.fromkeys(t for t in texts if t))
    else:
        raise SystemExit(f"unknown pool {pool!r}: wordnet or tweets")
    random.Random(seed).shuffle(texts)
    if len(texts) < size:
        raise SystemExit(f"pool {pool!r} has only {len(texts)} texts, fewer than {size}")
    print(f"{pool}: {len(texts)} distinct texts, the first {size} of a seed-{seed} shuffle used", flush=True)
    return texts[:size]


@dataclass(frozen=True)
class Split:
    source_train: slice
    target_train: slice
    held_out: slice


def split(size: int, n_eval: int) -> Split:
    half = (size - n_eval) // 2
    return Split(slice(0, half), slice(half, 2 * half), slice(size - n_eval, size))


def pool_folder(pool: str, size: int, seed: int) -> Path:
    return cache_dir() / "align_bench" / f"{pool}-{size}-{seed}"


@dataclass(frozen=True)
class CenteredPool:
    """A cached pool as the aligner sees it: each space centred on its training half's mean, rows unit length."""

    raw: dict[str, np.ndarray]  # "<model>.<train|eval>" -> the cached embeddings
    a: np.ndarray  # source training half
    b: np.ndarray  # target training half
    x: np.ndarray  # held-out rows, source model
    y: np.ndarray  # the same rows, target model


def load_centered(pool: str, size: int, target: str, seed: int = 0) -> CenteredPool:
    from subspaces.align.preprocess import center_normalize

    folder = pool_folder(pool, size, seed)
    raw = {f"{m}.{p}": np.load(folder / f"{m}.{p}.npy") for m in (SOURCE_MODEL, target) for p in ("train", "eval")}
    a_mean, b_mean = raw[f"{SOURCE_MODEL}.train"].mean(0), raw[f"{target}.train"].mean(0)
    a, x = (center_normalize(raw[f"{SOURCE_MODEL}.{p}"], a_mean) for p in ("train", "eval"))
    b, y = (center_normalize(raw[f"{target}.{p}"], b_mean) for p in ("train", "eval"))
    return CenteredPool(raw, a, b, x, y)


STATIC_MODELS = ("wordllama",)  # table lookups: nothing to export to a runtime


def embed_pool(
    pool: str,
    size: int,
    seed: int,
    n_eval: int,
    models: list[str],
    batch_size: int = 64,
    texts: list[str] | None = None,
    backend: str = "torch",
) -> Path:
    """Embed what each model needs: the source its half + held-out, each target its half + held-out.
    ``texts``: the pool's ``size`` shuffled texts, for pools :func:`pool_texts` does not read. ``backend``:
    ``onnx`` runs the same fp32 network about twice as fast on this CPU (``benchmarks/results/backend_speed.json``;
    the vectors agree to float rounding); a static model (wordllama) has no network and always runs as it is."""
    from subspaces.models.encoder import encode, load_encoder

    texts = pool_texts(pool, size, seed) if texts is None else texts
    parts = split(size, n_eval)
    folder = pool_folder(pool, size, seed)
    folder.mkdir(parents=True, exist_ok=True)
    for name in models:
        train_part = parts.source_train if name == SOURCE_MODEL else parts.target_train
        for part_name, part in (("train", train_part), ("eval", parts.held_out)):
            path = folder / f"{name}.{part_name}.npy"
            if path.is_file():
                continue
            runs_on = "torch" if name in STATIC_MODELS else backend
            model = load_encoder(name, backend=runs_on)
            start = time.perf_counter()
            emb = encode(model, texts[part], batch_size=batch_size, show_progress=True)
            seconds = time.perf_counter() - start
            save_npy(path, emb.astype(np.float32))
            meta = {"n": len(emb), "seconds": seconds, "model": name, "part": part_name, "backend": runs_on}
            save_json(path.with_suffix(".json"), meta)
            print(f"{pool} {name} {part_name}: {len(emb)} texts in {seconds:.0f}s -> {path}", flush=True)
    return folder


def add_pool_arguments(parser: argparse.ArgumentParser) -> None:
    """--pool, --size, --n-eval, --seed: which cached pool a script reads (or this one builds)."""
    parser.add_argument("--pool", choices=["wordnet", "tweets"], required=True)
    parser.add_argument("--size", type=int, default=40_000)
    parser.add_argument("--n-eval", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pool_arguments(parser)
    parser.add_argument("--models", default="minilm-l6,paraphrase-l3,wordllama")
    args = parser.parse_args()
    embed_pool(args.pool, args.size, args.seed, args.n_eval, args.models.split(","))


if __name__ == "__main__":
    main()
