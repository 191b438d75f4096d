"""One call from dataset to trained model to filtered rank metrics, in the spirit of PyKEEN's ``pipeline``.

    from subspaces.kgc.pipeline import train_pipeline, evaluate_model
    result = train_pipeline(dataset="wn18rr", model="minilm-l6", arch="tri", head="hypernet", rank=32,
                            freeze_encoder=True, output="runs/wn18rr-hypernet")
    evaluate_model("runs/wn18rr-hypernet", split="test")   # {"forward": {...}, "backward": {...}, "average": ...}
    evaluate_model("minilm-l6", dataset="wn18rr")          # a plain encoder: the zero-shot bi-encoder
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from subspaces.errors import SubspacesError
from subspaces.io import atomic_open, save_json
from subspaces.kgc.data import DATASETS, KnowledgeGraph, load_kg
from subspaces.kgc.graph import KnownTails, LinkGraph
from subspaces.kgc.inference import KGCInference
from subspaces.kgc.loss import SimKGCLoss
from subspaces.kgc.models import (
    ARCHS,
    CONFIG_NAME,
    BiEncoderKGC,
    FrozenTriEncoder,
    TriEncoderKGC,
    load_kgc_model,
    read_config,
)
from subspaces.kgc.ranking import Ties, average_metrics, rank_metrics, rank_queries
from subspaces.kgc.texts import KGCTexts
from subspaces.kgc.train import KGCTrainConfig, train_kgc
from subspaces.train.loop import seed_everything

DEFAULT_MAX_LENGTH = 50  # SimKGC's --max-num-tokens


def _split_name(kg: KnowledgeGraph, split: str) -> str:
    """``split`` as the graph names it (``validation``, the conditional tasks' name, is ``valid``), or an error."""
    split = {"validation": "valid"}.get(split, split)
    if split not in kg.splits:
        raise SubspacesError(f"unknown split {split!r}; choose one of {', '.join(kg.splits)}")
    return split


def build_model(
    model: str,
    arch: str,
    head: str = "hypernet",
    rank: int | str | None = "auto",
    *,
    max_length: int = DEFAULT_MAX_LENGTH,
    shared_encoder: bool = True,
    device: str = "cpu",
) -> BiEncoderKGC | TriEncoderKGC:
    from subspaces.models.encoder import load_encoder
    from subspaces.models.heads import make_head

    if arch not in ARCHS:
        raise SubspacesError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
    encoder = load_encoder(model, max_seq_length=max_length, device=device)
    if arch == "bi":
        return BiEncoderKGC(encoder, None if shared_encoder else load_encoder(model, max_seq_length=max_length, device=device))
    return TriEncoderKGC(encoder, make_head(head, int(encoder.get_embedding_dimension()), rank).to(device))


def _entity_and_relation_vectors(model: TriEncoderKGC, texts: KGCTexts, disk_cache) -> tuple[torch.Tensor, torch.Tensor]:
    inference = KGCInference(model, texts, disk_cache=disk_cache)
    entities = inference.entity_vectors()
    relations = inference._lookup(model.encoder, "relation", texts.relations, "relation embeddings")
    return entities, relations


def train_pipeline(
    *,
    output: str | Path,
    dataset: str | Path = "wn18rr",
    model: str = "minilm-l6",
    arch: str = "tri",
    head: str = "hypernet",
    rank: int | str | None = "auto",
    freeze_encoder: bool = True,
    batch_size: int = 1024,
    lr: float | None = None,
    head_lr: float | None = None,
    epochs: int = 1,
    max_steps: int | None = None,
    seed: int = 42,
    max_length: int = DEFAULT_MAX_LENGTH,
    margin: float = 0.02,
    temperature: float = 0.05,
    pre_batch: int = 0,
    pre_batch_weight: float = 0.5,
    self_negatives: bool = True,
    neighbour_names: bool | None = None,
    shared_encoder: bool = True,
    warmup_steps: int = 400,
    disk_cache=None,
    evaluate_split: str | None = "test",
    device: str = "cpu",
    show_progress: bool = True,
) -> dict:
    """Train a KGC model with SimKGC's objective, save it to ``output``, and (optionally) evaluate it.

    ``freeze_encoder`` (tri-encoder only) trains the head on cached entity and relation embeddings; otherwise
    the encoder is fine-tuned on text (SimKGC's recipe; what a GPU is for). ``lr`` defaults to 1e-3 for a
    frozen encoder and SimKGC's 5e-5 for fine-tuning; ``head_lr`` (fine-tuning a tri-encoder) gives the randomly
    initialised head its own rate, the encoder keeping ``lr``.
    """
    if freeze_encoder and arch == "bi":
        raise SubspacesError("--freeze-encoder leaves the bi-encoder nothing to train; evaluate it zero-shot with `kgc eval MODEL --dataset ...`")
    if head_lr is not None and (arch != "tri" or freeze_encoder):
        raise SubspacesError("--head-lr is for fine-tuning a tri-encoder (its head beside the encoder); use --lr otherwise")
    seed_everything(seed)
    kg = dataset if isinstance(dataset, KnowledgeGraph) else load_kg(dataset)
    if evaluate_split:
        evaluate_split = _split_name(kg, evaluate_split)  # checked before training, not after it
    texts = KGCTexts.build(kg, neighbour_names)
    kgc_model = build_model(model, arch, head, rank, max_length=max_length, shared_encoder=shared_encoder, device=device)
    examples = kg.with_inverses("train")
    known = KnownTails(examples)
    config = KGCTrainConfig(
        batch_size=batch_size,
        lr=lr if lr is not None else (1e-3 if freeze_encoder else 5e-5),
        head_lr=head_lr,
        epochs=epochs,
        max_steps=max_steps,
        warmup_steps=warmup_steps,
        seed=seed,
        show_progress=show_progress,
    )
    prepare_seconds = 0.0
    if freeze_encoder:
        started = time.perf_counter()
        entities, relations = _entity_and_relation_vectors(kgc_model, texts, disk_cache)
        prepare_seconds = time.perf_counter() - started
        trainable = FrozenTriEncoder(kgc_model, entities.to(device), relations.to(device))
    else:
        trainable = kgc_model
    loss = SimKGCLoss(
        trainable,
        known,
        margin=margin,
        temperature=temperature,
        pre_batch=pre_batch,
        pre_batch_weight=pre_batch_weight,
        self_negatives=self_negatives,
        batch_size=min(batch_size, len(examples)),
    )
    result = train_kgc(loss.to(device), examples, config, texts)
    output = Path(output)
    if isinstance(dataset, KnowledgeGraph) or str(dataset) in DATASETS:
        source = kg.name
    else:
        source = str(Path(dataset).resolve())
    saved = {
        "dataset": kg.name,
        "dataset_source": source,  # what evaluation reloads: a dataset name or the folder trained on
        "base_model": model,
        "max_length": max_length,
        "neighbour_names": texts.link_graph is not None,
        "freeze_encoder": freeze_encoder,
        "train": {**asdict(config), "margin": margin, "temperature": temperature, "pre_batch": pre_batch,
                  "pre_batch_weight": pre_batch_weight, "self_negatives": self_negatives},
        "train_result": {**result.to_dict(), "prepare_seconds": prepare_seconds},
    }
    if isinstance(kgc_model, TriEncoderKGC):
        kgc_model.save(output, saved, save_encoder=not freeze_encoder)
    else:
        kgc_model.save(output, saved)
    report = {"output": str(output), "train_result": saved["train_result"]}
    if evaluate_split:
        report["eval"] = evaluate_model(kgc_model, kg, split=evaluate_split, texts=texts, disk_cache=disk_cache,
                                        predictions=output / f"predictions-{evaluate_split}.jsonl", show_progress=show_progress,
                                        model_name=str(output))
        save_json(output / f"eval-{evaluate_split}.json", report["eval"])
    return report


def evaluate_model(
    model: str | Path | BiEncoderKGC | TriEncoderKGC,
    dataset: str | Path | KnowledgeGraph | None = None,
    *,
    split: str = "test",
    texts: KGCTexts | None = None,
    disk_cache=None,
    predictions: str | Path | None = None,
    ties: Ties = "realistic",
    n_hop: int = 0,
    neighbour_weight: float = 0.05,
    neighbour_names: bool | None = None,
    max_length: int | None = None,
    batch_size: int = 64,
    model_name: str | None = None,
    show_progress: bool = True,
) -> dict:
    """Filtered ranking of ``split`` against every entity, forward (tails), backward (heads) and their average.

    ``model`` is a trained KGC folder, a model object, or a plain encoder name/folder (then the zero-shot
    bi-encoder). ``n_hop > 0`` adds SimKGC's graph re-ranking, reported under ``"rerank"`` beside the plain figures.
    """
    is_folder = not isinstance(model, torch.nn.Module) and (Path(str(model)) / CONFIG_NAME).is_file()
    if not is_folder and not isinstance(model, torch.nn.Module):
        from subspaces.models.encoder import resolve_model_path

        resolve_model_path(model)  # neither a KGC folder nor an encoder: say so, not "name the dataset"
    config: dict = read_config(model) if is_folder else {}
    if dataset is None:
        dataset = config.get("dataset_source", config.get("dataset"))
        if dataset is None:
            raise SubspacesError("name the dataset (--dataset wn18rr|fb15k237): the model folder does not record one")
    kg = dataset if isinstance(dataset, KnowledgeGraph) else load_kg(dataset)  # bad data fails before a model loads
    split = _split_name(kg, split)
    if isinstance(model, (BiEncoderKGC, TriEncoderKGC)):
        kgc_model = model
    elif is_folder:
        kgc_model = load_kgc_model(model, max_seq_length=max_length or config.get("max_length", DEFAULT_MAX_LENGTH))
    else:
        kgc_model = build_model(str(model), "bi", max_length=max_length or DEFAULT_MAX_LENGTH)
        config = {"zero_shot": True}
    if texts is None:
        texts = KGCTexts.build(kg, config.get("neighbour_names", neighbour_names))
    known = KnownTails(np.concatenate([kg.with_inverses(s) for s in kg.splits]))
    forward = kg.splits[split]
    queries = kg.with_inverses(split)  # forward queries, then their inverses (the backward direction)
    inference = KGCInference(kgc_model, texts, disk_cache=disk_cache, batch_size=batch_size, show_progress=show_progress)
    started = time.perf_counter()
    with torch.no_grad():
        entity_vectors = inference.entity_vectors()
        query_vectors = inference.query_vectors(queries)
        ranks, top = rank_queries(query_vectors, entity_vectors, queries, known, ties=ties)
    seconds = time.perf_counter() - started
    n = len(forward)
    result = {
        "dataset": kg.name,
        "model": model_name or str(model if not isinstance(model, torch.nn.Module) else type(model).__name__),
        "arch": kgc_model.arch,
        "head": kgc_model.head.config() if isinstance(kgc_model, TriEncoderKGC) else None,
        "split": split,
        "queries": int(len(queries)),
        "ties": ties,
        "forward": rank_metrics(ranks[:n]),
        "backward": rank_metrics(ranks[n:]),
        "inference_seconds": seconds,
        **inference.stats(),
    }
    result["average"] = average_metrics(result["forward"], result["backward"])
    if n_hop > 0:
        graph = LinkGraph(kg.splits["train"], kg.num_entities)
        reranked, _ = rank_queries(query_vectors, entity_vectors, queries, known, ties=ties, graph=graph, n_hop=n_hop, neighbour_weight=neighbour_weight)
        forward_rr, backward_rr = rank_metrics(reranked[:n]), rank_metrics(reranked[n:])
        result["rerank"] = {"n_hop": n_hop, "neighbour_weight": neighbour_weight, "forward": forward_rr,
                            "backward": backward_rr, "average": average_metrics(forward_rr, backward_rr)}
    if predictions is not None:
        write_predictions(predictions, kg, queries, ranks, top, n)
    return result


def write_predictions(path: str | Path, kg: KnowledgeGraph, queries: np.ndarray, ranks: np.ndarray, top: np.ndarray, n_forward: int) -> None:
    """One JSON line per query: direction, ids, relation words, the answer's filtered rank and the top-k ids."""
    with atomic_open(path, "w", encoding="utf-8") as handle:
        for i, (h, r, t) in enumerate(queries.tolist()):
            record = {
                "direction": "forward" if i < n_forward else "backward",
                "head": kg.entity_ids[h],
                "relation": kg.relation_text(r),
                "tail": kg.entity_ids[t],
                "rank": float(ranks[i]),
                "top": [kg.entity_ids[e] for e in top[i].tolist()],
            }
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
