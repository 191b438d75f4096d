"""Step time of full versus partial fine-tuning (issue 16): minilm-l6, SimCSE's unsupervised loss, WordNet sentences.

Every arm ("all", then --trainable-layers 1 and 2) trains a fresh copy of the model in this one process, on the same
threads, with the same batches; the arms take turns (the order rotates each repeat) so load on the machine falls on
all of them alike, and each arm's figure is the median step time over its timed steps. The activation cache is
built before the first step and timed apart. Peak memory is measured by running each arm alone in a subprocess
(its RSS high-water mark, and the mark before the model loads: imports and data), since arms sharing a process
share its peak.

    python benchmarks/partial_ft_speed.py                       # writes benchmarks/results/partial_ft_speed.json
    python benchmarks/partial_ft_speed.py --steps 1 --repeats 1 --output /tmp/smoke.json   # a smoke test
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def _arm_name(layers: int | None) -> str:
    return "all" if layers is None else f"top {layers}"


def _parse_arm(text: str) -> int | None:
    return None if text == "all" else int(text)


class Arm:
    """One model under one --trainable-layers setting, with its optimiser and the SimCSE loss step."""

    def __init__(self, args: argparse.Namespace, layers: int | None, texts: list[str]) -> None:
        import torch

        from subspaces.losses.simcse import SimCSELoss
        from subspaces.models.encoder import load_encoder
        from subspaces.models.partial import partial_fine_tuning
        from subspaces.train.sentence import loss_step

        torch.manual_seed(args.seed)
        self.name = _arm_name(layers)
        self.model = load_encoder(args.model)
        self.model.max_seq_length = args.max_length
        self.model.train()
        self.cache_seconds = 0.0
        self.pft = partial_fine_tuning(self.model, layers, show_progress=False)
        if self.pft is not None:
            start = time.perf_counter()
            self.pft.prepare(texts)
            self.cache_seconds = time.perf_counter() - start
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.trainable = sum(p.numel() for p in params)
        self.optimizer = torch.optim.AdamW(params, lr=3e-5)
        self.step_fn = loss_step(self.model, SimCSELoss(self.model, temperature=0.05))

    def step(self, rows: list[tuple[str, ...]]) -> float:
        """One optimiser step; its wall time in seconds."""
        start = time.perf_counter()
        loss = self.step_fn(rows)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return time.perf_counter() - start


def _sentences(n: int) -> list[str]:
    from subspaces.data.text import wordnet_sentences

    texts = wordnet_sentences()
    if len(texts) < n:
        raise SystemExit(f"need {n} sentences, WordNet has {len(texts)}")
    return texts[:n]


def _batches(args: argparse.Namespace) -> list[list[tuple[str, ...]]]:
    """Every batch an arm will see (warm-up, then the timed ones), distinct sentences throughout."""
    from subspaces.train.sentence import RowBatches

    count = args.warmup + args.steps * args.repeats
    rows = [(s,) for s in _sentences(count * args.batch_size)]
    source = RowBatches(rows, args.batch_size, args.seed, rank=0, world=1)
    return [source.batch(0, i) for i in range(count)]


def _configure_threads(threads: int | None) -> int:
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def run_speed(args: argparse.Namespace) -> dict[str, Any]:
    threads = _configure_threads(args.threads)
    batches = _batches(args)
    texts = [row[0] for batch in batches for row in batch]
    arms = [Arm(args, _parse_arm(a), texts) for a in args.arms.split(",")]
    for arm in arms:  # warm-up: allocator, kernels, the first backward
        for rows in batches[: args.warmup]:
            arm.step(rows)
    times: dict[str, list[float]] = {arm.name: [] for arm in arms}
    for repeat in range(args.repeats):
        start = args.warmup + repeat * args.steps
        order = arms[repeat % len(arms) :] + arms[: repeat % len(arms)]  # rotate who goes first
        for arm in order:
            for rows in batches[start : start + args.steps]:
                times[arm.name].append(arm.step(rows))
    full = statistics.median(times["all"]) if "all" in times else None
    result: dict[str, Any] = {"threads": threads, "arms": {}}
    for arm in arms:
        median = statistics.median(times[arm.name])
        result["arms"][arm.name] = {
            "median_step_seconds": median,
            "step_seconds": times[arm.name],
            "speedup_vs_all": full / median if full else None,
            "trainable_parameters": arm.trainable,
            "cache_build_seconds": arm.cache_seconds,
            "cached_texts": len(set(texts)) if arm.pft is not None else 0,
        }
    return result


def run_memory_arm(args: argparse.Namespace) -> dict[str, Any]:
    """One arm alone (called in a subprocess): peak RSS after building the cache and training the steps."""
    _configure_threads(args.threads)
    batches = _batches(args)
    texts = [row[0] for batch in batches for row in batch]
    before = _peak_rss_mb()
    arm = Arm(args, _parse_arm(args.memory_arm), texts)
    for rows in batches:
        arm.step(rows)
    return {"arm": arm.name, "peak_rss_mb": _peak_rss_mb(), "rss_before_arm_mb": before}


def _peak_rss_mb() -> float:
    """This process's RSS high-water mark. Not ``ru_maxrss``: Linux carries that over from the parent across
    fork + exec, so a subprocess of a large parent reports the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux: no /proc


