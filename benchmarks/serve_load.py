"""Loopback load test of ``subspaces serve`` beside infinity-emb (issue 56; docs/serve.md "Load test" says what it
measures and how to install infinity-emb in its own venv): each server in its own subprocess on 127.0.0.1 only,
one at a time; ``--checks`` runs ours alone (equal embeddings, a soak, an overload burst).

    python benchmarks/serve_load.py --duration 15   # about 5 minutes: results/serve_vs_infinity.json
    python benchmarks/serve_load.py --smoke         # under a minute: both servers start and answer (a temporary file)
    python benchmarks/serve_load.py --checks        # ours alone, about 11 minutes: results/serve_checks.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
HOST = "127.0.0.1"  # loopback only, by design


# --- our server (run as `serve_load.py --serve`, in a subprocess) ---------------------------------------------------
def run_server(args: argparse.Namespace) -> None:
    import uvicorn

    from subspaces.config import set_threads
    from subspaces.serve.app import create_app
    from subspaces.serve.settings import ServeSettings

    set_threads(args.threads)
    names = ("model", "max_batch_tokens", "max_wait_ms", "max_queue", "backend", "precision", "dtype")
    settings = ServeSettings(**{name: getattr(args, name) for name in names})
    uvicorn.run(create_app(settings), host=HOST, port=args.port, log_level="warning", access_log=False)


# --- the load generator ------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class Server:
    """One server subprocess on a free loopback port; a context manager that waits for /health and stops it."""

    def __init__(self, kind: str, args: argparse.Namespace, max_queue: int) -> None:
        self.kind, self.port = kind, free_port()
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        self.path = "/v1/embeddings"
        if kind == "infinity":
            from subspaces.models.encoder import resolve_model_path

            model = str(resolve_model_path(args.model))
            command = [str(args.infinity / "bin" / "infinity_emb"), "v2", "--model-id", model, "--host", HOST]
            command += ["--port", str(self.port), "--engine", "torch", "--device", "cpu"]
            command += ["--dtype", args.infinity_dtype]
            self.env["OMP_NUM_THREADS"] = str(args.threads)  # torch's intra-op threads, as ours are set
            self.path = "/embeddings"
        else:
            command = [sys.executable, __file__, "--serve", "--port", str(self.port), "--model", args.model]
            command += ["--threads", str(args.threads), "--max-queue", str(max_queue)]
            command += ["--max-batch-tokens", str(args.max_batch_tokens), "--max-wait-ms", str(args.max_wait_ms)]
            command += ["--backend", args.backend]
            command += [f"--{name}={getattr(args, name)}" for name in ("precision", "dtype") if getattr(args, name)]
        self.command = command
        self.url = f"http://{HOST}:{self.port}"

    def __enter__(self) -> Server:
        self.process = subprocess.Popen(self.command, env=self.env)
        import httpx

        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"the {self.kind} server exited with {self.process.returncode}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"the {self.kind} server did not become ready")

    def __exit__(self, *_exc: object) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")


async def load(
    url: str, texts: list[str], concurrency: int, seconds: float, path: str = "/v1/embeddings", per_request: int = 1
) -> dict[str, Any]:
    """``concurrency`` clients sending ``per_request`` texts per request (one: a bare string), back to back, for
    ``seconds``, to ``path``."""
    import httpx

    latencies: list[float] = []
    codes: dict[str, int] = {}
    retry_after: set[str] = set()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        stop = time.monotonic() + seconds

        async def worker(offset: int) -> None:
            i = offset
            while time.monotonic() < stop:
                start = time.perf_counter()
                picked = [texts[(i + j) % len(texts)] for j in range(per_request)]
                body = picked[0] if per_request == 1 else picked
                try:
                    response = await client.post(path, json={"input": body})
                    code = str(response.status_code)
                    if response.status_code == 503:
                        retry_after.add(response.headers.get("retry-after", "missing"))
                except httpx.HTTPError as exc:
                    code = type(exc).__name__
                codes[code] = codes.get(code, 0) + 1
                if code == "200":
                    latencies.append(time.perf_counter() - start)
                i += concurrency * per_request

        began = time.perf_counter()
        await asyncio.gather(*(worker(c) for c in range(concurrency)))
        elapsed = time.perf_counter() - began
    ok = codes.get("200", 0)
    fivexx = sum(n for c, n in codes.items() if c.startswith("5"))
    return {
        "concurrency": concurrency,
        "seconds": round(elapsed, 2),
        "requests_per_s": round(ok / elapsed, 2),
        "texts_per_s": round(ok * per_request / elapsed, 2),
        "p50_ms": round(1000 * statistics.median(latencies), 2) if latencies else None,
        "p99_ms": round(1000 * _quantile(latencies, 0.99), 2) if latencies else None,
        "status": codes,
        "5xx": fivexx,
        "retry_after": sorted(retry_after),
    }


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def overload(server: Server, texts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """A burst far past the queue, then sequential requests: are the refusals 503s, and does it recover?"""
    import httpx

    before = server.rss_mb()
    burst = asyncio.run(load(server.url, texts, args.overload_concurrency, args.overload_seconds))
    after = server.rss_mb()
    recovery = [
        httpx.post(server.url + "/v1/embeddings", json={"input": t}, timeout=30).status_code for t in texts[:20]
    ]
    return {
        "queue": args.overload_queue,
        "concurrency": args.overload_concurrency,
        "burst": burst,
        "non_503_5xx": burst["5xx"] - burst["status"].get("503", 0),
        "recovered": all(code == 200 for code in recovery),
        "rss_mb_before": round(before, 1),
        "rss_mb_after": round(after, 1),
        "retry_after_on_503": burst["retry_after"],
    }


def soak(server: Server, texts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Concurrency 8 for ``--soak`` seconds, the server's RSS sampled every ``--soak-every`` seconds."""
    samples = []
    rounds = max(1, int(args.soak // args.soak_every))
    total: dict[str, int] = {}
    for _ in range(rounds):
        row = asyncio.run(load(server.url, texts, 8, args.soak_every))
        for code, n in row["status"].items():
            total[code] = total.get(code, 0) + n
        samples.append(round(server.rss_mb(), 1))
    third = max(1, len(samples) // 3)
    growth = statistics.median(samples[-third:]) - statistics.median(samples[:third])
    five_xx = sum(n for code, n in total.items() if code.startswith("5"))
    return {
        "seconds": rounds * args.soak_every,
        "rss_mb": samples,
        "rss_growth_mb": round(growth, 1),  # median of the last third of the samples minus that of the first
        "status": total,
        "5xx": five_xx,
    }


def targets(result: dict[str, Any]) -> dict[str, Any]:
    """The checks' targets, each on this run's figures (None where the run did not measure it)."""
    soak_, overload_ = result.get("soak"), result["overload"]
    return {
        "embeddings_equal_encode_1e-5": max(result["max_abs_diff_vs_encode"].values()) <= 1e-5,
        "no_5xx_below_saturation": None if soak_ is None else soak_["5xx"] == 0,
        # flat: the RSS grew by under 5% (and at least 20 MB of slack, for allocator noise) over the soak
        "soak_memory_flat": None
        if soak_ is None
        else soak_["rss_growth_mb"] <= max(20.0, 0.05 * statistics.median(soak_["rss_mb"])),
        "overload_503s_only_then_recovers": overload_["burst"]["status"].get("503", 0) > 0
        and overload_["non_503_5xx"] == 0
        and overload_["recovered"],
    }


def check_equal(server: Server, texts: list[str], args: argparse.Namespace) -> dict[str, float]:
    """The largest difference between served rows and what ``subspaces model encode --normalize`` writes, over a few
    texts, keyed by the rows' size (full size only: ``dimensions`` below it is refused for a model not trained for
    truncation, issue 56)."""
    import httpx
    import numpy as np

    sample = [t for t in texts if t.strip() and "\n" not in t][:16]  # encode reads one text per line
    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / "in.txt", Path(tmp) / "out.npy"
        source.write_text("\n".join(sample) + "\n", encoding="utf-8")
        command = [sys.executable, "-m", "subspaces.cli.app", "model", "encode", "-m", args.model, "--normalize"]
        command += ["-i", str(source), "-o", str(target), "--threads", str(args.threads)]
        subprocess.run(command, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL)
        want = np.load(target)
    served = httpx.post(server.url + "/v1/embeddings", json={"input": sample}, timeout=60).json()["data"]
    return {str(want.shape[1]): float(np.abs(np.array([d["embedding"] for d in served]) - want).max())}


def sentences(n: int) -> list[str]:
    from subspaces.data.text import wordnet_sentences

    return wordnet_sentences()[:n]


def paragraphs(texts: list[str], n: int, joined: int = 9) -> list[str]:
    """``n`` long texts, each ``joined`` consecutive sentences (the model reads at most its 256 tokens)."""
    return [" ".join(texts[(i * joined + j) % len(texts)] for j in range(joined)) for i in range(n)]


def against_infinity(args: argparse.Namespace) -> dict[str, Any]:
    """Ours and infinity-emb, one server at a time, on short and long texts at each level: texts/s, p50/p99."""
    from subspaces.models.backends import resolve_dtype
    from subspaces.numerics import cpu_model, native_bfloat16, native_int8
    from subspaces.serve.settings import ServeSettings

    args.infinity_dtype = args.infinity_dtype or ("bfloat16" if native_bfloat16() else "float32")
    short = sentences(args.texts)
    kinds = {"short": short, "long": paragraphs(short, max(64, args.texts // 9))}
    result: dict[str, Any] = {
        "date": str(date.today()),
        "model": args.model,
        "cpu": cpu_model(),
        "native_bfloat16": native_bfloat16(),
        "native_int8": native_int8(),
        "threads": args.threads,
        "cpus": os.cpu_count(),
        "duration_s": args.duration,
        "texts_per_request": args.per_request,
        "infinity_config": f"infinity-emb, torch --dtype {args.infinity_dtype}, its other defaults",
        "note": "client and servers share this machine's cores; one server at a time",
    }
    servers: list[tuple[str, str, argparse.Namespace]] = []
    for config in args.ours.split(","):  # backend:precision:dtype
        backend, precision, dtype = (config.split(":") + ["", ""])[:3]  # "auto": the server picks
        precision, dtype = precision or None, dtype or None
        ours = argparse.Namespace(**{**vars(args), "backend": backend, "precision": precision, "dtype": dtype})
        runtime = ServeSettings(model=args.model, backend=backend, precision=precision, dtype=dtype).runtime
        ran = f"{runtime[0]}:{runtime[1]}:{resolve_dtype(runtime[2], runtime[0])}"
        servers.append((f"ours {config} = {ran}", "ours", ours))
    servers.append((f"infinity {args.infinity_dtype}", "infinity", args))
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for label, kind, options in servers:
        with Server(kind, options, args.max_queue) as server:
            for name, texts in kinds.items():
                asyncio.run(load(server.url, texts, max(args.levels), args.warmup, server.path, args.per_request))
                for level in args.levels:
                    row = asyncio.run(load(server.url, texts, level, args.duration, server.path, args.per_request))
                    print(
                        f"{label:32s} {name:5s} c={level:3d}: {row['texts_per_s']:8.1f} texts/s  "
                        f"p50 {row['p50_ms']} ms  p99 {row['p99_ms']} ms  {row['status']}",
                        flush=True,
                    )
                    rows.setdefault(label, {}).setdefault(name, []).append(row)
    result["servers"] = rows
    peer = rows[servers[-1][0]]
    result["ratio_over_infinity"] = {
        label: {
            f"{name} c={o['concurrency']}": {
                "texts_per_s": round(o["texts_per_s"] / i["texts_per_s"], 2) if i["texts_per_s"] else None,
                "p99": round(o["p99_ms"] / i["p99_ms"], 2) if o["p99_ms"] and i["p99_ms"] else None,
            }
            for name in kinds
            for o, i in zip(rows[label][name], peer[name], strict=True)
        }
        for label, _, _ in servers[:-1]
    }
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--threads", type=int, default=2, help="Torch threads of each server.")
    parser.add_argument("--duration", type=float, default=60.0, help="Seconds per concurrency level.")
    parser.add_argument("--levels", type=lambda s: list(map(int, s.split(","))), default="1,32", help="Concurrencies.")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--texts", type=int, default=2000, help="Distinct WordNet sentences cycled through.")
    parser.add_argument("--per-request", type=int, default=8, help="Texts a request.")
    parser.add_argument("--ours", default="auto,torch:fp32:auto,onnx:int8:float32", help="backend:precision:dtype,...")
    parser.add_argument("--infinity", type=Path, default=Path("/work/peers/infinity"), help="infinity-emb's venv.")
    parser.add_argument("--infinity-dtype", default=None, help="Default: bfloat16 where the CPU has it natively.")
    parser.add_argument("--max-batch-tokens", type=int, default=16384)
    parser.add_argument("--max-wait-ms", type=float, default=0.0)
    parser.add_argument("--max-queue", type=int, default=256, help="Ours, except in the overload burst.")
    parser.add_argument("--output", type=Path, help="Default: results/serve_vs_infinity.json, or serve_checks.json.")
    parser.add_argument("--smoke", action="store_true", help="A few seconds per phase: checks the script only.")
    parser.add_argument("--checks", action="store_true", help="Ours alone: equal embeddings, soak, overload.")
    parser.add_argument("--backend", default="torch", help="--checks: torch, onnx or openvino.")
    parser.add_argument("--precision", default=None, help="--checks: fp32 or int8 (default: the backend's).")
    parser.add_argument("--dtype", default=None, help="--checks: float32, bfloat16 or auto (default: float32).")
    parser.add_argument("--overload-queue", type=int, default=8, help="--checks: the queue in the overload burst.")
    parser.add_argument("--overload-concurrency", type=int, default=128)
    parser.add_argument("--overload-seconds", type=float, default=10.0)
    parser.add_argument("--soak-seconds", "--soak", dest="soak", type=float, default=600.0, help="--checks (0: none).")
    parser.add_argument("--soak-every", type=float, default=10.0, help="Seconds between RSS samples in the soak.")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the server subprocess
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.serve:
        run_server(args)
        return
    if args.smoke:
        args.duration, args.warmup, args.overload_seconds = 2.0, 1.0, 2.0
        args.soak, args.soak_every, args.texts = 6.0, 2.0, 200
    if args.output is None:
        name = "serve_checks.json" if args.checks else "serve_vs_infinity.json"
        args.output = Path(tempfile.gettempdir()) / "serve_load_smoke.json" if args.smoke else RESULTS / name
    result = checks(args) if args.checks else against_infinity(args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["targets" if args.checks else "ratio_over_infinity"], indent=1), f"-> {args.output}")


def checks(args: argparse.Namespace) -> dict[str, Any]:
    """Ours alone: served rows against ``model encode``'s, the soak, the overload burst; the targets on them."""
    from subspaces.numerics import cpu_model

    texts = sentences(args.texts)
    result: dict[str, Any] = {
        "date": str(date.today()),
        "model": args.model,
        "cpu": cpu_model(),
        "threads": args.threads,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "smoke": args.smoke,
        "texts": len(texts),
        "batching": {"max_batch_tokens": args.max_batch_tokens, "max_wait_ms": args.max_wait_ms},
        "ours": f"{args.backend}:{args.precision}:{args.dtype}",
        "note": "client and server share this machine's cores; one WordNet sentence per request",
    }
    with Server("ours", args, args.max_queue) as server:
        result["max_abs_diff_vs_encode"] = check_equal(server, texts, args)
        if args.soak:
            result["soak"] = soak(server, texts, args)
    with Server("ours", args, args.overload_queue) as server:
        result["overload"] = overload(server, texts, args)
    result["targets"] = targets(result)
    return result


if __name__ == "__main__":
    main()
