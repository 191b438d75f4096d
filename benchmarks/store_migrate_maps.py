"""Learned maps for a store migration (issue 53 items 1, 2, 6), on DEV data only: which map the held-out pairs
choose, and how the choice and quality move with the number of re-embedded pairs.

Corpus: the second sentences of MRPC's *train* split (dev use here; MRPC test is never read) plus WordNet
definitions up to --n rows (unlabelled filler). Queries: the first sentences of MRPC train's paraphrase pairs,
each with its paraphrase as the one relevant row. Both models embed everything once (cached under --cache).
For each pair count, pairs are sampled from the corpus (outside 1,000 held-out rows), every map is fitted in
both directions by :func:`subspaces.store.maps.fit_and_choose` (what `store migrate` runs), and reported:

- held-out top-10 overlap with a true re-embed (label-free, what the store's report shows), per map;
- Recall@10 and nDCG@10 of the MRPC queries over the whole corpus: old model, true re-embed, query-side
  (new queries mapped into the old vectors), rewrite (old vectors mapped into the new space).

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/store_migrate_maps.py --n 6000 --pairs 250,500,1000,2000
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from subspaces.store import maps

ROOT = Path(__file__).resolve().parent
DATA = Path(os.environ.get("SUBSPACES_DATA", ROOT.parent.parent / "shared" / "data"))


def mrpc_train() -> tuple[list[str], list[str], list[int]]:
    """(corpus sentences #2, queries #1 of paraphrase pairs, each query's corpus row)."""
    lines = (DATA / "mrpc" / "msr_paraphrase_train.txt").read_text(encoding="utf-8-sig").splitlines()[1:]
    corpus: dict[str, int] = {}
    queries, relevant = [], []
    for line in lines:
        quality, _, _, first, second = line.split("\t")
        row = corpus.setdefault(second, len(corpus))
        if quality == "1":
            queries.append(first)
            relevant.append(row)
    return list(corpus), queries, relevant


def wordnet(n: int, skip: set[str]) -> list[str]:
    import gzip

    out = []
    with gzip.open(DATA / "wordnet_sentences" / "wordnet30_definitions.txt.gz", "rt", encoding="utf-8") as handle:
        for line in handle:
            text = line.strip()
            if text and text not in skip:
                out.append(text)
            if len(out) >= n:
                break
    return out


def embed(model: str, texts: list[str], cache: Path, tag: str) -> tuple[np.ndarray, float]:
    path = cache / f"{model}-{tag}-{len(texts)}.npy"
    seconds_path = path.with_suffix(".seconds")
    if path.is_file():
        return np.load(path), float(seconds_path.read_text())
    from subspaces.models.encoder import encode, load_encoder

    encoder = load_encoder(model)
    start = time.perf_counter()
    vectors = encode(encoder, texts, batch_size=64, normalize=True)
    seconds = time.perf_counter() - start
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    seconds_path.write_text(str(seconds))
    return vectors, seconds


def retrieval(queries: np.ndarray, rows: np.ndarray, relevant: list[int], k: int = 10) -> dict[str, float]:
    top = np.argsort(-(queries @ rows.T), axis=1)[:, :k]
    hits = top == np.asarray(relevant)[:, None]
    recall = float(hits.any(axis=1).mean())
    ndcg = float((hits / np.log2(np.arange(2, k + 2))).sum(axis=1).mean())
    return {"recall@10": round(recall, 4), "ndcg@10": round(ndcg, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", default="minilm-l6")
    parser.add_argument("--new", default="paraphrase-l3")
    parser.add_argument("--n", type=int, default=6000, help="corpus rows (MRPC train #2 sentences + WordNet)")
    parser.add_argument("--pairs", default="250,500,1000,2000")
    parser.add_argument("--heldout", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=1000, help="MRPC train paraphrase queries evaluated")
    parser.add_argument("--variants", action="store_true", help="also the query-side maps' other settings")
    parser.add_argument("--cache", type=Path, default=ROOT.parent / "outputs" / "migrate-maps-cache")
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "store_migrate_maps.json")
    args = parser.parse_args()

    corpus, queries, relevant = mrpc_train()
    corpus = corpus + wordnet(max(0, args.n - len(corpus)), set(corpus))
    rng = np.random.default_rng(0)
    chosen_queries = rng.permutation(len(queries))[: args.queries]
    queries = [queries[i] for i in chosen_queries]
    relevant = [relevant[i] for i in chosen_queries]
    old_rows, old_s = embed(args.old, corpus, args.cache, "corpus")
    new_rows, new_s = embed(args.new, corpus, args.cache, "corpus")
    old_q, _ = embed(args.old, queries, args.cache, "queries")
    new_q, _ = embed(args.new, queries, args.cache, "queries")
    results: dict = {
        "data": "dev: MRPC train (queries #1 of paraphrase pairs, corpus #2) + WordNet definitions as filler",
        "rows": len(corpus),
        "queries": len(queries),
        "encode_seconds_per_row": {args.old: old_s / len(corpus), args.new: new_s / len(corpus)},
        "old": retrieval(old_q, old_rows, relevant),
        "reembedded": retrieval(new_q, new_rows, relevant),
        "runs": [],
    }
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}, indent=1))
    order = rng.permutation(len(corpus))
    held = order[: args.heldout]
    for n_pairs in [int(p) for p in args.pairs.split(",")]:
        fit = order[args.heldout : args.heldout + n_pairs]
        for direction in ("queries", "rows"):
            variants = [("default", None)]
            if args.variants and direction == "queries":
                variants += [
                    ("regression", {"affine": {"adjoint": False}, "lowrank": {"adjoint": False}}),
                    ("mlp-cosine", {"mlp": {"objective": "cosine"}}),
                ]
            for label, params in variants:
                start = time.perf_counter()
                chosen, candidates, summary = maps.fit_and_choose(
                    old_rows[fit], new_rows[fit], direction, params=params, random_state=0
                )
                seconds = time.perf_counter() - start
                run = {"pairs": n_pairs, "direction": direction, "variant": label, "chosen": summary["chosen"]}
                run["seconds"] = round(seconds, 2)
                run["candidates"] = {}
                for kind, fitted in list(candidates.items()) + [("chosen (refit)", chosen)]:
                    figures = {
                        "overlap@10": round(maps.agreement(fitted, old_rows[held], new_rows[held], direction), 4)
                    }
                    if kind in summary["candidates"]:
                        figures["selection@10"] = summary["candidates"][kind]["selection@10"]
                    if direction == "queries":
                        figures |= retrieval(fitted.transform(new_q), old_rows, relevant)
                    else:
                        figures |= retrieval(new_q, fitted.transform(old_rows), relevant)
                    run["candidates"][kind] = figures
                results["runs"].append(run)
                print(json.dumps(run))
    if results["runs"]:
        results["query_us_linear_384"] = maps.query_microseconds(
            maps.make("affine").fit(old_rows[:1000], new_rows[:1000]), 384
        )
        print(results["query_us_linear_384"])
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
