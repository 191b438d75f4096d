"""SimCSE's augmentation ablation (the paper's Table 1) and alignment-uniformity picture (Figure 2) at CPU scale.

Start model: ``minilm-l6`` with its top two transformer layers re-initialised (seeded per run) and trained over the
bottom four layers' cached activations (``--trainable-layers 2``): a pretrained encoder whose sentence geometry must
be learnt again (issue 19). Its STS table before training is recorded per seed.

Arms (same steps, batch, max length, lr, data order per seed):
- ``dropout``: one column, two dropout views (unsupervised SimCSE);
- ``none``: one column, dropout off in the trained layers (both views equal);
- ``delete_one_word``: a sentence and a copy with one word deleted, dropout on;
- ``sup_pairs`` / ``sup_hardneg`` (item 3, supervised vs unsupervised from the same start and budget): supervised
  SimCSE on NLI (premise, entailed hypothesis) pairs, without and with the contradiction as a hard negative at the
  paper's default weight (``hard_negative_weight`` 0, i.e. weight 1), dropout on. The only NLI data here is SNLI's
  dev and test triplets (6,339; the 275k-triplet training file is missing, ``data/nli/SOURCE.md``), so the 1,000
  steps of 64 pass over them about ten times where the unsupervised arms see 64,000 distinct sentences: the
  supervised arms have the better signal and far less text. No STS task is built from SNLI, so nothing scored is
  trained on.

``--state-dropout p`` adds dropout p on the four frozen layers' cached output in the dropout and deletion arms
(``subspaces.models.partial``): with dropout in only the two trained layers the views sit at cosine 0.998 and
dropout cannot be told from none; p = 0.1 brings them to 0.965, where this start model trained whole with dropout
everywhere has 0.961 (``simcse_start_loss.py``, on training text). The ``none`` arm has no dropout anywhere, so it
is the same run with or without it: an existing ``none`` record of the same settings is reused, and says so.

Protocol: the learning rate is chosen on STS-B dev, with the dropout arm and a seed no scored run uses (this favours
the dropout arm, if anything; stated in the results). Every run: STS-B dev every ``--eval-steps`` (the best
checkpoint is kept, as SimCSE does), alignment and uniformity on STS-B dev every ``--geometry-steps``, then the
7-task STS test table of the kept model. One JSON per run under ``--results``; finished runs are skipped and an
interrupted run resumes from its checkpoint (the engine's exact resume), so the command can be re-run until done.

    python benchmarks/simcse_ablation.py run                  # all arms x seeds 0,1,2 (seed-major order)
    python benchmarks/simcse_ablation.py table                # mean and spread per arm, from the JSON
    python benchmarks/simcse_ablation.py plot                 # alignment-uniformity trajectories -> PNG
    python benchmarks/simcse_ablation.py rows                 # every kept model's cosine per STS test pair
    python benchmarks/simcse_ablation.py paired               # paired bootstrap intervals between arms, from rows
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "simcse_ablation"
ARMS = ("dropout", "none", "delete_one_word", "sup_pairs", "sup_hardneg")
SUPERVISED = ("sup_pairs", "sup_hardneg")


def nli_rows(arm: str) -> list[tuple[str, ...]]:
    """The SNLI triplets as supervised rows: ``(anchor, positive)`` for ``sup_pairs``, with the hard negative for
    ``sup_hardneg``."""
    from subspaces.config import data_dir
    from subspaces.data.nli import training_rows

    rows = training_rows(data_dir() / "nli" / "snli_devtest_triplets.csv")
    return [row[:2] for row in rows] if arm == "sup_pairs" else rows


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct WordNet sentences (definitions and usage examples), a fixed sample (the same for every run)."""
    from subspaces.config import data_dir

    folder = data_dir() / "wordnet_sentences"
    lines: list[str] = []
    for name in ("wordnet30_examples.txt.gz", "wordnet30_definitions.txt.gz"):
        with gzip.open(folder / name, "rt", encoding="utf-8") as fh:
            lines.extend(line.strip() for line in fh if line.strip())
    lines = sorted(set(lines))
    random.Random(seed).shuffle(lines)
    return lines[:n]


