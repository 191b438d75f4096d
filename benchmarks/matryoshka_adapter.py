"""Issue 17's adapter regime: raw truncation vs PCA vs the Matryoshka adapter on ``minilm-l6`` vectors.

``minilm-l6`` is not Matryoshka-trained. Everything is fitted on unlabelled vectors (``--fit-corpus``): by default
(``corpora``, the paper's unsupervised setting: the corpus's own vectors) the tasks' unlabelled texts the arms
read except the probes' test rows and the retrieval queries — Banking77 and Emotion train utterances, the STS-B
retrieval pool, the SNLI hypotheses, ~52k texts; or ``wordnet``: ``--fit-texts`` WordNet sentences (50k), no
evaluation text among them; or both. Chosen on dev (``benchmarks/notes/matryoshka.md``): at 32 dims SNLI-dev
nDCG@10 raw 44.0, WordNet-fitted adapter 45.2, WordNet + SNLI documents 47.0, with listwise self-distillation
(``rank_weight`` 1) 51.5. The arms:

- ``raw``: the first d coordinates;
- ``pca``: PCA (fitted on the same unlabelled vectors) then the first d components;
- ``adapter``: :class:`subspaces.adapt.MatryoshkaAdapter` with its similarity + top-k + reconstruction losses;
- ``adapter_mic``: the same plus the MIC-style output regularisers (per-dimension variance floor and prefix
  decorrelation, weight 1 each: our setting);
- ``adapter_pca``: the adapter started from the vectors' principal axes (``basis="pca"``: an orthogonal
  rotation applied to the rows as they are, so full-size cosines are the raw ones) instead of their own
  coordinates.

Adapter arms run ``--seeds`` seeds. Every arm is scored at 16/32/64/128/384 on L2-normalised prefixes:

- Banking77 (full train/test split) and Emotion (dair-ai, train/test): accuracy of a logistic-regression probe
  on the unit prefixes, **no StandardScaler** (a scaler would undo the per-dimension variance balance the
  adapter and SIR buy);
- STS-B test: Spearman x 100 of the prefix cosines;
- retrieval on STS-B test: each pair with gold score >= 4 is a query (sentence 1) with one relevant document
  (sentence 2) among the distinct STS-B test sentences and, with ``--retrieval-pool all`` (the default), every
  STS-B train and dev sentence as distractors, ~16k documents (the query itself left out): Recall@10 and
  nDCG@10. The test split's ~2.7k documents alone leave raw 32-d prefixes near the ceiling, where no gain shows;
  with the distractors raw 32-d still has R@10 0.94 on dev;
- retrieval on SNLI test (``SNLI R@10``, ``SNLI nDCG@10``), the harder one: each premise is a query, its entailed
  hypotheses the relevant documents, among all ~10k distinct hypotheses of the split, each premise's neutral and
  contradicting hypotheses among them (dev: SNLI dev). Binary-relevance nDCG@10.

``--split dev`` scores the same way on dev rows instead (Banking77: the last 10 % of train held out from the
probe; Emotion: validation; STS-B: dev): choose adapter settings there, never on the test rows. The settings
in this script (the adapter's defaults: hidden 512, 20 epochs, batch 512, lr 1e-3, top-k 10, weights 1/1/1)
were **not** tuned on anything; run ``--split dev`` with other ``--adapter-*`` values to tune them.

Resumable: one JSON per arm and seed under ``--out/<split>/`` (``raw.json``, ``adapter-seed0.json``, ...), each
with per-row values (probe correctness, pair cosines, per-query retrieval scores), so ``table`` can report paired
bootstrap 95 % intervals of adapter - raw on the same rows. An arm whose JSON exists is skipped.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/matryoshka_adapter.py run --seeds 0,1,2
    .venv/bin/python benchmarks/matryoshka_adapter.py table
    .venv/bin/python benchmarks/matryoshka_adapter.py run --smoke        # seconds; writes under runs/

Rough full-run time on 2 shared CPU cores: encoding ~90k texts with minilm-l6 once (the smoke run measured
56-68 texts/s on this busy machine, so up to ~25 min; cached under ``$SUBSPACES_CACHE/bench-vectors``), each
adapter fit on 50k x 384 ~1-2 min (20 epochs of 97 steps), and per arm 10 logistic-regression probes (Banking77
10k x 77 classes, Emotion 16k x 6) ~2-4 min: about 25 + 2 x 3 x (2 + 3) + 2 x 3 = ~60 min for raw, PCA and the
two adapter arms x 3 seeds (not measured end to end). The smoke run takes ~90 s cold, seconds once cached.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

DIMS = (16, 32, 64, 128, 384)
RESULTS = Path(__file__).resolve().parent / "results" / "matryoshka" / "adapter"
SMOKE_OUT = Path(__file__).resolve().parents[1] / "runs" / "matryoshka_adapter_smoke"


# -- vectors, cached ------------------------------------------------------------------------------------------------


def cached_vectors(model_name: str, texts: Sequence[str], batch_size: int = 128) -> np.ndarray:
    """``encode(model, texts)`` (unnormalised float32), cached on disk by model and content."""
    from subspaces.config import cache_dir
    from subspaces.io import save_npy
    from subspaces.models.encoder import encode, load_encoder

    digest = hashlib.sha1("\n".join([model_name, *texts]).encode("utf-8")).hexdigest()[:16]
    path = cache_dir() / "bench-vectors" / f"{model_name}-{len(texts)}-{digest}.npy"
    if path.is_file():
        return np.load(path)
    model = load_encoder(model_name)
    vectors = np.asarray(encode(model, list(texts), batch_size=batch_size, show_progress=True), dtype=np.float32)
    save_npy(path, vectors)
    return vectors


def fit_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` WordNet sentences drawn at random (the unlabelled fit set)."""
    from subspaces.data.text import wordnet_sentences

    texts = wordnet_sentences()
    pick = np.random.default_rng(seed).permutation(len(texts))[:n]
    return [texts[i] for i in np.sort(pick)]


