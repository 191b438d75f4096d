"""BENCHMARKS §3's adapter regime (issue 17): raw truncation, PCA and ``MatryoshkaAdapter`` on ``minilm-l6``
vectors (not Matryoshka-trained), fitted unsupervised on the tasks' unlabelled texts (Banking77 and Emotion train
utterances, the STS-B retrieval pool, the SNLI hypotheses). Arms (``arm``): ``raw``, ``pca``, ``adapter`` (listwise
self-distillation on, weight 1; ``seed`` its ``random_state``), ``adapter_mic`` (plus the MIC-style variance floor
and prefix decorrelation) and ``adapter_pca`` (started from the principal axes). Metrics x 100 on L2-normalised
prefixes of each size (per-row values under ``rows``): ``banking77``, ``emotion`` (logistic-regression probes, no
scaler); ``stsb_spearman`` (rows: ``stsb_cosine``); ``stsb_r@10``, ``stsb_ndcg@10`` (each STS-B pair scored >= 4 a
query with one relevant sentence, the other STS-B splits' sentences as distractors); ``snli_r@10``,
``snli_ndcg@10`` (each SNLI premise a query, its entailed hypotheses relevant, among all the split's hypotheses).
``split`` ``dev``: Banking77 train's last 10 % (fixed shuffle) held out, Emotion validation, STS-B and SNLI dev."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from bench.tables import grid
from bench.tasks import cell_params, migrate

DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6", "dtype": "float32", "split": "test", "dims": [16, 32, 64, 128, 384], "C": 10.0,
    "limit": None, "threads": 2, "cache": migrate.DEFAULTS["cache"],
    "adapter": {"hidden": 512, "epochs": 20, "batch_size": 512, "lr": 1e-3, "rank_weight": 1.0},
}  # fmt: skip
ARMS: dict = {"adapter": {}, "adapter_mic": {"var_weight": 1.0, "corr_weight": 1.0}, "adapter_pca": {"basis": "pca"}}
LABELS = {"raw": "raw truncation", "pca": "PCA truncation", "adapter": "adapter",
          "adapter_mic": "adapter + MIC regularisers", "adapter_pca": "adapter from the principal axes"}  # fmt: skip
PAIRED = {"banking77": "Banking77 accuracy", "emotion": "Emotion accuracy", "stsb_spearman": "STS-B Spearman"}


@cache
def tasks(split: str, limit: int | None) -> tuple[Any, ...]:
    """Each task's texts, labels, gold scores and relevant rows on ``split``, lists cut to ``limit``."""
    from subspaces.config import dataset_dir
    from subspaces.data.classification import load_banking77, load_emotion
    from subspaces.data.sts import load_stsb

    own = "test" if split == "test" else "dev"
    banking, held = load_banking77("train"), load_banking77("test")
    emotion = (load_emotion("train"), load_emotion("test" if own == "test" else "validation"))
    probes = {
        "banking77": [(b.texts, b.labels) for b in (banking, held)],
        "emotion": [(e.texts, e.labels) for e in emotion],
    }
    if own == "dev":  # the last 10 % of train, in a fixed shuffled order, held out from the probe
        order = np.random.default_rng(0).permutation(len(banking))
        parts = np.split(order, [int(0.9 * len(order))])
        probes["banking77"] = [([banking.texts[i] for i in o], [banking.labels[i] for i in o]) for o in parts]
    probes = {task: [(texts[:limit], labels[:limit]) for texts, labels in both] for task, both in probes.items()}
    sts = load_stsb(own)  # type: ignore[arg-type]
    s1, s2, gold = sts.sentences1[:limit], sts.sentences2[:limit], sts.scores[:limit]
    others = [load_stsb(o) for o in ("train", "dev", "test") if o != own]
    corpus = list(dict.fromkeys([*s1, *s2, *(t for o in others for t in [*o.sentences1, *o.sentences2][:limit])]))
    where = {t: i for i, t in enumerate(corpus)}
    asked = [(where[a], where[b]) for a, b, score in zip(s1, s2, gold, strict=True) if score >= 4 and a != b]
    folder = dataset_dir("nli") / "senteval_snli"
    read = lambda name: (folder / f"{name}.{own}").read_text(encoding="utf-8").splitlines()[:limit]  # noqa: E731
    documents = list(dict.fromkeys(h.strip() for h in read("s2")))
    position = {t: i for i, t in enumerate(documents)}
    relevant: dict[str, set[int]] = {}
    for premise, hypothesis, label in zip(read("s1"), read("s2"), read("labels"), strict=True):
        if label.strip() == "entailment":
            relevant.setdefault(premise.strip(), set()).add(position[hypothesis.strip()])
    snli = (list(relevant), documents, [sorted(r) for r in relevant.values()])
    return probes, (s1, s2, gold), corpus, np.asarray(asked, dtype=int).reshape(-1, 2), snli


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """One cell: an arm fitted on the split's unlabelled texts, every metric at every size."""
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegression

    from subspaces.adapt import MatryoshkaAdapter
    from subspaces.eval.sts import spearman_x100
    from subspaces.vectors import cosine_rows, unit_prefix

    p = cell_params(DEFAULTS, params)
    probes, (s1, s2, gold), corpus, asked, (queries, documents, relevant) = tasks(p["split"], p["limit"])
    labelled = [t for both in probes.values() for texts, _ in both for t in texts]
    every = list(dict.fromkeys(labelled + corpus + queries + documents))
    index = {t: i for i, t in enumerate(every)}
    encoded = migrate.vectors(p["model"], every, p)
    unlabelled = dict.fromkeys([*probes["banking77"][0][0], *probes["emotion"][0][0], *corpus, *documents])
    fit = encoded[[index[t] for t in unlabelled]]
    dims = [d for d in p["dims"] if d <= fit.shape[1]]
    result: dict[str, Any] = {"fit_rows": len(fit), "stsb_documents": len(corpus), "snli_documents": len(documents)}
    mapped = encoded  # raw
    if p["arm"] == "pca":
        mapped = PCA(random_state=0).fit(fit).transform(encoded).astype(np.float32)
    elif p["arm"] != "raw":
        settings = {"dims": [d for d in dims if d < fit.shape[1]], **p["adapter"], **ARMS[p["arm"]]}
        adapter = MatryoshkaAdapter(**settings, random_state=seed).fit(fit)
        mapped = adapter.transform(encoded)
        result |= {"fit_seconds": round(adapter.fit_seconds_, 1), "history": adapter.history_}
    rows: dict[str, list[float]] = {}
    metrics, gains = {}, 1 / np.log2(np.arange(2, 12))
    unit = lambda texts, d: unit_prefix(mapped[[index[t] for t in texts]], d).astype(np.float32)  # noqa: E731
    for d in dims:
        for task, ((x, y), (x_test, y_test)) in probes.items():
            probe = LogisticRegression(C=p["C"], max_iter=2000).fit(unit(x, d), np.asarray(y))
            rows[f"{task}/{d}"] = (probe.predict(unit(x_test, d)) == np.asarray(y_test)).astype(int).tolist()
        rows[f"stsb_cosine/{d}"] = cosine_rows(unit(s1, d), unit(s2, d)).round(6).tolist()
        metrics[f"stsb_spearman/{d}"] = spearman_x100(np.asarray(rows[f"stsb_cosine/{d}"]), gold)
        pool = unit(corpus, d)
        sims = pool[asked[:, 0]] @ pool.T
        sims[np.arange(len(asked)), asked[:, 0]] = -np.inf  # a query does not retrieve itself
        rank = (sims > sims[np.arange(len(asked)), asked[:, 1]][:, None]).sum(1) + 1
        rows[f"stsb_r@10/{d}"] = (rank <= 10).astype(int).tolist()
        rows[f"stsb_ndcg@10/{d}"] = np.where(rank <= 10, 1 / np.log2(rank + 1), 0.0).round(6).tolist()
        top = np.argsort(-(unit(queries, d) @ unit(documents, d).T), axis=1)[:, :10]
        hits = [np.isin(row, rel) for row, rel in zip(top, relevant, strict=True)]
        rows[f"snli_r@10/{d}"] = [int(h.any()) for h in hits]
        ndcg = [gains[h].sum() / gains[: min(len(rel), 10)].sum() for h, rel in zip(hits, relevant, strict=True)]
        rows[f"snli_ndcg@10/{d}"] = [round(float(v), 6) for v in ndcg]
    metrics |= {name: 100 * float(np.mean(v)) for name, v in rows.items() if not name.startswith("stsb_cosine")}
    return result | {"dims": dims, "metrics": metrics, "rows": rows}


