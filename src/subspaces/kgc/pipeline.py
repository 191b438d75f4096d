"""One call from dataset to trained model to filtered rank metrics, in the spirit of PyKEEN's ``pipeline``.

from subspaces.kgc.pipeline import train_pipeline, evaluate_model
result = train_pipeline(dataset="wn18rr", model="minilm-l6", arch="tri", head="hypernet", rank=32,
                        freeze_encoder=True, output="runs/wn18rr-hypernet")
result.eval.average                                    # {"mrr": ..., "hits@1": ..., ..., "mr": ...}
evaluate_model("runs/wn18rr-hypernet", split="test")   # a KGCEvalResult: .forward, .backward, .average, .save(path)
evaluate_model("minilm-l6", dataset="wn18rr")          # a plain encoder: the zero-shot bi-encoder
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from subspaces.errors import SubspacesError
from subspaces.io import atomic_open
from subspaces.kgc.data import DATASETS, KnowledgeGraph, load_kg
from subspaces.kgc.graph import KnownTails, LinkGraph
from subspaces.kgc.inference import KGCInference
from subspaces.kgc.models import KGCModel, build_model, embed_batch, load_kgc_model
from subspaces.kgc.ranking import Ties, average_metrics, rank_metrics, rank_queries
from subspaces.kgc.texts import KGCTexts, NeighbourOrder
from subspaces.kgc.train import KGCTrainConfig, RankingEvaluator, train_kgc
from subspaces.losses.simkgc import SimKGCLoss
from subspaces.models.triencoder import TriEncoder, partially_trained
from subspaces.results import JSONResult

DEFAULT_MAX_LENGTH = 50  # SimKGC's --max-num-tokens


@dataclass
class KGCEvalResult(JSONResult):
    """Filtered rank metrics (``mrr``, ``hits@1|3|10``, ``mr``) by direction, and what inference cost; saved as
    ``kgc eval --json`` writes it."""

    OMIT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"rerank"})

    dataset: str
    model: str
    arch: str
    head: dict[str, Any] | None  # the tri-encoder head's config; None for a bi-encoder
    split: str
    queries: int
    ties: str
    forward: dict[str, float]
    backward: dict[str, float]
    inference_seconds: float
    # the text and condition caches over this evaluation (KGCInference.stats)
    cache_hit_rate: float
    text_lookups: int
    text_hits: int
    encoded_texts: int
    encode_seconds: float
    condition_lookups: int
    condition_hit_rate: float
    average: dict[str, float]
    rerank: dict[str, Any] | None = None  # with n_hop > 0: SimKGC's graph re-ranking, beside the plain figures


@dataclass
class KGCResult(JSONResult):
    """What ``train_pipeline`` did: where the model is, the training summary, and the evaluation if one ran."""

    OMIT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"eval"})

    output: str
    train_result: dict[str, Any]
    eval: KGCEvalResult | None = None


def _split_name(kg: KnowledgeGraph, split: str) -> str:
    """``split`` as the graph names it (``validation``, the conditional tasks' name, is ``valid``), or an error."""
    split = {"validation": "valid"}.get(split, split)
    if split not in kg.splits:
        raise SubspacesError(f"unknown split {split!r}; choose one of {', '.join(kg.splits)}")
    return split


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
    neighbour_order: NeighbourOrder = "id",
    per_example_texts: bool | None = None,
    shared_encoder: bool = True,
    warmup_steps: int = 400,
    head_dropout: float = 0.0,
    head_init: str = "scaled",
    head_activation: str = "relu",
    normalize_queries: bool = True,
    disk_cache=None,
    evaluate_split: str | None = "test",
    select_on: str | None = None,
    track_on: str | None = None,
    rerank_n_hop: int = 0,
    neighbour_weight: float = 0.05,
    trainable_layers: int | str | None = None,
    cache_dir: str | Path | None = None,
    recipe: str | None = None,
    device: str = "cpu",
    checkpoint_dir: str | Path | None = None,
    show_progress: bool = True,
) -> KGCResult:
    """Train a KGC model with SimKGC's objective, save it to ``output``, and (optionally) evaluate it.

    ``freeze_encoder`` (tri-encoder only) trains the head on cached entity and relation embeddings; otherwise
    the encoder is fine-tuned on text (SimKGC's recipe; what a GPU is for). ``lr`` defaults to 1e-3 for a
    frozen encoder and SimKGC's 5e-5 for fine-tuning; ``head_lr`` (fine-tuning a tri-encoder) gives the randomly
    initialised head its own rate, the encoder keeping ``lr``. ``select_on`` (a split, e.g. ``"valid"``) evaluates
    at each epoch end and keeps the state with the best MRR there; without it the last state is kept.
    ``track_on`` (a split) evaluates at each epoch end too, into the history, but keeps the last state.
    ``trainable_layers`` (fine-tuning) trains only the encoders' top N layers over cached bottom activations
    (kept in ``cache_dir``, or in memory). ``checkpoint_dir``: the training checkpoints there every 50 steps and
    on Ctrl-C, and the same call again resumes exactly where it stopped (the engine's resume; a fine-tuned epoch
    on CPU takes hours).

    Options of Hyper-CL's released configuration (:mod:`subspaces.kgc.recipes` sets them all, ``recipe`` names
    it in the saved metadata): ``head_dropout``, ``head_init`` and ``head_activation`` (concat) for the head
    (:func:`subspaces.models.heads.make_head`); ``normalize_queries=False`` scores the raw projection;
    ``neighbour_order`` and ``per_example_texts`` (default: on for the bi-encoder, as before) shape the link-graph
    texts (:mod:`subspaces.kgc.texts`); ``rerank_n_hop`` adds SimKGC's graph re-ranking to the evaluation.
    """
    if freeze_encoder and arch == "bi":
        raise SubspacesError(
            "--freeze-encoder leaves the bi-encoder nothing to train; "
            "evaluate it zero-shot with `kgc eval MODEL --dataset ...`"
        )
    if trainable_layers not in (None, "all") and freeze_encoder:
        raise SubspacesError("--trainable-layers trains encoder layers: it cannot go with --freeze-encoder")
    if head_lr is not None and (arch != "tri" or freeze_encoder):
        raise SubspacesError(
            "--head-lr is for fine-tuning a tri-encoder (its head beside the encoder); use --lr otherwise"
        )
    from subspaces.models.encoder import resolve_device
    from subspaces.train.engine import seed_everything

    resolve_device(device)  # a device this machine lacks fails before the graph and the model load
    seed_everything(seed)
    kg = dataset if isinstance(dataset, KnowledgeGraph) else load_kg(dataset)
    if evaluate_split:
        evaluate_split = _split_name(kg, evaluate_split)  # checked before training, not after it
    if select_on and track_on:
        raise SubspacesError("select_on and track_on both evaluate each epoch: give one of them")
    if select_on:
        select_on = _split_name(kg, select_on)
    if track_on:
        track_on = _split_name(kg, track_on)
    if per_example_texts is None:
        per_example_texts = arch == "bi"
    texts = KGCTexts.build(kg, neighbour_names, order=neighbour_order, per_example=per_example_texts)
    head_options = {"dropout": head_dropout, "init": head_init, "activation": head_activation}
    kgc_model = build_model(
        model,
        arch,
        head=head,
        rank=rank,
        freeze_encoder=freeze_encoder,
        max_length=max_length,
        shared_encoder=shared_encoder,
        disk_cache=disk_cache,
        device=device,
        show_progress=show_progress,
        head_options=head_options if arch == "tri" else None,
    )
    examples = kg.with_inverses("train")
    known = KnownTails(examples)  # the false-negative masks see training triples only (the filter sees every split)
    config = KGCTrainConfig(
        batch_size=batch_size,
        lr=lr if lr is not None else (1e-3 if freeze_encoder else 5e-5),
        head_lr=head_lr,
        epochs=epochs,
        max_steps=max_steps,
        warmup_steps=warmup_steps,
        seed=seed,
        show_progress=show_progress,
        description=f"train kgc {arch} on {kg.name}",
        checkpoint_dir=None if checkpoint_dir is None else str(checkpoint_dir),
    )
    prepare_seconds = 0.0
    if freeze_encoder:  # every entity and relation through the frozen encoder once, before the first step
        started = time.perf_counter()
        entity_texts = texts.distinct_training_texts(examples)
        kgc_model.embed_sentences(entity_texts, f"kgc {kg.name}: encoding {len(entity_texts):,} entity texts")
        kgc_model.embed_conditions(texts.relations, f"kgc {kg.name}: encoding {len(texts.relations)} relations")
        prepare_seconds = time.perf_counter() - started
    loss = SimKGCLoss(
        kgc_model,
        known,
        margin=margin,
        temperature=temperature,
        pre_batch=pre_batch,
        pre_batch_weight=pre_batch_weight,
        self_negatives=self_negatives,
        batch_size=min(batch_size, len(examples)),
        embed_batch=functools.partial(embed_batch, kgc_model),
        normalize_queries=normalize_queries,
    )
    evaluator = None
    tracked = select_on or track_on
    if tracked:
        evaluator = RankingEvaluator(kg, tracked, texts, select=bool(select_on))
    with partially_trained(
        _training_inputs(kgc_model, texts, examples),
        trainable_layers,
        cache_dir=cache_dir,
        show_progress=show_progress,
        description=f"caching activations for kgc {kg.name}",
    ):
        result = train_kgc(loss.to(device), examples, config, texts, evaluator)
    output = Path(output)
    if isinstance(dataset, KnowledgeGraph) or str(dataset) in DATASETS:
        source = kg.name
    else:
        source = str(Path(dataset).resolve())
    kgc_model.metadata = {
        "dataset": kg.name,
        "dataset_source": source,  # what evaluation reloads: a dataset name or the folder trained on
        "base_model": model,
        "max_length": max_length,
        "neighbour_names": texts.link_graph is not None,
        "neighbour_order": neighbour_order,
        "per_example_texts": per_example_texts,
        "recipe": recipe,
        "freeze_encoder": freeze_encoder,
        # what TriEncoder.search marks as seen (any other relation text is projected zero-shot, with a note)
        "seen_conditions": sorted({texts.relations[r] for r in set(examples[:, 1].tolist())}),
        "train": {
            **asdict(config),
            "margin": margin,
            "temperature": temperature,
            "pre_batch": pre_batch,
            "pre_batch_weight": pre_batch_weight,
            "self_negatives": self_negatives,
            "normalize_queries": normalize_queries,
            "select_on": select_on,
            "track_on": track_on,
        },
        "train_result": {**result.to_dict(), "prepare_seconds": prepare_seconds},
    }
    kgc_model.save(output)
    report = KGCResult(output=str(output), train_result=kgc_model.metadata["train_result"])
    if evaluate_split:
        report.eval = evaluate_model(
            kgc_model,
            kg,
            split=evaluate_split,
            texts=texts,
            predictions=output / f"predictions-{evaluate_split}.jsonl",
            n_hop=rerank_n_hop,
            neighbour_weight=neighbour_weight,
            show_progress=show_progress,
            model_name=str(output),
        )
        report.eval.save(output / f"eval-{evaluate_split}.json")
    return report