# -- evaluation data ------------------------------------------------------------------------------------------------


def evaluation_data(split: str, limit: int | None, pool: str = "split") -> dict[str, Any]:
    """Texts and labels of every task for ``split`` (test or dev); ``limit`` caps rows (smoke runs). ``pool``:
    the retrieval documents, the split's own STS-B sentences, or (``all``) those plus every other STS-B split's
    as distractors (no labels of theirs are read)."""
    from subspaces.data.classification import load_banking77, load_emotion
    from subspaces.data.sts import load_stsb

    def cap(rows: Sequence[Any]) -> list[Any]:
        return list(rows[:limit]) if limit is not None else list(rows)

    banking = load_banking77("train")
    if split == "test":
        test = load_banking77("test")
        b_train, b_test = (banking.texts, banking.labels), (test.texts, test.labels)
    else:  # dev: the last 10 % of train (in a fixed shuffled order) held out from the probe
        order = np.random.default_rng(0).permutation(len(banking))
        cut = int(0.9 * len(order))
        take = lambda idx: ([banking.texts[i] for i in idx], [banking.labels[i] for i in idx])  # noqa: E731
        b_train, b_test = take(order[:cut]), take(order[cut:])
    emotion_train = load_emotion("train")
    emotion_test = load_emotion("test" if split == "test" else "validation")
    sts = load_stsb("test" if split == "test" else "dev")
    n_pairs = len(sts.scores) if limit is None else min(limit, len(sts.scores))
    distractors: list[str] = []
    if pool == "all":
        for other in ("train", "dev", "test"):
            if other != ("test" if split == "test" else "dev"):
                pairs = load_stsb(other)  # type: ignore[arg-type]
                distractors += cap([*pairs.sentences1, *pairs.sentences2])
    return {
        "SNLI": snli_retrieval("test" if split == "test" else "dev", limit),
        "Distractors": distractors,
        "Banking77": {
            "train": (cap(b_train[0]), cap(b_train[1])),
            "test": (cap(b_test[0]), cap(b_test[1])),
        },
        "Emotion": {
            "train": (cap(emotion_train.texts), cap(emotion_train.labels)),
            "test": (cap(emotion_test.texts), cap(emotion_test.labels)),
        },
        "STSB": (sts.sentences1[:n_pairs], sts.sentences2[:n_pairs], sts.scores[:n_pairs]),
    }


