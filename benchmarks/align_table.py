"""Markdown table of alignment results from the JSON files ``align_bench.py`` wrote (archived: notes/align.md).

    .venv/bin/python benchmarks/align_table.py benchmarks/results/align_wordnet.json \
        benchmarks/results/align_tweets.json

``PATH=NOTE`` appends NOTE to the label of that file's rows (e.g. what the defaults were when it ran).
"""

from __future__ import annotations

import json
import sys


def fmt(metrics: dict | None, key: str, digits: int = 3) -> str:
    return "n/a" if metrics is None else f"{metrics[key]:.{digits}f}"


def main(paths: list[str]) -> None:
    print(
        "| pool | pair | n_eval | mini-vec2vec top-1 | mean rank | cosine | identity top-1 | oracle top-1 | "
        "gap to oracle | cross-fitted oracle top-1 | gap to it | fit s | paper recipe top-1 | paper fit s | speed-up |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for arg in paths:
        path, _, note = arg.partition("=")
        with open(path) as f:
            results = json.load(f)
        # Runs that override more than the restart count are labelled with their overrides.
        extra = {k: v for k, v in results.get("params", {}).items() if k != "n_restarts"}
        restarts = results.get("params", {}).get("n_restarts", 3)
        label = (f", {restarts} restarts" if restarts != 1 else "") + (f", {json.dumps(extra)}" if extra else "")
        label += f", seed {results['seed']}" if results.get("seed", 0) != 0 else ""
        label += f", {note}" if note else ""
        for r in results["pairs"]:
            passes = len(r.get("diagnostics", {}).get("restart_final_nn_similarity", [])) or restarts
            ran = f" ({passes} run)" if passes < restarts else ""  # restarts stop at the first converged pass
            paper = r.get("paper_recipe")
            gap = (r["oracle"]["top1"] - r["top1"]) / r["oracle"]["top1"]
            cross = r.get("oracle_cross_fitted")
            cross_gap = "n/a" if cross is None else f"{100 * max(0.0, cross['top1'] - r['top1']) / cross['top1']:.1f}%"
            paper_seconds = "n/a" if paper is None else f"{paper['fit_seconds']:.0f}"
            speedup = "n/a" if paper is None else f"{r['speedup_vs_paper_recipe']:.1f}x"
            print(
                f"| {results['pool']} ({results['size']}) | {r['source']} → {r['target']}{label}{ran} | "
                f"{r['n_eval']} | "
                f"{r['top1']:.3f} | {r['mean_rank']:.1f} | {r['cosine']:.3f} | {fmt(r['identity'], 'top1')} | "
                f"{r['oracle']['top1']:.3f} | {100 * gap:.1f}% | {fmt(cross, 'top1')} | {cross_gap} | "
                f"{r['fit_seconds']:.0f} | {fmt(paper, 'top1')} | "
                f"{paper_seconds} | {speedup} |"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