def start_model(seed: int, reinit: int):
    from subspaces.models.encoder import load_encoder
    from subspaces.models.partial import reinit_top_layers

    model = load_encoder("minilm-l6")
    if reinit:
        reinit_top_layers(model, reinit, seed=seed)
    return model


@contextmanager
def cached_bottom(model, trainable_layers: int, cache_dir: Path, evaluator):
    """``model`` in eval mode reading its frozen bottom layers' outputs for every STS test text from disk (exact to
    fp16), under no_grad."""
    import torch

    from subspaces.models.partial import partial_fine_tuning

    model.eval()
    # Its own cache folder: the model reads max_seq_length tokens here, not the training length.
    folder = cache_dir / f"eval-len{model.max_seq_length}"
    texts = sorted(
        {t for task in evaluator.tasks for p in [evaluator._pairs(task)] for t in p.sentences1 + p.sentences2}
    )
    with partial_fine_tuning(model, trainable_layers, cache_dir=folder, show_progress=False) as pft, torch.no_grad():
        pft.prepare(texts)  # written to disk once; every later table reads the bottom layers' outputs from there
        yield


def sts_table(model, trainable_layers: int, cache_dir: Path) -> dict[str, float]:
    """The 7-task STS test table (+ geometry on STS-B test), through the same cached bottom layers."""
    from subspaces.eval.sts import STSEvaluator

    evaluator = STSEvaluator()
    with cached_bottom(model, trainable_layers, cache_dir, evaluator):
        return evaluator(model)


def sts_rows(model, trainable_layers: int, cache_dir: Path) -> tuple[dict[str, Any], float]:
    """Every STS test pair's cosine, per task (what ``paired`` resamples), and the STS avg they give, through the
    same cached bottom layers."""
    from subspaces.eval.sts import STSEvaluator

    evaluator = STSEvaluator(geometry=False)
    with cached_bottom(model, trainable_layers, cache_dir, evaluator):
        avg = evaluator(model)["avg"]
    return evaluator.predicted_, avg