def run_memory(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    peaks = {}
    for arm in args.arms.split(","):
        command = [sys.executable, __file__, *_passthrough(args), "--memory-arm", arm]
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        line = json.loads(done.stdout.strip().splitlines()[-1])
        peaks[line["arm"]] = line
    return peaks


def _passthrough(args: argparse.Namespace) -> list[str]:
    out = [
        "--model",
        args.model,
        "--batch-size",
        str(args.batch_size),
        "--max-length",
        str(args.max_length),
        "--steps",
        str(args.steps),
        "--repeats",
        str(args.repeats),
        "--warmup",
        str(args.warmup),
        "--seed",
        str(args.seed),
    ]
    return out + (["--threads", str(args.threads)] if args.threads is not None else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--arms", default="all,1,2", help="comma-separated: all and/or numbers of top layers")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per arm per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per arm first")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-memory", action="store_true", help="skip the per-arm subprocesses")
    parser.add_argument("--output", type=Path, default=RESULTS / "partial_ft_speed.json")
    parser.add_argument("--memory-arm", default=None, help=argparse.SUPPRESS)  # internal: one arm, for its peak RSS
    args = parser.parse_args()
    if args.memory_arm is not None:
        print(json.dumps(run_memory_arm(args)))
        return
    import torch

    from subspaces.io import save_json

    result = run_speed(args)
    if not args.no_memory:
        for name, memory in run_memory(args).items():
            result["arms"][name]["peak_rss_mb"] = memory["peak_rss_mb"]
            result["arms"][name]["peak_rss_before_model_mb"] = memory["rss_before_arm_mb"]
    payload = {
        "benchmark": "partial fine-tuning step time (issue 16)",
        "settings": {k: v for k, v in vars(args).items() if k not in ("output", "memory_arm")},
        **result,
        "target": "speedup_vs_all >= 2.5 at top 2",
        "machine": {
            "platform": platform.platform(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "date": str(date.today()),
        },
        "command": " ".join(["python", *sys.argv]),
    }
    save_json(args.output, payload)
    for name, arm in result["arms"].items():
        speed = f"{arm['speedup_vs_all']:.2f}x" if arm["speedup_vs_all"] else "-"
        peak = f"{arm['peak_rss_mb']:.0f} MB" if "peak_rss_mb" in arm else "-"
        print(
            f"{name:>6}: {arm['median_step_seconds']:.3f} s/step ({speed}), cache {arm['cache_build_seconds']:.1f} s, "
            f"peak RSS {peak}"
        )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
