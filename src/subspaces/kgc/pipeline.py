"""``kgc train`` and ``kgc eval`` as one call each: ``train_pipeline`` (dataset to saved model to filtered rank
metrics) and ``evaluate_model`` (a saved model, or a plain encoder zero-shot as the bi-encoder)."""

from __future__ import annotations

import functools
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from subspaces.cond.train import check_trainable
from subspaces.errors import SubspacesError
from subspaces.eval.base import Evaluator
from subspaces.io import atomic_open
from subspaces.kgc.data import DATASETS, KnowledgeGraph, load_kg
from subspaces.kgc.graph import KnownTails, LinkGraph
from subspaces.kgc.ranking import Ties, average_metrics, rank_metrics, rank_queries
from subspaces.kgc.recipes import KGCTrainConfig
from subspaces.kgc.texts import KGCTexts
from subspaces.kgc.train import embed_batch, train_kgc
from subspaces.losses.simkgc import SimKGCLoss
from subspaces.models.conditional import (
    CacheSettings,
    ConditionalModel,
    TriEncoder,
    build_model,
    is_trained_folder,
    load_or_zero_shot,
)
from subspaces.models.folder import read_config
from subspaces.models.partial import partially_trained
from subspaces.results import JSONResult
from subspaces.train.engine import FitResult, seed_everything


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
    # the text and condition caches over this evaluation (_cache_stats)
    cache_hit_rate: float
    text_lookups: int
    text_hits: int
    encoded_texts: int
    encode_seconds: float
    condition_lookups: int
    condition_hit_rate: float
    average: dict[str, float]
    rerank: dict[str, Any] | None = None  # with rerank_n_hop > 0: SimKGC's re-ranking, beside the plain figures


@dataclass(kw_only=True)
class KGCTrainResult(FitResult):
    """The loop's result of a KGC run, with what the task adds; its JSON is the model folder's ``train_result``."""

    SAVED = (
        "steps", "seconds", "examples_per_second", "final_temperature", "best_dev_mrr", "history", "prepare_seconds",
    )  # fmt: skip

    batch_size: int
    final_temperature: float
    prepare_seconds: float  # the frozen encoder's one pass over every text, before training

    @property
    def examples_per_second(self) -> float:
        return self.steps * self.batch_size / self.seconds if self.seconds else 0.0

    @property
    def best_dev_mrr(self) -> float | None:
        return self.best_score


@dataclass
class KGCResult(JSONResult):
    """What ``train_pipeline`` did: where the model is, the training summary, and the evaluation if one ran."""

    OMIT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"eval"})

    output: str
    train_result: KGCTrainResult
    eval: KGCEvalResult | None = None


def _split_name(kg: KnowledgeGraph, split: str) -> str:
    """``split`` as the graph names it (``validation``, the conditional tasks' name, is ``valid``), or an error."""
    split = {"validation": "valid"}.get(split, split)
    if split not in kg.splits:
        raise SubspacesError(f"unknown split {split!r}; choose one of {', '.join(kg.splits)}")
    return split


