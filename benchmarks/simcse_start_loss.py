"""Is unsupervised SimCSE's loss already solved at step 0, and how far apart are its two views? (Issue 19's design.)

Mean InfoNCE loss (τ = 0.05, batch 64, max length 32, dropout views, no training) over 6 batches of WordNet
sentences (training text, not scored data), for several start models built from ``minilm-l6``: chance is
ln 64 = 4.16; and the mean cosine between a sentence's two views. The full model with dropout everywhere is the
reference for how much the views should differ; ``state dropout`` puts the frozen layers' noise back on the cached
activations (``subspaces.models.partial``). Writes ``benchmarks/results/simcse_start_loss.json``.

``--corpus tweets|banking`` checks the domain-adaptation starts of ``simcse_domain.py`` instead (the full model, top
two layers trained over cached activations), on that domain's training text, batch 64 and 256; it writes
``simcse_start_loss_<corpus>.json``.

    OMP_NUM_THREADS=2 python benchmarks/simcse_start_loss.py
    OMP_NUM_THREADS=2 python benchmarks/simcse_start_loss.py --corpus tweets
"""

from __future__ import annotations

import argparse
import json
import math
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
DOMAIN_ARMS = (  # the domain-adaptation start: nothing re-initialised
    ("full minilm, all layers, dropout everywhere", 0, None, False, 0.0),
    ("full minilm, train top2, state dropout 0.1 (simcse_domain's design)", 0, 2, False, 0.1),
    ("full minilm, train top2, state dropout 0.1, delete_one_word", 0, 2, True, 0.1),
)


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=("wordnet", "tweets", "banking"), default="wordnet")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from simcse_ablation import corpus
    from subspaces.losses.simcse import SimCSELoss
    from subspaces.models.encoder import load_encoder
    from subspaces.models.partial import partial_fine_tuning, reinit_top_layers
    from subspaces.train.simcse import delete_one_word

    if args.corpus == "wordnet":
        sizes, arms = (64,), ARMS
        texts = corpus(64 * 6, 0)
    else:
        from simcse_domain import training_texts

        sizes, arms = (64, 256), DOMAIN_ARMS
        texts = training_texts(args.corpus)
        random.Random(0).shuffle(texts)
    out, cosines = {}, {}
    for (name, reinit, trainable, two_columns, state_dropout), size in [(a, s) for a in arms for s in sizes]:
        batches = [texts[i * size : (i + 1) * size] for i in range(6)]
        if len(sizes) > 1:
            name = f"{name}, batch {size}"
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
    suffix = "" if args.corpus == "wordnet" else f"_{args.corpus}"
    path = ROOT / "results" / f"simcse_start_loss{suffix}.json"
    chance = ", ".join(f"ln {s} = {math.log(s):.3f}" for s in sizes)
    record = {"corpus": args.corpus, "loss_at_step_0": out, "view_cosine": cosines, "chance": chance}
    path.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
