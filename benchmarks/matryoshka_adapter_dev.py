"""The dev choices of ``matryoshka_adapter.py`` (issue 17's adapter regime): SNLI-dev retrieval nDCG@10 of one
adapter per setting (seed 0), at 16/32/64/384 dims, against raw truncation. Dev rows only; the test split is
never read here. Each variant's line is appended to ``benchmarks/results/matryoshka/adapter/dev_variants.json``.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/matryoshka_adapter_dev.py wordnet_rank1 corpora_rank1 ...
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import matryoshka_adapter as bench

OUT = bench.RESULTS / "dev_variants.json"
DIMS = (16, 32, 64, 384)


def main(names: list[str]) -> None:
    from subspaces.adapt import MatryoshkaAdapter
    from subspaces.config import set_threads

    set_threads(2)
    data = bench.evaluation_data("dev", None, "all")
    wordnet = bench.cached_vectors("minilm-l6", bench.fit_texts(50_000))
    every = bench.all_texts(data)
    index = {t: i for i, t in enumerate(every)}
    encoded = bench.cached_vectors("minilm-l6", every)

    def rows(texts):
        return encoded[[index[t] for t in texts]]

    queries, documents = rows(data["SNLI"]["queries"]), rows(data["SNLI"]["documents"])
    unlabelled = [*data["Banking77"]["train"][0], *data["Emotion"]["train"][0]]
    unlabelled += bench.retrieval_rows(*data["STSB"], data["Distractors"])[0] + data["SNLI"]["documents"]
    corpora = rows(list(dict.fromkeys(unlabelled)))
    variants = {
        "raw": None,
        "wordnet": (wordnet, {}),
        "wordnet_lr3e-3": (wordnet, {"lr": 3e-3}),
        "wordnet_topk_only": (wordnet, {"pair_weight": 0.0}),
        "wordnet_rank1": (wordnet, {"rank_weight": 1.0}),
        "wordnet+snli_docs": (np.concatenate([wordnet, documents]), {}),
        "wordnet+snli_docs_rank1": (np.concatenate([wordnet, documents]), {"rank_weight": 1.0}),
        "wordnet+snli_docs_rank1_pca": (np.concatenate([wordnet, documents]), {"rank_weight": 1.0, "basis": "pca"}),
        "snli_docs_rank1_ep60": (documents, {"rank_weight": 1.0, "epochs": 60}),
        "corpora_rank1": (corpora, {"rank_weight": 1.0}),
        "corpora_rank3": (corpora, {"rank_weight": 3.0}),
        "corpora_rank1_ep60": (corpora, {"rank_weight": 1.0, "epochs": 60}),
    }
    done = json.loads(OUT.read_text()) if OUT.is_file() else {}
    for name in names:
        start = time.perf_counter()
        if variants[name] is None:
            transform, fit_rows = (lambda x: x), 0
        else:
            fit, settings = variants[name]
            adapter = MatryoshkaAdapter(dims=(16, 32, 64, 128), random_state=0, **settings).fit(fit)
            transform, fit_rows = adapter.transform, len(fit)
        ndcg = {}
        for d in DIMS:
            _, per_query = bench.set_retrieval_scores(
                bench.unit(transform(queries), d), bench.unit(transform(documents), d), data["SNLI"]["relevant"]
            )
            ndcg[str(d)] = round(100 * float(np.mean(per_query)), 2)
        done[name] = {"snli_dev_ndcg@10": ndcg, "fit_rows": fit_rows, "seconds": round(time.perf_counter() - start)}
        print(name, done[name], flush=True)
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(done, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
