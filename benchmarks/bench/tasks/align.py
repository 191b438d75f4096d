"""Unsupervised alignment (BENCHMARKS §2): ``MiniVec2Vec()`` with the shipped defaults fitted on two disjoint
unpaired halves of a pool sample (``minilm-l6`` and ``target`` vectors), scored by top-1 retrieval on its held-out
pairs beside the in-sample and the cross-fitted orthogonal oracles. Dev domains: wordnet, tweets; test: utterances,
questions, sts, mrpc, captions, entities (experiments/align_*.toml). Vectors are cached under the cache folder's
``align_bench/``."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np

from bench.stats import timed
from bench.tables import grid
from bench.tasks import cell_params

SOURCE = "minilm-l6"
DEFAULTS: dict[str, Any] = {
    "target": "paraphrase-l3", "size": 40_000, "sample": 0, "reserved": 1000, "threads": 2, "params": {},
}  # fmt: skip


def texts(domain: str) -> list[str]:
    """The domain's distinct texts, in a fixed order."""
    from subspaces.config import dataset_dir
    from subspaces.data import classification, sts
    from subspaces.data.text import read_corpus, wordnet_sentences
    from subspaces.io import read_lines

    if domain == "wordnet":
        found = wordnet_sentences()
    elif domain == "tweets":
        found = [t for path in sorted(dataset_dir("tweeteval").rglob("*_text.txt")) for t in read_corpus(path)]
    elif domain == "utterances":
        found = [t for s in ("train", "test") for t in classification.load_banking77(s).texts]
        found += [t for s in ("train", "validation", "test") for t in classification.load_emotion(s).texts]
    elif domain == "questions":
        paths = sorted(dataset_dir("nq_open").glob("NQ-open*.jsonl"))
        found = [json.loads(line)["question"] for p in paths for line in read_lines(p) if line.strip()]
    elif domain == "sts":
        sets = [sts.load_sick(s) for s in ("train", "trial", "test")]
        sets += [sts.load_stsb(s) for s in ("train", "dev", "test")]
        sets += [sts.load_sts_year(f"STS{year}") for year in range(12, 17)]
        found = [t for pairs in sets for t in (*pairs.sentences1, *pairs.sentences2)]
    elif domain == "mrpc":
        found = [t for s in ("train", "test") for p in [classification.load_mrpc(s)] for t in (*p.texts1, *p.texts2)]
    elif domain == "captions":
        folder = dataset_dir("nli") / "senteval_snli"
        found = [t for side in ("s1", "s2") for s in ("dev", "test") for t in read_lines(folder / f"{side}.{s}")]
    elif domain == "entities":
        lines = read_lines(dataset_dir("fb15k237") / "FB15k_mid2name.txt")
        found = [line.split("\t", 1)[1].replace("_", " ") for line in lines if "\t" in line]
    else:
        raise ValueError(f"unknown domain {domain!r}")
    return list(dict.fromkeys(t.strip() for t in found if t and t.strip()))


def pool(domain: str, sample: int, size: int, target: str) -> dict[str, np.ndarray]:
    """The halves ``a`` (source), ``b`` (target) and the held-out pairs ``x``, ``y`` of a pool sample."""
    from subspaces.config import cache_dir
    from subspaces.io import save_npy
    from subspaces.models.encoder import encode, load_encoder

    if target == SOURCE:
        raise ValueError(f"the target must be another model than the source ({SOURCE})")
    chosen = sorted(set(texts(domain)))
    if len(chosen) < 2000:
        raise ValueError(f"domain {domain!r} has {len(chosen)} texts here: too few (is its data folder whole?)")
    random.Random(sample).shuffle(chosen)
    chosen = chosen[:size]
    n_eval = min(8192, len(chosen) // 4)
    half = (len(chosen) - n_eval) // 2
    parts = {"train": chosen[:half], "eval": chosen[len(chosen) - n_eval :]}
    folder = cache_dir() / "align_bench" / f"protocol-{domain}-{len(chosen)}-{sample}"
    vectors = {}
    for model in (SOURCE, target):
        if model == target:
            parts["train"] = chosen[half : 2 * half]
        for part, rows in parts.items():
            path = folder / f"{model}.{part}.npy"
            if not path.is_file():
                backend = "torch" if model == "wordllama" else "onnx"  # a static model has no graph to export
                save_npy(path, encode(load_encoder(model, backend=backend), rows, batch_size=64).astype(np.float32))
            vectors[f"{model}.{part}"] = np.load(path)
    (a, x), (b, y) = ((vectors[f"{m}.train"], vectors[f"{m}.eval"]) for m in (SOURCE, target))
    return {"a": a, "b": b, "x": x, "y": y}


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    from subspaces.align import MiniVec2Vec, evaluate_alignment

    p = cell_params(DEFAULTS, params)
    data = pool(p["domain"], int(p["sample"]), int(p["size"]), p["target"])
    aligner = MiniVec2Vec.from_params(p["params"], random_state=seed, verbose=False)
    _, seconds = timed(aligner.fit, data["a"], data["b"])
    scored = len(data["x"]) - int(p["reserved"])
    report = evaluate_alignment(aligner, data["x"][:scored], data["y"][:scored], pool_size=scored)
    d = aligner.diagnostics_
    top1, oracle, crossed = report.top1, report.oracle.top1, report.oracle_cross_fitted.top1
    return {
        "rows_a_side": len(data["a"]), "scored_pairs": scored, "top1": round(top1, 4), "oracle_top1": round(oracle, 4),
        "cross_fitted_top1": round(crossed, 4), "of_oracle": round(top1 / oracle, 4),
        "of_cross_fitted": round(top1 / crossed, 4),
        "identity_top1": round(report.identity.top1, 4) if report.identity else None,
        "converged": bool(aligner.converged_), "stopped_early": bool(aligner.stopped_early_),
        "fit_seconds": round(seconds, 1), "kept": d.kept, "stop_reason": d.stop_reason,
        "polish": ("accepted" if d.polish.accepted else "rejected") if d.polish.ran else "skipped",
    }  # fmt: skip


def table(summary: dict[str, Any]) -> str:
    """Per pool: top-1 (mean over seeds ± the 95 % t-interval's half-width), × each oracle, fit seconds."""
    roles = {c["pool"]: c["role"] for c in summary["cells"]}
    rows = []
    for name, arms in summary["aggregate"].items():
        for arm, values in arms.items():
            top1 = values["top1"]
            half = f" ± {top1['half_width']:.3f}" if top1["seeds"] > 1 else ""
            converged = [c["result"]["converged"] for c in summary["cells"] if (c["pool"], c["arm"]) == (name, arm)]
            rows.append(
                f"{name if len(arms) == 1 else f'{name}, {arm}'} | {roles[name]} | {top1['seeds']} | {top1['mean']:.3f}"
                f"{half} | {values['of_oracle']['mean']:.3f} | {values['of_cross_fitted']['mean']:.3f} "
                f"| {sum(converged)}/{len(converged)} | {values['fit_seconds']['mean']:.0f}"
            )
    head = "pool | role | seeds | top-1 ± 95 % | × oracle (in-sample) | × oracle (cross-fitted) | converged | fit s"
    return grid(head, rows, left=2)
