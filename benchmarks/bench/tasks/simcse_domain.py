"""Domain adaptation with unsupervised SimCSE (issue 19; notes/simcse.md "Domain adaptation"). A pool is the domain
measured (``tweets``, ``banking``); an arm is what the full ``minilm-l6`` is trained on first: nothing (``start``), the
domain's unlabelled training text (``in-domain``) or 64,000 WordNet sentences (``control``: the objective's share).
Measured on the domain's test rows: logistic-regression probes, k-means V-measure (mean of 3 k-means seeds), the
7-task STS avg. A trained model is kept under ``work``: the control trains once a seed for both pools."""

from __future__ import annotations

import json
import random
import time
from functools import reduce
from operator import getitem
from pathlib import Path
from typing import Any

from bench.tables import grid

TWEETS = ("TweetEval-emotion", "TweetEval-hate", "TweetEval-irony", "TweetEval-offensive", "TweetEval-sentiment")
PROBES = {"tweets": (*TWEETS, "Emotion"), "banking": ("Banking77",)}
CLUSTERING = {"tweets": ("TweetEval-emotion", "Emotion"), "banking": ("Banking77",)}
TRAINING = ("model", "steps", "batch_size", "max_length", "lr", "state_dropout")
DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6", "steps": 1000, "batch_size": 64, "max_length": 32, "lr": 3e-5, "state_dropout": 0.1,
    "max_train": 5000, "max_test": 3000,  # probe rows per split (seeded subsets)
    "work": "outputs/bench-simcse-domain",
}  # fmt: skip


def training_texts(domain: str) -> list[str]:
    """The unlabelled training text: train splits only, deduplicated, in a fixed order (WordNet: shuffled)."""
    from subspaces.data import classification as cls

    if domain == "wordnet":
        from subspaces.data.text import wordnet_sentences

        texts = wordnet_sentences()
        random.Random(0).shuffle(texts)  # definitions and examples mixed; the first steps x batch are used
        return texts
    if domain == "tweets":
        texts = [t for task in cls.TWEETEVAL_TASKS if task != "sentiment" for t in cls.load_tweeteval(task).texts]
    else:
        texts = list(cls.load_banking77("train").texts)
    return sorted({t.strip() for t in texts if t.strip()})


def v_measure(model: Any, task: str) -> float:
    import numpy as np
    from sklearn.cluster import KMeans
    from sklearn.metrics import v_measure_score

    from subspaces.eval.dims import TASKS
    from subspaces.models.encoder import encode

    rows = TASKS[task].load("test")  # type: ignore[misc]  # a classification task: it has a loader
    texts, labels = list(rows.texts), list(rows.labels)
    emb = np.asarray(encode(model, texts, batch_size=128, normalize=True, show_progress=False))
    found = [KMeans(len(set(labels)), n_init=3, random_state=s).fit_predict(emb) for s in range(3)]
    return 100 * float(np.mean([v_measure_score(labels, a) for a in found]))


def measure(model: Any, domain: str, p: dict[str, Any]) -> dict[str, Any]:
    from subspaces.eval.dims import DimsEvaluator
    from subspaces.eval.sts import STSEvaluator

    model.eval()
    probes = DimsEvaluator(tasks=PROBES[domain], dims=[None], max_train=p["max_train"], max_test=p["max_test"])
    report = probes.report(model).to_dict()
    full = str(report["dims"][0])
    return {
        "probes": {t: report["scores"][t][full] for t in PROBES[domain]},  # x 100
        "metrics": report["metrics"],
        "clustering_v_measure": {t: v_measure(model, t) for t in CLUSTERING[domain]},
        "sts": STSEvaluator()(model),
    }  # fmt: skip


