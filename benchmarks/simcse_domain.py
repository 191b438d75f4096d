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
sentiment and dair-ai Emotion), ``banking`` (Banking77 train utterances; measured on Banking77) and the control
``wordnet``: the same training on 64,000 general-domain WordNet sentences, measured on both domains' rows — what the
objective alone does to a domain, so that in-domain − control is the in-domain text's share. One JSON per
(domain, seed) under ``benchmarks/results/simcse_domain/``, plus ``start_<domain>.json``, each with its test rows
(``.rows.npz``: probe predictions, k-means assignments, STS cosines) for paired bootstrap intervals; reruns skip
finished ones and an interrupted training resumes from its checkpoint.

    python benchmarks/simcse_domain.py run --domains tweets,banking,wordnet --seeds 0,1,2   # ~12 min a run, 2 cores
    python benchmarks/simcse_domain.py rows      # the rows of runs recorded before rows were kept (re-measured)
    python benchmarks/simcse_domain.py table     # mean ± half-range over seeds, from the JSON
    python benchmarks/simcse_domain.py paired    # paired 95 % intervals on the same test rows, from the rows
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
# The control: the same training on general text (WordNet sentences), measured on every domain's rows. A gain it
# shares is the objective's (spreading the space), not the in-domain text's.
MEASURED = {"tweets": ("tweets",), "banking": ("banking",), "wordnet": ("tweets", "banking")}


def training_texts(domain: str) -> list[str]:
    """The domain's unlabelled training text: train splits only, deduplicated, in a fixed order."""
    from subspaces.data import classification as cls

    if domain == "tweets":
        texts = [t for task in cls.TWEETEVAL_TASKS if task != "sentiment" for t in cls.load_tweeteval(task).texts]
    elif domain == "banking":
        texts = list(cls.load_banking77("train").texts)
    elif domain == "wordnet":
        import random

        from subspaces.data.text import wordnet_sentences

        texts = wordnet_sentences()
        random.Random(0).shuffle(texts)  # definitions and examples mixed; the first steps x batch are used
        return texts
    else:
        raise SystemExit(f"unknown domain {domain!r}; choose tweets, banking or wordnet (the control)")
    return sorted({t.strip() for t in texts if t.strip()})


def test_rows(task: str) -> Any:
    from subspaces.data import classification as cls

    if task == "Emotion":
        return cls.load_emotion("test")
    if task == "Banking77":
        return cls.load_banking77("test")
    return cls.load_tweeteval(task.removeprefix("TweetEval-"), "test")


def clustering(model, task: str, limit: int | None, keep: dict[str, Any] | None = None) -> float:
    import numpy as np
    from sklearn.cluster import KMeans
    from sklearn.metrics import v_measure_score

    from subspaces.models.encoder import encode

    rows = test_rows(task)
    texts, labels = list(rows.texts)[:limit], list(rows.labels)[:limit]
    emb = np.asarray(encode(model, texts, batch_size=128, normalize=True, show_progress=False))
    k = len(set(labels))
    assignments = np.stack([KMeans(k, n_init=3, random_state=s).fit_predict(emb) for s in range(3)])
    if keep is not None:
        keep[f"cluster:{task}:gold"], keep[f"cluster:{task}:assign"] = np.asarray(labels), assignments
    return 100 * float(np.mean([v_measure_score(labels, a) for a in assignments]))


