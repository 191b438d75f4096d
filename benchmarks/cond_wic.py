"""WiC as conditional similarity with minilm-l6: no-condition cosine, bi-encoder, tri-encoder heads.

Frozen encoder (the default): every distinct sentence, condition and (sentence, condition) pair of WiC is encoded
once (kept on disk under the subspaces cache folder, so reruns skip it) and the heads train on those embeddings.
``--fine-tune`` instead trains the encoder too, for one epoch, for the bi-encoder and the hypernet tri-encoder.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/cond_wic.py --out benchmarks/results/cond_wic.json
    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/cond_wic.py --fine-tune \
        --out benchmarks/results/cond_wic_ft.json

Writes JSON (every figure of BENCHMARKS.md section 4) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

from subspaces.cache import LRUCache, content_key
from subspaces.cond.analysis import cluster_impurity, expressiveness
from subspaces.cond.metrics import choose_threshold, conditional_metrics
from subspaces.cond.pipeline import cache_benchmark
from subspaces.cond.tasks import get_task
from subspaces.cond.train import CondTrainConfig, evaluate, fit
from subspaces.config import cache_dir
from subspaces.io import save_json
from subspaces.models.conditional import BiEncoder, TriEncoder
from subspaces.models.encoder import load_encoder
from subspaces.models.heads import make_head

MODEL = "minilm-l6"


def persistent_cache(name: str, encoder, texts: list, namespace: str) -> LRUCache:
    """An LRUCache pre-filled with embeddings of ``texts``, stored on disk between runs."""
    path = cache_dir() / f"cond_wic_{MODEL}_{name}.npz"
    keys = [content_key(namespace, *(t if isinstance(t, tuple) else (t,))) for t in texts]
    stored: dict[str, np.ndarray] = {}
    if path.is_file():
        with np.load(path) as data:
            stored = dict(zip(data["keys"].tolist(), data["emb"], strict=True))
    missing = [i for i, k in enumerate(keys) if k not in stored]
    if missing:
        t0 = time.perf_counter()
        emb = encoder.encode([texts[i] for i in missing], batch_size=64, convert_to_numpy=True, show_progress_bar=True)
        print(f"encoded {len(missing)} {name} in {time.perf_counter() - t0:.0f}s")
        stored.update({keys[i]: e.astype(np.float32) for i, e in zip(missing, emb, strict=True)})
        allk = list(stored)
        with open(path, "wb") as handle:  # benchmark-local scratch, not a user output
            np.savez(handle, keys=np.array(allk), emb=np.stack([stored[k] for k in allk]))
    cache = LRUCache(max_bytes=None, name=name)
    for k in keys:
        cache.put(k, stored[k])
    return cache


def summarise(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "scores"}


def no_condition_baseline(sentence_cache: LRUCache, task, dev, test, seen_keys) -> dict:
    def cos(rows):
        a = np.stack([sentence_cache.get(content_key("sentence", r.sentence1)) for r in rows])
        b = np.stack([sentence_cache.get(content_key("sentence", r.sentence2)) for r in rows])
        return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)

    threshold = choose_threshold(cos(dev), np.array(task.scaled_labels(dev)))
    keys = set(seen_keys)
    seen = np.array([task.seen_key(r) in keys for r in test])
    return {
        **conditional_metrics(cos(test), task.scaled_labels(test), binary=True, threshold=threshold, seen=seen),
        "threshold": threshold,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="benchmarks/results/cond_wic.json")
    parser.add_argument("--epochs", type=int, default=10, help="epochs of the hadamard and concat heads")
    parser.add_argument("--hyper-epochs", type=int, default=6, help="epochs of the low-rank hypernet (9.4M weights)")
    parser.add_argument("--full-epochs", type=int, default=2, help="epochs of the full-rank hypernet (57M weights)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--hyper-seeds", type=int, nargs="+", default=[0], help="seeds of the hypernet heads (CPU-bound)"
    )
    parser.add_argument("--rank", type=int, default=32, help="hypernet rank K (d/12 = 32 for d = 384)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--fine-tune", action="store_true", help="fine-tune the encoder (1 epoch) instead")
    parser.add_argument("--ft-epochs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--heads",
        nargs="+",
        default=["hadamard", "concat", "hypernet", "hypernet-full"],
        help="which tri-encoder heads to train",
    )
    parser.add_argument("--no-analyses", action="store_true", help="skip expressiveness, impurity and cache timing")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    task = get_task("wic")
    train, dev, test = task.load("train"), task.load("validation"), task.load("test")
    seen_keys = task.seen_keys(train)
    report: dict = {
        "task": "wic",
        "model": MODEL,
        "date": datetime.now(UTC).isoformat(timespec="minutes"),
        "machine": f"{platform.machine()}, 2 shared CPU cores, torch {torch.__version__}, {args.threads} thread(s)",
        "sentence_embedding": "the WiC sentence as is (tokenised text, no target-word marker): "
        "condition-free, cacheable",
        "args": vars(args),
        "results": {},
    }
    encoder = load_encoder(MODEL)
    results = report["results"]

    if args.fine_tune:
        fine_tune(report, encoder, task, train, dev, test, seen_keys, args)
    else:
        rows = train + dev + test
        sentences = sorted({s for r in rows for s in (r.sentence1, r.sentence2)})
        conditions = sorted({r.condition for r in rows})
        sentence_cache = persistent_cache("sentences", encoder, sentences, "sentence")
        condition_cache = persistent_cache("conditions", encoder, conditions, "condition")
        results["no_condition_cosine"] = no_condition_baseline(sentence_cache, task, dev, test, seen_keys)

        # Bi-encoder with the frozen encoder: zero-shot cosine of (sentence, condition) pair encodings.
        pairs = sorted({(s, r.condition) for r in dev + test for s in (r.sentence1, r.sentence2)})
        pair_cache = persistent_cache("pairs", encoder, pairs, "pair")
        bi = BiEncoder(encoder, encoder_name=MODEL)
        bi.store.memory["pair"] = pair_cache
        bi.metadata["seen_keys"] = seen_keys
        results["bi_frozen"] = summarise(evaluate(bi, task, test, dev_rows=dev, seen_keys=seen_keys))

        every = {
            "hadamard": ("hadamard", None, args.epochs),
            "concat": ("concat", None, args.epochs),
            "hypernet": ("hypernet", args.rank, args.hyper_epochs),
            "hypernet-full": ("hypernet", None, args.full_epochs),
        }
        heads = [every[h] for h in args.heads]
        trained: dict[str, TriEncoder] = {}
        for kind, rank, epochs in heads:
            name = f"tri_{kind}" + ("" if kind != "hypernet" else f"_k{rank}" if rank else "_full")
            seeds = args.hyper_seeds if kind == "hypernet" else args.seeds
            runs = []
            for seed in seeds:
                torch.manual_seed(seed)
                model = TriEncoder(
                    encoder, make_head(kind, encoder.get_embedding_dimension(), rank), encoder_name=MODEL
                )
                model.store.memory["sentence"], model.store.memory["condition"] = sentence_cache, condition_cache
                config = CondTrainConfig(
                    objective="mse", batch_size=32, head_lr=args.lr, epochs=epochs, seed=seed, show_progress=False
                )
                fitted = fit(model, task, train, config, dev_rows=dev)
                t0 = time.perf_counter()
                result = evaluate(model, task, test, dev_rows=dev, seen_keys=seen_keys)
                infer = time.perf_counter() - t0
                runs.append(
                    {
                        "seed": seed,
                        **summarise(result),
                        "train_seconds": fitted.seconds,
                        "steps": fitted.steps,
                        "best_epoch": fitted.best_epoch,
                        "best_dev_auc": fitted.best_dev,
                        "eval_seconds_warm_sentences": infer,
                    }
                )
                print(
                    f"{name} seed {seed}: test acc {result['metrics']['accuracy']:.4f} "
                    f"auc {result['metrics']['auc']:.4f} "
                    f"(train {fitted.seconds:.0f}s, best epoch {fitted.best_epoch})",
                    flush=True,
                )
                if seed == seeds[0]:
                    trained[name] = model
            results[name] = aggregate(runs)

        if not args.no_analyses:
            report.update(analyses(trained, condition_cache, train, test, args.rank))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    save_json(args.out, report)
    print_table(report)


def analyses(trained: dict[str, TriEncoder], condition_cache: LRUCache, train, test, rank: int) -> dict:
    """Expressiveness and cluster impurity of the first seed's heads; bi- vs tri-encoder cache timing."""
    test_conditions = sorted({r.condition for r in test})
    cond_emb = torch.from_numpy(np.stack([condition_cache.get(content_key("condition", c)) for c in test_conditions]))
    top = {c for c, _ in Counter(r.condition for r in train).most_common(10)}
    members = sorted({(s, r.condition) for r in train if r.condition in top for s in (r.sentence1, r.sentence2)})
    return {
        "expressiveness": {
            name: expressiveness(m.head, cond_emb) for name, m in trained.items() if m.head.kind != "concat"
        },
        "cluster_impurity": {
            "data": "sentences of the 10 most frequent train conditions, k-means with k = 10, entropy / log 10",
            **{
                name: cluster_impurity(m, [s for s, _ in members], [c for _, c in members])
                for name, m in trained.items()
            },
        },
        # Fresh models, nothing cached: cold, warm, and the same pairs under new conditions.
        "cache_benchmark": cache_benchmark("wic", MODEL, split="test", rank=rank),
    }


