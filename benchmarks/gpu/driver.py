"""The training the CPU cannot afford, on one lent GPU, in one time-boxed command (issue 55; notes/gpu.md): stage
``kgc`` (Hyper-CL's WN18RR recipe, encoder fine-tuned, tri vs bi, seeds 0 and 1, the same steps for every run, as
many as its box allows) then ``simcse`` (SimCSE's unsupervised ablation from a random BERT), each in its own process
killed at its box's end; each rewrites its JSON after every run, so what finished stays. Writes under ``--out``:
``environment.json``, ``kgc.json``, ``simcse.json`` and ``summary.json``.

    python3 benchmarks/gpu/driver.py --out "$OUT" --seconds 520          # by run.sh, on the GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmark package, bench
from bench.environment import environment, stdout_of
from subspaces.io import save_json

RECIPE = "hypercl-wn18rr"
KGC_ARMS = {"bi": "bi-simkgc", "tri": "tri-hypernet-full"}
SIMCSE_ARMS = ("dropout", "none", "delete_one_word")
PAPER = {"tri_mrr": 0.616, "bi_mrr": 0.666, "tri_over_bi": 0.616 / 0.666}


def gpu_record() -> dict[str, Any]:
    import torch

    record: dict[str, Any] = {"cuda_available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        record |= {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1)}
        record |= {"multiprocessors": props.multi_processor_count, "capability": f"{props.major}.{props.minor}"}
    smi = ("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    record["driver"] = stdout_of(*smi, timeout=20) or None
    return record


def _kgc_run(
    args: argparse.Namespace, kg: Any, arch: str, steps: int, seed: int, output: Path, *, evaluate: bool = True
) -> dict[str, Any]:
    from subspaces.kgc.pipeline import train_pipeline
    from subspaces.kgc.recipes import recipe_settings

    settings = recipe_settings(RECIPE, arch)
    settings["batch_size"] = args.kgc_batch or settings["batch_size"]
    started = time.perf_counter()
    settings |= {"arch": arch, "freeze_encoder": False, "max_steps": steps, "epochs": args.kgc_max_epochs}
    settings |= {"seed": seed, "evaluate_split": "test" if evaluate else None, "disk_cache": False, "save_steps": 0}
    report = train_pipeline(
        output=output, dataset=kg, model=args.model, device=args.device, show_progress=False, recipe=RECIPE, **settings
    )
    evaluation = report.eval.to_dict() if report.eval is not None else {"average": {}}
    train, rerank = report.train_result.to_dict(), (evaluation.get("rerank") or {}).get("average", {}).get("mrr")
    return {
        "arch": arch, "seed": seed, "steps": train["steps"], "batch_size": settings["batch_size"],
        "train_seconds": train["seconds"], "wall_seconds": time.perf_counter() - started,
        "mrr": evaluation["average"].get("mrr"), "mrr_rerank": rerank, "eval": evaluation, "train": train,
    }  # fmt: skip


def kgc_stage(args: argparse.Namespace, deadline: float, path: Path) -> None:
    from subspaces.kgc.data import load_kg
    from subspaces.kgc.recipes import recipe_settings

    work = Path(tempfile.mkdtemp(prefix="gpu-kgc-"))
    kg = load_kg(args.kgc_dataset)
    batch = args.kgc_batch or recipe_settings(RECIPE, "tri")["batch_size"]
    train_rows = len(kg.with_inverses("train"))
    per_epoch = max(1, train_rows // min(batch, train_rows))
    record = {"recipe": RECIPE, "dataset": args.kgc_dataset, "model": args.model, "paper": PAPER, "status": "probing"}
    save_json(path, record)
    # A first short run pays the process's warm-up (CUDA context, kernel choice); then each arm's probe times a
    # step and what a run costs besides its steps (model, batches), to which a test evaluation is added.
    _kgc_run(args, kg, "bi", 2, args.seeds[0], work / "warm-up", evaluate=False)
    probe = {}
    for arch in KGC_ARMS:
        r = _kgc_run(args, kg, arch, args.probe_steps, args.seeds[0], work / f"probe-{arch}", evaluate=False)
        other = r["wall_seconds"] - r["train_seconds"] + args.kgc_eval_seconds
        probe[arch] = {"seconds_per_step": r["train_seconds"] / max(1, r["steps"]), "other_seconds": other}
    left = deadline - time.time() - args.margin_seconds
    # every run takes the same steps: a seed's pair costs the two arms' step times, plus each run's other costs
    per_pair_step = sum(p["seconds_per_step"] for p in probe.values())
    other = sum(p["other_seconds"] for p in probe.values()) * len(args.seeds)
    steps = int((left - other) / (per_pair_step * len(args.seeds)))
    steps = max(1, min(steps, per_epoch * args.kgc_max_epochs))
    plan = {"steps": steps, "steps_per_epoch": per_epoch, "epochs": steps / per_epoch}
    plan["runs"] = len(KGC_ARMS) * len(args.seeds)
    record |= {"status": "running", "plan": plan, "probe": probe, "runs": []}
    save_json(path, record)
    for seed in args.seeds:
        for arch, arm in KGC_ARMS.items():
            r = _kgc_run(args, kg, arch, steps, seed, work / f"{arm}-seed{seed}")
            record["runs"].append({"arm": arm, **r})
            record["ratios"] = kgc_ratios(record["runs"])
            save_json(path, record)
            print(f"kgc {arm} seed {seed}: MRR {r['mrr']:.4f} (5-hop {r['mrr_rerank']})", flush=True)


def kgc_ratios(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """tri / bi MRR per seed with both arms finished (plain and with the 5-hop re-ranking), and their mean."""
    by_seed: dict[int, dict[str, dict[str, Any]]] = {}
    for r in runs:
        by_seed.setdefault(r["seed"], {})[r["arch"]] = r
    out: dict[str, Any] = {}
    for key in ("mrr", "mrr_rerank"):
        per_seed = {
            seed: pair["tri"][key] / pair["bi"][key]
            for seed, pair in by_seed.items()
            if {"tri", "bi"} <= pair.keys() and pair["tri"][key] is not None and pair["bi"][key]
        }
        out[key] = {"per_seed": per_seed, "mean": statistics.fmean(per_seed.values()) if per_seed else None}
    return out


def simcse_stage(args: argparse.Namespace, deadline: float, path: Path) -> None:
    from bench.tasks.simcse_scratch import run as simcse_cell

    work = Path(tempfile.mkdtemp(prefix="gpu-simcse-"))
    base = {"batch_size": args.simcse_batch, "lr": args.simcse_lr, "layers": args.simcse_layers}
    base |= {"hidden": args.simcse_hidden, "max_sentences": args.simcse_max_sentences, "work": str(work)}
    record: dict[str, Any] = {"task": "simcse_scratch", "seed": args.simcse_seed, "status": "probing"}
    save_json(path, record)
    started = time.perf_counter()
    probe = simcse_cell(base | {"augmentation": "dropout", "steps": args.probe_steps}, args.simcse_seed)
    per_step = args.simcse_batch / probe["after"]["samples_per_second"]
    other = time.perf_counter() - started - probe["after"]["train_seconds"]
    # the full STS table and the untrained model's (once) cost a few evaluations more than the probe's STS-B dev
    left = deadline - time.time() - args.margin_seconds - 3 * other
    steps = max(1, min(args.simcse_max_steps, int((left / len(SIMCSE_ARMS) - other) / per_step)))
    record |= {"status": "running", "plan": {"steps": steps, "seconds_per_step_probe": per_step}, "arms": {}}
    save_json(path, record)
    for i, arm in enumerate(SIMCSE_ARMS):
        params = base | {"augmentation": arm, "steps": steps, "full_sts": True, "before": i == 0}
        record["arms"][arm] = simcse_cell(params, args.simcse_seed)
        save_json(path, record)
        print(f"simcse {arm}: best STS-B dev {record['arms'][arm]['after']['best_stsb_dev']:.2f}", flush=True)


STAGES = {"kgc": kgc_stage, "simcse": simcse_stage}


def headline(stage: str, record: dict[str, Any]) -> dict[str, Any]:
    if stage == "kgc":
        return {"plan": record.get("plan"), "ratios": record.get("ratios"), "paper": PAPER}
    after = {a: r["after"] for a, r in record.get("arms", {}).items()}
    best = {a: r["best_stsb_dev"] for a, r in after.items()}
    sts = {a: (r.get("sts") or {}).get("avg") for a, r in after.items()}
    return {"plan": record.get("plan"), "best_stsb_dev": best, "sts_avg": sts}


def run_stages(args: argparse.Namespace) -> dict[str, Any]:
    """Each stage as a child process, killed at its box's end (its own, or what is left of the whole)."""
    out, end = Path(args.out), time.time() + args.seconds
    summary: dict[str, Any] = {"seconds": args.seconds, "stages": {}}
    for stage in args.stages:
        box = min(getattr(args, f"{stage}_seconds"), end - time.time())
        path = out / f"{stage}.json"
        if box < args.min_stage_seconds:
            summary["stages"][stage] = {"status": f"not started: {box:.0f} s left"}
        else:
            command = [sys.executable, __file__, *args.argv, "--stage", stage, "--deadline", str(time.time() + box)]
            started = time.time()
            try:
                done = subprocess.run(command, timeout=box + args.grace_seconds)
                status = "done" if done.returncode == 0 else f"failed (exit {done.returncode})"
            except subprocess.TimeoutExpired:
                status = f"stopped at its {box:.0f} s box"
            record = json.loads(path.read_text()) if path.is_file() else {}
            if record and record.get("status") != "done":
                record["status"] = status
                save_json(path, record)
            summary["stages"][stage] = {"status": status, "seconds": time.time() - started, **headline(stage, record)}
        save_json(out / "summary.json", summary)
    return summary


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT") or "runs/gpu-out")
    p.add_argument("--seconds", type=float, default=520, help="the whole driver, start to end")
    p.add_argument("--stages", type=lambda s: [x for x in s.split(",") if x], default=list(STAGES))
    p.add_argument("--kgc-seconds", type=float, default=390, help="stage 1's box (at most what is left)")
    p.add_argument("--simcse-seconds", type=float, default=200, help="stage 2's box (at most what is left)")
    p.add_argument("--min-stage-seconds", type=float, default=30, help="a stage with less left is not started")
    p.add_argument("--margin-seconds", type=float, default=15, help="kept free at a box's end when planning steps")
    p.add_argument("--grace-seconds", type=float, default=10, help="after its box, before a stage is killed")
    p.add_argument("--device", default=None, help="default: cuda where available, else cpu")
    p.add_argument("--model", default="minilm-l6", help="the KGC encoder: a bundled name or a model folder")
    p.add_argument("--install", default="unknown", help="how run.sh installed the project (recorded)")
    p.add_argument("--probe-steps", type=int, default=10, help="steps each arm's timing run takes")
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1])
    p.add_argument("--kgc-dataset", default="wn18rr")
    p.add_argument("--kgc-batch", type=int, default=None, help="default: the recipe's 512")
    p.add_argument("--kgc-eval-seconds", type=float, default=20, help="a test evaluation (H200: 10-14 s)")
    p.add_argument("--kgc-max-epochs", type=int, default=50, help="the released run's length caps the plan")
    p.add_argument("--simcse-seed", type=int, default=42)
    p.add_argument("--simcse-batch", type=int, default=64)
    p.add_argument("--simcse-lr", type=float, default=5e-4, help="notes/simcse.md §1.2's rate for this start")
    p.add_argument("--simcse-layers", type=int, default=4)
    p.add_argument("--simcse-hidden", type=int, default=256)
    p.add_argument("--simcse-max-sentences", type=int, default=None)
    p.add_argument("--simcse-max-steps", type=int, default=15_625, help="the paper's 1M sentences at batch 64")
    p.add_argument("--stage", choices=list(STAGES), help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.argv = list(argv)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.device.startswith("cuda"):  # TF32 as cuDNN by default (released run: fp16 autocast; these loops: fp32)
        torch.backends.cuda.matmul.allow_tf32 = True
    out = Path(args.out)  # save_json makes the folder
    if args.stage:
        STAGES[args.stage](args, args.deadline, out / f"{args.stage}.json")
        return
    env = environment() | {"gpu": gpu_record(), "device": args.device, "install": args.install}
    env["command"] = "benchmarks/gpu/driver.py " + " ".join(args.argv)
    save_json(out / "environment.json", env)
    summary = run_stages(args)
    print(json.dumps(summary, indent=2, default=str), flush=True)


if __name__ == "__main__":
    main()