def snli_retrieval(split: str, limit: int | None = None) -> dict[str, list[Any]]:
    """SNLI ``split`` as retrieval: each distinct premise with an entailed hypothesis is a query, its entailed
    hypotheses are the relevant documents, among every distinct hypothesis of the split (each premise's neutral
    and contradicting ones among them: hard negatives)."""
    from subspaces.config import data_dir

    folder = data_dir() / "nli" / "senteval_snli"
    read = lambda name: (folder / f"{name}.{split}").read_text(encoding="utf-8").splitlines()  # noqa: E731
    premises, hypotheses, labels = read("s1"), read("s2"), read("labels")
    if limit is not None:
        premises, hypotheses, labels = premises[:limit], hypotheses[:limit], labels[:limit]
    documents = list(dict.fromkeys(h.strip() for h in hypotheses))
    where = {h: i for i, h in enumerate(documents)}
    relevant: dict[str, list[int]] = {}
    for premise, hypothesis, label in zip(premises, hypotheses, labels, strict=True):
        if label.strip() == "entailment":
            relevant.setdefault(premise.strip(), []).append(where[hypothesis.strip()])
    sets = [sorted(set(rows)) for rows in relevant.values()]  # a hypothesis written twice is one document
    return {"queries": list(relevant), "documents": documents, "relevant": sets}


def all_texts(data: dict[str, Any]) -> list[str]:
    texts: list[str] = []
    for task in ("Banking77", "Emotion"):
        texts += data[task]["train"][0] + data[task]["test"][0]
    texts += list(data["STSB"][0]) + list(data["STSB"][1]) + list(data["Distractors"])
    texts += data["SNLI"]["queries"] + data["SNLI"]["documents"]
    return list(dict.fromkeys(texts))


# -- metrics --------------------------------------------------------------------------------------------------------


def unit(x: np.ndarray, d: int) -> np.ndarray:
    from subspaces.vectors import unit_prefix

    return unit_prefix(x, d).astype(np.float32)


def probe_correct(
    x_train: np.ndarray, y_train: list[int], x_test: np.ndarray, y_test: list[int], C: float
) -> list[int]:
    """Per test row 1/0: a logistic-regression probe on the (unit) features, no scaler."""
    from sklearn.linear_model import LogisticRegression

    probe = LogisticRegression(C=C, max_iter=2000)
    probe.fit(x_train, np.asarray(y_train))
    return (probe.predict(x_test) == np.asarray(y_test)).astype(int).tolist()


def retrieval_rows(
    s1: Sequence[str], s2: Sequence[str], scores: Sequence[float], distractors: Sequence[str] = ()
) -> tuple[list[str], list[int], list[int]]:
    """The retrieval task's corpus (distinct sentences, then the distractors not among them), and per query its
    row and its relevant document's row."""
    corpus = list(dict.fromkeys([*s1, *s2, *distractors]))
    where = {t: i for i, t in enumerate(corpus)}
    queries, relevant = [], []
    for a, b, score in zip(s1, s2, scores, strict=True):
        if score >= 4 and a != b:
            queries.append(where[a])
            relevant.append(where[b])
    return corpus, queries, relevant


def retrieval_scores(vectors: np.ndarray, queries: list[int], relevant: list[int], k: int = 10):
    """Per query Recall@k (0/1: one relevant document) and nDCG@k (1 / log2(rank + 1) within k)."""
    sims = vectors[queries] @ vectors.T
    sims[np.arange(len(queries)), queries] = -np.inf  # a query does not retrieve itself
    target = sims[np.arange(len(queries)), relevant]
    rank = (sims > target[:, None]).sum(1) + 1  # 1-based rank of the relevant document
    hit = rank <= k
    return hit.astype(int).tolist(), np.where(hit, 1 / np.log2(rank + 1), 0.0).round(6).tolist()