def train_pipeline(
    config: KGCTrainConfig | None = None,
    *,
    output: str | Path,
    dataset: str | Path | KnowledgeGraph = "wn18rr",
    model: str = "minilm-l6",
    device: str = "cpu",
    **settings: Any,
) -> KGCResult:
    """Train a KGC model on ``dataset`` with SimKGC's objective, save it to ``output``, and (optionally) evaluate it;
    ``settings`` (fields of :class:`~subspaces.kgc.recipes.KGCTrainConfig`) replace the ``config``'s values."""
    config = replace(config or KGCTrainConfig(), **settings)
    arch, freeze_encoder = config.arch, config.freeze_encoder
    check_trainable("kgc", arch, freeze_encoder, config.trainable_layers)
    if config.head_lr is not None and arch != "tri":
        raise SubspacesError("--head-lr is the tri-encoder's head; the bi-encoder has none (use --encoder-lr)")
    from subspaces.models.encoder import resolve_device

    resolve_device(device)  # fails before the graph and the model load
    seed_everything(config.seed)
    kg = dataset if isinstance(dataset, KnowledgeGraph) else load_kg(dataset)
    evaluate_split = _split_name(kg, config.evaluate_split) if config.evaluate_split else None  # checked before
    if config.select_on and config.track_on:
        raise SubspacesError("select_on and track_on both evaluate each epoch: give one of them")
    select_on = _split_name(kg, config.select_on) if config.select_on else None
    track_on = _split_name(kg, config.track_on) if config.track_on else None
    per_example_texts = arch == "bi" if config.per_example_texts is None else config.per_example_texts
    texts = KGCTexts.build(kg, config.neighbour_names, per_example=per_example_texts)
    head_options = {"dropout": config.head_dropout, "init": config.head_init, "activation": config.head_activation}
    kgc_model = build_model(
        model,
        arch,
        task="kgc",
        head=config.head,
        rank=config.rank,
        head_options=head_options if arch == "tri" else None,
        freeze_encoder=freeze_encoder,
        shared_encoder=config.shared_encoder,
        max_length=config.max_length,
        cache=CacheSettings(disk=config.disk_cache, show_progress=config.show_progress),
        device=device,
    )
    examples = kg.with_inverses("train")
    known = KnownTails(examples)  # the false-negative masks see training triples only (the filter sees every split)
    config = replace(config, description=f"train kgc {arch} on {kg.name}")
    prepare_seconds = 0.0
    if isinstance(kgc_model, TriEncoder) and freeze_encoder:  # every text through the frozen encoder once
        started = time.perf_counter()
        entity_texts = texts.distinct_training_texts(examples)
        kgc_model.embed_sentences(entity_texts, f"kgc {kg.name}: encoding {len(entity_texts):,} entity texts")
        kgc_model.embed_conditions(texts.relations, f"kgc {kg.name}: encoding {len(texts.relations)} relations")
        prepare_seconds = time.perf_counter() - started
    batch_size = min(config.batch_size, len(examples))  # TripleBatches' (a graph smaller than a batch: one batch)
    loss = SimKGCLoss(
        kgc_model, known, settings=config, batch_size=batch_size, embed_batch=functools.partial(embed_batch, kgc_model)
    )
    tracked = select_on or track_on
    evaluator = RankingEvaluator(kg, tracked, texts, select=bool(select_on)) if tracked else None
    with partially_trained(
        _training_inputs(kgc_model, texts, examples),
        config.trainable_layers,
        cache_dir=config.cache_dir,
        show_progress=config.show_progress,
        description=f"caching activations for kgc {kg.name}",
    ):
        result = train_kgc(loss.to(device), examples, config, texts=texts, evaluator=evaluator)
    output = Path(output)
    named = isinstance(dataset, KnowledgeGraph) or str(dataset) in DATASETS
    source = kg.name if named else str(Path(str(dataset)).resolve())
    train = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()}
    summary = KGCTrainResult.of(
        result, batch_size=batch_size, final_temperature=loss.temperature, prepare_seconds=prepare_seconds
    )
    kgc_model.metadata = {
        "dataset": kg.name,
        "dataset_source": source,  # what evaluation reloads: a dataset name or the folder trained on
        "base_model": model,
        "max_length": config.max_length,
        "neighbour_names": texts.link_graph is not None,
        "neighbour_order": "id",  # evaluation refuses any other
        "per_example_texts": per_example_texts,
        "recipe": config.recipe,
        "freeze_encoder": freeze_encoder,
        # what TriEncoder.search marks as seen (any other relation text is projected zero-shot, with a note)
        "seen_conditions": sorted({texts.relations[r] for r in set(examples[:, 1].tolist())}),
        "train": {**train, "select_on": select_on, "track_on": track_on},
        "train_result": summary.to_dict(),
    }
    kgc_model.save(output)
    report = KGCResult(output=str(output), train_result=summary)
    if evaluate_split:
        report.eval = evaluate_model(
            kgc_model,
            kg,
            split=evaluate_split,
            texts=texts,
            predictions=output / f"predictions-{evaluate_split}.jsonl",
            rerank_n_hop=config.rerank_n_hop,
            neighbour_weight=config.neighbour_weight,
            show_progress=config.show_progress,
            model_name=str(output),
        )
        report.eval.save(output / f"eval-{evaluate_split}.json")
    return report


