"""Is unsupervised SimCSE's loss already solved at step 0? (A design check for the ablation, issue 19.)

Mean InfoNCE loss (τ = 0.05, batch 64, max length 32, dropout views, no training) over 6 batches of WordNet
sentences, for several start models built from ``minilm-l6``: chance is ln 64 = 4.16. Writes
``benchmarks/results/simcse_start_loss.json``.

    OMP_NUM_THREADS=2 python benchmarks/simcse_start_loss.py
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
ARMS = (  # name, top layers re-initialised, trainable layers (None: all), second column by word deletion
    ("full minilm, all layers, dropout everywhere (no reinit)", 0, None, False),
    ("reinit top2, train top2 (the ablation's design)", 2, 2, False),
    ("reinit top2, train top2, delete_one_word", 2, 2, True),
    ("reinit top2, all layers train (dropout everywhere)", 2, None, False),
    ("reinit top4, train top4", 4, 4, False),
    ("reinit top6 (random transformer on pretrained embeddings), train all", 6, None, False),
)


def main() -> None:
    import torch

    sys.path.insert(0, str(ROOT))
    from simcse_ablation import corpus
    from subspaces.losses.simcse import SimCSELoss
    from subspaces.models.encoder import load_encoder
    from subspaces.models.partial import partial_fine_tuning, reinit_top_layers
    from subspaces.train.simcse import delete_one_word

    texts = corpus(64 * 6, 0)
    batches = [texts[i * 64 : (i + 1) * 64] for i in range(6)]
    out = {}
    for name, reinit, trainable, two_columns in ARMS:
        torch.manual_seed(0)
        model = load_encoder("minilm-l6")
        model.max_seq_length = 32
        if reinit:
            reinit_top_layers(model, reinit, seed=0)
        pft = partial_fine_tuning(model, trainable, show_progress=False) if trainable else None
        loss = SimCSELoss(model, temperature=0.05)
        model.train()
        rng = random.Random(0)
        values = []
        with torch.no_grad():
            for batch in batches:
                columns = [batch, [delete_one_word(s, rng) for s in batch]] if two_columns else [batch]
                values.append(float(loss([model.preprocess(c) for c in columns], None)))
        if pft is not None:
            pft.detach()
        out[name] = sum(values) / len(values)
        print(f"{name}: {out[name]:.5f}", flush=True)
    path = ROOT / "results" / "simcse_start_loss.json"
    path.write_text(json.dumps({"loss_at_step_0": out, "chance": "ln 64 = 4.159"}, indent=1) + "\n")


if __name__ == "__main__":
    main()