def set_retrieval_scores(queries: np.ndarray, documents: np.ndarray, relevant: list[list[int]], k: int = 10):
    """Per query Recall@k (1 if any relevant document is in the top k) and binary-relevance nDCG@k."""
    sims = queries @ documents.T
    top = np.argsort(-sims, axis=1)[:, :k]
    gains = 1 / np.log2(np.arange(2, k + 2))
    recall, ndcg = [], []
    for row, rel in zip(top, relevant, strict=True):
        hits = np.isin(row, rel)
        recall.append(int(hits.any()))
        ndcg.append(round(float(gains[hits].sum() / gains[: min(len(rel), k)].sum()), 6))
    return recall, ndcg


def score_arm(transform, vectors: dict[str, np.ndarray], data: dict[str, Any], dims: Sequence[int], C: float):
    """Per-row results of one arm at each dim: ``{task: {dim: [per-row values]}}``."""
    from subspaces.vectors import cosine_rows

    tasks = ("Banking77", "Emotion", "STSB", "R@10", "nDCG@10", "SNLI R@10", "SNLI nDCG@10")
    out: dict[str, dict[str, Any]] = {t: {} for t in tasks}
    mapped = {name: transform(v) for name, v in vectors.items()}
    s1, s2, _ = data["STSB"]
    _, queries, relevant = retrieval_rows(s1, s2, data["STSB"][2], data["Distractors"])
    for d in dims:
        for task in ("Banking77", "Emotion"):
            out[task][str(d)] = probe_correct(
                unit(mapped[f"{task}-train"], d),
                data[task]["train"][1],
                unit(mapped[f"{task}-test"], d),
                data[task]["test"][1],
                C,
            )
        out["STSB"][str(d)] = cosine_rows(unit(mapped["STSB-1"], d), unit(mapped["STSB-2"], d)).round(6).tolist()
        recall, ndcg = retrieval_scores(unit(mapped["Retrieval"], d), queries, relevant)
        out["R@10"][str(d)], out["nDCG@10"][str(d)] = recall, ndcg
        recall, ndcg = set_retrieval_scores(
            unit(mapped["SNLI-queries"], d), unit(mapped["SNLI-documents"], d), data["SNLI"]["relevant"]
        )
        out["SNLI R@10"][str(d)], out["SNLI nDCG@10"][str(d)] = recall, ndcg
    return out


def summary(rows: dict[str, Any], gold: Sequence[float]) -> dict[str, dict[str, float]]:
    """The task metrics (x 100) from per-row values."""
    from subspaces.eval.sts import spearman_x100

    result: dict[str, dict[str, float]] = {}
    for task, per_dim in rows.items():
        result[task] = {
            d: spearman_x100(np.asarray(v), gold) if task == "STSB" else 100 * float(np.mean(v))
            for d, v in per_dim.items()
        }
    return result


# -- arms -----------------------------------------------------------------------------------------------------------


def make_transform(arm: str, seed: int, fit_vectors: np.ndarray, args: argparse.Namespace):
    if arm == "raw":
        return (lambda x: x), {}
    if arm == "pca":
        from sklearn.decomposition import PCA

        pca = PCA(random_state=0).fit(fit_vectors)
        return (lambda x: pca.transform(x).astype(np.float32)), {}
    from subspaces.adapt import MatryoshkaAdapter

    settings = {
        "dims": [d for d in args.dims if d < fit_vectors.shape[1]],
        "hidden": args.adapter_hidden,
        "epochs": args.adapter_epochs,
        "batch_size": args.adapter_batch_size,
        "lr": args.adapter_lr,
        "rank_weight": args.adapter_rank_weight,
        "random_state": seed,
        "verbose": True,
    }
    if arm == "adapter_mic":
        settings |= {"var_weight": 1.0, "corr_weight": 1.0}
    if arm == "adapter_pca":
        settings |= {"basis": "pca"}
    adapter = MatryoshkaAdapter(**settings).fit(fit_vectors)
    info = {"fit_seconds": adapter.fit_seconds_, "loss_terms": adapter.loss_terms_, "history": adapter.history_}
    return adapter.transform, {"settings": {k: v for k, v in settings.items() if k != "verbose"}, **info}


