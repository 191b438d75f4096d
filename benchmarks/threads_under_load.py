"""The same commands under a competing CPU load: the default threading versus ``OMP_NUM_THREADS=1``.

Issue 23 item 10: on a busy 2-core machine the old default threading made ``align fit`` take > 300 s where
``OMP_NUM_THREADS=1`` took 23 s, and encoding 2,000 lines 35 s vs 14 s. This runs each command as a user would
(a fresh ``subspaces`` process, wall-clock time) while ``--load`` busy processes compete for the cores, under:

- ``default``: no thread variables set; the command picks its own (``subspaces.config.set_threads``);
- ``omp1``: ``OMP_NUM_THREADS=1``;
- ``all-cores``: as many threads as usable cores whatever the load (the count the default chose before it read the
  load average), with idle OpenMP threads sleeping;
- ``spin``: the default thread count with ``OMP_WAIT_POLICY=ACTIVE``, i.e. idle OpenMP threads busy-wait (what the
  new default turns off), to show what that part costs.

Run (the lead runs the full one; it takes several minutes)::

    nice -n 5 .venv/bin/python benchmarks/threads_under_load.py --out benchmarks/results/threads_under_load.json
    .venv/bin/python benchmarks/threads_under_load.py --smoke   # seconds: tiny inputs, one setting pair

The embeddings ``align fit`` reads are made once, before any timing, with no load.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUBSPACES = [sys.executable, "-m", "subspaces.cli.app"]
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "SUBSPACES_THREADS")
SETTINGS = {
    "default": {},
    "omp1": {"OMP_NUM_THREADS": "1"},
    # as many threads as cores, whatever the load (the previous default's count, with idle threads sleeping)
    "all-cores": {"SUBSPACES_THREADS": str(len(os.sched_getaffinity(0)))},
    "spin": {"OMP_WAIT_POLICY": "ACTIVE"},
}
# A single-threaded BLAS job that ends when this script does (also when it is killed: its parent changes).
BURN = (
    "import os\nimport numpy as np\nparent = os.getppid()\na = np.random.rand(256, 256)\n"
    "while os.getppid() == parent:\n    a @ a\n"
)


def corpus(n: int) -> list[str]:
    """The first ``n`` WordNet definitions (the shared data folder, as the commands find it)."""
    sys.path.insert(0, str(REPO / "src"))
    from subspaces.config import dataset_dir

    path = dataset_dir("wordnet_sentences") / "wordnet30_definitions.txt.gz"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for _, line in zip(range(n), handle, strict=False)]


def environment(setting: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    return env | SETTINGS[setting]


def timed(args: list[str], env: dict[str, str], limit: float) -> float | None:
    """Wall-clock seconds of one command; None if it ran past ``limit`` (then it is stopped)."""
    start = time.perf_counter()
    try:
        subprocess.run(
            args, env=env, check=True, cwd=REPO, timeout=limit, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
    except subprocess.TimeoutExpired:
        return None
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"{' '.join(args)} failed:\n{exc.stderr.decode(errors='replace')[-2000:]}") from None
    return time.perf_counter() - start


class Load:
    """``n`` busy single-threaded processes, started on entry and stopped on exit."""

    def __init__(self, n: int) -> None:
        self.n, self.procs = n, []

    def __enter__(self) -> Load:
        env = os.environ | {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        self.procs = [subprocess.Popen([sys.executable, "-c", BURN], env=env) for _ in range(self.n)]
        # The default reads the one-minute load average: wait until it shows the load, as it would on a machine
        # that has been busy for a while (at most 90 s).
        deadline = time.monotonic() + 90
        while os.getloadavg()[0] < 0.9 * self.n and time.monotonic() < deadline:
            time.sleep(2.0)
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=2000, help="texts encoded (encode) and rows per side (align fit)")
    parser.add_argument("--load", type=int, default=None, help="competing busy processes (default: the usable cores)")
    parser.add_argument("--settings", default="default,omp1,all-cores", help="which of: " + ", ".join(SETTINGS))
    parser.add_argument("--commands", default="encode,align-fit", help="which of: encode, align-fit")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds after which a command is stopped")
    parser.add_argument("--smoke", action="store_true", help="tiny inputs, encode only, default vs omp1, load 1")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.smoke:
        args.lines, args.settings, args.commands, args.limit = 50, "default,omp1", "encode", 120.0
        args.load = 1 if args.load is None else args.load

    sys.path.insert(0, str(REPO / "src"))
    from subspaces.config import available_cpus

    cpus = available_cpus()
    load = cpus if args.load is None else args.load
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    commands = [c.strip() for c in args.commands.split(",") if c.strip()]
    with tempfile.TemporaryDirectory(prefix="threads-under-load-") as scratch:
        work = Path(scratch)
        texts = corpus(2 * args.lines)
        (work / "a.txt").write_text("\n".join(texts[: args.lines]) + "\n", encoding="utf-8")
        (work / "b.txt").write_text("\n".join(texts[args.lines :]) + "\n", encoding="utf-8")
        runs = {
            "encode": [*SUBSPACES, "encode", "-m", "minilm-l6", "-i", str(work / "a.txt"), "-o", str(work / "e.npy")],
            "align-fit": [
                *SUBSPACES,
                "align",
                "fit",
                "--source-emb",
                str(work / "src.npy"),
                "--target-emb",
                str(work / "tgt.npy"),
                "--output",
                str(work / "aligner"),
            ],
        }
        if "align-fit" in commands:  # the inputs, made once without load or timing
            for model, text, emb in (("minilm-l6", "a.txt", "src.npy"), ("paraphrase-l3", "b.txt", "tgt.npy")):
                subprocess.run(
                    [*SUBSPACES, "encode", "-m", model, "-i", str(work / text), "-o", str(work / emb)],
                    check=True,
                    cwd=REPO,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
        results = []
        with Load(load):
            for command in commands:
                for setting in settings:
                    seconds = timed(runs[command], environment(setting), args.limit)
                    results.append({"command": command, "setting": setting, "seconds": seconds})
                    shown = f"{seconds:.1f} s" if seconds is not None else f"> {args.limit:.0f} s (stopped)"
                    print(f"{command:10s} {setting:8s} {shown}", flush=True)
    report = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {cpus} usable by this process",
        "load": f"{load} busy single-threaded numpy processes",
        "lines": args.lines,
        "settings": {s: SETTINGS[s] for s in settings},
        "results": results,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
