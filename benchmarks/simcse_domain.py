"""Domain adaptation with unsupervised SimCSE (issue 19, item 4): does in-domain unlabelled text improve a good model?

Start: the full ``minilm-l6`` (already a good sentence encoder). Train unsupervised SimCSE on one domain's unlabelled
text (labels never read for training), top 2 layers over the bottom four's cached activations with state dropout 0.1
(the design check of ``simcse_start_loss.py``), batch 64, ``--steps`` steps, lr 3e-5 (SimCSE's published
unsupervised value; nothing here is tuned, on dev or test). Then, before and after, on the domain's *test* rows:

- probes: logistic regression on the frozen embeddings (``subspaces.eval.dims``, train split → test split; at most
  ``--max-train`` 5,000 / ``--max-test`` 3,000 rows per task, seeded subsets, so that a run's evaluation takes
  minutes: TweetEval-sentiment alone has 45,615 training tweets);
- clustering: k-means with k = the number of classes on the test texts, V-measure against the labels (mean of 3
  k-means seeds) — unlike a probe it reads the embedding geometry SimCSE changes;
- the cost on general STS: the 7-task STS average (``subspaces.eval.sts``).

Domains: ``tweets`` (every TweetEval task's train texts; measured on TweetEval emotion/hate/irony/offensive/
sentiment and dair-ai Emotion) and ``banking`` (Banking77 train utterances; measured on Banking77). One JSON per
(domain, seed) under ``benchmarks/results/simcse_domain/``, plus ``start_<domain>.json``; reruns skip finished ones
and an interrupted training resumes from its checkpoint.

    python benchmarks/simcse_domain.py run --domains tweets,banking --seeds 0,1,2    # ~12 min a run on 2 cores
    python benchmarks/simcse_domain.py table
    python benchmarks/simcse_domain.py run --smoke --results /tmp/dom                # tiny, a minute
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "simcse_domain"
PROBES = {
    "tweets": (
        "TweetEval-emotion",
        "TweetEval-hate",
        "TweetEval-irony",
        "TweetEval-offensive",
        "TweetEval-sentiment",
        "Emotion",
    ),
    "banking": ("Banking77",),
}
CLUSTERING = {"tweets": ("TweetEval-emotion", "Emotion"), "banking": ("Banking77",)}


def training_texts(domain: str) -> list[str]:
    """The domain's unlabelled training text: train splits only, deduplicated, in a fixed order."""
    from subspaces.data import classification as cls

    if domain == "tweets":
        texts = [t for task in cls.TWEETEVAL_TASKS if task != "sentiment" for t in cls.load_tweeteval(task).texts]
    elif domain == "banking":
        texts = list(cls.load_banking77("train").texts)
    else:
        raise SystemExit(f"unknown domain {domain!r}; choose tweets or banking")
    return sorted({t.strip() for t in texts if t.strip()})


def test_rows(task: str) -> Any:
    from subspaces.data import classification as cls

    if task == "Emotion":
        return cls.load_emotion("test")
    if task == "Banking77":
        return cls.load_banking77("test")
    return cls.load_tweeteval(task.removeprefix("TweetEval-"), "test")


def clustering(model, task: str, limit: int | None) -> float:
    import numpy as np
    from sklearn.cluster import KMeans
    from sklearn.metrics import v_measure_score

    from subspaces.models.encoder import encode

    rows = test_rows(task)
    texts, labels = list(rows.texts)[:limit], list(rows.labels)[:limit]
    emb = np.asarray(encode(model, texts, batch_size=128, normalize=True, show_progress=False))
    k = len(set(labels))
    scores = [v_measure_score(labels, KMeans(k, n_init=3, random_state=s).fit_predict(emb)) for s in range(3)]
    return 100 * float(np.mean(scores))


def measure(model, domain: str, args: argparse.Namespace) -> dict[str, Any]:
    from subspaces.eval.dims import DimsEvaluator
    from subspaces.eval.sts import STSEvaluator

    model.eval()
    train_cap, test_cap = (200, 200) if args.smoke else (args.max_train, args.max_test)
    probes = DimsEvaluator(tasks=list(PROBES[domain]), dims=[None], max_train=train_cap, max_test=test_cap)(model)
    full = str(probes["dims"][0])
    sts = STSEvaluator(tasks=["STSBenchmark"]) if args.smoke else STSEvaluator()
    return {
        "probes": {t: probes["scores"][t][full] for t in PROBES[domain]},  # DimsEvaluator reports x 100
        "metrics": probes["metrics"],
        "clustering_v_measure": {t: clustering(model, t, 200 if args.smoke else None) for t in CLUSTERING[domain]},
        "sts": sts(model),
    }