def geometry_sample(pairs, n_uniform: int = 300, seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """STS-B dev texts for the trajectories: every pair scored above 4 (alignment, as the paper) and the sentences
    of ``n_uniform`` random pairs (uniformity; a sample keeps a checkpoint every 10 steps affordable on 2 cores)."""
    import numpy as np

    scores = np.asarray(pairs.scores)
    positive = np.flatnonzero(scores > 4.0)
    sample = np.random.default_rng(seed).choice(len(scores), size=min(n_uniform, len(scores)), replace=False)
    s1, s2 = pairs.sentences1, pairs.sentences2
    return [s1[i] for i in positive], [s2[i] for i in positive], [s1[i] for i in sample] + [s2[i] for i in sample]


def dev_geometry(model, sample: tuple[list[str], list[str], list[str]]) -> dict[str, float]:
    import torch

    from subspaces.eval.geometry import alignment, uniformity
    from subspaces.models.encoder import encode

    first, second, spread = sample
    was_training = model.training
    model.eval()
    with torch.no_grad():
        emb = encode(model, first + second + spread, batch_size=256, normalize=True, show_progress=False)
    model.train(was_training)
    a, b, u = emb[: len(first)], emb[len(first) : 2 * len(first)], emb[2 * len(first) :]
    return {"alignment": alignment(a, b), "uniformity": uniformity(u)}


def train_run(args: argparse.Namespace, arm: str, seed: int, lr: float, steps: int, out: Path) -> dict[str, Any]:
    """One run; returns its record (history with geometry, best dev, the STS table of the kept model)."""
    from subspaces.data.sts import load_stsb
    from subspaces.models.encoder import load_encoder
    from subspaces.train.simcse import SimCSEConfig, set_dropout, train_simcse, unsup_examples

    model = start_model(seed, args.reinit)
    if arm == "none":
        set_dropout(model, 0.0)
    if arm in SUPERVISED:
        rows = nli_rows(arm)
    else:
        texts = corpus(steps * args.batch_size, args.data_seed)
        rows = unsup_examples(texts, "delete_one_word" if arm == "delete_one_word" else "dropout", seed)
    dev = geometry_sample(load_stsb("dev"))
    geometry: list[dict[str, Any]] = []

    def callback(step: int, loss: float) -> None:
        if step % args.geometry_steps == 0:
            geometry.append({"step": step, "loss": loss, **dev_geometry(model, dev)})

    geometry.append({"step": 0, **dev_geometry(model, dev)})
    config = SimCSEConfig(
        output_dir=str(out),
        mode="sup" if arm in SUPERVISED else "unsup",
        batch_size=args.batch_size,
        lr=lr,
        max_steps=steps,
        max_length=args.max_length,
        eval_steps=args.eval_steps,
        save_steps=args.eval_steps,
        seed=seed,
        trainable_layers=args.trainable_layers,
        cache_dir=str(args.cache_dir / f"train-len{args.max_length}"),
        state_dropout=0.0 if arm == "none" else args.state_dropout,
        show_progress=not args.quiet,
        description=f"simcse {arm} seed {seed}",
    )
    started = time.perf_counter()
    result = train_simcse(model, rows, config, callback=callback)
    seconds = time.perf_counter() - started
    kept = load_encoder(str(out))
    return {
        "arm": arm,
        "seed": seed,
        "lr": lr,
        "state_dropout": 0.0 if arm == "none" else args.state_dropout,
        "steps": result.steps,
        "resumed_from": result.resumed_from,
        "best_dev": result.best_score,
        "best_step": result.best_step,
        "evals": [h for h in result.history if "eval" in h],
        "losses": [h for h in result.history if "loss" in h],
        # A resumed run lacks the geometry of the steps before its resume point: recorded as such.
        "geometry": geometry,
        "train_seconds": seconds,
        "sts_test": sts_table(kept, args.trainable_layers, args.cache_dir),
    }


def save(path: Path, record: dict[str, Any]) -> None:
    from subspaces.io import save_json

    save_json(path, record)


def choose_lr(args: argparse.Namespace) -> float:
    """The learning rate with the best STS-B dev after ``--lr-steps`` steps, dropout arm, seed ``--lr-seed``."""
    path = args.results / "lr_choice.json"
    if path.is_file():
        return float(json.loads(path.read_text())["chosen"])
    trials = {}
    for lr in args.lr_grid:
        record = train_run(args, "dropout", args.lr_seed, lr, args.lr_steps, args.runs / f"lr{lr:g}")
        trials[f"{lr:g}"] = {"best_dev": record["best_dev"], "best_step": record["best_step"]}
        print(f"lr {lr:g}: best STS-B dev {record['best_dev']:.2f}", flush=True)
    chosen = max(args.lr_grid, key=lambda lr: trials[f"{lr:g}"]["best_dev"])
    save(
        path,
        {
            "chosen": chosen,
            "trials": trials,
            "arm": "dropout",
            "seed": args.lr_seed,
            "steps": args.lr_steps,
            "selected_on": "STS-B dev Spearman (never the test tables)",
        },
    )
    return chosen


def reused(args: argparse.Namespace, path: Path, matches: Any) -> bool:
    """Copy the record of the same name from the default results folder when ``matches(record)``: runs that state
    dropout cannot change (the start tables; the none arm, with no dropout anywhere) are not computed twice."""
    same = RESULTS / path.name
    if args.results == RESULTS or not same.is_file():
        return False
    record = json.loads(same.read_text())
    if not matches(record):
        return False
    save(path, {**record, "reused_from": str(same.relative_to(ROOT.parent))})
    return True


def run(args: argparse.Namespace) -> None:
    args.results.mkdir(parents=True, exist_ok=True)

    def without_state_dropout(values: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in values.items() if k != "state_dropout"}

    for seed in args.seeds:
        start_path = args.results / f"start_seed{seed}.json"
        if start_path.is_file() or reused(args, start_path, lambda r: r["reinit_top_layers"] == args.reinit):
            continue
        table = sts_table(start_model(seed, args.reinit), args.trainable_layers, args.cache_dir)
        save(start_path, {"seed": seed, "reinit_top_layers": args.reinit, "sts_test": table})
    lr = args.lr if args.lr is not None else choose_lr(args)
    for seed in args.seeds:  # seed-major: an interrupted session leaves every arm with the same seeds done
        for arm in args.arms:
            path = args.results / f"{arm}_seed{seed}.json"
            if path.is_file():
                continue

            def same_run(record: dict[str, Any]) -> bool:
                same_settings = without_state_dropout(record["settings"]) == without_state_dropout(settings(args))
                return same_settings and record["lr"] == lr

            if arm == "none" and reused(args, path, same_run):
                continue
            record = train_run(args, arm, seed, lr, args.steps, args.runs / f"{arm}_seed{seed}")
            save(path, {**record, "settings": settings(args)})
            print(
                f"{arm} seed {seed}: best dev {record['best_dev']:.2f}, STS avg {record['sts_test']['avg']:.2f}",
                flush=True,
            )


def settings(args: argparse.Namespace) -> dict[str, Any]:
    keep = (
        "steps",
        "batch_size",
        "max_length",
        "eval_steps",
        "geometry_steps",
        "trainable_layers",
        "reinit",
        "data_seed",
        "state_dropout",
    )
    return {k: getattr(args, k) for k in keep}


def load_runs(results: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("*_seed*.json")) if not p.name.startswith("start")]