def _training_inputs(model: ConditionalModel, texts: KGCTexts, examples: np.ndarray) -> list[tuple[object, list]]:
    """Each encoder with the inputs it reads in training (what partial fine-tuning caches)."""
    if isinstance(model, TriEncoder):
        return [(model.encoder, [*texts.distinct_training_texts(examples), *texts.relations])]
    heads = texts.training_texts(examples)[0]
    relations = [texts.relations[r] for r in examples[:, 1].tolist()]
    return [
        (model.encoder, list(zip(heads, relations, strict=True))),
        (model.store.encoders["sentence"], texts.distinct_training_texts(examples)),
    ]


class RankingEvaluator(Evaluator):
    """Filtered ranking of one split of the model (or of the loss the engine trains, in eval mode: no margin); MRR
    picks the state kept, or with ``select=False`` is only tracked."""

    primary_metric = "mrr"
    greater_is_better = True

    def __init__(self, kg: KnowledgeGraph, split: str, texts: KGCTexts, *, select: bool = True) -> None:
        self.kg, self.split, self.texts, self.select = kg, split, texts, select

    def is_better(self, score: float, best: float | None) -> bool:
        return super().is_better(score, best) if self.select else True

    def __call__(self, module: Any) -> dict[str, float]:
        model = getattr(module, "model", module)
        result = evaluate_model(model, self.kg, split=self.split, texts=self.texts, show_progress=False)
        # What the evaluation cost rides along, so a run's history separates training from evaluation time.
        return {
            **result.average,
            "inference_seconds": result.inference_seconds,
            "cache_hit_rate": result.cache_hit_rate,
        }


def evaluate_model(
    model: str | Path | ConditionalModel,
    dataset: str | Path | KnowledgeGraph | None = None,
    *,
    split: str = "test",
    texts: KGCTexts | None = None,
    disk_cache: str | Path | bool | None = None,
    predictions: str | Path | None = None,
    ties: Ties = "realistic",
    rerank_n_hop: int = KGCTrainConfig.rerank_n_hop,
    neighbour_weight: float = KGCTrainConfig.neighbour_weight,
    model_name: str | None = None,
    show_progress: bool = True,
    device: str = "cpu",
) -> KGCEvalResult:
    """Filtered ranking of ``split`` against every entity, forward (tails), backward (heads) and their average, of a
    trained KGC folder, a model object, or a plain encoder (the zero-shot bi-encoder, at the recipe's ``max_length``).
    ``rerank_n_hop > 0`` adds SimKGC's graph re-ranking (under ``rerank``), with raw query vectors where the model
    trained with them."""
    from subspaces.models.encoder import resolve_device

    resolve_device(device)
    is_folder = not isinstance(model, torch.nn.Module) and is_trained_folder(model, "kgc")
    metadata: dict = read_config(model, task="kgc")["metadata"] if is_folder else {}  # type: ignore[arg-type]
    if dataset is None:
        dataset = metadata.get("dataset_source", metadata.get("dataset"))
        if dataset is None:
            raise SubspacesError("name the dataset (--dataset wn18rr|fb15k237): the model folder does not record one")
    kg = dataset if isinstance(dataset, KnowledgeGraph) else load_kg(dataset)  # bad data fails before a model loads
    split = _split_name(kg, split)
    if isinstance(model, torch.nn.Module):  # it keeps its own store (memory, and disk shards if built with them)
        kgc_model: ConditionalModel = model
    else:
        kgc_model = load_or_zero_shot(
            model,
            task="kgc",
            zero_shot_max_length=KGCTrainConfig.max_length,
            cache=CacheSettings(disk=disk_cache),
            device=device,
        )
    kgc_model.store.show_progress = show_progress
    kgc_model.store.batch_size = 64
    kgc_model.store.reset_stats()  # the statistics are this evaluation's (vectors already held stay valid)
    if isinstance(kgc_model, TriEncoder):
        kgc_model.params_cache.reset_stats()
    metadata = metadata or dict(getattr(kgc_model, "metadata", {}))
    if metadata.get("neighbour_names") and metadata.get("neighbour_order") != "id":
        raise SubspacesError(
            "this KGC folder names neighbours in the pre-release 'index' order, which this version no longer builds: "
            "retrain it (kgc train), or evaluate it with the release that wrote it"
        )
    if texts is None:
        texts = KGCTexts.build(kg, metadata.get("neighbour_names"))
    normalize_queries = bool(metadata.get("train", {}).get("normalize_queries", True))
    known = KnownTails(np.concatenate([kg.with_inverses(s) for s in kg.splits]))  # the filter: every split's triples
    forward = kg.splits[split]
    queries = kg.with_inverses(split)  # forward queries, then their inverses (the backward direction)
    kgc_model.eval()
    label = f"kgc {kg.name}"
    started = time.perf_counter()
    with torch.no_grad():
        entities = entity_vectors(kgc_model, texts, label)
        query_rows = query_vectors(kgc_model, texts, queries, label)
        ranks, top = rank_queries(query_rows, entities, queries, known, ties=ties)
    seconds = time.perf_counter() - started
    n = len(forward)
    forward_m, backward_m, average_m = _by_direction(ranks, n)
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
        **_cache_stats(kgc_model),
        average=average_m,
    )
    if rerank_n_hop > 0:
        rerank: dict[str, Any] = {
            "n_hop": rerank_n_hop,
            "neighbour_weight": neighbour_weight,
            "normalize_queries": normalize_queries,
        }
        graph = LinkGraph(kg.splits["train"], kg.num_entities)
        reranked, _ = rank_queries(query_rows, entities, queries, known, ties=ties, graph=graph, **rerank)
        directions = dict(zip(("forward", "backward", "average"), _by_direction(reranked, n), strict=True))
        result.rerank = {**rerank, **directions}
    if predictions is not None:
        write_predictions(predictions, kg, queries, ranks, top, n)
    return result


