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

Issue 18, Hyper-CL's released configuration (``--recipe hypercl-wn18rr``; one JSON per arm and seed under
``benchmarks/results/kgc/<part>/``, so an interrupted run resumes where it stopped; ``summary`` prints the table):

    nice -n 5 .venv/bin/python benchmarks/kgc_bench.py official-frozen --seeds 5 --epochs 4   # result 1
    nice -n 5 .venv/bin/python benchmarks/kgc_bench.py official-cpu --seeds 2 --epochs 3 --trainable-layers 1
    nice -n 5 .venv/bin/python benchmarks/kgc_bench.py official-cpu-cost --max-steps 4   # what official-cpu costs
    .venv/bin/python benchmarks/kgc_bench.py summary                                            # both, ± 95 %
    .venv/bin/python benchmarks/kgc_bench.py official-frozen --smoke     # seconds: tiny random BERT, toy graph
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
            head_lr=1e-3 if args.lr is None else args.lr,
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
    from subspaces.kgc.ranking import rank_metrics, rank_queries
    from subspaces.kgc.texts import KGCTexts
    from subspaces.models.conditional import build_model, load_model
    from subspaces.models.embedding_cache import EmbeddingShardCache
    from subspaces.models.encoder import encode

    kg = load_kg(args.dataset)
    texts = KGCTexts.build(kg)
    queries = kg.with_inverses("test")
    known = KnownTails(np.concatenate([kg.with_inverses(s) for s in kg.splits]))
    bi = build_model(MODEL, "bi", task="kgc", max_length=50)
    tri = load_model(cache_dir() / "kgc-runs" / f"{args.dataset}-{args.tri_run}", task="kgc")
    entities = EmbeddingShardCache(bi.encoder).encode(texts.entities)  # from disk: identical for both
    # Cold entity encoding is the same work for both models; time a sample and scale it (said so in the output).
    sample = texts.entities[: args.entity_sample]
    started = time.perf_counter()
    encode(bi.encoder, sample, batch_size=64)
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
    from subspaces.kgc.train import KGCTrainConfig, embed_batch, train_kgc
    from subspaces.losses.simkgc import SimKGCLoss
    from subspaces.models.conditional import build_model

    model = build_model(
        model_name,
        arch,
        task="kgc",
        head=head,
        rank=parse_rank(rank),
        freeze_encoder=False,
        shared_encoder=not separate_encoders,
        max_length=50,
        device=device,
    )
    loss = SimKGCLoss(model, KnownTails(examples), batch_size=batch_size, embed_batch=partial(embed_batch, model)).to(
        device
    )
    if warmup:
        train_kgc(
            loss,
            examples,
            KGCTrainConfig(batch_size=batch_size, encoder_lr=5e-5, max_steps=warmup, show_progress=False),
            texts,
        )
    result = train_kgc(
        loss,
        examples,
        KGCTrainConfig(batch_size=batch_size, encoder_lr=5e-5, max_steps=steps, show_progress=False),
        texts,
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
    from subspaces.kgc.pipeline import evaluate_model, train_pipeline
    from subspaces.kgc.texts import KGCTexts
    from subspaces.models.conditional import build_model

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
        # encoded on the device too
        start = build_model(args.model, "bi", task="kgc", max_length=50, device=args.device)
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
            encoder_lr=lr,
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


# -- issue 18: the official configuration -------------------------------------------------------------------------
OFFICIAL_ARMS = "hadamard,concat,hypernet:32,hypernet:full"
RECIPE = "hypercl-wn18rr"


def _arm_name(spec: str) -> tuple[str, str, str]:
    kind, _, rank = spec.partition(":")
    rank = rank or "32"
    return (f"{kind}-{rank}" if kind == "hypernet" else kind), kind, rank


def _done(folder: Path, arm: str, seed: int) -> tuple[Path, dict | None]:
    path = folder / f"{arm}-seed{seed}.json"
    return path, (json.loads(path.read_text()) if path.is_file() else None)


def official_frozen(args: argparse.Namespace) -> None:
    """Result 1: the frozen encoder's heads under the released configuration, N seeds x E epochs each."""
    from subspaces.kgc.pipeline import train_pipeline
    from subspaces.kgc.recipes import recipe_settings

    folder = args.results / "official-frozen"
    for seed in range(args.seed, args.seed + args.seeds):
        for spec in args.heads.split(","):
            arm, kind, rank = _arm_name(spec)
            path, done = _done(folder, arm, seed)
            if done is not None:
                print(f"{arm} seed {seed}: done ({path.name})", flush=True)
                continue
            settings = recipe_settings(RECIPE, "tri")
            settings.update(head=kind, rank=parse_rank(rank))
            if args.lr is not None:
                settings["head_lr"] = args.lr
            if args.batch_size_given:
                settings["batch_size"] = args.batch_size
            report = train_pipeline(
                output=Path(args.runs) / "official-frozen" / f"{arm}-seed{seed}",
                dataset=args.dataset,
                model=args.model,
                arch="tri",
                freeze_encoder=True,
                epochs=args.epochs,
                seed=seed,
                recipe=RECIPE,
                show_progress=not args.smoke,
                **settings,
            )
            assert report.eval is not None
            record = {"arm": arm, "seed": seed, "settings": _jsonable(settings), "train": report.train_result}
            save_json(path, {"meta": _meta(args.command), **record, "eval": report.eval.to_dict()})
            print(arm, f"seed {seed}", json.dumps(report.eval.average), flush=True)


def official_cpu(args: argparse.Namespace) -> None:
    """Result 2: bi- vs tri-encoder with the encoder's top layer(s) trained over cached activations, on CPU.

    Same recipe, same batches (batch size, seed, so the same permutation), same steps; test MRR after each epoch
    (tracked, not selected on), train seconds per epoch without those evaluations, the final test inference.
    """
    from subspaces.kgc.pipeline import train_pipeline
    from subspaces.kgc.recipes import recipe_settings

    folder = args.results / "official-cpu"
    for seed in range(args.seed, args.seed + args.seeds):
        for arch in ("bi", "tri"):
            arm = "bi-simkgc" if arch == "bi" else "tri-hypernet-full"
            path, done = _done(folder, arm, seed)
            if done is not None:
                print(f"{arm} seed {seed}: done ({path.name})", flush=True)
                continue
            settings = recipe_settings(RECIPE, arch)
            if args.lr is not None:
                settings["encoder_lr"] = args.lr
            if args.batch_size_given:
                settings["batch_size"] = args.batch_size
            if arch == "tri" and args.tri_rank != "full":
                settings["rank"] = parse_rank(args.tri_rank)
            report = train_pipeline(
                output=Path(args.runs) / "official-cpu" / f"{arm}-seed{seed}",
                dataset=args.dataset,
                model=args.model,
                arch=arch,
                freeze_encoder=False,
                epochs=args.epochs,
                seed=seed,
                track_on="test",
                trainable_layers=args.trainable_layers,
                cache_dir=args.activation_cache,
                disk_cache=False,  # a trained encoder's vectors change every step
                recipe=RECIPE,
                device=args.device,
                # hours an epoch on CPU: checkpointed every 50 steps, and the same command resumes exactly
                output_dir=Path(args.runs) / "official-cpu" / f"{arm}-seed{seed}-checkpoints",
                show_progress=not args.smoke,
                **settings,
            )
            assert report.eval is not None
            train = report.train_result
            evals = [e for e in train["history"] if "eval" in e]
            per_epoch = {}
            for entry in evals:  # the engine may evaluate the last epoch twice (epoch end, run end): keep one
                per_epoch[entry["epoch"]] = entry["eval"]
            eval_seconds = sum(e["eval"]["inference_seconds"] for e in evals)
            record = {
                "arm": arm,
                "arch": arch,
                "seed": seed,
                "settings": _jsonable(settings),
                "trainable_layers": args.trainable_layers,
                "mrr_per_epoch": [per_epoch[k]["mrr"] for k in sorted(per_epoch)],
                "train_seconds_per_epoch": (train["seconds"] - eval_seconds) / args.epochs,
                "test_inference": {
                    k: report.eval.to_dict()[k]
                    for k in ("inference_seconds", "cache_hit_rate", "condition_hit_rate", "encoded_texts")
                },
                "train": train,
            }
            save_json(path, {"meta": _meta(args.command, args.device), **record, "eval": report.eval.to_dict()})
            print(arm, f"seed {seed}", json.dumps(record["mrr_per_epoch"]), flush=True)


def official_cpu_cost(args: argparse.Namespace) -> None:
    """What result 2 costs on this machine, before spending it: per arm, ``--max-steps`` steps of the released
    configuration with the top layer(s) trained, run twice in one process over the same batches (same seed).
    The first pass computes the bottom activations of the batches' texts (lazily, as a step needs them); the second
    finds them all cached, so its seconds per step are the steady state of epochs 2 and on. Extrapolated: the
    training hours of ``--epochs`` epochs x ``--seeds`` seeds (without the up-front cache build, whose size is
    ``distinct_training_texts``, the entity side's texts, and without the per-epoch evaluations)."""
    import tempfile
    from unittest import mock

    import subspaces.kgc.pipeline as pipeline
    from subspaces.kgc.data import load_kg
    from subspaces.kgc.recipes import recipe_settings
    from subspaces.kgc.texts import KGCTexts

    own_inputs = pipeline._training_inputs

    def without_texts(*inputs):
        return [(encoder, []) for encoder, _texts in own_inputs(*inputs)]

    kg = load_kg(args.dataset)
    examples = kg.with_inverses("train")
    out: dict = {"max_steps": args.max_steps, "examples_per_epoch": int(len(examples)), "arms": {}}
    for arch in ("bi", "tri"):
        settings = recipe_settings(RECIPE, arch)
        texts = KGCTexts.build(
            kg,
            settings["neighbour_names"],
            order=settings["neighbour_order"],
            per_example=settings["per_example_texts"],
        )
        distinct = len(texts.distinct_training_texts(examples))  # what one full cache build computes
        with tempfile.TemporaryDirectory(prefix="kgc-cost-") as root:
            passes, per_step = [], {}
            for label in ("cold", "cached"):
                # No up-front cache build (each encoder attached with no texts to prepare): each step computes
                # only the activations its batch lacks.
                with mock.patch.object(pipeline, "_training_inputs", side_effect=without_texts):
                    started = time.perf_counter()
                    report = pipeline.train_pipeline(
                        output=Path(root) / label,
                        dataset=args.dataset,
                        model=args.model,
                        arch=arch,
                        freeze_encoder=False,
                        epochs=1,
                        max_steps=args.max_steps,
                        seed=args.seed,
                        trainable_layers=args.trainable_layers,
                        cache_dir=Path(root) / "activations",
                        disk_cache=False,
                        evaluate_split=None,
                        recipe=RECIPE,
                        show_progress=False,
                        **settings,
                    )
                    passes.append(time.perf_counter() - started)
                train = report.train_result
                per_step[label] = train["seconds"] / args.max_steps
                print(arch, label, f"{per_step[label]:.2f} s/step", flush=True)
        steps_per_epoch = int(np.ceil(len(examples) / settings["batch_size"]))
        step = per_step["cached"]
        out["arms"][arch] = {
            "batch_size": settings["batch_size"],
            "seconds_per_step_cached": step,
            "seconds_per_step_cold": per_step["cold"],
            "cold_pass_seconds": passes[0],
            "cached_pass_seconds": passes[1],
            "distinct_training_texts": distinct,
            "steps_per_epoch": steps_per_epoch,
            "hours_per_epoch": step * steps_per_epoch / 3600,
            "hours_for_run": step * steps_per_epoch * args.epochs * args.seeds / 3600,
        }
        print(arch, json.dumps(out["arms"][arch]), flush=True)
    out["hours_total_without_cache_builds_and_evaluations"] = sum(a["hours_for_run"] for a in out["arms"].values())
    save_json(args.results / "official-cpu-cost.json", {"meta": _meta(args.command, args.device), **out})


def _jsonable(settings: dict) -> dict:
    return {k: v for k, v in settings.items() if isinstance(v, (str, int, float, bool, type(None)))}


def ci95(values: list[float]) -> dict:
    """Mean and the half-width of its 95 % Student-t interval (0 for one value)."""
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    half = float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else 0.0
    return {"mean": float(x.mean()), "ci95": half, "n": len(x)}


def _records(folder: Path) -> dict[str, dict[int, dict]]:
    out: dict[str, dict[int, dict]] = {}
    for path in sorted(folder.glob("*-seed*.json")):
        record = json.loads(path.read_text())
        out.setdefault(record["arm"], {})[record["seed"]] = record
    return out


def _mrr(record: dict) -> float:
    return record["eval"]["average"]["mrr"]


def summarise_frozen(folder: Path) -> dict:
    """Per arm MRR/H@1/H@10 mean ± 95 %, plain and re-ranked; paired (same seed) differences of MRR."""
    arms = _records(folder)
    out: dict = {"arms": {}, "paired_mrr": {}}
    for arm, by_seed in arms.items():
        row = {}
        for block in ("plain", "rerank"):
            for metric in ("mrr", "hits@1", "hits@10"):
                values = [
                    (r["eval"]["average"] if block == "plain" else r["eval"]["rerank"]["average"])[metric]
                    for r in by_seed.values()
                    if block == "plain" or "rerank" in r["eval"]
                ]
                if values:
                    row[f"{block} {metric}"] = ci95(values)
        out["arms"][arm] = row
    for better, worse in (("hypernet-full", "hypernet-32"), ("hypernet-32", "concat"), ("concat", "hadamard")):
        if better in arms and worse in arms:
            seeds = sorted(set(arms[better]) & set(arms[worse]))
            diffs = [_mrr(arms[better][s]) - _mrr(arms[worse][s]) for s in seeds]
            if diffs:
                c = ci95(diffs)
                significant = c["n"] > 1 and c["mean"] - c["ci95"] > 0  # the interval excludes 0
                out["paired_mrr"][f"{better} - {worse}"] = {**c, "significant": significant}
    return out


def summarise_cpu(folder: Path) -> dict:
    """MRR after each epoch (mean over seeds), the tri/bi ratio per epoch, seconds per epoch, test inference."""
    arms = _records(folder)
    out: dict = {}
    for arm, by_seed in arms.items():
        curves = np.asarray([r["mrr_per_epoch"] for r in by_seed.values()])
        out[arm] = {
            "seeds": sorted(by_seed),
            "mrr_per_epoch": curves.mean(axis=0).tolist(),
            "final": ci95(curves[:, -1].tolist()),
            "train_seconds_per_epoch": float(np.mean([r["train_seconds_per_epoch"] for r in by_seed.values()])),
            "test_inference": next(iter(by_seed.values()))["test_inference"],
        }
    if "bi-simkgc" in arms and "tri-hypernet-full" in arms:
        bi, tri = arms["bi-simkgc"], arms["tri-hypernet-full"]
        seeds = sorted(set(bi) & set(tri))
        ratios = np.asarray([np.divide(tri[s]["mrr_per_epoch"], bi[s]["mrr_per_epoch"]) for s in seeds])
        out["tri_over_bi_per_epoch"] = ratios.mean(axis=0).tolist()
        out["tri_over_bi_final"] = ci95(ratios[:, -1].tolist())
    return out


def summary(args: argparse.Namespace) -> None:
    def fmt(c: dict) -> str:
        return f"{c['mean']:.3f} ± {c['ci95']:.3f}"

    frozen_summary = summarise_frozen(args.results / "official-frozen")
    if frozen_summary["arms"]:
        print("| head (frozen, official config) | seeds | MRR | H@1 | H@10 | MRR, 5-hop re-rank |")
        print("|---|---|---|---|---|---|")
        for arm, row in frozen_summary["arms"].items():
            rerank = fmt(row["rerank mrr"]) if "rerank mrr" in row else "-"
            print(
                f"| {arm} | {row['plain mrr']['n']} | {fmt(row['plain mrr'])} | {fmt(row['plain hits@1'])} "
                f"| {fmt(row['plain hits@10'])} | {rerank} |"
            )
        for pair, c in frozen_summary["paired_mrr"].items():
            print(f"paired MRR {pair}: {fmt(c)} over {c['n']} seeds, significant at 95 %: {c['significant']}")
    cpu_summary = summarise_cpu(args.results / "official-cpu")
    for arm, row in cpu_summary.items():
        if isinstance(row, dict) and "mrr_per_epoch" in row:
            inference = row["test_inference"]
            print(
                f"{arm}: MRR per epoch {[round(v, 4) for v in row['mrr_per_epoch']]}, final {fmt(row['final'])}, "
                f"{row['train_seconds_per_epoch']:.0f} s/epoch, test inference {inference['inference_seconds']:.0f} s "
                f"(text-cache hit rate {inference['cache_hit_rate']:.1%}, {inference['encoded_texts']} encoded)"
            )
    if "tri_over_bi_per_epoch" in cpu_summary:
        ratios = [round(v, 3) for v in cpu_summary["tri_over_bi_per_epoch"]]
        print(f"tri/bi MRR per epoch {ratios}; final {fmt(cpu_summary['tri_over_bi_final'])} (paper: 0.92)")
    save_json(args.results / f"official-summary{args.tag}.json", {"frozen": frozen_summary, "cpu": cpu_summary})


def smoke_setup(root: Path) -> tuple[Path, Path]:
    """A tiny random BERT and a 60-entity WN18RR-layout graph (short descriptions, so the link graph acts)."""
    from bench.random_bert import build_random_bert

    model = root / "tiny-bert"
    if not model.is_dir():
        build_random_bert(model, num_layers=2, hidden_size=32, num_heads=2, dropout=0.0, max_position=64)
    data = root / "wn18rr-toy"
    data.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    n = 60
    ids = [f"{int(i):08d}" for i in rng.permutation(90_000_000)[:n]]
    (data / "wordnet-mlj12-definitions.txt").write_text(
        "".join(f"{ids[i]}\t__word{i}_NN_1\ta thing of kind {i % 7}\n" for i in range(n))
    )
    relations = ["_hypernym", "_has_part", "_derivationally_related_form"]
    triples = {(int(rng.integers(n)), int(rng.integers(3)), int(rng.integers(n))) for _ in range(400)}
    rows = [f"{ids[h]}\t{relations[r]}\t{ids[t]}\n" for h, r, t in sorted(triples) if h != t]
    for name, part in (("train", rows[:-40]), ("valid", rows[-40:-20]), ("test", rows[-20:])):
        (data / f"{name}.txt").write_text("".join(part))
    return model, data


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
        "part",
        choices=[
            "zero-shot",
            "frozen",
            "efficiency",
            "fb15k237",
            "finetune-timing",
            "finetune",
            "table",
            "official-frozen",
            "official-cpu",
            "official-cpu-cost",
            "summary",
        ],
    )
    parser.add_argument("--seeds", type=int, default=5, help="official-*: seeds per arm (from --seed on)")
    parser.add_argument("--trainable-layers", default="1", help="official-cpu: the encoder's top layers trained")
    parser.add_argument("--tri-rank", default="full", help="official-cpu: the tri-encoder hypernet's rank")
    parser.add_argument("--activation-cache", default=None, help="official-cpu: keep cached activations here")
    parser.add_argument("--smoke", action="store_true", help="official-*: tiny random BERT on a toy graph (seconds)")
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

    threads = os.environ.get("OMP_NUM_THREADS")
    prefix = "python" if args.device.startswith("cuda") else "nice -n 5 .venv/bin/python"
    if threads and not args.device.startswith("cuda"):
        prefix = f"OMP_NUM_THREADS={threads} {prefix}"  # what this run was given, not what it should have been
    command = f"{prefix} benchmarks/kgc_bench.py " + " ".join(sys.argv[1:])
    if args.part in ("official-frozen", "official-cpu", "official-cpu-cost", "summary"):
        run_official(args, command)
        return
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