def trained(domain: str, seed: int, p: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The model trained on ``domain``'s text with ``seed`` and the training record, trained once per settings."""
    from subspaces.fingerprint import json_sha256
    from subspaces.models.encoder import load_encoder
    from subspaces.train.simcse import SimCSEConfig, train_simcse, unsup_examples

    settings = {k: p[k] for k in TRAINING}
    digest = json_sha256(settings)[:8]
    folder = Path(p["work"]) / f"{domain}_seed{seed}-{digest}"  # a checkpoint resumes only its own settings
    marker = folder / "bench-train.json"
    if marker.is_file() and json.loads(marker.read_text())["settings"] == settings:
        return folder, json.loads(marker.read_text())["record"]
    texts = training_texts(domain)[: p["steps"] * p["batch_size"]]
    config = SimCSEConfig(
        output_dir=str(folder), batch_size=p["batch_size"], lr=p["lr"], max_steps=p["steps"],
        max_length=p["max_length"], eval_steps=0, stsb_dev=False, save_steps=125, seed=seed, trainable_layers=2,
        cache_dir=str(Path(p["work"]) / "activations" / f"{domain}-len{p['max_length']}"),
        state_dropout=p["state_dropout"], description=f"simcse on {domain} seed {seed}",
    )  # fmt: skip
    started = time.perf_counter()
    result = train_simcse(load_encoder(p["model"]), unsup_examples(texts, "dropout", seed), config)
    record = {"trained_on": domain, "train_texts": len(texts), "steps": result.steps}
    losses = [h["loss"] for h in result.history if "loss" in h]
    record |= {"train_seconds": time.perf_counter() - started, "final_loss": losses[-1] if losses else None}
    marker.write_text(json.dumps({"settings": settings, "record": record}))
    return folder, record


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    from subspaces.models.encoder import load_encoder

    p = DEFAULTS | params
    source = {"start": None, "in-domain": p["domain"], "control": "wordnet"}[p["arm"]]
    folder, record = trained(source, seed, p) if source else (p["model"], {})
    return {"domain": p["domain"], **record, "after": measure(load_encoder(str(folder)), p["domain"], p)}


def table(summary: dict[str, Any]) -> str:
    """BENCHMARKS §1's domain rows: the start's figure, then in-domain − start, control − start and in-domain −
    control, each the mean over seeds [min, max of the per-seed difference] (a side with one run: its value)."""
    out = []
    for pool, arms in summary["aggregate"].items():
        cells = [c for c in summary["cells"] if c["pool"] == pool]
        kept = ("after/probes/", "after/clustering_v_measure/", "after/sts/avg")
        names = [n for n in arms.get("start", {}) if n.startswith(kept)]
        metrics = cells[0]["result"]["after"]["metrics"]
        rows = []
        for name in names:
            start = _per_seed(cells, "start", name)
            kind, _, task = name.removeprefix("after/").partition("/")
            label = {"probes": f"probe {task} ({metrics.get(task)})", "sts": "STS avg"}.get(kind)
            line = [label or f"k-means V-measure {task}", f"{sum(start.values()) / len(start):.2f}"]
            for a, b in (("in-domain", "start"), ("control", "start"), ("in-domain", "control")):
                line.append(_difference(_per_seed(cells, a, name), _per_seed(cells, b, name)))
            rows.append(" | ".join(line))
        header = f"{pool}: measure | start | in-domain Δ | control Δ | in-domain − control"
        out += [f"### {pool} (Δ: mean over seeds [range over seeds])", "", grid(header, rows)]
    return "\n".join(out)


def _per_seed(cells: list[dict[str, Any]], arm: str, name: str) -> dict[int, float]:
    """An arm's figure ``name`` ("after/sts/avg") by seed."""
    return {c["seed"]: float(reduce(getitem, name.split("/"), c["result"])) for c in cells if c["arm"] == arm}


def _difference(a: dict[int, float], b: dict[int, float]) -> str:
    if not a or not b:
        return "-"
    mean_a, mean_b = sum(a.values()) / len(a), sum(b.values()) / len(b)
    diffs = [v - b.get(s, mean_b) for s, v in a.items()] if len(a) >= len(b) else [mean_a - v for v in b.values()]
    return f"{sum(diffs) / len(diffs):+.2f} [{min(diffs):+.2f}, {max(diffs):+.2f}]"