def entity_vectors(model: ConditionalModel, texts: KGCTexts, label: str = "kgc") -> torch.Tensor:
    """Every entity's vector, through the model's store (memory, and disk shards if it was built with them);
    ``label`` names the task and dataset in progress lines ("kgc wn18rr")."""
    n = len(texts.entities)
    return model.store.embed("sentence", texts.entities, f"{label}: encoding {n:,} entities").cpu()


@torch.no_grad()
def query_vectors(model: ConditionalModel, texts: KGCTexts, queries: np.ndarray, label: str = "kgc") -> torch.Tensor:
    """The vector of each query row's (head text, relation): a bi-encoder encodes each pair (almost every query a
    miss); a tri-encoder finds the head's text cached and encodes each relation once."""
    queries = np.asarray(queries)
    heads = [texts.entities[h] for h in queries[:, 0].tolist()]
    relations = [texts.relations[r] for r in queries[:, 1].tolist()]
    description = f"{label}: encoding {len(queries):,} queries"  # the bi-encoder's (head, relation) pairs
    return model.project(heads, relations, description if model.arch == "bi" else None).cpu()


def _cache_stats(model: ConditionalModel) -> dict[str, Any]:
    """The text and condition caches' lookups and hit rates, and the texts actually encoded."""
    text = [c.stats() for c in model.store.memory.values()]
    lookups, hits = sum(s.lookups for s in text), sum(s.hits for s in text)
    condition = model.params_cache.stats() if isinstance(model, TriEncoder) else None
    return {
        "cache_hit_rate": hits / lookups if lookups else 0.0,
        "text_lookups": lookups,
        "text_hits": hits,
        "encoded_texts": model.store.encoded_texts,
        "encode_seconds": model.store.encode_seconds,
        "condition_lookups": condition.lookups if condition else 0,
        "condition_hit_rate": condition.hit_rate if condition else 0.0,
    }


def _by_direction(ranks: np.ndarray, n_forward: int) -> tuple[dict[str, float], ...]:
    """Rank metrics of the forward queries (the first ``n_forward``), of the backward ones, and their average."""
    forward, backward = rank_metrics(ranks[:n_forward]), rank_metrics(ranks[n_forward:])
    return forward, backward, average_metrics(forward, backward)


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