def table(summary: dict[str, Any]) -> str:
    """BENCHMARKS §3's table per pool: SNLI nDCG@10 of every arm (mean over seeds) and Δ adapter − raw [paired
    bootstrap 95 % interval] (relative to raw); raw / adapter on the probes and STS-B."""
    out = []
    for pool, arms in summary["aggregate"].items():
        dims = next(c["result"]["dims"] for c in summary["cells"] if c["pool"] == pool)
        paired = summary.get("paired", {}).get(pool, {}).get("adapter - raw", {})
        m = lambda a, n, d, arms=arms: arms.get(a, {}).get(f"metrics/{n}/{d}", {}).get("mean", np.nan)  # noqa: E731
        rows = [
            f"SNLI nDCG@10 | {LABELS[a]} | " + " | ".join(f"{m(a, 'snli_ndcg@10', d):.2f}" for d in dims)
            for a in LABELS
            if a in arms
        ]
        deltas = [_delta(paired.get(f"snli_ndcg@10/{d}"), m("raw", "snli_ndcg@10", d)) for d in dims]
        rows.append("SNLI nDCG@10 | Δ adapter − raw | " + " | ".join(deltas))
        rows += [
            f"{label} | raw / adapter | " + " | ".join(f"{m('raw', n, d):.2f} / {m('adapter', n, d):.2f}" for d in dims)
            for n, label in PAIRED.items()
        ]
        out.append(grid(f"metric ({pool}) | arm | " + " | ".join(map(str, dims)), rows, left=2))
    return "\n".join(out)


def _delta(got: dict[str, float] | None, raw: float) -> str:
    if not got:
        return "-"
    diff, low, high = (100 * got[k] for k in ("diff", "low", "high"))
    relative = f" ({diff / raw:+.0%})".replace("%", " %") if raw else ""
    return f"{diff:+.2f} [{low:.2f}, {high:.2f}]{relative}".replace("-", "−")
