"""Foundation benchmarks: the STS table of minilm-l6, supervised SimCSE from minilm-l6, and training throughput
against sentence-transformers' trainer. (SimCSE from scratch with its augmentation ablation is an experiment file:
``benchmarks/run.py benchmarks/experiments/simcse_scratch.toml``.)

Each sub-command writes JSON to benchmarks/results/ and prints a table. Run from the repository root:

    python benchmarks/simcse_bench.py sts
    python benchmarks/simcse_bench.py sup --epochs 1 --batch-size 64
    python benchmarks/simcse_bench.py throughput --steps 30
"""

from __future__ import annotations

import json
import platform
import time
from datetime import date
from pathlib import Path

import torch
import typer

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
RESULTS = Path(__file__).parent / "results"


def _machine() -> dict:
    return {
        "cpu_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "date": str(date.today()),
    }


def _save(name: str, payload: dict) -> None:
    from subspaces.io import save_json

    save_json(RESULTS / f"{name}.json", {**payload, "machine": _machine()})
    print(json.dumps(payload, indent=1)[:4000])


def _sts(model, variant="original") -> dict:
    from subspaces.eval.sts import STSEvaluator

    t = time.perf_counter()
    scores = STSEvaluator(variant=variant)(model)
    scores["seconds"] = time.perf_counter() - t
    return scores


@app.command()
def sts() -> None:
    """STS table of minilm-l6 on the original and the SentEval files."""
    from subspaces.models.encoder import load_encoder

    model = load_encoder("minilm-l6")
    _save("sts_minilm_l6", {"model": "minilm-l6", "original": _sts(model), "senteval": _sts(model, "senteval")})


@app.command()
def sup(
    epochs: int = 1,
    batch_size: int = 64,
    lr: float = 5e-5,
    max_steps: int | None = None,
    seed: int = 42,
    pooler: str = "mean",
    before: bool = True,
) -> None:
    """Supervised SimCSE on the SNLI dev/test triplets, starting from minilm-l6."""
    from subspaces.config import dataset_dir
    from subspaces.data.nli import read_triplets
    from subspaces.models.encoder import load_encoder
    from subspaces.train.simcse import SimCSEConfig, train_simcse

    rows = [(t.anchor, t.positive, t.negative) for t in read_triplets(dataset_dir("nli") / "snli_devtest_triplets.csv")]
    results: dict = {
        "config": {
            "epochs": epochs,
            "batch_size": batch_size,
            "lr": lr,
            "max_steps": max_steps,
            "pooler": pooler,
            "n_triplets": len(rows),
            "seed": seed,
        }
    }
    if before:  # the same table as `sts`; skip it when that has been measured already
        results["before"] = _sts(load_encoder("minilm-l6"))
    model = load_encoder("minilm-l6", pooler=pooler)
    cfg = SimCSEConfig(
        output_dir="outputs/bench-sup",
        mode="sup",
        batch_size=batch_size,
        lr=lr,
        epochs=epochs,
        max_steps=max_steps,
        eval_steps=25,
        save_steps=0,
        seed=seed,
        resume=False,
    )
    t = time.perf_counter()
    res = train_simcse(model, rows, cfg)
    results["train"] = {
        "seconds": time.perf_counter() - t,
        "steps": res.steps,
        "samples_per_second": res.samples_per_second,
        "best_stsb_dev": res.best_score,
    }
    results["after"] = _sts(load_encoder("outputs/bench-sup"))
    _save("simcse_sup", results)


@app.command()
def throughput(steps: int = 30, batch_size: int = 64, model_name: str = "minilm-l6", repeats: int = 2) -> None:
    """Samples/s of `train simcse`'s loop against SentenceTransformerTrainer, with its MultipleNegativesRankingLoss
    and with our SimCSELoss (the loss in their trainer: the loop's overhead alone).

    Same model, batch, max length (32), data (unsupervised pairs (s, s) from WordNet sentences), optimiser and
    learning rate; the three alternate `repeats` times in one process so machine load hits them alike.
    """
    from subspaces.data.text import wordnet_sentences
    from subspaces.losses.simcse import SimCSELoss
    from subspaces.models.encoder import load_encoder
    from subspaces.train.sentence import EncoderTrainConfig as TrainConfig
    from subspaces.train.sentence import train_sentence_loss as train

    sentences = wordnet_sentences(limit=steps * batch_size)
    runs: dict[str, list[float]] = {"subspaces": [], "sentence_transformers": [], "st_trainer_simcse_loss": []}
    for r in range(repeats):
        model = load_encoder(model_name)
        cfg = TrainConfig(
            output_dir=f"outputs/bench-tp/ours{r}",
            batch_size=batch_size,
            lr=3e-5,
            max_steps=steps,
            eval_steps=0,
            save_steps=0,
            resume=False,
            show_progress=False,
            max_grad_norm=1.0,
        )
        t = time.perf_counter()
        train(model, SimCSELoss(model), [(s, s) for s in sentences], cfg)
        runs["subspaces"].append(steps * batch_size / (time.perf_counter() - t))

        for arm in ("sentence_transformers", "st_trainer_simcse_loss"):
            model = load_encoder(model_name)
            model.max_seq_length = 32
            runs[arm].append(_st_samples_per_second(model, arm, sentences, steps, batch_size, r))
        print(runs)
    ours, theirs = max(runs["subspaces"]), max(runs["sentence_transformers"])
    _save(
        "simcse_throughput",
        {
            "model": model_name,
            "steps": steps,
            "batch_size": batch_size,
            "threads": torch.get_num_threads(),
            "runs": runs,
            "best_samples_per_second": {arm: max(values) for arm, values in runs.items()},
            "ratio_subspaces_over_st": ours / theirs,
            "ratio_subspaces_over_st_with_simcse_loss": ours / max(runs["st_trainer_simcse_loss"]),
        },
    )


def _st_samples_per_second(model, arm: str, sentences: list[str], steps: int, batch_size: int, r: int) -> float:
    """Samples/s of sentence-transformers' trainer with its MultipleNegativesRankingLoss or with our SimCSELoss."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from subspaces.losses.simcse import SimCSELoss

    args = SentenceTransformerTrainingArguments(
        output_dir=f"outputs/bench-tp/{arm}{r}",
        per_device_train_batch_size=batch_size,
        learning_rate=3e-5,
        max_steps=steps,
        save_strategy="no",
        report_to=[],
        logging_steps=10_000,
        dataloader_drop_last=True,
        warmup_ratio=0.0,
        lr_scheduler_type="linear",
        weight_decay=0.0,
        disable_tqdm=True,
        seed=42,
        use_cpu=True,
    )
    data = Dataset.from_dict({"anchor": sentences, "positive": sentences})
    loss = MultipleNegativesRankingLoss(model, scale=20.0) if arm == "sentence_transformers" else SimCSELoss(model)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss)
    t = time.perf_counter()
    trainer.train()
    return steps * batch_size / (time.perf_counter() - t)


if __name__ == "__main__":
    app()
