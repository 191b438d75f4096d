"""The figures of docs/inference.md's bfloat16 table and docs/serve.md's length-sorting paragraph (issue 56).

    python benchmarks/dtype_and_sorting.py            # ~3 minutes on 2 threads; prints the CPU, then each figure

bfloat16 against float32 on 500 MRPC sentences + 500 nine-sentence paragraphs (cosine to the float32 rows; weights
cast against autocast; 128 paragraphs' speed), then serve's forward pass with and without length-sorted passes on
64-text batches (48 short + 16 long, and 64 short), in float32 and bfloat16.
"""

from __future__ import annotations

import copy
import subprocess
import time

import torch

from subspaces.config import dataset_dir
from subspaces.models.encoder import load_encoder
from subspaces.serve import engine as eng
from subspaces.serve.settings import ServeSettings


def mixed(n_short: int = 500, n_long: int = 500) -> tuple[list[str], list[str]]:
    lines = (dataset_dir("mrpc") / "msr_paraphrase_train.txt").read_text(encoding="utf-8").splitlines()[1:]
    sents = [s for parts in (line.split("\t") for line in lines) if len(parts) >= 5 for s in parts[3:5]]
    return sents[:n_short], [" ".join(sents[1000 + 9 * i : 1009 + 9 * i]) for i in range(n_long)]


def encode(model, texts: list[str], autocast: bool = False) -> torch.Tensor:
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        return model.encode(texts, batch_size=32, convert_to_tensor=True).float()


def dtype_figures() -> None:
    short, long = mixed()
    texts = [t for pair in zip(short, long, strict=True) for t in pair]
    model = load_encoder("minilm-l6").eval()
    cast = copy.deepcopy(model).to(torch.bfloat16)
    ref = encode(model, texts)
    for name, rows in (("autocast", encode(model, texts, True)), ("weights cast", encode(cast, texts))):
        cos = torch.nn.functional.cosine_similarity(rows, ref).numpy()
        print(f"{name}: cosine to float32 mean {cos.mean():.5f} min {cos.min():.5f}")
    for name, m, auto in (("float32", model, False), ("autocast", model, True), ("weights cast", cast, False)):
        encode(m, long[:16], auto)
        start = time.perf_counter()
        encode(m, long[:128], auto)
        print(f"{name}: 128 paragraphs {128 / (time.perf_counter() - start):.1f} texts/s")


def sorting_figures() -> None:
    short, long = mixed(480, 160)
    mixed_batches = [
        [short[b * 48 + 8 * i : b * 48 + 8 * i + 8] for i in range(6)]
        + [long[b * 16 + 8 * i : b * 16 + 8 * i + 8] for i in range(2)]
        for b in range(4)
    ]
    short_batches = [[short[64 * b + 8 * i : 64 * b + 8 * i + 8] for i in range(8)] for b in range(3)]
    sorted_passes = eng.passes
    for dtype in ("float32", "bfloat16"):
        engine = eng.Engine(ServeSettings(model="minilm-l6", dtype=dtype))
        for name, batches in (("48 short + 16 long", mixed_batches), ("64 short", short_batches)):
            for sort in (False, True):
                eng.passes = sorted_passes if sort else (lambda order, lengths: [order])  # type: ignore[assignment]
                best = float("inf")
                for _ in range(2):
                    start = time.perf_counter()
                    for requests in batches:
                        engine.forward(engine.join([engine.tokenize(r).inputs for r in requests]))
                    best = min(best, time.perf_counter() - start)
                rows = sum(len(r) for requests in batches for r in requests)
                print(f"serve forward, {dtype}, {name}, sorted={sort}: {rows / best:.1f} texts/s")
    eng.passes = sorted_passes


if __name__ == "__main__":
    torch.set_num_threads(2)
    print(subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True, text=True).stdout.strip())
    dtype_figures()
    sorting_figures()
