"""KGC with a frozen encoder under Hyper-CL's released configuration (BENCHMARKS §5, notes/kgc.md): ``subspaces kgc
train --recipe hypercl-wn18rr --freeze-encoder`` with one head (an arm), then the test split's filtered ranking, plain
and with SimKGC's 5-hop re-rank, in a scratch folder removed after the cell (a full-rank hypernet is 0.2 GB)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.stats import seed_interval
from bench.tables import grid

DEFAULTS: dict[str, Any] = {"dataset": "wn18rr", "model": "minilm-l6", "epochs": 4, "rank": "32"}
PAIRS = (("hypernet-full", "hypernet-32"), ("hypernet-32", "concat"), ("concat", "hadamard"))


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    p = DEFAULTS | params
    with tempfile.TemporaryDirectory(prefix="kgc-") as tmp:
        options = {"dataset": p["dataset"], "model": p["model"], "recipe": "hypercl-wn18rr", "head": p["head"]}
        options |= {k: p[k] for k in ("rank", "epochs") if p.get(k) is not None} | {"seed": seed}
        command = [str(Path(sys.executable).with_name("subspaces")), "kgc", "train", "--freeze-encoder"]
        command += ["--output", f"{tmp}/model", "--json", f"{tmp}/eval.json"]
        command += [a for k, v in options.items() for a in (f"--{k.replace('_', '-')}", str(v))]
        subprocess.run(command, check=True)
        model = json.loads((Path(tmp) / "model" / "subspaces_model.json").read_text())["metadata"]
        result = json.loads((Path(tmp) / "eval.json").read_text())
    # the run's whole configuration (a superset of what the archived JSON recorded under "settings")
    settings = {k: v for k, v in model["train"].items() if k not in ("output_dir", "cache_dir")}
    settings["neighbour_order"] = model["neighbour_order"]
    return {
        "settings": settings,
        "train": {k: model["train_result"][k] for k in ("steps", "seconds", "examples_per_second")},
        "queries": result["queries"], "test": result["average"], "rerank": result.get("rerank", {}).get("average", {}),
        **{k: result[k] for k in ("forward", "backward", "inference_seconds")},
    }  # fmt: skip


def table(summary: dict[str, Any]) -> str:
    """BENCHMARKS §5: each head's MRR, H@1, H@10 and re-ranked MRR, mean ± 95 % t-interval over seeds; then the
    MRR differences of the same seeds between heads, with their 95 % t-interval."""

    def fmt(value: dict[str, Any] | None) -> str:
        return "-" if value is None else f"{value['mean']:.3f} ± {value['half_width']:.3f}"

    out, header = [], "head (frozen, official config) | seeds | MRR | H@1 | H@10 | MRR, 5-hop re-rank"
    for pool, arms in summary["aggregate"].items():
        rows = []
        for arm, v in arms.items():
            figures = ("test/mrr", "test/hits@1", "test/hits@10", "rerank/mrr")
            rows.append(f"{arm} | {v['test/mrr']['seeds']} | " + " | ".join(fmt(v.get(f)) for f in figures))
        out += [f"### {pool}", "", grid(header, rows)]
        mrr = {(c["arm"], c["seed"]): c["result"]["test"]["mrr"] for c in summary["cells"] if c["pool"] == pool}
        for a, b in PAIRS:
            diffs = [mrr[a, s] - mrr[b, s] for arm, s in mrr if arm == a and (b, s) in mrr]
            if diffs:
                d = seed_interval(diffs)
                out.append(f"- paired MRR {a} − {b}: {d['mean']:+.3f} ± {d['half_width']:.3f} over {d['seeds']} seeds")
        out.append("")
    return "\n".join(out)