def run(args: argparse.Namespace) -> None:
    from subspaces.config import set_threads
    from subspaces.io import save_json

    set_threads(args.threads)
    out = args.out / args.split
    data = evaluation_data(args.split, args.limit, args.retrieval_pool)
    fit = cached_vectors(args.model, fit_texts(args.fit_texts))
    every = all_texts(data)
    index = {t: i for i, t in enumerate(every)}
    encoded = cached_vectors(args.model, every)
    if args.fit_corpus != "wordnet":
        # the paper's unsupervised setting fits on the corpus's own vectors: the texts the arms read, except the
        # probes' test rows and the retrieval queries (no label, no query, no test probe row is seen)
        unlabelled = [*data["Banking77"]["train"][0], *data["Emotion"]["train"][0]]
        unlabelled += retrieval_rows(*data["STSB"], data["Distractors"])[0] + data["SNLI"]["documents"]
        corpora = encoded[[index[t] for t in dict.fromkeys(unlabelled)]]
        fit = corpora if args.fit_corpus == "corpora" else np.concatenate([fit, corpora])
    s1, s2, gold = data["STSB"]
    corpus, _, _ = retrieval_rows(s1, s2, gold, data["Distractors"])

    def rows(texts: Sequence[str]) -> np.ndarray:
        return encoded[[index[t] for t in texts]]

    vectors = {
        f"{task}-{part}": rows(data[task][part][0]) for task in ("Banking77", "Emotion") for part in ("train", "test")
    }
    vectors |= {"STSB-1": rows(s1), "STSB-2": rows(s2), "Retrieval": rows(corpus)}
    vectors |= {"SNLI-queries": rows(data["SNLI"]["queries"]), "SNLI-documents": rows(data["SNLI"]["documents"])}
    dims = [d for d in args.dims if d <= fit.shape[1]]
    fixed = [a for a in args.arms if a in ("raw", "pca")]
    arms = [(a, 0) for a in fixed] + [(a, s) for a in args.arms if a not in fixed for s in args.seeds]
    for arm, seed in arms:
        name = arm if arm in ("raw", "pca") else f"{arm}-seed{seed}"
        path = out / f"{name}.json"
        if path.is_file():
            done = json.loads(path.read_text())
            if "SNLI R@10" not in done["scores"] or done.get("fit_rows") != int(fit.shape[0]):
                raise SystemExit(f"{path} is from another protocol (no SNLI task, or another fit set): move it away")
            print(f"{name}: done already ({path})")
            continue
        start = time.perf_counter()
        transform, info = make_transform(arm, seed, fit, args)
        per_row = score_arm(transform, vectors, data, dims, args.C)
        report = {
            "arm": arm,
            "seed": seed,
            "split": args.split,
            "model": args.model,
            "fit_rows": int(fit.shape[0]),
            "probe": {"C": args.C, "scaler": None, "features": "L2-normalised prefixes"},
            "retrieval": {
                "stsb": {"pool": args.retrieval_pool, "documents": len(corpus)},
                "snli": {"queries": len(data["SNLI"]["queries"]), "documents": len(data["SNLI"]["documents"])},
            },
            "dims": dims,
            "scores": summary(per_row, gold),
            "rows": per_row,
            "gold_sts": list(gold),
            "seconds": time.perf_counter() - start,
            **info,
        }
        save_json(path, report)
        print(f"{name}: " + ", ".join(f"{t} {v[str(dims[1])]:.2f}@{dims[1]}" for t, v in report["scores"].items()))


# -- table ----------------------------------------------------------------------------------------------------------