def _training_inputs(model: KGCModel, texts: KGCTexts, examples: np.ndarray) -> list[tuple[object, list]]:
    """Each encoder with the inputs it reads in training (what partial fine-tuning caches)."""
    if isinstance(model, TriEncoder):
        return [(model.encoder, [*texts.distinct_training_texts(examples), *texts.relations])]
    return [
        (model.hr_encoder, model.query_inputs(texts, examples, training=True)),
        (model.tail_encoder, texts.distinct_training_texts(examples)),
    ]


def evaluate_model(
    model: str | Path | KGCModel,
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
    normalize_queries: bool | None = None,
    max_length: int | None = None,
    batch_size: int = 64,
    model_name: str | None = None,
    show_progress: bool = True,
    device: str = "cpu",
) -> KGCEvalResult:
    """Filtered ranking of ``split`` against every entity, forward (tails), backward (heads) and their average.

    ``model`` is a trained KGC folder, a model object, or a plain encoder name/folder (then the zero-shot
    bi-encoder), loaded onto ``device`` (a model object stays where it is). ``n_hop > 0`` adds SimKGC's graph
    re-ranking, reported under ``rerank`` beside the plain figures. ``normalize_queries`` (default: as the model
    was trained) scores raw query vectors when False; it changes only the re-ranked figures.
    """
    from subspaces.models.encoder import resolve_device
    from subspaces.models.folder import is_model_folder, read_config

    resolve_device(device)

    is_folder = not isinstance(model, torch.nn.Module) and is_model_folder(model)
    if not is_folder and not isinstance(model, torch.nn.Module):
        from subspaces.models.encoder import resolve_model_path

        resolve_model_path(model)  # neither a KGC folder nor an encoder: say so, not "name the dataset"
    metadata: dict = read_config(model, task="kgc")["metadata"] if is_folder else {}
    if dataset is None:
        dataset = metadata.get("dataset_source", metadata.get("dataset"))
        if dataset is None:
            raise SubspacesError("name the dataset (--dataset wn18rr|fb15k237): the model folder does not record one")
    kg = dataset if isinstance(dataset, KnowledgeGraph) else load_kg(dataset)  # bad data fails before a model loads
    split = _split_name(kg, split)
    if isinstance(model, torch.nn.Module):
        kgc_model: KGCModel = model  # it keeps its own store (memory, and disk shards if it was built with them)
    elif is_folder:
        kgc_model = load_kgc_model(model, max_seq_length=max_length, disk_cache=disk_cache, device=device)
    else:
        kgc_model = build_model(
            str(model), "bi", max_length=max_length or DEFAULT_MAX_LENGTH, disk_cache=disk_cache, device=device
        )
        metadata = {"zero_shot": True}
    kgc_model.store.show_progress = show_progress
    kgc_model.store.batch_size = batch_size
    kgc_model.store.reset_stats()  # the statistics are this evaluation's (vectors already held stay valid)
    if isinstance(kgc_model, TriEncoder):
        kgc_model.params_cache.reset_stats()
    metadata = metadata or dict(getattr(kgc_model, "metadata", {}))
    if texts is None:
        # A model trained before neighbour orders were recorded read them in index order.
        order = metadata.get("neighbour_order", "index" if "neighbour_names" in metadata else "id")
        texts = KGCTexts.build(kg, metadata.get("neighbour_names", neighbour_names), order=order)
    if normalize_queries is None:
        normalize_queries = bool(metadata.get("train", {}).get("normalize_queries", True))
    known = KnownTails(np.concatenate([kg.with_inverses(s) for s in kg.splits]))  # the filter: every split's triples
    forward = kg.splits[split]
    queries = kg.with_inverses(split)  # forward queries, then their inverses (the backward direction)
    inference = KGCInference(kgc_model, texts, label=f"kgc {kg.name}")
    started = time.perf_counter()
    with torch.no_grad():
        entity_vectors = inference.entity_vectors()
        query_vectors = inference.query_vectors(queries)
        ranks, top = rank_queries(query_vectors, entity_vectors, queries, known, ties=ties)
    seconds = time.perf_counter() - started
    n = len(forward)
    forward_m, backward_m = rank_metrics(ranks[:n]), rank_metrics(ranks[n:])
    result = KGCEvalResult(
        dataset=kg.name,
        model=model_name or str(model if not isinstance(model, torch.nn.Module) else type(model).__name__),
        arch=kgc_model.arch,
        head=kgc_model.head.config() if isinstance(kgc_model, TriEncoder) else None,
        split=split,
        queries=int(len(queries)),
        ties=ties,
        forward=forward_m,
        backward=backward_m,
        inference_seconds=seconds,
        **inference.stats(),
        average=average_metrics(forward_m, backward_m),
    )
    if n_hop > 0:
        graph = LinkGraph(kg.splits["train"], kg.num_entities)
        reranked, _ = rank_queries(
            query_vectors,
            entity_vectors,
            queries,
            known,
            ties=ties,
            graph=graph,
            n_hop=n_hop,
            neighbour_weight=neighbour_weight,
            normalize_queries=normalize_queries,
        )
        forward_rr, backward_rr = rank_metrics(reranked[:n]), rank_metrics(reranked[n:])
        result.rerank = {
            "n_hop": n_hop,
            "neighbour_weight": neighbour_weight,
            "normalize_queries": normalize_queries,
            "forward": forward_rr,
            "backward": backward_rr,
            "average": average_metrics(forward_rr, backward_rr),
        }
    if predictions is not None:
        write_predictions(predictions, kg, queries, ranks, top, n)
    return result


def write_predictions(
    path: str | Path, kg: KnowledgeGraph, queries: np.ndarray, ranks: np.ndarray, top: np.ndarray, n_forward: int
) -> None:
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