def train(domain: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    from subspaces.models.encoder import load_encoder
    from subspaces.train.simcse import SimCSEConfig, train_simcse, unsup_examples

    texts = training_texts(domain)[: args.steps * args.batch_size]
    model = load_encoder("minilm-l6")
    rows = unsup_examples(texts, "dropout", seed)
    out = args.runs / f"{domain}_seed{seed}"
    config = SimCSEConfig(
        output_dir=str(out),
        batch_size=args.batch_size,
        lr=args.lr,
        max_steps=args.steps,
        max_length=args.max_length,
        eval_steps=0,
        stsb_dev=False,
        save_steps=125,
        seed=seed,
        trainable_layers=2,
        cache_dir=str(args.runs / "activations" / f"{domain}-len{args.max_length}"),
        state_dropout=args.state_dropout,
        show_progress=not args.quiet,
        description=f"simcse on {domain} seed {seed}",
    )
    started = time.perf_counter()
    result = train_simcse(model, rows, config)
    return {
        "domain": domain,
        "seed": seed,
        "train_texts": len(texts),
        "steps": result.steps,
        "train_seconds": time.perf_counter() - started,
        "losses": [h for h in result.history if "loss" in h],
        "after": measure(load_encoder(str(out)), domain, args),
    }


def settings(args: argparse.Namespace) -> dict[str, Any]:
    keep = ("steps", "batch_size", "max_length", "lr", "state_dropout", "max_train", "max_test", "smoke")
    return {k: getattr(args, k) for k in keep}


def run(args: argparse.Namespace) -> None:
    from subspaces.io import save_json
    from subspaces.models.encoder import load_encoder

    args.results.mkdir(parents=True, exist_ok=True)
    for domain in args.domains:
        start = args.results / f"start_{domain}.json"
        if not start.is_file():
            save_json(start, {"domain": domain, **measure(load_encoder("minilm-l6"), domain, args)})
        for seed in args.seeds:
            path = args.results / f"{domain}_seed{seed}.json"
            if not path.is_file():
                save_json(path, {**train(domain, seed, args), "settings": settings(args)})
                print(f"{domain} seed {seed} done", flush=True)


def table(args: argparse.Namespace) -> None:
    for start_path in sorted(args.results.glob("start_*.json")):
        start = json.loads(start_path.read_text())
        domain = start["domain"]
        runs = [json.loads(p.read_text()) for p in sorted(args.results.glob(f"{domain}_seed*.json"))]
        cells = [
            *[("probe", t, start["probes"][t], [r["after"]["probes"][t] for r in runs]) for t in start["probes"]],
            *[
                (
                    "clustering",
                    t,
                    start["clustering_v_measure"][t],
                    [r["after"]["clustering_v_measure"][t] for r in runs],
                )
                for t in start["clustering_v_measure"]
            ],
            ("STS avg", "7 tasks", start["sts"]["avg"], [r["after"]["sts"]["avg"] for r in runs]),
        ]
        print(f"\n{domain}: {len(runs)} seed(s)\n")
        print("| measure | task | start | after (mean ± half-range) | Δ |")
        print("|---|---|---:|---:|---:|")
        for kind, task, before, after in cells:
            if not after:
                continue
            mean = statistics.mean(after)
            spread = (max(after) - min(after)) / 2
            print(f"| {kind} | {task} | {before:.2f} | {mean:.2f} ± {spread:.2f} | {mean - before:+.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("run", "table"))
    parser.add_argument("--domains", type=lambda s: s.split(","), default=["tweets", "banking"])
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--state-dropout", type=float, default=0.1)
    parser.add_argument("--max-train", type=int, default=5000, help="probe training rows per task (seeded subset)")
    parser.add_argument("--max-test", type=int, default=3000, help="probe test rows per task (seeded subset)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--runs", type=Path, default=ROOT.parent / "runs" / "simcse_domain")
    parser.add_argument("--smoke", action="store_true", help="4 steps, 200-row probes, STS-B only")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.batch_size, args.seeds = 4, 8, args.seeds[:1]
    {"run": run, "table": table}[args.command](args)


if __name__ == "__main__":
    main()
