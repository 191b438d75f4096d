#!/usr/bin/env bash
# End-to-end outputs a refactor must not change (issue 54): the STS table, a SimCSE step, an align fit, a store
# search and a served embedding, written to OUT as JSON/text. Run before and after, then: diff -r BEFORE AFTER
# (timings are left out of what is written). Usage: .ci/e2e_outputs.sh OUT   (~3 min on 2 cores)
set -euo pipefail
OUT=$(realpath -m "$1"); mkdir -p "$OUT"; WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
S="${SUBSPACES:-.venv/bin/subspaces}"; PY="${PYTHON:-.venv/bin/python}"
export SUBSPACES_THREADS=2 SUBSPACES_PRECISION=float32
export SUBSPACES_DATA="${SUBSPACES_DATA:-$(realpath ../shared/data)}"; DATA=$SUBSPACES_DATA
$PY -c "import gzip,sys; lines=gzip.open(sys.argv[1],'rt').read().splitlines()[:1200]; open(sys.argv[2],'w').write('\n'.join(lines)+'\n')" "$DATA/wordnet_sentences/wordnet30_examples.txt.gz" "$WORK/texts.txt"

# 1. the STS table (STSBenchmark only, minilm-l6)
$S model eval --model minilm-l6 --tasks STSBenchmark --json "$WORK/sts.json" > /dev/null
$PY - "$WORK/sts.json" > "$OUT/sts.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if not any(t in k for t in ("second", "time", "env", "cpu", "date", "commit", "version", "thread"))}
    return x
print(json.dumps(strip(d), indent=1, sort_keys=True))
PY

# 2. three SimCSE steps (unsup, dropout views), the logged losses
head -192 "$WORK/texts.txt" > "$WORK/simcse.txt"
$S simcse train --data "$WORK/simcse.txt" --output "$WORK/simcse" --batch-size 32 --max-steps 3 --seed 0 > /dev/null 2>&1
$PY - "$WORK/simcse" > "$OUT/simcse.json" <<'PY'
import json, sys, pathlib
state = json.loads((pathlib.Path(sys.argv[1]) / "trainer_state.json").read_text())
def fmt(x):
    if isinstance(x, float):
        return float(f"{x:.6g}")
    return {k: fmt(v) for k, v in x.items()} if isinstance(x, dict) else x
print(json.dumps({"history": [fmt(h) for h in state["history"]], "best_score": fmt(state["best_score"])}, indent=1))
PY

# 3. an align fit: minilm-l6 vectors of one half onto paraphrase-l3 vectors of the other half
head -600 "$WORK/texts.txt" > "$WORK/a.txt"; tail -600 "$WORK/texts.txt" > "$WORK/b.txt"
$S model encode --model minilm-l6 --input "$WORK/a.txt" --output "$WORK/a.npy" > /dev/null 2>&1
$S model encode --model paraphrase-l3 --input "$WORK/b.txt" --output "$WORK/b.npy" > /dev/null 2>&1
$S align fit --source-emb "$WORK/a.npy" --target-emb "$WORK/b.npy" --output "$WORK/aligner" --seed 0 --max-seconds 0 > /dev/null 2>&1 || true
$PY - "$WORK/aligner" > "$OUT/align.txt" <<'PY'
import sys, numpy as np
from subspaces.align import MiniVec2Vec
a = MiniVec2Vec.load(sys.argv[1])
print(a.matrix_.shape, np.round(a.matrix_[:3, :5], 4).tolist(), a.converged_)
PY

# 4. a store search (exact and funnel) over 1,200 sentences
$S store create "$WORK/store" --model minilm-l6 > /dev/null 2>&1
$S store add "$WORK/store" --input "$WORK/texts.txt" > /dev/null 2>&1
for mode in "" "--dims 64"; do $S store search "$WORK/store" "a person who plays music" -k 5 $mode 2>/dev/null; done \
  | sed -E 's/[0-9]+\.[0-9]{4}[0-9]*/&/g' > "$OUT/store_search.txt"

# 5. a served embedding (OpenAI route)
$PY - > "$OUT/serve.json" <<'PY'
import json
from fastapi.testclient import TestClient
from subspaces.serve.app import create_app
from subspaces.serve.settings import ServeSettings
import time
with TestClient(create_app(ServeSettings(model="minilm-l6"))) as client:
    while client.get("/health").status_code != 200:
        time.sleep(0.2)
    r = client.post("/v1/embeddings", json={"input": ["a served sentence", "another"]})
    d = r.json()
print(json.dumps({"status": r.status_code, "usage": d.get("usage"), "head": [[round(x, 5) for x in e["embedding"][:6]] for e in d["data"]], "n": len(d["data"][0]["embedding"])}, indent=1))
PY
echo "wrote $OUT"
