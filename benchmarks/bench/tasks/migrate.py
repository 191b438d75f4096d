"""Migration quality on retrieval sets that do not saturate (issue 53 items 2 and 6, and its first target): Recall@10
and nDCG@10 of a store migrated to a new model (query-side and rewrite, through ``Store.migrate``) next to the old
model and a full re-embed, over a corpus of 20,000 documents with one relevant document a query.

Pools (``data``). DEV, where every default was chosen: ``snli`` (the unique premises of SNLI *dev* plus WordNet
definitions to ``n_docs`` documents; queries: SNLI dev's entailment hypotheses, each relevant to its premise) and
``sick`` (the first sentences of SICK *train*'s entailment pairs plus SNLI dev's neutral and contradiction
hypotheses and WordNet usage examples; queries: the pairs' second sentences; SICK test is never read). TEST, only
reported: ``snli-test`` (SNLI *test*'s premises <- its entailment hypotheses, tweets of TweetEval emoji test as the
distractors) and ``sts`` (STS12-16: each pair scored >= 4 of 5 a query, its first sentence, and its relevant
document, the second; the benchmark's other sentences and then tweets fill the corpus: domains and a relation no
dev pool has). The queries are split in halves by a fixed seed: ``choose`` (settings may be tuned on it) and
``check`` (never tuned on). Each model embeds every text once (cached under ``cache``, in ``dtype``).

Arms (``arm``): ``reembed`` (new model, queries and documents), ``old``, ``query-side`` and ``rewrite`` with
``pairs`` re-embedded pairs (``Store.migrate`` on a store of the old vectors, its chosen map read back; each map kind
also fitted alone on the same pairs; ``choice_queries = "choose"``: the choose half's texts choose the map, then only
``check`` is fair), ``unpaired`` (``Store.migrate(new, query_side=True, unpaired=True, texts=...)`` with
``domain_texts``; a refusal is the result) and ``unpaired-map`` (its fit scored whether or not refused). New-model
vectors come from the cache (``encode`` is looked up), so a report's encode seconds are not real. Per-query values
go under ``rows``; :func:`ratios`: each arm over the re-embed, paired bootstrap over queries (seeds averaged)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from bench.environment import ROOT
from bench.tasks import cell_params
from subspaces.io import read_lines

DATA = Path(os.environ.get("SUBSPACES_DATA", ROOT.parent / "shared" / "data"))
K = 10
DEFAULTS: dict[str, Any] = {
    "data": "snli", "old": "minilm-l6", "new": "paraphrase-l3", "arm": "reembed", "pairs": 2000, "heldout": 1000,
    "n_docs": 20_000, "dtype": "bfloat16",
    "maps": None,  # Store.migrate's default: every kind
    "map_params": None,
    "kinds": ["orthogonal", "affine", "lowrank", "mlp"],  # each also fitted alone on the same pairs
    "domain_texts": 5000,  # arm "unpaired": the texts sample's size
    "domain_from": "pool",  # arm "unpaired": "pool" (mixed as the corpus), "own", "fillers" or "tweets" (wrong domain)
    "choice_queries": None,  # "choose": the choose half's query texts (no labels) passed to migrate as --queries
    "cache": "outputs/migrate-dev-cache", "threads": 2,
    "backend": "torch",  # arm "queries" only
    "precision": "fp32",
}  # fmt: skip


def _lines(path: Path) -> list[str]:
    return [line.strip() for line in read_lines(path, skip_blank=False)]


@cache
def dataset(data: str, n_docs: int) -> tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...]]:
    """``(documents, queries, each query's relevant document)`` of a pool; documents unique, no query among them."""
    nli = DATA / "nli" / "senteval_snli"
    split = "test" if data == "snli-test" else "dev"
    premises, hypotheses, labels = (_lines(nli / f"{name}.{split}") for name in ("s1", "s2", "labels"))
    tweets = DATA / "tweeteval" / "emoji" / "test_text.txt"
    if data in ("snli", "snli-test"):
        pairs = [(h, p) for p, h, label in zip(premises, hypotheses, labels, strict=True) if label == "entailment"]
        relevant_docs = list(dict.fromkeys(premises))
        fillers = [_lines(tweets if split == "test" else DATA / "wordnet_sentences" / "wordnet30_definitions.txt.gz")]
    elif data == "sts":
        scored = _sts_pairs()
        pairs = [(a, b) for a, b, score in scored if score >= 4.0 and a != b]
        relevant_docs = list(dict.fromkeys(b for _, b in pairs))
        fillers = [[t for a, b, _ in scored for t in (a, b)], _lines(tweets)]
    elif data == "sick":
        rows = [line.split("\t") for line in _lines(DATA / "sick" / "SICK_train.txt")[1:] if line]
        pairs = [(r[2].strip(), r[1].strip()) for r in rows if r[4] == "ENTAILMENT"]
        relevant_docs = list(dict.fromkeys(p for _, p in pairs))
        other = [h for h, label in zip(hypotheses, labels, strict=True) if label != "entailment"]
        fillers = [other, _lines(DATA / "wordnet_sentences" / "wordnet30_examples.txt.gz")]
    else:
        raise ValueError(f"unknown data {data!r}: snli, sick, snli-test or sts")
    queries_set = {q for q, _ in pairs}
    docs = [d for d in relevant_docs if d and d not in queries_set]
    seen = set(docs) | queries_set
    for filler in fillers:
        for text in filler:
            if len(docs) >= n_docs:
                break
            if text and text not in seen:
                seen.add(text)
                docs.append(text)
    position = {d: i for i, d in enumerate(docs)}
    kept = [(q, position[p]) for q, p in pairs if p in position]
    return tuple(docs), tuple(q for q, _ in kept), tuple(r for _, r in kept)


def _sts_pairs() -> list[tuple[str, str, float]]:
    """Every scored pair of STS12-16 (the organisers' cased files), in file order."""
    out = []
    for gold in sorted((DATA / "sts12-16" / "original").glob("STS1*/STS.gs.*.txt")):
        texts = gold.with_name(gold.name.replace("STS.gs.", "STS.input."))
        scores = gold.read_text(encoding="utf-8", errors="replace").split("\n")
        lines = texts.read_text(encoding="utf-8", errors="replace").split("\n")
        for score, line in zip(scores, lines, strict=False):
            if score.strip() and "\t" in line:
                a, b = (part.strip() for part in line.split("\t")[:2])
                out.append((a, b, float(score)))
    return out


def domain_texts(data: str, docs: tuple[str, ...], n: int, mix: str = "pool") -> tuple[str, ...]:
    """``n`` unlabelled texts of a pool's domain for an unpaired migration, none in its corpus or queries, mixed as
    the corpus is: its own source's other texts (STS-B train/dev for ``sts``, SNLI dev for ``snli-test``, SNLI dev's
    other hypotheses for the dev pool ``snli``) and, in the corpus's share of fillers, tweets of TweetEval emoji
    *train* (the corpus's are from its test split; for ``snli``, WordNet definitions the corpus did not take).
    ``data="tweets"``: emoji train tweets alone, a wrong domain (a user's mistake) for the refusal's calibration.
    ``mix``: "pool" (as the corpus), "own" (the own source alone: for ``snli``, texts like its queries) or
    "fillers" (the fillers alone): samples drawn otherwise than the store's rows."""
    emoji = DATA / "tweeteval" / "emoji"
    if data == "tweets":  # a wrong domain for any pool but the tweets among its fillers (a user's mistake)
        return _mixed([], _lines(emoji / "train_text.txt"), 1.0, set(docs), n)
    if data not in ("sts", "snli-test", "snli"):
        raise ValueError(f"domain texts are drawn for the pools sts, snli-test and snli only, not {data!r}")
    taken = set(docs) | set(dataset(data, len(docs))[1])
    fillers, in_corpus = _lines(emoji / "train_text.txt"), set(_lines(emoji / "test_text.txt"))
    if data == "snli":  # dev: SNLI dev's other hypotheses, and the WordNet definitions the corpus did not take
        own = _lines(DATA / "nli" / "senteval_snli" / "s2.dev")
        fillers = _lines(DATA / "wordnet_sentences" / "wordnet30_definitions.txt.gz")
        in_corpus = set(fillers)
    elif data == "sts":
        rows = [
            line.split("\t") for part in ("train", "dev") for line in _lines(DATA / f"stsb/original/sts-{part}.csv")
        ]
        own = [text.strip() for row in rows if len(row) > 6 for text in row[5:7]]
    else:
        own = [t for name in ("s1", "s2") for t in _lines(DATA / "nli" / "senteval_snli" / f"{name}.dev")]
    share = {"own": 0.0, "fillers": 1.0}.get(mix, len(set(docs) & in_corpus) / len(docs))
    return _mixed(own, fillers, share, taken, n)


def _mixed(own: list[str], fillers: list[str], share: float, taken: set[str], n: int) -> tuple[str, ...]:
    """``n`` texts of ``own`` and (a ``share`` of them) ``fillers``, none in ``taken``, each drawn at random."""
    rng = np.random.default_rng(53)
    picked = []
    for source, count in ((own, n - round(n * share)), (fillers, round(n * share))):
        fresh = [t for t in dict.fromkeys(source) if t and t not in taken]
        picked += [fresh[i] for i in rng.permutation(len(fresh))[:count]]
    return tuple(picked)


def halves(n: int) -> np.ndarray:
    """``True`` for the ``check`` half of ``n`` queries (fixed seed), ``False`` for ``choose``."""
    return np.isin(np.arange(n), np.random.default_rng(53).permutation(n)[: n // 2])


_VECTORS: dict[str, dict[str, np.ndarray]] = {}  # model -> text -> unit vector
_NAMES: dict[int, str] = {}  # id(encoder) -> model


@cache
def encoder(model: str, dtype: str) -> Any:
    from subspaces.models.encoder import load_encoder

    loaded = load_encoder(model, dtype=dtype)
    _NAMES[id(loaded)] = model
    return loaded


def vectors(model: str, texts: list[str] | tuple[str, ...], params: dict[str, Any]) -> np.ndarray:
    """Unit vectors of ``texts`` by ``model``, each text encoded once ever (cache on disk, by model and dtype)."""
    _patch_encode()
    folder = ROOT / params["cache"]
    npy, names = (folder / f"{model}-{params['dtype']}{suffix}" for suffix in (".npy", ".json"))
    if model not in _VECTORS:  # the disk cache, read once a process
        _VECTORS[model] = dict(zip(json.loads(names.read_text()), np.load(npy), strict=True)) if npy.is_file() else {}
    known = _VECTORS[model]
    missing = list(dict.fromkeys(t for t in texts if t not in known))
    if missing:
        encoded = _REAL_ENCODE(encoder(model, params["dtype"]), missing, batch_size=64, normalize=True)
        known.update(zip(missing, encoded, strict=True))
        folder.mkdir(parents=True, exist_ok=True)
        np.save(npy, np.stack(list(known.values())).astype(np.float32))
        names.write_text(json.dumps(list(known)))
    return np.stack([known[t] for t in texts]).astype(np.float32)


def _cached_encode(model: Any, texts: Any, **options: Any) -> Any:
    """``encode`` for a migration's sample: the cached vectors of a benchmark encoder, else the real thing."""
    name = _NAMES.get(id(model))
    known = _VECTORS.get(name or "", {})
    if name is not None and options.get("normalize") and all(t in known for t in texts):
        return np.stack([known[t] for t in texts]).astype(np.float32)
    return _REAL_ENCODE(model, texts, **options)


def _patch_encode() -> None:
    import subspaces.models.encoder as module

    global _REAL_ENCODE
    if module.encode is not _cached_encode:
        _REAL_ENCODE = module.encode
        module.encode = _cached_encode


_REAL_ENCODE: Any = None


_STORES: dict[tuple[str, str, int, str], Any] = {}


def store_of(params: dict[str, Any], docs: tuple[str, ...], old_docs: np.ndarray) -> Any:
    """A store (temporary folder, one per process) of the documents' old-model vectors and texts, ids ``d<i>``."""
    from subspaces.store import Store

    key = (params["data"], params["old"], len(docs), params["dtype"])
    if key not in _STORES:
        folder = Path(tempfile.mkdtemp(prefix="migrate-dev-"))
        np.save(folder / "docs.npy", old_docs)
        (folder / "ids.txt").write_text("".join(f"d{i}\n" for i in range(len(docs))))
        (folder / "texts.jsonl").write_text("".join(json.dumps(t) + "\n" for t in docs))
        store = Store.create(folder / "store", encoder(params["old"], params["dtype"]), name=params["old"])
        store.import_vectors(folder / "docs.npy", ids=folder / "ids.txt", texts=folder / "texts.jsonl")
        _STORES[key] = store
    return _STORES[key]


def ranks(queries: np.ndarray, docs: np.ndarray, relevant: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """Each query's relevant document's rank (0 = first) by inner product, exact."""
    out = np.empty(len(queries), dtype=np.int64)
    for start in range(0, len(queries), chunk):
        scores = queries[start : start + chunk] @ docs.T
        mine = scores[np.arange(len(scores)), relevant[start : start + chunk]]
        out[start : start + chunk] = (scores > mine[:, None]).sum(axis=1)
    return out


def figures(rank: np.ndarray, check: np.ndarray) -> tuple[dict[str, Any], dict[str, list[float]]]:
    recall = (rank < K).astype(float)
    ndcg = np.where(rank < K, 1.0 / np.log2(rank + 2.0), 0.0)
    parts = {"all": np.ones_like(check), "choose": ~check, "check": check}
    out = {f"{name}@{K}": {part: round(float(v[mask].mean()), 4) for part, mask in parts.items()}
           for name, v in (("recall", recall), ("ndcg", ndcg))}  # fmt: skip
    return out, {f"recall@{K}": recall.tolist(), f"ndcg@{K}": ndcg.round(5).tolist()}


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """One cell: an arm's Recall@10 and nDCG@10 on a pool (``seed``: the migration's pair sample)."""
    p = cell_params(DEFAULTS, params)
    _patch_encode()
    docs, queries, relevant_t = dataset(p["data"], int(p["n_docs"]))
    relevant = np.asarray(relevant_t)
    check = halves(len(queries))
    start = time.perf_counter()
    old_docs, new_docs = vectors(p["old"], docs, p), vectors(p["new"], docs, p)
    old_q, new_q = vectors(p["old"], queries, p), vectors(p["new"], queries, p)
    result: dict[str, Any] = {"docs": len(docs), "queries": len(queries), "check_queries": int(check.sum())}
    result["vectors_seconds"] = round(time.perf_counter() - start, 2)
    arm = p["arm"]
    if arm == "queries":  # the old model's queries encoded on a backend (serve's --backend), against its stored rows
        from subspaces.models.encoder import load_encoder

        model = load_encoder(p["old"], backend=p["backend"], precision=p["precision"])
        q = _REAL_ENCODE(model, list(queries), batch_size=64, normalize=True)
        result["metrics"], result["rows"] = figures(ranks(q, old_docs, relevant), check)
        return result
    if arm in ("reembed", "old"):
        q, d = (new_q, new_docs) if arm == "reembed" else (old_q, old_docs)
        result["metrics"], result["rows"] = figures(ranks(q, d, relevant), check)
        return result
    if arm == "unpaired-map":  # the unpaired arm's fit and map scored whether or not the store would refuse it
        fitted, result["report"] = unpaired_map(p, seed, docs, old_docs)
        result["metrics"], result["rows"] = figures(ranks(fitted.transform(new_q), old_docs, relevant), check)
        return result
    if arm not in ("query-side", "rewrite", "unpaired"):
        raise ValueError(f"unknown arm {arm!r}: reembed, old, query-side, rewrite, unpaired or unpaired-map")
    sample = [q for q, in_check in zip(queries, check, strict=True) if not in_check]
    return result | migrated(p, seed, docs, relevant, check, old_docs, new_docs, new_q, sample)


def migrated(  # fmt: skip
    p: dict[str, Any],
    seed: int,
    docs: tuple[str, ...],
    relevant: np.ndarray,
    check: np.ndarray,
    old_docs: np.ndarray,
    new_docs: np.ndarray,
    new_q: np.ndarray,
    choose_texts: list[str],
) -> dict[str, Any]:
    from subspaces.errors import SubspacesError
    from subspaces.store import maps

    query_side = p["arm"] in ("query-side", "unpaired")
    direction = "queries" if query_side else "rows"
    store = store_of(p, docs, old_docs)
    options: dict[str, Any] = {"pairs": int(p["pairs"]), "maps": p["maps"], "map_params": p["map_params"]}
    if p["arm"] == "unpaired":
        texts = Path(tempfile.mkdtemp(prefix="migrate-domain-")) / "texts.txt"
        data = "tweets" if p["domain_from"] == "tweets" else p["data"]
        texts.write_text("".join(t + "\n" for t in domain_texts(data, docs, int(p["domain_texts"]), p["domain_from"])))
        options = {"unpaired": True, "texts": texts}
    start = time.perf_counter()
    try:
        chooses = {str(i): t for i, t in enumerate(choose_texts)} if p["choice_queries"] == "choose" else None
        new, held = encoder(p["new"], p["dtype"]), int(p["heldout"])
        report = store.migrate(new, name=p["new"], heldout=held, seed=seed, query_side=query_side, queries=chooses,
                               **options)  # fmt: skip
    except SubspacesError as refused:  # an unpaired map its checks do not trust: the refusal is the result
        return {"refused": str(refused), "migrate_seconds": round(time.perf_counter() - start, 2)}
    migrate_s = time.perf_counter() - start
    space = store.manifest.spaces[store.manifest.active]
    if query_side:
        entry = next(e for e in space.query_maps.values() if e["model"]["name"] == p["new"])
        chosen = maps.load_map(store.path / entry["map"])
    else:
        pending = store.manifest.spaces[store.manifest.pending()[0]]
        chosen = maps.load_map(store.path / pending.aligner)

    def evaluate(fitted: Any) -> np.ndarray:
        if query_side:
            return ranks(fitted.transform(new_q), old_docs, relevant)
        return ranks(new_q, fitted.transform(old_docs), relevant)

    result: dict[str, Any] = {"migrate_seconds": round(migrate_s, 2), "chosen": report["map"]}
    result["report"] = {
        f"overlap@{K}": report.get(f"overlap@{K}"), "candidates": report.get("candidates", {}),
        "chosen_by": report.get("chosen_by"), "map_us_per_query": report.get("map_us_per_query"),
        "trust": report.get("trust"),
    }  # fmt: skip
    result["metrics"], result["rows"] = figures(evaluate(chosen), check)
    if not p["kinds"]:
        return result
    # The same pair sample as the migration's (its rows' order and seeded permutation), each kind fitted on it.
    rows = store._load_rows(store.manifest.active)
    position = np.asarray([int(str(i)[1:]) for i in rows.ids])
    order = position[np.random.default_rng(seed).permutation(len(position))]
    held = min(int(p["heldout"]), len(position) // 5)
    fit = order[held : held + int(p["pairs"])]
    source, target = (new_docs[fit], old_docs[fit]) if query_side else (old_docs[fit], new_docs[fit])
    result["kinds"] = {}
    for kind in p["kinds"]:
        params = maps.DIRECTION_DEFAULTS[direction].get(kind, {}) | dict((p["map_params"] or {}).get(kind) or {})
        fitted = maps.make(kind, params, seed).fit(source, target)
        metrics, per_query = figures(evaluate(fitted), check)
        result["kinds"][kind] = metrics | {"fit_seconds": round(fitted.fit_seconds_, 2)}
        if kind == report["map"]:  # the migration's own map, refitted here on its pairs: the same figures
            result["chosen_matches_refit"] = per_query[f"recall@{K}"] == result["rows"][f"recall@{K}"]
        result["rows"] |= {f"{name}/{kind}": values for name, values in per_query.items()}
    return result


def unpaired_map(p: dict[str, Any], seed: int, docs: tuple[str, ...], old_docs: np.ndarray) -> tuple[Any, dict]:
    """The ``unpaired`` arm's fit (the store's steps, all its rows the stored sample): the map and its report."""
    from subspaces.store import unpaired

    data = "tweets" if p["domain_from"] == "tweets" else p["data"]
    new_t = vectors(p["new"], domain_texts(data, docs, int(p["domain_texts"]), p["domain_from"]), p)
    aligner = unpaired.fit(new_t, old_docs, params=None, seed=seed, show_progress=False)
    fitted = unpaired.as_query_map(aligner, new_t)
    spreads = unpaired.spread(fitted.transform(new_t), old_docs, seed=seed)
    return fitted, {"trust": unpaired.verdict(aligner) | {"spread": spreads}, "fit_seconds": aligner.fit_seconds_}


def _refused(trust: dict[str, Any]) -> bool:
    """Whether today's :func:`subspaces.store.unpaired.refusal` refuses an ``unpaired-map`` cell's map."""
    from subspaces.store.unpaired import MISMATCH_LIMIT

    spread = trust.get("spread")  # only an unpaired-map cell's
    return spread is not None and (not trust["trusted"] or spread["mismatch"] - spread["floor"] > MISMATCH_LIMIT)


def ratios(path: str | Path, n: int = 2000) -> dict[str, Any]:
    """Per pool, each migration arm's (and map kind's) figures over the re-embed's [paired bootstrap 95 %], per half."""
    from bench.experiment import load
    from bench.runner import cell_path

    experiment = load(path)
    records: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for cell, target in ((c, cell_path(experiment, c)) for c in experiment.cells):
        if target.is_file():
            records.setdefault((cell.pool, cell.arm), []).append(json.loads(target.read_text())["result"])
    out: dict[str, Any] = {}
    rng = np.random.default_rng(0)
    for pool in dict.fromkeys(pool for pool, _ in records):
        base = records.get((pool, "reembed"))
        if not base:
            continue
        check = halves(len(base[0]["rows"][f"recall@{K}"]))
        sizes = {"all": len(check), "choose": int((~check).sum()), "check": int(check.sum())}
        draws = {name: rng.integers(0, m, size=(n, m)) for name, m in sizes.items()}
        out[pool] = {}
        for (other_pool, arm), cells in records.items():
            if other_pool != pool or arm == "reembed":
                continue
            runs = [r for r in cells if "rows" in r]  # a refused unpaired map has no figures
            if not runs:
                out[pool][arm] = {"refused": len(cells)}
                continue
            names = [key for key in runs[0]["rows"] if all(key in r["rows"] for r in runs)]
            row: dict[str, Any] = {"seeds": len(runs)}
            for name in names:
                metric = name.split("/")[0]
                a = np.mean([r["rows"][name] for r in runs], axis=0)
                b = np.mean([r["rows"][metric] for r in base], axis=0)
                for half, mask in (("all", np.ones_like(check)), ("choose", ~check), ("check", check)):
                    x, y = a[mask], b[mask]
                    boot = x[draws[half]].mean(1) / np.maximum(y[draws[half]].mean(1), 1e-12)
                    row[f"{name}/{half}"] = {
                        "ratio": round(float(x.mean() / y.mean()), 4), "low": round(float(np.percentile(boot, 2.5)), 4),
                        "high": round(float(np.percentile(boot, 97.5)), 4),
                    }  # fmt: skip
            out[pool][arm] = row | {
                "chosen": [r.get("chosen") for r in runs], "refused": len(cells) - len(runs),
                "would_refuse": sum(_refused((r.get("report") or {}).get("trust") or {}) for r in runs),
            }  # fmt: skip
    return out


def table(summary: dict[str, Any]) -> str:
    """Per pool: each arm's Recall@10, nDCG@10, ratio to the re-embed [95 % interval] and the chosen kinds."""
    path = ROOT / summary["experiment"]["file"]
    found = ratios(path)
    lines = []
    for pool, arms in summary["aggregate"].items():
        lines += [f"### {pool}", "", "| arm | chosen | R@10 | nDCG@10 | R@10 / re-embed (check half) | same, all |"]
        lines.append("|---|---|---:|---:|---|---|")
        for arm, values in arms.items():
            r = values.get(f"metrics/recall@{K}/all", {}).get("mean", float("nan"))
            g = values.get(f"metrics/ndcg@{K}/all", {}).get("mean", float("nan"))
            row = found.get(pool, {}).get(arm, {})
            cells = []
            for half in ("check", "all"):
                got = row.get(f"recall@{K}/{half}")
                cells.append(f"{got['ratio']:.3f} [{got['low']:.3f}, {got['high']:.3f}]" if got else "-")
            chosen = ",".join(sorted({str(c) for c in row.get("chosen", []) if c})) or "-"
            chosen += f" (refused: {row['refused']})" if row.get("refused") else ""
            lines.append(f"| {arm} | {chosen} | {r:.3f} | {g:.3f} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    """Write ``<out>/ratios.json``: per pool and arm the chosen maps, means over seeds and ratios to the re-embed."""
    import argparse

    from bench.experiment import load
    from subspaces.io import save_json

    parser = argparse.ArgumentParser(description="ratios of a migrate experiment's arms to its re-embed")
    parser.add_argument("experiment", type=Path)
    args = parser.parse_args()
    experiment = load(args.experiment)
    summary = json.loads((experiment.out / "summary.json").read_text())
    found = ratios(args.experiment)
    wanted = ("metrics/", "kinds/", "report/overlap@10", "migrate_seconds")
    for pool, arms in found.items():
        for arm, row in arms.items():
            means = summary["aggregate"][pool][arm]
            row["means"] = {n: {"mean": round(v["mean"], 4), "std": round(v["std"], 4)}
                            for n, v in means.items() if n.startswith(wanted)}  # fmt: skip
    command = (
        f"OMP_NUM_THREADS=2 nice -n 10 .venv/bin/python benchmarks/run.py benchmarks/{args.experiment} --resume; "
        f"cd benchmarks && OMP_NUM_THREADS=2 ../.venv/bin/python -m bench.tasks.migrate {args.experiment}"
    )
    record = {
        "command": command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "roles": {cell.pool: cell.role for cell in experiment.cells}, "environment": summary["environment"],
        "pools": found,
    }  # fmt: skip
    save_json(experiment.out / "ratios.json", record)
    print(table(summary))


if __name__ == "__main__":
    main()