def table(args: argparse.Namespace) -> None:
    from scipy.stats import spearmanr

    from subspaces.eval.stats import paired_bootstrap

    folder = args.out / args.split
    reports = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    if not reports:
        raise SystemExit(f"no results under {folder}; run first")
    by_arm: dict[str, list[dict]] = {}
    for r in reports:
        by_arm.setdefault(r["arm"], []).append(r)
    dims = reports[0]["dims"]
    gold = np.asarray(reports[0]["gold_sts"])
    print(f"## {args.split} split, {reports[0]['model']}, fit on {reports[0]['fit_rows']} unlabelled vectors\n")
    print("| task | arm | seeds | " + " | ".join(str(d) for d in dims) + " |")
    print("|---|---|---|" + "---|" * len(dims))
    for task in reports[0]["scores"]:
        for arm, runs in by_arm.items():
            means = [np.mean([r["scores"][task][str(d)] for r in runs]) for d in dims]
            print(f"| {task} | {arm} | {len(runs)} | " + " | ".join(f"{m:.2f}" for m in means) + " |")
    if "raw" not in by_arm:
        return
    print(
        "\n### adapter arm - raw, paired bootstrap 95 % interval (rows resampled; adapter rows averaged over seeds)\n"
    )
    print("| task | arm | " + " | ".join(str(d) for d in dims) + " |")
    print("|---|---|" + "---|" * len(dims))
    raw = by_arm["raw"][0]
    for task in raw["scores"]:
        if task == "STSB":
            metric = lambda v, pick: 100 * float(spearmanr(v, gold[pick]).statistic)  # noqa: E731
        else:
            metric = lambda v, pick: 100 * float(np.mean(v))  # noqa: E731
        for arm in (a for a in by_arm if a != "raw"):
            cells = []
            for d in dims:
                a = np.mean([np.asarray(r["rows"][task][str(d)], dtype=float) for r in by_arm[arm]], axis=0)
                b = np.asarray(raw["rows"][task][str(d)], dtype=float)
                result = paired_bootstrap(a, b, metric, n=args.bootstrap)
                diff, lo, hi = result.diff, result.low, result.high
                relative = f" ({diff / metric(b, np.arange(len(b))):+.0%})" if "@10" in task else ""
                cells.append(f"{diff:+.2f} [{lo:+.2f}, {hi:+.2f}]{relative}")
            print(f"| {task} | {arm} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("run", "table"), nargs="?", default="run")
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--split", choices=("test", "dev"), default="test")
    parser.add_argument("--fit-texts", type=int, default=50_000, help="Unlabelled WordNet sentences to fit on.")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--arms", default="raw,pca,adapter,adapter_mic,adapter_pca", help="Comma-separated arms.")
    parser.add_argument("--dims", default=",".join(map(str, DIMS)))
    parser.add_argument(
        "--retrieval-pool",
        choices=("split", "all"),
        default="all",
        help="Retrieval documents: the split's STS-B sentences, or all STS-B splits' (harder: ~16k documents).",
    )
    parser.add_argument("--C", type=float, default=10.0, help="Inverse L2 strength of the probe (on unit vectors).")
    parser.add_argument("--adapter-hidden", type=int, default=512)
    parser.add_argument("--adapter-epochs", type=int, default=20)
    parser.add_argument("--adapter-batch-size", type=int, default=512)
    parser.add_argument("--adapter-lr", type=float, default=1e-3)
    parser.add_argument("--adapter-rank-weight", type=float, default=1.0, help="Listwise self-distillation (dev).")
    parser.add_argument(
        "--fit-corpus",
        choices=("wordnet", "wordnet+corpora", "corpora"),
        default="corpora",
        help="Fit on WordNet sentences, the tasks' unlabelled train/document texts, or both (chosen on dev).",
    )
    parser.add_argument("--limit", type=int, default=None, help="Cap the rows of every split (smoke runs).")
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true", help="Tiny sizes, one seed, under runs/: seconds.")
    args = parser.parse_args()
    if args.smoke:
        args.fit_texts, args.limit, args.seeds, args.adapter_epochs = 1000, 300, "0", 2
        args.adapter_batch_size, args.bootstrap = 128, 100
        args.out = args.out or SMOKE_OUT
    args.out = args.out or RESULTS
    args.seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
    args.dims = [int(d) for d in args.dims.split(",") if d.strip()]
    args.arms = [a.strip() for a in str(args.arms).split(",") if a.strip()]
    (run if args.command == "run" else table)(args)


if __name__ == "__main__":
    main()