def fine_tune(report, encoder, task, train, dev, test, seen_keys, args) -> None:
    from subspaces.models.conditional import build_model

    for arch, head in (("bi", None), ("tri", "hypernet")):
        name = f"{arch}_fine_tuned" + (f"_{head}_k{args.rank}" if head else "")
        model = build_model(
            MODEL,
            arch,
            head=head or "hypernet",
            rank=args.rank,
            freeze_encoder=False,
            max_length=64,
            seed=args.seeds[0],
        )
        config = CondTrainConfig(
            objective="mse", batch_size=32, head_lr=args.lr, encoder_lr=2e-5, epochs=args.ft_epochs, seed=args.seeds[0]
        )
        fitted = fit(model, task, train, config, dev_rows=dev)
        t0 = time.perf_counter()
        result = evaluate(model, task, test, dev_rows=dev, seen_keys=seen_keys)
        report["results"][name] = {
            **summarise(result),
            "train_seconds": fitted.seconds,
            "steps": fitted.steps,
            "eval_seconds": time.perf_counter() - t0,
            "best_dev_auc": fitted.best_dev,
        }
        print(
            f"{name}: test acc {result['metrics']['accuracy']:.4f} auc {result['metrics']['auc']:.4f} "
            f"(train {fitted.seconds:.0f}s)",
            flush=True,
        )


