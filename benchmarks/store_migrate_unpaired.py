"""Unpaired query-side migration (issue 53 item 3), on DEV data only: mini-vec2vec fitted from a sample of domain
texts (embedded by the new model) and the stored vectors, no pairs; its trust verdict, and what it retrieves
against a re-embedded store and against the paired query-side map at 2,000 pairs.

Corpus, queries and the paired baseline are those of ``store_migrate_maps.py`` (imported): MRPC *train* second
sentences plus WordNet definitions up to --n rows; 1,000 MRPC-train first sentences of paraphrase pairs as
queries, each with its paraphrase as the one relevant row. The texts sample (no row of it in the corpus or the
queries): the MRPC-train first sentences of the *non*-paraphrase pairs, then WordNet definitions after those in
the corpus, up to --texts. A control per direction: the same texts against vectors with the stored rows' mean and
covariance but no content (Gaussian), which the trust checks should refuse.

    OMP_NUM_THREADS=2 nice -n 10 .venv/bin/python benchmarks/store_migrate_unpaired.py --texts 5000
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from subspaces.store import maps, unpaired
from subspaces.vectors import normalize_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store_migrate_maps import DATA, ROOT, embed, mrpc_train, retrieval, wordnet


def texts_sample(corpus: list[str], queries: list[str], n: int) -> tuple[list[str], str]:
    """Domain texts outside the corpus and the queries, and what they are."""
    lines = (DATA / "mrpc" / "msr_paraphrase_train.txt").read_text(encoding="utf-8-sig").splitlines()[1:]
    taken = set(corpus) | set(queries)
    mrpc = list(dict.fromkeys(f for q, _, _, f, _ in (line.split("\t") for line in lines) if q == "0"))
    mrpc = [t for t in mrpc if t not in taken][:n]
    extra = wordnet(n - len(mrpc), taken | set(mrpc))  # skips the corpus's: the definitions after them
    about = (
        f"{len(mrpc)} MRPC-train first sentences of non-paraphrase pairs + {len(extra)} WordNet definitions "
        "after the corpus's (none in the corpus or the queries)"
    )
    return mrpc + extra, about


def one_direction(old: str, new: str, args: argparse.Namespace, data: dict) -> dict:
    corpus, queries, relevant, texts = data["corpus"], data["queries"], data["relevant"], data["texts"]
    old_rows, _ = embed(old, corpus, args.cache, "corpus")
    new_rows, _ = embed(new, corpus, args.cache, "corpus")
    new_q, _ = embed(new, queries, args.cache, "queries")
    new_texts, text_s = embed(new, texts, args.cache, "unpaired-texts")
    held, fit = data["held"], data["fit"]
    out: dict = {"old": old, "new": new, "texts_encode_seconds": round(text_s, 1)}
    out["reembedded"] = retrieval(new_q, new_rows, relevant)
    if new_q.shape[1] == old_rows.shape[1]:  # no map at all: what sharing coordinates alone gives
        out["unmapped"] = retrieval(new_q, old_rows, relevant)

    start = time.perf_counter()
    paired, _, summary = maps.fit_and_choose(old_rows[fit], new_rows[fit], "queries", random_state=0)
    out["paired_2000"] = {
        "map": summary["chosen"],
        "fit_seconds": round(time.perf_counter() - start, 1),
        "overlap@10": round(maps.agreement(paired, old_rows[held], new_rows[held], "queries"), 4),
    } | retrieval(paired.transform(new_q), old_rows, relevant)

    start = time.perf_counter()
    aligner = unpaired.fit(new_texts, old_rows, params=None, seed=args.seed, show_progress=False)
    seconds = time.perf_counter() - start
    fitted = unpaired.as_query_map(aligner, new_texts)
    figures = {"fit_seconds": round(seconds, 1), "verdict": unpaired.verdict(aligner)}
    figures["overlap@10"] = round(maps.agreement(fitted, old_rows[held], new_rows[held], "queries"), 4)
    figures |= retrieval(fitted.transform(new_q), old_rows, relevant)
    # the map as store search applies it (unit rows of the linear form) against the aligner's own transform
    figures["aligner_transform"] = retrieval(normalize_rows(aligner.transform(new_q)), old_rows, relevant)
    for key in ("recall@10", "ndcg@10"):
        figures[f"{key}_of_reembed"] = round(figures[key] / out["reembedded"][key], 4)
        figures[f"{key}_of_paired"] = round(figures[key] / out["paired_2000"][key], 4)
    out["unpaired"] = figures
    print(json.dumps(out), flush=True)

    if args.control:
        rng = np.random.default_rng(args.seed)
        mean, cov = old_rows.mean(0), np.cov(old_rows, rowvar=False)
        noise = rng.multivariate_normal(mean, cov, size=len(old_rows)).astype(np.float32)
        start = time.perf_counter()
        control = unpaired.fit(new_texts, noise, params=None, seed=args.seed, show_progress=False)
        out["control_gaussian"] = {
            "fit_seconds": round(time.perf_counter() - start, 1),
            "verdict": unpaired.verdict(control),
            "refusal": unpaired.refusal(control, "the control's map"),
        }
        print(json.dumps(out["control_gaussian"]), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="minilm-l6,paraphrase-l3", help="the two models; both directions run")
    parser.add_argument("--n", type=int, default=6000, help="corpus rows (MRPC train #2 sentences + WordNet)")
    parser.add_argument("--texts", type=int, default=5000, help="domain texts the new model encodes")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--heldout", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=2000, help="pairs of the paired query-side baseline")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--directions", default="both", choices=("both", "forward", "reverse"))
    parser.add_argument("--no-control", dest="control", action="store_false")
    parser.add_argument("--cache", type=Path, default=ROOT.parent / "outputs" / "migrate-maps-cache")
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "store_migrate_unpaired" / "results.json")
    args = parser.parse_args()

    corpus, queries, relevant = mrpc_train()
    corpus = corpus + wordnet(max(0, args.n - len(corpus)), set(corpus))
    rng = np.random.default_rng(0)  # the same draws as store_migrate_maps.py: its queries, held-out rows, pairs
    chosen = rng.permutation(len(queries))[: args.queries]
    queries, relevant = [queries[i] for i in chosen], [relevant[i] for i in chosen]
    order = rng.permutation(len(corpus))
    texts, about = texts_sample(corpus, queries, args.texts)
    data = {
        "corpus": corpus,
        "queries": queries,
        "relevant": relevant,
        "texts": texts,
        "held": order[: args.heldout],
        "fit": order[args.heldout : args.heldout + args.pairs],
    }
    a, b = args.models.split(",")
    pairs = {"forward": [(a, b)], "reverse": [(b, a)], "both": [(a, b), (b, a)]}[args.directions]
    cpu = subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True, text=True).stdout.strip()
    results = {
        "data": "dev: MRPC train (queries #1 of paraphrase pairs, corpus #2) + WordNet definitions as filler",
        "texts_sample": about,
        "rows": len(corpus),
        "queries": len(queries),
        "texts": len(texts),
        "cpu": cpu,
        "threads": os.environ.get("OMP_NUM_THREADS"),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["benchmarks/store_migrate_unpaired.py", *sys.argv[1:]]),
        "runs": [one_direction(old, new, args, data) for old, new in pairs],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