def table(args: argparse.Namespace) -> None:
    runs = load_runs(args.results)
    starts = [json.loads(p.read_text()) for p in sorted(args.results.glob("start_seed*.json"))]
    tasks = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg"]
    rows = [("start (top 2 re-initialised)", [s["sts_test"] for s in starts])]
    rows += [(arm, [r["sts_test"] for r in runs if r["arm"] == arm]) for arm in ARMS]
    print("| arm | seeds | " + " | ".join(tasks) + " | best STS-B dev |")
    print("|---" * (len(tasks) + 3) + "|")
    for name, tables in rows:
        if not tables:
            continue
        cells = []
        for task in tasks:
            values = [t[task] for t in tables if task in t]
            cells.append(_mean_spread(values))
        dev = [r["best_dev"] for r in runs if r["arm"] == name]
        print(f"| {name} | {len(tables)} | " + " | ".join(cells) + f" | {_mean_spread(dev) if dev else '-'} |")


def _mean_spread(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {(max(values) - min(values)) / 2:.2f}"


def plot(args: argparse.Namespace) -> None:
    from bench.analysis import plot_alignment_uniformity

    runs = load_runs(args.results)
    trajectories = {f"{r['arm']} (seed {r['seed']})": r["geometry"] for r in runs if r["seed"] == args.plot_seed}
    path = plot_alignment_uniformity(trajectories, args.results / f"alignment_uniformity_seed{args.plot_seed}.png")
    print(f"wrote {path}")


# -- per-row scores and paired intervals ----------------------------------------------------------------------------

COMPARISONS = (
    ("dropout", "none"),
    ("dropout", "delete_one_word"),
    ("delete_one_word", "none"),
    ("sup_pairs", "dropout"),
    ("sup_hardneg", "dropout"),
    ("sup_hardneg", "sup_pairs"),
    *((arm, "start") for arm in ARMS),
)


def kept_model_dir(args: argparse.Namespace, result: Path, record: dict[str, Any]) -> Path:
    """Where a run's kept model is: a reused record's run folder is the default one, beside its JSON's source."""
    default_runs = ROOT.parent / "runs" / "simcse_ablation"
    return (default_runs if "reused_from" in record else args.runs) / result.stem


def rows(args: argparse.Namespace) -> None:
    """Re-score the start and every kept model on the STS test pairs and keep each pair's cosine
    (``<run>.rows.npz``); the recorded table is recomputed from them as a check."""
    import numpy as np

    from subspaces.io import atomic_open
    from subspaces.models.encoder import load_encoder

    for result in sorted(args.results.glob("*_seed*.json")):
        target = result.with_suffix(".rows.npz")
        if target.is_file():
            continue
        record = json.loads(result.read_text())
        if result.name.startswith("start"):
            model = start_model(int(record["seed"]), int(record["reinit_top_layers"]))
        else:
            folder = kept_model_dir(args, result, record)
            if not (folder / "model.safetensors").is_file():
                raise SystemExit(f"{result.name}: no kept model under {folder}")
            model = load_encoder(str(folder))
        predicted, avg = sts_rows(model, args.trainable_layers, args.cache_dir)
        recorded = record["sts_test"]["avg"]
        if abs(avg - recorded) > 0.05:
            raise SystemExit(f"{result.name}: rows give STS avg {avg:.3f}, the record says {recorded:.3f}")
        with atomic_open(target, "wb") as handle:  # written whole, then renamed: no half-written rows
            np.savez(handle, **{t: v.astype(np.float32) for t, v in predicted.items()})
        print(f"{result.stem}: STS avg {avg:.2f} from the rows (recorded {recorded:.2f})", flush=True)


def paired(args: argparse.Namespace) -> None:
    """Paired bootstrap 95 % intervals of the STS-avg difference between arms: the same resampled test pairs
    (within each task) score both arms, every seed both arms share averaged on each resample."""
    import numpy as np

    from bench.stats import paired_avg_difference
    from subspaces.data.sts import TASKS
    from subspaces.eval.sts import STSEvaluator

    by_arm: dict[str, dict[int, Any]] = {}
    for path in sorted(args.results.glob("*_seed*.rows.npz")):
        arm, seed = path.name.split(".")[0].rsplit("_seed", 1)
        with np.load(path) as data:
            by_arm.setdefault(arm, {})[int(seed)] = {t: data[t] for t in TASKS}
    evaluator = STSEvaluator(geometry=False)
    gold = {t: evaluator.gold(t) for t in TASKS}
    report = []
    for a, b in COMPARISONS:
        seeds = sorted(set(by_arm.get(a, {})) & set(by_arm.get(b, {})))
        if not seeds:
            continue
        side_a, side_b = ({t: np.stack([by_arm[arm][s][t] for s in seeds], axis=1) for t in TASKS} for arm in (a, b))
        result = paired_avg_difference(side_a, side_b, gold, n=args.bootstrap)
        report.append({"a": a, "b": b, "seeds": seeds, **result._asdict(), "excludes_zero": result.excludes_zero})
        print(f"| {a} − {b} | {len(seeds)} | {result.diff:+.2f} [{result.low:+.2f}, {result.high:+.2f}] |", flush=True)
    save(
        args.results / "paired.json",
        {
            "what": "STS-avg (7 tasks, Spearman x 100) difference a - b, mean over the seeds both arms have",
            "interval": f"paired bootstrap 95 %, {args.bootstrap} resamples of the test pairs within each task",
            "comparisons": report,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("run", "table", "plot", "rows", "paired"))
    parser.add_argument("--arms", type=lambda s: s.split(","), default=list(ARMS))
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--eval-steps", type=int, default=125)
    parser.add_argument("--geometry-steps", type=int, default=10)
    parser.add_argument("--trainable-layers", type=int, default=2)
    parser.add_argument("--reinit", type=int, default=2, help="top layers re-initialised before training (0: none)")
    parser.add_argument("--lr", type=float, default=None, help="skip the dev choice and use this learning rate")
    parser.add_argument("--state-dropout", type=float, default=0.0, help="dropout on the cached frozen states")
    parser.add_argument("--lr-grid", type=lambda s: [float(x) for x in s.split(",")], default=[3e-5, 1e-4, 3e-4])
    parser.add_argument("--lr-steps", type=int, default=250)
    parser.add_argument("--lr-seed", type=int, default=100)
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--plot-seed", type=int, default=0)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--runs", type=Path, default=ROOT.parent / "runs" / "simcse_ablation")
    parser.add_argument("--cache-dir", type=Path, default=ROOT.parent / "runs" / "simcse_ablation" / "activations")
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples for paired")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    {"run": run, "table": table, "plot": plot, "rows": rows, "paired": paired}[args.command](args)


if __name__ == "__main__":
    main()