def measure(model, domain: str, args: argparse.Namespace, keep: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every measure of the domains ``domain`` is measured on (its own; both for the control). With ``keep``,
    each test row's probe prediction, cluster assignments and STS cosine go into it (for ``paired``)."""
    import numpy as np

    from subspaces.eval.dims import DimsEvaluator
    from subspaces.eval.sts import STSEvaluator

    model.eval()
    probe_tasks = [t for d in MEASURED[domain] for t in PROBES[d]]
    cluster_tasks = [t for d in MEASURED[domain] for t in CLUSTERING[d]]
    train_cap, test_cap = (200, 200) if args.smoke else (args.max_train, args.max_test)
    evaluator = DimsEvaluator(
        tasks=probe_tasks, dims=[None], max_train=train_cap, max_test=test_cap, keep_predictions=keep is not None
    )
    probes = evaluator.report(model).to_dict()
    full = str(probes["dims"][0])
    sts = STSEvaluator(tasks=["STSBenchmark"]) if args.smoke else STSEvaluator()
    record = {
        "probes": {t: probes["scores"][t][full] for t in probe_tasks},  # DimsEvaluator reports x 100
        "metrics": probes["metrics"],
        "clustering_v_measure": {t: clustering(model, t, 200 if args.smoke else None, keep) for t in cluster_tasks},
        "sts": sts(model),
    }
    if keep is not None:
        for t in probe_tasks:
            details = probes["details"][t]
            keep[f"probe:{t}:gold"], keep[f"probe:{t}:pred"] = (
                np.asarray(details["gold"]),
                np.asarray(details[full]["predictions"]),
            )
        keep.update({f"sts:{t}": v.astype(np.float32) for t, v in sts.predicted_.items()})
    return record


def train(domain: str, seed: int, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
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
    seconds = time.perf_counter() - started
    keep: dict[str, Any] = {}
    record = {
        "domain": domain,
        "measured_on": list(MEASURED[domain]),
        "seed": seed,
        "train_texts": len(texts),
        "steps": result.steps,
        "train_seconds": seconds,
        "losses": [h for h in result.history if "loss" in h],
        "after": measure(load_encoder(str(out)), domain, args, keep),
    }
    return record, keep


def settings(args: argparse.Namespace) -> dict[str, Any]:
    keep = ("steps", "batch_size", "max_length", "lr", "state_dropout", "max_train", "max_test", "smoke")
    return {k: getattr(args, k) for k in keep}


def save_rows(path: Path, keep: dict[str, Any]) -> None:
    """``<run>.rows.npz`` beside the run's JSON, written whole then renamed (never half-written)."""
    import numpy as np

    from subspaces.io import atomic_open

    with atomic_open(path, "wb") as handle:
        np.savez_compressed(handle, **keep)


def rows_path(result: Path) -> Path:
    return result.with_suffix(".rows.npz")


def run(args: argparse.Namespace) -> None:
    from subspaces.io import save_json
    from subspaces.models.encoder import load_encoder

    args.results.mkdir(parents=True, exist_ok=True)
    for domain in args.domains:
        for measured in MEASURED[domain]:
            start = args.results / f"start_{measured}.json"
            if not start.is_file():
                keep: dict[str, Any] = {}
                record = {"domain": measured, **measure(load_encoder("minilm-l6"), measured, args, keep)}
                save_rows(rows_path(start), keep)  # rows first: the JSON marks the measurement done
                save_json(start, record)
        for seed in args.seeds:
            path = args.results / f"{domain}_seed{seed}.json"
            if not path.is_file():
                record, keep = train(domain, seed, args)
                save_rows(rows_path(path), keep)
                save_json(path, {**record, "settings": settings(args)})
                print(f"{domain} seed {seed} done", flush=True)


def _figures(record: dict[str, Any]) -> dict[str, float]:
    measured = record.get("after", record)
    return {
        **{f"probe {t}": v for t, v in measured["probes"].items()},
        **{f"clustering {t}": v for t, v in measured["clustering_v_measure"].items()},
        "sts avg": measured["sts"]["avg"],
    }


def rows(args: argparse.Namespace) -> None:
    """Re-measure the start and every trained model of runs recorded before rows were kept, keeping the rows;
    the recorded figures must come out again (else nothing is written)."""
    from subspaces.models.encoder import load_encoder

    for result in sorted(args.results.glob("*.json")):
        if result.name == "paired.json" or rows_path(result).is_file():
            continue
        record = json.loads(result.read_text())
        is_start = result.name.startswith("start_")
        domain = record["domain"]
        folder = args.runs / result.stem
        if not is_start and not (folder / "model.safetensors").is_file():
            raise SystemExit(f"{result.name}: no trained model under {folder}")
        keep: dict[str, Any] = {}
        again = measure(load_encoder("minilm-l6" if is_start else str(folder)), domain, args, keep)
        recorded, now = _figures(record), _figures(again)
        off = {k: (round(recorded[k], 2), round(now[k], 2)) for k in recorded if abs(recorded[k] - now[k]) > 0.05}
        # A flipped probe row or k-means start moves a figure a little (BLAS rounding); a point or more means the
        # wrong model or data, and no rows are kept.
        if any(abs(a - b) > 1.0 for a, b in off.values()):
            raise SystemExit(f"{result.name}: re-measured figures differ from the record: {off}")
        save_rows(rows_path(result), keep)
        moved = f"figures moved (recorded, now): {off}" if off else "figures as recorded"
        print(f"{result.stem}: rows kept; {moved}", flush=True)


def paired(args: argparse.Namespace) -> None:
    """Paired bootstrap 95 % intervals, on the same test rows: in-domain − start, control − start, in-domain −
    control, for every probe, clustering and the STS average; seeds averaged on every resample."""
    import numpy as np
    from sklearn.metrics import v_measure_score

    from bench.stats import paired_avg_difference
    from subspaces.data.sts import TASKS
    from subspaces.eval.dims import classification_scores
    from subspaces.eval.stats import paired_bootstrap
    from subspaces.eval.sts import STSEvaluator
    from subspaces.io import save_json

    def load(paths: list[Path]) -> list[dict[str, np.ndarray]]:
        out = []
        for p in paths:
            with np.load(rows_path(p)) as data:
                out.append({k: data[k] for k in data.files})
        return out

    def columns(sides: list[dict[str, np.ndarray]], key: str) -> np.ndarray:  # (rows, seeds [x k-means seeds])
        return np.concatenate([side[key][:, None] if side[key].ndim == 1 else side[key].T for side in sides], axis=1)

    def seed_spread(side_a: list, side_b: list, key: str, metric_fn: Any) -> Any:
        """A clustering score is no row average: resampled rows shift V-measure by about its own small-sample bias
        (on Banking77's 77 x 77 table of 3,080 rows the percentile interval missed the estimate), so its range is
        over training seeds instead: each seed's score (its k-means seeds averaged) minus the other side's, seeds
        paired by order, against the mean when one side has a single run."""
        from subspaces.eval.stats import PairedDifference

        every = np.arange(side_a[0][key].shape[-1])
        va = [metric_fn(columns([side], key), every) for side in side_a]
        vb = [metric_fn(columns([side], key), every) for side in side_b]
        if len(va) == len(vb):
            per_seed = [x - y for x, y in zip(va, vb, strict=True)]
        elif len(va) == 1:
            per_seed = [va[0] - y for y in vb]
        else:
            per_seed = [x - float(np.mean(vb)) for x in va]
        return PairedDifference(float(np.mean(va) - np.mean(vb)), float(min(per_seed)), float(max(per_seed)))

    evaluator = STSEvaluator(geometry=False)
    report: list[dict[str, Any]] = []
    for start_path in sorted(args.results.glob("start_*.json")):
        start = json.loads(start_path.read_text())
        measured = start["domain"]
        arms = {
            "start": [start_path],
            "in-domain": sorted(args.results.glob(f"{measured}_seed*.json")),
            "control": [p for p in sorted(args.results.glob("wordnet_seed*.json")) if measured in measured_on(p)],
        }
        if not all(rows_path(p).is_file() for paths in arms.values() for p in paths):
            raise SystemExit(f"{measured}: some runs have no rows yet; run `rows` first")
        sides = {arm: load(paths) for arm, paths in arms.items() if paths}
        print(f"\n{measured}: in-domain {len(arms['in-domain'])} seed(s), control {len(arms['control'])}\n")
        print("| measure | " + " | ".join(f"{a} − {b}" for a, b in COMPARE if a in sides and b in sides) + " |")
        print("|---" * (1 + sum(a in sides and b in sides for a, b in COMPARE)) + "|")
        measures: list[tuple[str, Any]] = []
        for task, metric in start["metrics"].items():
            gold = sides["start"][0][f"probe:{task}:gold"]

            def probe(values, pick, gold=gold, metric=metric) -> float:
                return float(np.mean([classification_scores(gold[pick], c)[metric] for c in values.T]))

            measures.append((f"probe {task}", (f"probe:{task}:pred", probe)))
        for task in start["clustering_v_measure"]:
            gold = sides["start"][0][f"cluster:{task}:gold"]

            def vmeasure(values, pick, gold=gold) -> float:
                return float(100 * np.mean([v_measure_score(gold[pick], c) for c in values.T]))

            measures.append((f"clustering {task}", (f"cluster:{task}:assign", vmeasure)))
        measures.append(("sts avg", None))
        # a smoke run has STS-B only; the gold scores are read once per domain, not once per comparison
        sts_gold = {t: evaluator.gold(t) for t in TASKS if f"sts:{t}" in sides["start"][0]}
        for name, how in measures:
            cells = []
            for a, b in COMPARE:
                if a not in sides or b not in sides:
                    continue
                interval = "seeds" if how is not None and how[0].startswith("cluster:") else "rows"
                if how is None:
                    side_a, side_b = ({t: columns(sides[arm], f"sts:{t}") for t in sts_gold} for arm in (a, b))
                    result = paired_avg_difference(side_a, side_b, sts_gold, n=args.bootstrap)
                elif interval == "seeds":
                    result = seed_spread(sides[a], sides[b], *how)
                else:
                    key, metric_fn = how
                    result = paired_bootstrap(
                        columns(sides[a], key), columns(sides[b], key), metric_fn, n=args.bootstrap
                    )
                report.append(
                    {"domain": measured, "measure": name, "a": a, "b": b, "interval": interval, **result._asdict()}
                )
                mark = " (seeds)" if interval == "seeds" else ""
                cells.append(f"{result.diff:+.2f} [{result.low:+.2f}, {result.high:+.2f}]{mark}")
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    save_json(
        args.results / "paired.json",
        {
            "what": "a - b on the same test rows; each side the mean over its seeds (k-means: and its 3 k-means seeds)",
            "interval": f"rows: paired bootstrap 95 %, {args.bootstrap} row resamples (STS: within each task); "
            "seeds (clustering): min and max over training seeds of the per-seed difference",
            "comparisons": report,
        },
    )


def measured_on(result: Path) -> list[str]:
    return json.loads(result.read_text()).get("measured_on", [])


COMPARE = (("in-domain", "start"), ("control", "start"), ("in-domain", "control"))


def table(args: argparse.Namespace) -> None:
    """Start, after in-domain training and after the control (WordNet), mean ± half-range over seeds."""
    for start_path in sorted(args.results.glob("start_*.json")):
        start = json.loads(start_path.read_text())
        domain = start["domain"]
        runs = {
            "in-domain": sorted(args.results.glob(f"{domain}_seed*.json")),
            "control": [p for p in sorted(args.results.glob("wordnet_seed*.json")) if domain in measured_on(p)],
        }
        arms = {arm: [json.loads(p.read_text()) for p in paths] for arm, paths in runs.items()}
        before = _figures(start)
        print(f"\n{domain}: in-domain {len(arms['in-domain'])} seed(s), control {len(arms['control'])} seed(s)\n")
        print("| measure | start | in-domain | Δ | control (WordNet) | Δ |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, value in before.items():
            cells = []
            for records in arms.values():
                after = [_figures(r)[name] for r in records]
                if not after:
                    cells += ["-", "-"]
                    continue
                mean, spread = statistics.mean(after), (max(after) - min(after)) / 2
                cells += [f"{mean:.2f} ± {spread:.2f}", f"{mean - value:+.2f}"]
            print(f"| {name} | {value:.2f} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("run", "table", "rows", "paired"))
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
    parser.add_argument("--bootstrap", type=int, default=1000, help="row resamples for paired")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.batch_size, args.seeds = 4, 8, args.seeds[:1]
    {"run": run, "table": table, "rows": rows, "paired": paired}[args.command](args)


if __name__ == "__main__":
    main()
