"""``encode`` at 1 thread, at every usable core and on the default, with 0, 1 and 2 competing busy processes.

The question: on a busy machine, is ``encode`` faster at one thread (what the load-aware default,
``subspaces.config.default_threads``, picks there) or at every usable core? ``benchmarks/threads_under_load.py``
answers it for whole commands (``align fit`` collapses with a pool as wide as the cores under load; ``encode`` did
not: 41.3 s with 2 threads against 53.3 s with 1). This times the encoding alone (model loading excluded), each
timing in a fresh process that sets its threads before torch loads, as a command does (so idle OpenMP threads
sleep: ``OMP_WAIT_POLICY=PASSIVE``), the two counts alternating so that drifting load from other work falls on both
alike. ``default``: ``set_threads()``'s load-aware count, with encoding's exception
(``subspaces.config.encoding_threads``; issue 51 item 4)::

    nice -n 5 .venv/bin/python benchmarks/encode_threads.py --out benchmarks/results/encode_threads.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# One timing: threads set first (as a command's set_threads), then the model, a warm-up, and the timed encode.
TIMED = """
import gzip, sys, time
from subspaces.config import dataset_dir, encoding_threads, set_threads
chosen = set_threads(None if sys.argv[1] == "default" else int(sys.argv[1]))
import torch
from subspaces.models.encoder import encode, load_encoder
with gzip.open(dataset_dir("wordnet_sentences") / "wordnet30_definitions.txt.gz", "rt", encoding="utf-8") as fh:
    texts = [line.strip() for _, line in zip(range(int(sys.argv[2])), fh)]
model = load_encoder("minilm-l6")
encode(model, texts[:64])
start = time.perf_counter()
encode(model, texts, batch_size=64)
print(time.perf_counter() - start, chosen, encoding_threads() or torch.get_num_threads())
"""
# A single-threaded BLAS job that ends when this script does (also when it is killed: its parent changes).
BURN = (
    "import os\nimport numpy as np\nparent = os.getppid()\na = np.random.rand(256, 256)\n"
    "while os.getppid() == parent:\n    a @ a\n"
)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=600, help="WordNet definitions encoded per timing")
    parser.add_argument("--repeats", type=int, default=3, help="timings per thread count and load")
    parser.add_argument("--loads", default="0,1,2", help="competing busy processes, one setting each")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    sys.path.insert(0, str(REPO / "src"))
    from subspaces.config import available_cpus

    cores = available_cpus()
    counts: list[int | str] = [*sorted({1, cores}), "default"]
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    results = []
    for load in [int(x) for x in args.loads.split(",")]:
        env = os.environ | {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        burners = [subprocess.Popen([sys.executable, "-c", BURN], env=env) for _ in range(load)]
        try:
            time.sleep(2.0 if load else 0.0)
            for repeat in range(args.repeats):
                for threads in counts if repeat % 2 == 0 else counts[::-1]:
                    run = [sys.executable, "-c", TIMED, str(threads), str(args.texts)]
                    done = subprocess.run(run, env=clean, cwd=REPO, capture_output=True, text=True, check=True)
                    seconds, chosen, used = done.stdout.strip().splitlines()[-1].split()
                    row = {"load": load, "threads": threads, "seconds": round(float(seconds), 3)}
                    row |= {"default_count": int(chosen), "encoded_on": int(used)}
                    row["loadavg_1min"] = round(os.getloadavg()[0], 2)
                    results.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            for proc in burners:
                proc.terminate()
            for proc in burners:
                proc.wait()
    summary = {}
    for load in sorted({r["load"] for r in results}):
        best = {t: min(r["seconds"] for r in results if r["load"] == load and r["threads"] == t) for t in counts}
        summary[str(load)] = {f"{t} (best s)": best[t] for t in counts} | {
            "1 thread / all cores": round(best[1] / best[cores], 3),
            "default / all cores": round(best["default"] / best[cores], 3),
        }
    report = {
        "cpu": cpu_model(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {cores} usable by this process",
        "model": "minilm-l6",
        "texts": args.texts,
        "note": "other work (this project's test runs) shared the machine too: loadavg_1min says how much",
        "summary": summary,
        "results": results,
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