def aggregate(runs: list[dict]) -> dict:
    """Mean and std over seeds of every metric; the runs themselves are kept."""
    out: dict = {"seeds": len(runs), "runs": runs}
    for part in ("metrics", "seen", "unseen"):
        keys = [k for k in runs[0][part] if k not in ("n", "share")]
        out[part] = {k: float(np.mean([r[part][k] for r in runs])) for k in keys}
        out[part + "_std"] = {k: float(np.std([r[part][k] for r in runs])) for k in keys}
    out["train_seconds"] = float(np.mean([r["train_seconds"] for r in runs]))
    return out


def print_table(report: dict) -> None:
    print(
        f"\n{'model':28s} {'acc':>7s} {'auc':>7s} {'seen acc':>9s} {'unseen acc':>10s} "
        f"{'seen auc':>9s} {'unseen auc':>10s}"
    )
    for name, r in report["results"].items():
        m, s, u = r["metrics"], r.get("seen", {}), r.get("unseen", {})
        print(
            f"{name:28s} {m['accuracy']:7.4f} {m['auc']:7.4f} {s.get('accuracy', float('nan')):9.4f} "
            f"{u.get('accuracy', float('nan')):10.4f} {s.get('auc', float('nan')):9.4f} "
            f"{u.get('auc', float('nan')):10.4f}"
        )
    if "expressiveness" in report:
        print(
            json.dumps(
                {"expressiveness": report["expressiveness"], "cluster_impurity": report["cluster_impurity"]}, indent=1
            )
        )


if __name__ == "__main__":
    main()
