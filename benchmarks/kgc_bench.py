"""Knowledge-graph completion benchmarks (issue 6): WN18RR and FB15k-237 with ``minilm-l6`` on CPU.

Each part writes ``benchmarks/results/kgc/<part>.json``; ``table`` prints the Markdown rows of BENCHMARKS.md
from those files. Entity embeddings come from the on-disk shard cache (the first run encodes them).

    export OMP_NUM_THREADS=1
    nice -n 5 .venv/bin/python benchmarks/kgc_bench.py zero-shot                  # SimKGC bi-encoder, no training
    nice -n 5 .venv/bin/python benchmarks/kgc_bench.py frozen --heads hadamard,concat,hypernet --epochs 3
    nice -n 5 .venv/bin/python benchmarks/kgc_bench.py efficiency                 # bi vs tri inference, same run
    nice -n 5 .venv/bin/python benchmarks/kgc_bench.py fb15k237 --head hypernet --epochs 1
    nice -n 5 .venv/bin/python benchmarks/kgc_bench.py finetune-timing --batch-size 64 --max-steps 3
    python benchmarks/kgc_bench.py finetune --device cuda --budget-seconds 150   # GPU: bi vs tri, encoder trained
    .venv/bin/python benchmarks/kgc_bench.py table
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

from subspaces.cli.common import parse_rank
from subspaces.config import cache_dir
from subspaces.io import save_json

RESULTS = Path(__file__).parent / "results" / "kgc"
MODEL = "minilm-l6"


def _meta(command: str, device: str = "cpu") -> dict:
    if device.startswith("cuda"):
        machine = f"{torch.cuda.get_device_name(device)}, {os.cpu_count()} CPU cores"
    else:
        machine = (
            f"{platform.machine()}, {torch.get_num_threads()} torch thread(s), "
            "shared 2-core CPU box (other jobs running)"
        )
    return {
        "command": command,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine,
        "torch": torch.__version__,
    }


def zero_shot(args: argparse.Namespace) -> dict:
    from subspaces.kgc.pipeline import evaluate_model

    result = evaluate_model(
        MODEL, args.dataset, split="test", n_hop=5 if args.dataset == "wn18rr" else 0, model_name=MODEL
    )
    return {"zero_shot_bi": result.to_dict()}


def frozen(args: argparse.Namespace) -> dict:
    from subspaces.kgc.pipeline import train_pipeline

    out: dict = {}
    for spec in args.heads.split(","):
        kind, _, rank = spec.partition(":")
        name = kind if kind != "hypernet" else f"hypernet-{rank or args.rank}"
        report = train_pipeline(
            output=cache_dir() / "kgc-runs" / f"{args.dataset}-{name}{args.tag}",
            dataset=args.dataset,
            model=MODEL,
            arch="tri",
            head=kind,
            rank=parse_rank(rank or args.rank),
            freeze_encoder=True,
            batch_size=args.batch_size,
            lr=1e-3 if args.lr is None else args.lr,
            epochs=args.epochs,
            max_steps=args.train_steps,
            pre_batch=args.pre_batch,
            seed=args.seed,
        )
        assert report.eval is not None  # evaluate_split is on
        out[name] = {"train": report.train_result, "eval": report.eval.to_dict(), "output": report.output}
        print(name, json.dumps(report.eval.average), f"train {report.train_result['seconds']:.0f}s", flush=True)
    return out


def efficiency(args: argparse.Namespace) -> dict:
    """Full test-set inference, bi vs tri, in one process; entity vectors shared, query side cold."""
    from subspaces.kgc.data import load_kg
    from subspaces.kgc.graph import KnownTails
    from subspaces.kgc.inference import KGCInference
    from subspaces.kgc.models import build_model, load_kgc_model
    from subspaces.kgc.ranking import rank_metrics, rank_queries
    from subspaces.kgc.texts import KGCTexts
    from subspaces.models.encoder import encode
    from subspaces.models.store import EmbeddingShardCache

    kg = load_kg(args.dataset)
    texts = KGCTexts.build(kg)
    queries = kg.with_inverses("test")
    known = KnownTails(np.concatenate([kg.with_inverses(s) for s in kg.splits]))
    bi = build_model(MODEL, "bi")
    tri = load_kgc_model(cache_dir() / "kgc-runs" / f"{args.dataset}-{args.tri_run}")
    entities = EmbeddingShardCache(bi.tail_encoder).encode(texts.entities)  # from disk: identical for both
    # Cold entity encoding is the same work for both models; time a sample and scale it (said so in the output).
    sample = texts.entities[: args.entity_sample]
    started = time.perf_counter()
    encode(bi.tail_encoder, sample, batch_size=64)
    entity_seconds = (time.perf_counter() - started) * len(texts.entities) / len(sample)
    out: dict = {
        "entity_encoding_seconds_extrapolated": entity_seconds,
        "entity_sample": len(sample),
        "entities": kg.num_entities,
    }
    for name, model in (("bi", bi), ("tri", tri)):
        model.store.disk = False  # the query side is timed cold
        inference = KGCInference(model, texts, label=f"kgc {kg.name}")
        inference.seed_entities(entities)
        started = time.perf_counter()
        with torch.no_grad():
            query_vectors = inference.query_vectors(queries)
            ranks, _ = rank_queries(query_vectors, torch.from_numpy(entities), queries, known)
        seconds = time.perf_counter() - started
        out[name] = {
            "query_side_seconds": seconds,
            "total_seconds_with_cold_entities": seconds + entity_seconds,
            "mrr_average": float(
                (rank_metrics(ranks[: len(queries) // 2])["mrr"] + rank_metrics(ranks[len(queries) // 2 :])["mrr"]) / 2
            ),
            **inference.stats(),
        }
        print(name, json.dumps(out[name]), flush=True)
    return out


def finetune_timing(args: argparse.Namespace) -> dict:
    """Seconds per fine-tuning step on this CPU (encoder trained), to size what a full run would take."""
    from subspaces.kgc.data import load_kg
    from subspaces.kgc.texts import KGCTexts

    kg = load_kg(args.dataset)
    texts = KGCTexts.build(kg)
    examples = kg.with_inverses("train")
    out: dict = {"batch_size": args.batch_size, "steps": args.max_steps, "examples_per_epoch": int(len(examples))}
    for arch in ("bi", "tri"):
        per_step = _seconds_per_step(
            MODEL,
            arch,
            "hypernet",
            "32",
            args.batch_size,
            texts,
            examples,
            steps=args.max_steps,
            warmup=0,
            separate_encoders=False,
        )
        out[arch] = {
            "seconds_per_step": per_step,
            "epoch_hours_extrapolated": per_step * len(examples) / args.batch_size / 3600,
        }
        print(arch, json.dumps(out[arch]), flush=True)
    return out


def _seconds_per_step(
    model_name: str,
    arch: str,
    head: str,
    rank: str,
    batch_size: int,
    texts,
    examples: np.ndarray,
    *,
    steps: int,
    warmup: int,
    separate_encoders: bool,
    device: str = "cpu",
) -> float:
    """Seconds per fine-tuning step (encoder trained) of a throwaway model, after ``warmup`` untimed steps."""
    from functools import partial

    from subspaces.kgc.graph import KnownTails
    from subspaces.kgc.models import build_model, embed_batch
    from subspaces.kgc.train import KGCTrainConfig, train_kgc
    from subspaces.losses.simkgc import SimKGCLoss

    model = build_model(
        model_name, arch, head=head, rank=parse_rank(rank), shared_encoder=not separate_encoders, device=device
    )
    loss = SimKGCLoss(model, KnownTails(examples), batch_size=batch_size, embed_batch=partial(embed_batch, model)).to(
        device
    )
    if warmup:
        train_kgc(
            loss, examples, KGCTrainConfig(batch_size=batch_size, lr=5e-5, max_steps=warmup, show_progress=False), texts
        )
    result = train_kgc(
        loss, examples, KGCTrainConfig(batch_size=batch_size, lr=5e-5, max_steps=steps, show_progress=False), texts
    )
    del model, loss
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return result.seconds / result.steps


def finetune(args: argparse.Namespace) -> dict:
    """SimKGC's bi-encoder vs the Hyper-CL tri-encoder with the encoder trained (SimKGC's recipe), same run.

    Both start from ``--model``, see the same batches in the same order and get the same number of steps: the
    fewest of ``--epochs`` epochs and what ``--budget-seconds`` of training allows for the slower of the two.
    """
    from subspaces.kgc.data import load_kg
    from subspaces.kgc.models import build_model
    from subspaces.kgc.pipeline import evaluate_model, train_pipeline
    from subspaces.kgc.texts import KGCTexts

    if args.tf32:  # TensorFloat-32 matrix products (SimKGC trains in fp16 mixed precision; this loop is fp32)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    kg = load_kg(args.dataset)
    texts = KGCTexts.build(kg)
    examples = kg.with_inverses("train")
    per_epoch = len(examples) // args.batch_size
    archs = args.archs.split(",")
    lr = 5e-5 if args.lr is None else args.lr
    out: dict = {
        "examples_per_epoch": int(len(examples)),
        "batch_size": args.batch_size,
        "lr": lr,
        "head_lr": args.head_lr,
        "tf32": args.tf32,
        "model": args.model_label or args.model,
    }
    steps = per_epoch * args.epochs
    if args.budget_seconds:
        out["seconds_per_step_probe"] = {
            arch: _seconds_per_step(
                args.model,
                arch,
                args.head,
                args.rank,
                args.batch_size,
                texts,
                examples,
                steps=4,
                warmup=2,
                separate_encoders=arch == "bi",
                device=args.device,
            )
            for arch in archs
        }
        steps = min(steps, max(1, int(args.budget_seconds / max(out["seconds_per_step_probe"].values()))))
    out["steps"], out["epochs"] = steps, steps / per_epoch
    print(json.dumps(out), flush=True)
    if args.zero_shot:  # the starting point, evaluated on this machine (checks the weights that travelled)
        start = build_model(args.model, "bi", device=args.device)  # encoded on the device too
        zero = evaluate_model(
            start, kg, split="test", texts=texts, disk_cache=False, show_progress=False, model_name=out["model"]
        )
        out["zero_shot_bi"] = zero.to_dict()
        print("zero-shot", json.dumps(zero.average), flush=True)
    for arch in archs:
        name = "bi-simkgc" if arch == "bi" else f"tri-{args.head}-{args.rank}"
        report = train_pipeline(
            output=Path(args.runs) / f"{Path(args.dataset).name}-finetune-{name}{args.tag}",
            dataset=kg,
            model=args.model,
            arch=arch,
            head=args.head,
            rank=parse_rank(args.rank),
            freeze_encoder=False,
            batch_size=args.batch_size,
            lr=lr,
            head_lr=args.head_lr if arch == "tri" else None,  # the bi-encoder has no head of its own
            epochs=args.epochs,
            max_steps=steps,
            seed=args.seed,
            shared_encoder=arch != "bi",
            disk_cache=False,
            device=args.device,
            show_progress=False,
        )
        assert report.eval is not None  # evaluate_split is on
        out[name] = {"train": report.train_result, "eval": report.eval.to_dict()}
        print(name, json.dumps(report.eval.average), f"train {report.train_result['seconds']:.0f}s", flush=True)
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def table(_args: argparse.Namespace) -> None:
    def row(label: str, r: dict, train_s: float | None = None) -> str:
        a = r["average"]
        t = "" if train_s is None else f"{train_s:.0f}"
        return (
            f"| {label} | {a['mrr']:.3f} | {a['hits@1']:.3f} | {a['hits@3']:.3f} | {a['hits@10']:.3f} | {a['mr']:.0f} "
            f"| {r['forward']['mrr']:.3f} | {r['backward']['mrr']:.3f} | {t} | {r['inference_seconds']:.0f} |"
        )

    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        print(f"\n{path.name}: {data.get('meta', {}).get('command', '')}")
        for key, value in data.items():
            if key == "meta" or not isinstance(value, dict):
                continue
            if "average" in value:
                print(row(key, value))
                if "rerank" in value:
                    print(row(f"{key} + {value['rerank']['n_hop']}-hop re-rank", {**value, **value["rerank"]}))
            elif "eval" in value:
                print(row(key, value["eval"], value["train"]["seconds"]))
            else:
                print(key, json.dumps(value))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "part", choices=["zero-shot", "frozen", "efficiency", "fb15k237", "finetune-timing", "finetune", "table"]
    )
    parser.add_argument("--dataset", default="wn18rr")
    parser.add_argument("--heads", default="hadamard,concat,hypernet")
    parser.add_argument("--head", default="hypernet")
    parser.add_argument("--rank", default="32")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=None, help="default 1e-3 frozen, 5e-5 fine-tuning")
    parser.add_argument("--pre-batch", type=int, default=0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--tag", default="", help="suffix for the results file and run folders (e.g. -6ep)")
    parser.add_argument("--tri-run", default="hypernet-32")
    parser.add_argument("--entity-sample", type=int, default=2048)
    parser.add_argument("--max-steps", type=int, default=3, help="finetune-timing: steps to time")
    parser.add_argument("--train-steps", type=int, default=None, help="frozen/fb15k237: stop after this many steps")
    parser.add_argument("--model", default=MODEL, help="finetune: bundled name or a model folder")
    parser.add_argument("--model-label", default="", help="finetune: how the results name the model")
    parser.add_argument("--archs", default="bi,tri", help="finetune: which architectures, in order")
    parser.add_argument("--head-lr", type=float, default=None, help="finetune: the tri-encoder head's own rate")
    parser.add_argument("--device", default="cpu", help="finetune: torch device (cuda for the GPU runs)")
    parser.add_argument(
        "--budget-seconds", type=float, default=0, help="finetune: training seconds per model (0: all epochs)"
    )
    parser.add_argument(
        "--tf32", action=argparse.BooleanOptionalAction, default=True, help="finetune on cuda: TF32 matrix products"
    )
    parser.add_argument(
        "--zero-shot", action=argparse.BooleanOptionalAction, default=True, help="finetune: evaluate the start too"
    )
    parser.add_argument("--runs", default=str(cache_dir() / "kgc-runs"), help="finetune: where the trained models go")
    args = parser.parse_args()
    if args.part == "table":
        table(args)
        return
    import sys

    prefix = "python" if args.device.startswith("cuda") else "OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python"
    command = f"{prefix} benchmarks/kgc_bench.py " + " ".join(sys.argv[1:])
    if args.part == "fb15k237":
        args.dataset, args.heads, args.pre_batch = "fb15k237", args.head, args.pre_batch or 2
        result = frozen(args)
        name = "fb15k237"
    else:
        parts = {
            "zero-shot": zero_shot,
            "frozen": frozen,
            "efficiency": efficiency,
            "finetune-timing": finetune_timing,
            "finetune": finetune,
        }
        result = parts[args.part](args)
        name = f"{args.dataset}-{args.part}"
    name += args.tag
    RESULTS.mkdir(parents=True, exist_ok=True)
    save_json(RESULTS / f"{name}.json", {"meta": _meta(command, args.device), **result})


if __name__ == "__main__":
    main()
