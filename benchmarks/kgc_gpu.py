"""Issue 18, item 3: the fine-tuned bi- vs tri-encoder comparison under Hyper-CL's released configuration, on one GPU.

One command, one wall-clock budget (default 600 s, under the 12 minutes a lent GPU allows): both models train the
whole encoder with ``--recipe hypercl-wn18rr`` (batch 512, lr 5e-5, link-graph texts per example, full-rank
hypernet with dropout 0.1, nn.Linear init, raw queries, no self-negatives for the tri-encoder; SimKGC's
self-negatives for the bi-encoder) for the same number of steps, as many as the budget allows for the slower of
the two after a short probe. Test MRR after each epoch is tracked (never selected on); the final test evaluation
also reports SimKGC's 5-hop re-ranking, inference time and cache hit rates.

    python benchmarks/kgc_gpu.py --device cuda --model /path/to/minilm-l6 --out "$OUT"      # on the GPU machine
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/kgc_gpu.py --smoke                           # seconds, on CPU

Each arm writes ``<out>/<arm>.json`` as soon as it finishes (``--out`` defaults to ``$OUT`` when set, else
``benchmarks/results/kgc/gpu``); ``summary.json`` holds the step plan and the tri/bi ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from kgc_bench import RECIPE, RESULTS, _meta, smoke_setup
from subspaces.io import save_json

ARMS = {"bi": "bi-simkgc", "tri": "tri-hypernet-full"}


def _settings(arch: str, args: argparse.Namespace) -> dict:
    from subspaces.kgc.recipes import recipe_settings

    settings = recipe_settings(RECIPE, arch)
    if args.batch_size is not None:
        settings["batch_size"] = args.batch_size
    return settings


def _train(arch: str, args: argparse.Namespace, kg, steps: int, output: Path, *, track: bool, evaluate: bool):
    from subspaces.kgc.pipeline import train_pipeline

    return train_pipeline(
        output=output,
        dataset=kg,
        model=args.model,
        arch=arch,
        freeze_encoder=False,
        epochs=args.max_epochs,
        max_steps=steps,
        seed=args.seed,
        track_on="test" if track else None,
        evaluate_split="test" if evaluate else None,
        disk_cache=False,
        recipe=RECIPE,
        device=args.device,
        show_progress=False,
        **_settings(arch, args),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm-l6", help="bundled name or a model folder")
    parser.add_argument("--dataset", default="wn18rr")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--budget-seconds", type=float, default=600, help="the whole script, start to end")
    parser.add_argument("--eval-seconds", type=float, default=20, help="assumed cost of one test evaluation")
    parser.add_argument("--probe-steps", type=int, default=5)
    parser.add_argument("--max-epochs", type=int, default=50, help="the released run's length caps the plan")
    parser.add_argument("--batch-size", type=int, default=None, help="default: the recipe's 512")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", default=os.environ.get("OUT") or str(RESULTS / "gpu"))
    parser.add_argument("--smoke", action="store_true", help="tiny random BERT on a toy graph, CPU, seconds")
    args = parser.parse_args()
    started = time.perf_counter()
    runs = Path(tempfile.mkdtemp(prefix="kgc-gpu-runs-"))
    if args.smoke:
        os.environ["SUBSPACES_CACHE"] = str(runs / "cache")
        model, data = smoke_setup(runs)
        args.model, args.dataset, args.device, args.batch_size = str(model), str(data), "cpu", 64
        args.budget_seconds, args.eval_seconds, args.out = min(args.budget_seconds, 40), 0.5, str(runs / "out")
    if args.device.startswith("cuda"):  # TF32 products (the released run uses fp16 autocast; this loop is fp32)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/kgc_gpu.py " + " ".join(sys.argv[1:])

    from subspaces.kgc.data import load_kg

    kg = load_kg(args.dataset)
    batch = _settings("bi", args)["batch_size"]
    per_epoch = len(kg.with_inverses("train")) // min(batch, len(kg.with_inverses("train")))
    probe = {}
    for arch in ARMS:  # seconds per step of each, from a short run (its first step pays the warm-up)
        report = _train(arch, args, kg, args.probe_steps, runs / f"probe-{arch}", track=False, evaluate=False)
        probe[arch] = report.train_result["seconds"] / report.train_result["steps"]
    spent = time.perf_counter() - started
    slowest = max(probe.values())
    # What is left, less a final evaluation each and one tracked evaluation per epoch, shared by the two arms.
    left = args.budget_seconds - spent - 2 * args.eval_seconds
    steps = max(1, int(left / 2 / (slowest + args.eval_seconds / per_epoch)))
    steps = min(steps, per_epoch * args.max_epochs)
    plan = {
        "seconds_per_step_probe": probe,
        "steps": steps,
        "steps_per_epoch": per_epoch,
        "epochs": steps / per_epoch,
        "batch_size": batch,
        "setup_seconds": spent,
    }
    print(json.dumps(plan), flush=True)
    results = {}
    for arch, arm in ARMS.items():
        report = _train(arch, args, kg, steps, runs / arm, track=steps >= per_epoch, evaluate=True)
        assert report.eval is not None
        train = report.train_result
        per_epoch_mrr = {e["epoch"]: e["eval"]["mrr"] for e in train["history"] if "eval" in e}
        results[arm] = {
            "mrr_per_epoch": [per_epoch_mrr[k] for k in sorted(per_epoch_mrr)],
            "train_seconds": train["seconds"],
            "eval": report.eval.to_dict(),
            "train": train,
        }
        save_json(out / f"{arm}.json", {"meta": _meta(command, args.device), "plan": plan, **results[arm]})
        print(arm, json.dumps(report.eval.average), f"train {train['seconds']:.0f} s", flush=True)
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    bi, tri = (results[a]["eval"] for a in ARMS.values())
    summary = {
        "plan": plan,
        "tri_over_bi_mrr": tri["average"]["mrr"] / bi["average"]["mrr"],
        "tri_over_bi_mrr_per_epoch": np.divide(
            results[ARMS["tri"]]["mrr_per_epoch"], results[ARMS["bi"]]["mrr_per_epoch"]
        ).tolist()
        if len(results[ARMS["tri"]]["mrr_per_epoch"]) == len(results[ARMS["bi"]]["mrr_per_epoch"])
        else None,
        "mrr": {arm: r["eval"]["average"]["mrr"] for arm, r in results.items()},
        "mrr_5hop_rerank": {
            arm: r["eval"].get("rerank", {}).get("average", {}).get("mrr") for arm, r in results.items()
        },
        "wall_seconds": time.perf_counter() - started,
    }
    save_json(out / "summary.json", {"meta": _meta(command, args.device), **summary})
    print(json.dumps({k: v for k, v in summary.items() if k != "plan"}), flush=True)


if __name__ == "__main__":
    main()
