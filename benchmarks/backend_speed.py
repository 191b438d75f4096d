"""CPU encoding speed of the backends (issue 22), their STS quality, and quantized-embedding retrieval.

For each model, every arm (sentence-transformers' torch path, then each backend x precision) encodes the same texts
in this one process on the same threads: short texts (WordNet example sentences) and long ones (WN18RR
definitions), at batch 1 and 64. The arms take turns (their order rotates each repeat) so load on the machine falls
on all alike; each figure is the median sentences/s over the repeats. Graph export is done before timing and
timed apart. STS is the 7-task average (subspaces.eval.sts.STSEvaluator). Peak memory is each arm's RSS
high-water mark (VmHWM) when run alone in a subprocess that loads it and encodes the long texts at batch 64.

Quantized embeddings: the torch arm's L2-normalised embeddings of N definitions are the corpus and of the example
sentences the queries; Recall@10 of int8 (ranges calibrated on 10,000 corpus rows) and binary search, without
rescoring and with a 4x shortlist rescored against the dequantized codes or the float rows, against float exact
search; bytes per vector.

    python benchmarks/backend_speed.py                     # writes benchmarks/results/backend_speed.json
    python benchmarks/backend_speed.py --smoke --output /tmp/smoke.json   # tiny sizes, one repeat, seconds
    python benchmarks/backend_speed.py --table                  # the BENCHMARKS.md tables, from the JSON
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
ARMS = ("torch:fp32", "onnx:fp32", "onnx:int8", "openvino:fp32", "openvino:int8")


def texts(kind: str, n: int) -> list[str]:
    from subspaces.config import dataset_dir
    from subspaces.io import read_lines

    if kind == "short":
        return read_lines(dataset_dir("wordnet_sentences") / "wordnet30_examples.txt.gz", limit=n)
    rows = (dataset_dir("wn18rr") / "wordnet-mlj12-definitions.txt").read_text(encoding="utf-8").splitlines()
    return [r.split("\t")[2] for r in rows if r.count("\t") == 2 and r.split("\t")[2].strip()][:n]


def load(model: str, arm: str):
    from subspaces.models.encoder import load_encoder

    backend, precision = arm.split(":")
    return load_encoder(model, backend=backend, precision=precision)


def rate(enc, batch: list[str], batch_size: int) -> float:
    from subspaces.models.encoder import encode

    start = time.perf_counter()
    encode(enc, batch, batch_size=batch_size, show_progress=False)
    return len(batch) / (time.perf_counter() - start)


def peak_rss(model: str, arm: str, n_long: int, threads: int) -> int | None:
    """VmHWM (bytes) of a fresh process that loads ``arm`` and encodes the long texts at batch 64."""
    here = str(Path(__file__).parent)
    code = (
        f"import sys; sys.path.insert(0, {here!r}); import backend_speed as b;"
        "from subspaces.config import set_threads;"
        f"set_threads({threads}); enc = b.load({model!r}, {arm!r}); b.rate(enc, b.texts('long', {n_long}), 64);"
        "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    return int(lines[-1]) * 1024 if done.returncode == 0 and lines else None


def retrieval(enc, n_corpus: int, n_queries: int) -> dict[str, Any]:
    import numpy as np

    from subspaces.models.encoder import encode
    from subspaces.quantize import calibrate_int8, quantize, search

    corpus = encode(enc, texts("long", n_corpus), normalize=True, show_progress=False)
    queries = encode(enc, texts("short", n_queries), normalize=True, show_progress=False)
    k = min(10, len(corpus))
    truth = np.argsort(-(queries @ corpus.T), axis=1, kind="stable")[:, :k]

    def recall(ids: np.ndarray) -> float:
        return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(ids, truth, strict=True)]))

    sample = np.random.default_rng(0).permutation(len(corpus))[:10_000]
    cal = calibrate_int8(corpus[np.sort(sample)])
    out: dict[str, Any] = {"corpus": len(corpus), "queries": len(queries), "float32_bytes": 4 * corpus.shape[1]}
    for kind in ("int8", "binary"):
        codes = quantize(corpus, kind, cal)  # type: ignore[arg-type]
        common = {"kind": kind, "k": k, "calibration": cal}
        out[kind] = {
            "bytes_per_vector": int(codes.shape[1]),
            "recall@10": recall(search(queries, codes, rescore=None, **common)[1]),  # type: ignore[arg-type]
            "recall@10_rescore4_codes": recall(search(queries, codes, rescore=4, **common)[1]),  # type: ignore[arg-type]
            "recall@10_rescore4_float": recall(
                search(queries, codes, rescore=4, corpus=corpus, **common)[1]  # type: ignore[arg-type]
            ),
        }
    return out


def table(report: dict[str, Any]) -> str:
    """The markdown tables of BENCHMARKS.md, from a written report."""
    machine = report["machine"]
    cpu = (
        f"{machine['cpu']}, {'native' if machine['native_bfloat16'] else 'no native'} bfloat16"
        if isinstance(machine, dict)
        else "AMD EPYC, no native bfloat16"  # runs before the record named the CPU: the project's AMD machines then
    )
    lines = [
        f"CPU: {cpu}; {report['threads']} threads; {report['date']}",
        "",
        "| model | arm | short b1 | short b64 | long b1 | long b64 | STS avg (Δ) | peak RSS |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for model, result in report["models"].items():
        speed, sts = result["sentences_per_s"], result.get("sts_avg", {})
        base = sts.get("torch:fp32")
        for arm, cells in speed.items():
            ratio = result.get("speedup_vs_torch", {}).get(arm, {})
            row = [f"{cells[c]:,.0f} ({ratio.get(c, float('nan')):.2f}×)" for c in ("short_b1", "short_b64")]
            row += [f"{cells[c]:,.0f} ({ratio.get(c, float('nan')):.2f}×)" for c in ("long_b1", "long_b64")]
            quality = f"{sts[arm]:.2f} ({sts[arm] - base:+.2f})" if arm in sts and base is not None else "—"
            rss = result.get("peak_rss_bytes", {}).get(arm)
            memory = f"{rss / 2**20:,.0f} MB" if rss else "—"
            lines.append(f"| {model} | {arm} | " + " | ".join(row) + f" | {quality} | {memory} |")
    lines += ["", "| model | embeddings | bytes / vector | Recall@10 | rescore 4× codes | rescore 4× float |"]
    lines.append("|---|---|---:|---:|---:|---:|")
    for model, result in report["models"].items():
        q = result["quantized_retrieval"]
        lines.append(f"| {model} | float32 | {q['float32_bytes']} | 1 | — | — |")
        for kind in ("int8", "binary"):
            r = q[kind]
            lines.append(
                f"| {model} | {kind} | {r['bytes_per_vector']} | {r['recall@10']:.3f} | "
                f"{r['recall@10_rescore4_codes']:.3f} | {r['recall@10_rescore4_float']:.3f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="minilm-l6,paraphrase-l3")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--n-short", type=int, default=2048)
    parser.add_argument("--n-long", type=int, default=1024)
    parser.add_argument("--n-batch1", type=int, default=128, help="texts timed at batch 1 (of each kind)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-sts", action="store_true")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--corpus", type=int, default=20_000, help="retrieval corpus rows (WN18RR definitions)")
    parser.add_argument("--queries", type=int, default=1000, help="retrieval queries (WordNet examples)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat, no STS, no memory")
    parser.add_argument("--output", type=Path, default=RESULTS / "backend_speed.json")
    parser.add_argument("--table", action="store_true", help="print the tables from --output and exit")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.output.read_text())))
        return
    if args.smoke:
        args.n_short, args.n_long, args.n_batch1, args.repeats = 32, 16, 4, 1
        args.corpus, args.queries, args.no_sts, args.no_memory = 200, 20, True, True

    from subspaces.config import set_threads
    from subspaces.numerics import cpu_record

    threads = set_threads(args.threads)
    arms = args.arms.split(",")
    data = {"short": texts("short", args.n_short), "long": texts("long", args.n_long)}
    report: dict[str, Any] = {
        "date": str(date.today()),
        "machine": cpu_record(),  # the CPU's model and whether it multiplies bfloat16 natively
        "threads": threads,
        "sizes": {"short": len(data["short"]), "long": len(data["long"]), "batch1": args.n_batch1},
        "repeats": args.repeats,
        "models": {},
    }
    for model in args.models.split(","):
        encoders, export_s = {}, {}
        for arm in arms:
            start = time.perf_counter()
            encoders[arm] = load(model, arm)  # exports on first use: timed apart
            export_s[arm] = time.perf_counter() - start
            rate(encoders[arm], data["short"][:8], 8)  # warm-up: first-call allocations
        runs: dict[str, list[float]] = {}
        for r in range(args.repeats):
            order = arms[r % len(arms) :] + arms[: r % len(arms)]
            for kind, batch in ((k, b) for k in data for b in (1, 64)):
                chunk = data[kind][: args.n_batch1] if batch == 1 else data[kind]
                for arm in order:
                    runs.setdefault(f"{arm}|{kind}|{batch}", []).append(rate(encoders[arm], chunk, batch))
        result: dict[str, Any] = {"load_or_export_s": export_s, "sentences_per_s": {}}
        for key, values in runs.items():
            arm, kind, batch = key.split("|")
            result["sentences_per_s"].setdefault(arm, {})[f"{kind}_b{batch}"] = statistics.median(values)
        if "torch:fp32" in arms:
            base = result["sentences_per_s"]["torch:fp32"]
            result["speedup_vs_torch"] = {
                arm: {c: v / base[c] for c, v in cells.items()} for arm, cells in result["sentences_per_s"].items()
            }
        if not args.no_sts:
            from subspaces.eval.sts import STSEvaluator

            result["sts_avg"] = {arm: float(STSEvaluator()(enc)["avg"]) for arm, enc in encoders.items()}
        if not args.no_memory:
            result["peak_rss_bytes"] = {arm: peak_rss(model, arm, args.n_long, threads) for arm in arms}
        result["quantized_retrieval"] = retrieval(encoders[arms[0]], args.corpus, args.queries)
        report["models"][model] = result
        print(json.dumps({model: result}, indent=1), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