def run_official(args: argparse.Namespace, command: str) -> None:
    """Issue 18's parts: results under ``benchmarks/results/kgc/`` (``--smoke``: a temporary folder)."""
    import sys
    import tempfile

    args.command = command
    args.batch_size_given = "--batch-size" in sys.argv
    if "--heads" not in sys.argv:
        args.heads = OFFICIAL_ARMS
    args.results = RESULTS
    if args.smoke:
        root = Path(tempfile.mkdtemp(prefix="kgc-smoke-"))
        model, data = smoke_setup(root)
        args.model, args.dataset, args.results, args.runs = str(model), str(data), root / "results", str(root / "runs")
        args.seeds, args.epochs = min(args.seeds, 2), min(args.epochs, 2)
        args.batch_size, args.batch_size_given = 64, True
        os.environ["SUBSPACES_CACHE"] = str(root / "cache")  # nothing of the smoke run lands in the user's cache
        print(f"smoke run under {root}", flush=True)
    started = time.perf_counter()
    if args.part == "official-frozen":
        official_frozen(args)
    elif args.part == "official-cpu":
        official_cpu(args)
    elif args.part == "official-cpu-cost":
        official_cpu_cost(args)
    if args.smoke or args.part == "summary":
        summary(args)
    print(f"{args.part}: {time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
