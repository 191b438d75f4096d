"""Loopback load test of ``subspaces serve`` beside infinity-emb (issue 56; docs/serve.md "Load test" says what it
measures and how to install infinity-emb in its own venv): each server in its own subprocess on 127.0.0.1 only,
one at a time.

    python benchmarks/serve_load.py --duration 15   # about 5 minutes: results/serve_vs_infinity.json
    python benchmarks/serve_load.py --smoke         # under a minute: both servers start and answer (a temporary file)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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


def run_server(options: dict[str, Any]) -> None:
    """Our server in this process (``serve_load.py --serve JSON``: settings, threads, port)."""
    import uvicorn

    from subspaces.config import set_threads
    from subspaces.serve.app import create_app
    from subspaces.serve.settings import ServeSettings

    set_threads(options.pop("threads"))
    port = options.pop("port")
    uvicorn.run(create_app(ServeSettings(**options)), host=HOST, port=port, log_level="warning", access_log=False)


class Server:
    """One server subprocess on a free loopback port; a context manager that waits for /health and stops it."""

    def __init__(self, args: argparse.Namespace, ours: dict[str, Any] | None) -> None:
        with socket.socket() as sock:
            sock.bind((HOST, 0))
            self.kind, self.port = "infinity" if ours is None else "ours", int(sock.getsockname()[1])
        self.env, self.path = {**os.environ, "HF_HUB_OFFLINE": "1"}, "/v1/embeddings"
        if ours is None:
            from subspaces.models.encoder import resolve_model_path

            model = str(resolve_model_path(args.model))
            self.command = [str(args.infinity / "bin" / "infinity_emb"), "v2", "--model-id", model, "--host", HOST]
            self.command += ["--port", str(self.port), "--engine", "torch", "--device", "cpu"]
            self.command += ["--dtype", args.infinity_dtype]
            self.env["OMP_NUM_THREADS"] = str(args.threads)  # torch's intra-op threads, as ours are set
            self.path = "/embeddings"
        else:
            settings = ours | {n: getattr(args, n) for n in ("max_batch_tokens", "max_wait_ms", "max_queue", "threads")}
            self.command = [sys.executable, __file__, "--serve", json.dumps(settings | {"port": self.port})]
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


async def load(
    url: str, texts: list[str], concurrency: int, seconds: float, path: str = "/v1/embeddings", per_request: int = 1
) -> dict[str, Any]:
    """``concurrency`` clients posting ``per_request`` texts each (one: a bare string), back to back, ``seconds``."""
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
    ok, ordered = codes.get("200", 0), sorted(latencies)
    row: dict[str, Any] = {"concurrency": concurrency, "seconds": round(elapsed, 2)}
    row |= {"requests_per_s": round(ok / elapsed, 2), "texts_per_s": round(ok * per_request / elapsed, 2)}
    row["p50_ms"] = round(1000 * statistics.median(latencies), 2) if latencies else None
    row["p99_ms"] = round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2) if latencies else None
    fivexx = sum(n for c, n in codes.items() if c.startswith("5"))
    return row | {"status": codes, "5xx": fivexx, "retry_after": sorted(retry_after)}


def against_infinity(args: argparse.Namespace) -> dict[str, Any]:
    """Ours and infinity-emb, one server at a time, on short and long texts at each level: texts/s, p50/p99."""
    from subspaces.data.text import wordnet_sentences
    from subspaces.models.backends import resolve_dtype
    from subspaces.numerics import cpu_model, native_bfloat16, native_int8
    from subspaces.serve.settings import ServeSettings

    args.infinity_dtype = args.infinity_dtype or ("bfloat16" if native_bfloat16() else "float32")
    short = wordnet_sentences()[: args.texts]
    # long texts: 9 consecutive sentences each (the model reads at most its 256 tokens)
    long = [" ".join(short[(i * 9 + j) % len(short)] for j in range(9)) for i in range(max(64, args.texts // 9))]
    kinds = {"short": short, "long": long}
    result: dict[str, Any] = {"date": str(date.today()), "model": args.model, "cpu": cpu_model()}
    result |= {"native_bfloat16": native_bfloat16(), "native_int8": native_int8(), "threads": args.threads}
    result |= {"cpus": os.cpu_count(), "duration_s": args.duration, "texts_per_request": args.per_request}
    result["infinity_config"] = f"infinity-emb, torch --dtype {args.infinity_dtype}, its other defaults"
    result["note"] = "client and servers share this machine's cores; one server at a time"
    servers: list[tuple[str, dict[str, Any] | None]] = []  # each server's label and our settings (None: infinity)
    for config in args.ours.split(","):  # backend:precision:dtype
        backend, precision, dtype = (config.split(":") + ["", ""])[:3]  # "auto": the server picks
        ours = {"model": args.model, "backend": backend, "precision": precision or None, "dtype": dtype or None}
        runtime = ServeSettings(**ours).runtime
        ran = f"{runtime[0]}:{runtime[1]}:{resolve_dtype(runtime[2], runtime[0])}"
        servers.append((f"ours {config} = {ran}", ours))
    servers.append((f"infinity {args.infinity_dtype}", None))
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for label, settings in servers:
        with Server(args, settings) as server:
            for name, texts in kinds.items():
                asyncio.run(load(server.url, texts, max(args.levels), args.warmup, server.path, args.per_request))
                for level in args.levels:
                    row = asyncio.run(load(server.url, texts, level, args.duration, server.path, args.per_request))
                    print(f"{label:32s} {name:5s} c={level:3d}: {row['texts_per_s']:8.1f} texts/s  p50 {row['p50_ms']} "
                          f"ms  p99 {row['p99_ms']} ms  {row['status']}", flush=True)  # fmt: skip
                    rows.setdefault(label, {}).setdefault(name, []).append(row)
    result["servers"] = rows
    peer, ratio = rows[servers[-1][0]], lambda a, b: round(a / b, 2) if a is not None and b else None
    result["ratio_over_infinity"] = {
        label: {
            f"{name} c={o['concurrency']}": {
                "texts_per_s": ratio(o["texts_per_s"], i["texts_per_s"]), "p99": ratio(o["p99_ms"] or None, i["p99_ms"])
            }
            for name in kinds
            for o, i in zip(rows[label][name], peer[name], strict=True)
        }
        for label, _ in servers[:-1]
    }  # fmt: skip
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
    parser.add_argument("--max-queue", type=int, default=256)
    parser.add_argument("--output", type=Path, help="Default: results/serve_vs_infinity.json.")
    parser.add_argument("--smoke", action="store_true", help="A few seconds per phase: checks the script only.")
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # the server subprocess: its settings as JSON
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.serve:
        run_server(json.loads(args.serve))
        return
    if args.smoke:
        args.duration, args.warmup, args.texts = 2.0, 1.0, 200
    smoke = Path(tempfile.gettempdir()) / "serve_load_smoke.json"
    args.output = args.output or (smoke if args.smoke else RESULTS / "serve_vs_infinity.json")
    result = against_infinity(args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["ratio_over_infinity"], indent=1), f"-> {args.output}")


if __name__ == "__main__":
    main()
