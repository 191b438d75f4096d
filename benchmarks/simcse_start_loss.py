"""Is unsupervised SimCSE's loss already solved at step 0, and how far apart are its two views? (Issue 19's design.)

Mean InfoNCE loss (τ = 0.05, batch 64, max length 32, dropout views, no training) over 6 batches of WordNet
sentences (training text, not scored data), for several start models built from ``minilm-l6``: chance is
ln 64 = 4.16; and the mean cosine between a sentence's two views. The full model with dropout everywhere is the
reference for how much the views should differ; ``state dropout`` puts the frozen layers' noise back on the cached
activations (``subspaces.models.partial``). Writes ``benchmarks/results/simcse_start_loss.json``.

    OMP_NUM_THREADS=2 python benchmarks/simcse_start_loss.py
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
ARMS = (  # name, top layers re-initialised, trainable layers (None: all), word deletion, state dropout
    ("full minilm, all layers, dropout everywhere (no reinit)", 0, None, False, 0.0),
    ("reinit top2, train top2 (the ablation's design)", 2, 2, False, 0.0),
    ("reinit top2, train top2, delete_one_word", 2, 2, True, 0.0),
    ("reinit top2, all layers train (dropout everywhere)", 2, None, False, 0.0),
    ("reinit top2, train top2, state dropout 0.1", 2, 2, False, 0.1),
    ("reinit top2, train top2, state dropout 0.2", 2, 2, False, 0.2),
    ("reinit top2, train top2, state dropout 0.3", 2, 2, False, 0.3),
    ("reinit top4, train top4", 4, 4, False, 0.0),
    ("reinit top6 (random transformer on pretrained embeddings), train all", 6, None, False, 0.0),
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
    out, cosines = {}, {}
    for name, reinit, trainable, two_columns, state_dropout in ARMS:
        torch.manual_seed(0)
        model = load_encoder("minilm-l6")
        model.max_seq_length = 32
        if reinit:
            reinit_top_layers(model, reinit, seed=0)
        pft = (
            partial_fine_tuning(model, trainable, show_progress=False, state_dropout=state_dropout)
            if trainable
            else None
        )
        loss = SimCSELoss(model, temperature=0.05)
        model.train()
        rng = random.Random(0)
        values, cos = [], []
        with torch.no_grad():
            for batch in batches:
                columns = [batch, [delete_one_word(s, rng) for s in batch]] if two_columns else [batch]
                values.append(float(loss([model.preprocess(c) for c in columns], None)))
                views = [model(model.preprocess(c))["sentence_embedding"] for c in (columns * 2)[:2]]
                cos.append(float(torch.nn.functional.cosine_similarity(*views).mean()))
        if pft is not None:
            pft.detach()
        out[name] = sum(values) / len(values)
        cosines[name] = sum(cos) / len(cos)
        print(f"{name}: loss {out[name]:.5f}, view cosine {cosines[name]:.4f}", flush=True)
    path = ROOT / "results" / "simcse_start_loss.json"
    record = {"loss_at_step_0": out, "view_cosine": cosines, "chance": "ln 64 = 4.159"}
    path.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
