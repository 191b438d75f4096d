"""Issue 57's cells: the default fit (its candidates: anchored passes, the identity, the paper recipe's pass)
against the paper's recipe (the notebook, ``align_paper_recipe.py``), ``init="identity"`` and the cross-fitted
oracle, in both directions of a model pair, on the protocol's dev pools. One JSON per cell, then ``cells.json``.

The reverse direction swaps the roles of the cached halves: the target model's half becomes the unpaired source,
the source model's half the target (still two disjoint halves), and the held-out pairs swap sides.

    OMP_NUM_THREADS=2 nice -n 10 .venv/bin/python benchmarks/align_candidates.py run \\
        --domains debian-descriptions,npm-summaries --size 12000 --seeds 0,1,2 \\
        --results benchmarks/results/align_candidates21/dev
    .venv/bin/python benchmarks/align_candidates.py table --results benchmarks/results/align_candidates21/dev
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from align_paper_recipe import score_paper_recipe
from align_pools import SOURCE_MODEL
from align_protocol import DOMAINS, load_pool
from subspaces.align import MiniVec2Vec, evaluate_alignment
from subspaces.io import save_json

TARGET = "paraphrase-l3"


def cpu_name() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((line.strip() for line in out.splitlines() if line.startswith("Model name")), "unknown")


def fit_arm(a, b, x, y, *, seed: int, init: str) -> dict:
    aligner = MiniVec2Vec(random_state=seed, init=init)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        aligner.fit(a, b)
    report = evaluate_alignment(aligner, x, y, pool_size=len(x))
    d = aligner.diagnostics_
    return {
        "top1": report["top1"],
        "oracle_cross_fitted": report["oracle_cross_fitted"]["top1"],
        "identity_top1": report["identity"]["top1"] if report.get("identity") else None,
        "fit_seconds": aligner.fit_seconds_,
        "trusted": aligner.converged_,
        "problems": d["problems"],
        "kept": d["kept"],
        "kept_why": d.get("kept_why"),
        "stopped_early": aligner.stopped_early_,
        "stop_reason": d["stop_reason"],
        "trust": d["trust"],
        "identity_reference": d["identity_reference"],
        "recipe_candidate": d.get("recipe_candidate"),
        "agreement": {k: d["agreement"].get(k) for k in ("agreement", "skipped", "compared")},
        "passes": [[r["label"], r["refined"], r["stage_seconds"]] for r in d["restarts"]],
        "warnings": [str(w.message) for w in caught],
    }


def run(args: argparse.Namespace) -> None:
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    for domain in args.domains.split(","):
        if DOMAINS[domain][0] != "dev" and not args.allow_test:
            raise SystemExit(f"{domain} is a test domain: pass --allow-test to report it")
        pool = load_pool(domain, args.sample, args.size, TARGET)
        for direction in args.directions.split(","):
            a, b, x, y = (pool[k] for k in (("a", "b", "x", "y") if direction == "forward" else ("b", "a", "y", "x")))
            source, target = (SOURCE_MODEL, TARGET) if direction == "forward" else (TARGET, SOURCE_MODEL)
            for seed in args.seeds:
                path = results / f"{domain}-s{args.sample}-{args.size}-{source}-to-{target}-seed{seed}.json"
                if path.is_file():
                    continue
                cell = {
                    "domain": domain,
                    "role": DOMAINS[domain][0],
                    "sample": args.sample,
                    "size": args.size,
                    "rows_a_side": [len(a), len(b)],
                    "held_out": len(x),
                    "source": source,
                    "target": target,
                    "seed": seed,
                    "cpu": cpu_name(),
                    "command": " ".join(sys.argv),
                    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                }
                for arm in args.arms.split(","):
                    clock = time.perf_counter()
                    if arm == "recipe":
                        scored = score_paper_recipe(a, b, x, y, seed=seed)
                        cell[arm] = {"top1": scored["top1"], "fit_seconds": scored["fit_seconds"]}
                    else:
                        cell[arm] = fit_arm(a, b, x, y, seed=seed, init="auto" if arm == "default" else arm)
                    cell[arm]["wall_seconds"] = time.perf_counter() - clock
                    print(
                        f"{path.stem} {arm}: top-1 {cell[arm]['top1']:.4f} in {cell[arm]['fit_seconds']:.1f}s",
                        flush=True,
                    )
                save_json(path, cell)


def table(args: argparse.Namespace) -> None:
    rows = [json.loads(p.read_text()) for p in sorted(Path(args.results).glob("*-seed*.json"))]
    cells = []
    for r in rows:
        d, recipe = r.get("default"), r.get("recipe")
        cell = {
            "domain": r["domain"],
            "direction": f"{r['source']} -> {r['target']}",
            "seed": r["seed"],
            "rows_a_side": r["rows_a_side"],
            "oracle": d["oracle_cross_fitted"] if d else None,
            "identity_map": d["identity_top1"] if d else None,
        }
        for arm in ("default", "recipe", "identity"):
            if arm in r:
                cell[arm] = {"top1": r[arm]["top1"], "seconds": r[arm]["fit_seconds"]}
        if d:
            cell["default"] |= {"trusted": d["trusted"], "kept": d["kept"], "stopped_early": d["stopped_early"]}
        if d and recipe:
            ok = d["top1"] >= recipe["top1"] or not d["trusted"]
            cell["default_at_least_recipe_or_refused"] = ok
            cell["time_ratio_to_recipe"] = d["fit_seconds"] / recipe["fit_seconds"]
        cells.append(cell)
    out = {"cpu": rows[0]["cpu"] if rows else None, "commands": sorted({r["command"] for r in rows})}
    out |= {"dates": sorted({r["date"] for r in rows}), "cells": cells}
    save_json(Path(args.results) / "cells.json", out)
    for c in cells:
        parts = [f"{c['domain']:<20} {c['direction']:<28} s{c['seed']}"]
        for arm in ("default", "recipe", "identity"):
            if arm in c:
                parts.append(f"{arm} {c[arm]['top1']:.3f}/{c[arm]['seconds']:.0f}s")
        parts.append(f"oracle {c['oracle']:.3f}" if c["oracle"] is not None else "")
        if "default" in c:
            parts.append(f"kept={c['default']['kept']} trusted={c['default']['trusted']}")
        if "time_ratio_to_recipe" in c:
            parts.append(f"ratio {c['time_ratio_to_recipe']:.2f} ok={c['default_at_least_recipe_or_refused']}")
        print("  ".join(parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--domains", default="debian-descriptions,npm-summaries")
    r.add_argument("--directions", default="forward,reverse")
    r.add_argument("--arms", default="default,recipe,identity")
    r.add_argument("--size", type=int, default=12_000)
    r.add_argument("--sample", type=int, default=0)
    r.add_argument("--seeds", type=lambda s: [int(v) for v in s.split(",")], default=[0, 1, 2])
    r.add_argument("--results", required=True)
    r.add_argument("--allow-test", action="store_true")
    t = sub.add_parser("table")
    t.add_argument("--results", required=True)
    args = parser.parse_args()
    run(args) if args.command == "run" else table(args)


if __name__ == "__main__":
    main()
