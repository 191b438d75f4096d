"""Issue 17's encoder regime: do MIC's terms make a fine-tuned encoder's 16- and 32-d prefixes better than MRL's?

The claim to show or refute: "MIC beats MRL at 16 and 32 dims by >= 2 points on >= 2 tasks".

**Start.** ``minilm-l6``, not Matryoshka-trained: its 16/32-d prefixes are weak (the adapter benchmark's raw
prefixes, run ``raw`` in ``benchmarks/results/matryoshka/adapter/test/summary.json``, at 16/32/384:
SNLI-test nDCG@10 26.7/44.1/64.1,
Banking77 65.6/81.2/93.0, Emotion 46.8/50.2/68.5, STS-B 72.0/76.7/82.0), which is what a Matryoshka objective can
gain. Nothing is re-initialised. Its top 2 of 6 transformer layers train over the bottom four's cached activations
(the engine's partial fine-tuning, ``trainable_layers=2`` + ``cache_dir``; :mod:`subspaces.models.partial`).

**Objective.** Supervised SimCSE on NLI triplets (anchor, entailed hypothesis, contradicting hypothesis as the hard
negative), InfoNCE at temperature 0.05, batch 64, max length 32 tokens, ``--steps`` 1000, lr 5e-5 for every arm
(SimCSE's supervised value; not tuned, on dev or test), no warm-up, linear decay. The only NLI triplets here are
``snli_devtest_triplets.csv`` (SNLI dev + test; SimCSE's 275k-triplet file is missing, see its SOURCE.md); the
retrieval task below is on SNLI *test*, so only the 3,172 triplets built from SNLI **dev** train (1000 x 64 rows is
~20 passes over them). 4 of the ~3.3k SNLI-test premises and 155 of its ~9.6k hypotheses (short generic ones)
also occur among the training texts. ``start-loss`` measures, without training, the per-prefix InfoNCE of the
start on the first 6 training batches (eval mode): the issue asks for >= 0.5 at every prefix, i.e. the task is not
solved at step 0, so a Matryoshka objective has something to train.

**Arms** (same rows, same batch order and seed, same steps, same lr; ``train_matryoshka``/``build_loss`` with
:class:`subspaces.train.matryoshka.MatryoshkaConfig`):

- ``simcse``: the InfoNCE at the full size only (MRL with dims = [full], which is SimCSE's loss);
- ``mrl``: MRL, InfoNCE at 16, 32, 64, 128 and 384, weight 1 each;
- ``mrl_scr``: MICLoss around MRL with only the SCR term (``lambda_sir`` = 0, ``lambda_distill`` = 0);
- ``mrl_sir``: only SIR (``lambda_corr`` = ``lambda_var`` = 0, ``lambda_distill`` = 0);
- ``mic``: every term at MatryoshkaConfig's defaults (γ 0.1, λ_corr 100, λ_var 25, λ_sir 1, β 0.1).
- ``mic_gamma1``: MIC with γ = 1, ten times the geometric regularisers (distillation unchanged): a dose check added
  after ``mic`` seed 0, when ``geometry`` showed each geometric piece's gradient at ~1 % of MRL's on the start
  (γ·SCR 0.33, γ·SIR 0.33, β·distill 0.88 against MRL's 32.4); reported beside ``mic``, never chosen over it (the
  claim is read from ``mic``).

MIC's regularised layers are the two that train, **layers 5 and 6** (MICLoss's 1-based ``hidden_states`` index:
the outputs of the fifth and the last transformer layer). The default (``layers=None``: the middle and the last,
3 and 6) would pick a frozen layer: under partial fine-tuning the embeddings' and the frozen layers' states are
not computed (``all_layer_embeddings`` holds None there, and MICLoss refuses such a layer), and a cached state
would carry no gradient anyway. Before training, each arm runs one batch in eval mode and stops unless its loss
is finite and > 0, each term its weights switch on is non-zero, the gradient reaches both trainable layers and
none of the frozen ones, and, for a MIC arm, the regularisers' own gradient (MIC's minus MRL's on the same batch)
reaches each regularised layer; the values go into the result as ``check``.

**Model selection.** The last step (no keep-best: the arms get the same number of steps; no split is read for
selection). **Evaluation**, of the start and of every trained model, at 16/32/64/128/384 on L2-normalised
prefixes (truncate, renormalise), on TEST rows, with the pieces of ``benchmarks/matryoshka_adapter.py``:

- Banking77 (full train/test) and Emotion (train/test): accuracy of a logistic-regression probe (C = 10) on the
  unit prefixes, **no StandardScaler** (``subspaces.eval.dims.DimsEvaluator`` standardises its features, which
  undoes the per-dimension variance MIC shapes, so its probe is not used here);
- STS-B test: Spearman x 100 of the prefix cosines;
- SNLI test retrieval: each premise a query, its entailed hypotheses the relevant documents, among all ~9.6k
  distinct test hypotheses (neutral and contradicting ones included): nDCG@10 and Recall@10.

Texts are embedded once per model through the same cached bottom layers (exact to float16, as
``simcse_ablation.py`` does; the cache is shared by every model since the bottom never trains). Per-row values
(probe correctness, pair cosines, per-query scores; 4 decimals) are kept for the paired bootstrap, in compact JSON.

**Output**: ``benchmarks/results/matryoshka/encoder/`` holds ``start_loss.json``, ``start.json`` and one
``<arm>-seed<k>.json`` per run (settings, the check, train seconds, the loss history with MICLoss's per-term
sizes at step 1 and every 10 steps, the per-prefix training loss on the start-loss batches after training, the
metrics, the per-row values; these per-run files are not in git: ``runs.json`` keeps them less the per-row
values and the history). A finished one is skipped (one with other settings stops the run); an interrupted
training resumes from its checkpoint under ``runs/matryoshka_encoder/`` (git-ignored), where the trained models
and the activation caches stay. ``table`` prints mean ± std over seeds per arm, task and dim; MIC - MRL,
MRL+SCR - MRL and MRL+SIR - MRL at 16 and 32 dims with paired bootstrap 95 % intervals (test rows resampled, the
same resample for both arms, seed k of one arm paired with seed k of the other and the difference averaged over
the seeds; the seed-to-seed spread is the table's ± and is not in the interval); the interval's half-width is the
effect the comparison can detect; and whether the claim holds (>= 2 of Banking77, Emotion, STS-B and SNLI nDCG@10
with a point difference >= 2 at both 16 and 32, and whether those intervals exclude 0). It writes ``summary.json``.

    OMP_NUM_THREADS=2 nice -n 5 .venv/bin/python benchmarks/matryoshka_encoder.py start-loss
    OMP_NUM_THREADS=2 nice -n 5 .venv/bin/python benchmarks/matryoshka_encoder.py run --seeds 0,1,2
    .venv/bin/python benchmarks/matryoshka_encoder.py table
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/matryoshka_encoder.py geometry   # MIC's targets, every model
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/matryoshka_encoder.py cost   # step time, arms taking turns, idle box
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/matryoshka_encoder.py run --smoke   # every arm, tiny, temp folder

``geometry`` (:func:`geometry_of`, seconds a model) is the manipulation check: MIC's unweighted terms measured on
the start and on every trained model at the same batches (did MIC move the statistics it targets, relative to
MRL?), and the gradient norm of MRL and of each MIC piece on the first batch at those weights (how much of the
update each piece is). It writes ``geometry.json``, keeping the models already there (``--redo`` measures again).

**Start loss** (``start-loss``, measured: 6 batches of 64, eval mode): InfoNCE 2.455 at 16 dims, 1.270 at 32,
0.828 at 64, 0.624 at 128, 0.516 at 384: every prefix >= 0.5, the full vector barely.

**Time**, measured in the smoke on this 2-core machine with OMP_NUM_THREADS=1 while another benchmark kept the other
core busy (``run --smoke --arms mrl,mic --batch-size 64 --steps 5 --train-limit 320``): 1.21 s a training step for
``mrl``, 1.34 for ``mic`` (the other arms not timed at batch 64; at batch 8: simcse 0.15, mrl 0.15, mrl_scr and
mrl_sir 0.17, mic 0.19). Extrapolated, not measured end to end:
1000 steps are ~20-22 min a run on one thread, ~5.3 h for 5 arms x 3 seeds (less on two threads); caching the
46,319 evaluation texts' bottom layers once (152 texts/s, ~5 min, ~0.6 GiB under ``runs/``), then per model
~2 min of top-layer encoding (382 texts/s) and a few minutes of probes (10 logistic regressions on 10k and 16k
rows) and retrieval: ~1-1.5 h for the 16 models. About 6-7 h in all; the smoke (every arm, 3 steps of 8) ~35 s.
Each run leaves a 91 MB model and a 119 MB checkpoint under ``runs/`` (~3 GB for 15).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "matryoshka" / "encoder"
RUNS = ROOT.parent / "runs" / "matryoshka_encoder"
MODEL = "minilm-l6"
DIMS: tuple[int | None, ...] = (16, 32, 64, 128, None)  # None: the model's full size
ARMS = ("simcse", "mrl", "mrl_scr", "mrl_sir", "mic", "mic_gamma1")
# What each arm changes in MatryoshkaConfig; the rest are its defaults (MIC's weights as this project reads them).
ARM_SETTINGS: dict[str, dict[str, Any]] = {
    "simcse": {"dims": (None,), "mic": False},
    "mrl": {"mic": False},
    "mrl_scr": {"mic": True, "lambda_sir": 0.0, "lambda_distill": 0.0},
    "mrl_sir": {"mic": True, "lambda_corr": 0.0, "lambda_var": 0.0, "lambda_distill": 0.0},
    "mic": {"mic": True},
    # A dose check, not a tuned arm: at the default gamma 0.1 each geometric term's gradient is ~1 % of MRL's on the
    # start (`geometry`), so ten times it asks whether a stronger dose moves the prefixes.
    "mic_gamma1": {"mic": True, "gamma": 1.0},
}
COMPARISONS = (("mic", "mrl"), ("mrl_scr", "mrl"), ("mrl_sir", "mrl"), ("mic_gamma1", "mrl"))
TASKS = ("Banking77", "Emotion", "STSB", "SNLI nDCG@10", "SNLI R@10")
CLAIM_TASKS = ("Banking77", "Emotion", "STSB", "SNLI nDCG@10")  # R@10 is the same retrieval task's other metric
START_LOSS_BATCHES = 6


# -- data -----------------------------------------------------------------------------------------------------------


def training_rows(limit: int | None = None) -> list[tuple[str, str, str]]:
    """The SNLI-dev triplets of ``snli_devtest_triplets.csv`` (anchor, entailment, contradiction), file order."""
    import csv

    from subspaces.config import dataset_dir
    from subspaces.errors import DataError
    from subspaces.io import open_text

    path = dataset_dir("nli") / "snli_devtest_triplets.csv"
    with open_text(path, newline="") as handle:
        reader = csv.DictReader(handle)
        if not {"sent0", "sent1", "hard_neg", "source"} <= set(reader.fieldnames or ()):
            raise DataError("needs the columns sent0, sent1, hard_neg and source", path=path)
        rows = [(r["sent0"], r["sent1"], r["hard_neg"]) for r in reader if r["source"] == "snli_dev"]
    if not rows:
        raise DataError("holds no snli_dev triplets", path=path)
    return rows[:limit] if limit else rows


def adapter_bench() -> Any:
    """``benchmarks/matryoshka_adapter.py`` as a module (its data loaders and per-row metrics)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import matryoshka_adapter

    return matryoshka_adapter


def evaluation_data(limit: int | None = None) -> dict[str, Any]:
    """The test rows of every task; ``limit`` (smoke runs): a seeded random subset of each probe split (Banking77's
    train split is sorted by label), the first STS-B pairs and the first SNLI lines."""
    adapter = adapter_bench()
    data = adapter.evaluation_data("test", None, "split")
    if limit is None:
        return data
    rng = np.random.default_rng(0)
    for task in ("Banking77", "Emotion"):
        for part in ("train", "test"):
            texts, labels = data[task][part]
            pick = np.sort(rng.permutation(len(texts))[:limit])
            data[task][part] = ([texts[i] for i in pick], [labels[i] for i in pick])
    data["STSB"] = tuple(list(column[:limit]) for column in data["STSB"])
    data["SNLI"] = adapter.snli_retrieval("test", limit)
    return data


def evaluation_texts(data: dict[str, Any]) -> list[str]:
    texts = [t for task in ("Banking77", "Emotion") for part in ("train", "test") for t in data[task][part][0]]
    texts += [*data["STSB"][0], *data["STSB"][1], *data["SNLI"]["queries"], *data["SNLI"]["documents"]]
    return list(dict.fromkeys(texts))


# -- arms -----------------------------------------------------------------------------------------------------------


def trained_layers(depth: int, trainable: int) -> tuple[int, ...]:
    """MICLoss's 1-based indices of the top ``trainable`` of ``depth`` layers (the ones that have a gradient)."""
    return tuple(range(depth - trainable + 1, depth + 1))


def arm_config(arm: str, *, depth: int, trainable_layers: int, dims: Sequence[int | None] = DIMS, **common: Any) -> Any:
    """The MatryoshkaConfig of ``arm``: ``common`` (the run's settings) and ``dims`` plus what the arm changes (the
    simcse arm keeps the full size only); a MIC arm regularises the trained layers, the top ``trainable_layers``."""
    from subspaces.errors import SubspacesError
    from subspaces.train.matryoshka import MatryoshkaConfig

    if arm not in ARM_SETTINGS:
        raise SubspacesError(f"unknown arm {arm!r}; choose from {', '.join(ARMS)}")
    settings = {"dims": tuple(dims), **ARM_SETTINGS[arm]}
    if settings["mic"]:
        settings["layers"] = trained_layers(depth, trainable_layers)
    return MatryoshkaConfig(**common, **settings, trainable_layers=trainable_layers, stsb_dev=False)


@contextmanager
def evaluating(model: Any, max_length: int) -> Iterator[None]:
    """``model`` in eval mode at ``max_length`` tokens for the block; its mode, length and gradients restored after."""
    was_training, length = model.training, model.max_seq_length
    model.eval()
    model.max_seq_length = max_length
    try:
        yield
    finally:
        model.zero_grad(set_to_none=True)
        model.max_seq_length = length
        model.train(was_training)


def layer_gradients(model: Any, loss: Any, batch: list[tuple[str, ...]], layers: Sequence[Any]) -> tuple[float, list]:
    """``loss`` on ``batch`` and its gradient, flattened per module of ``layers`` (zeros where none reached)."""
    import torch

    from subspaces.train.sentence import loss_step

    model.zero_grad(set_to_none=True)
    value = loss_step(model, loss)(batch)
    value.backward()
    grads = [
        torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in layer.parameters()])
        for layer in layers
    ]
    return float(value.detach()), grads


def check_arm(model: Any, config: Any, rows: Sequence[tuple[str, ...]]) -> dict[str, Any]:
    """One batch through ``config``'s loss under partial fine-tuning, in eval mode (no dropout: deterministic).

    Raises SubspacesError unless the loss is finite and > 0, every MIC term the weights switch on is non-zero, the
    gradient reaches every trainable layer and no frozen parameter, and (MIC arms) the regularisers' own gradient,
    MIC's minus MRL's, reaches every regularised layer. Returns the loss, the terms and the gradient norms.
    """
    from subspaces.errors import SubspacesError
    from subspaces.models.partial import partial_fine_tuning
    from subspaces.train.matryoshka import build_loss

    batch = list(rows[: config.batch_size])
    layers = model[0].auto_model.encoder.layer
    top = list(layers[len(layers) - config.trainable_layers :])
    with (
        evaluating(model, config.max_length),
        partial_fine_tuning(model, config.trainable_layers, cache_dir=config.cache_dir, show_progress=False),
    ):
        loss = build_loss(model, config)
        value, grads = layer_gradients(model, loss, batch, top)
        frozen = [n for n, p in model.named_parameters() if p.grad is not None and not p.requires_grad]
        report: dict[str, Any] = {"loss": value, "grad_norm": [float(g.norm()) for g in grads]}
        problems = [] if np.isfinite(value) and value > 0 else [f"loss {value}"]
        problems += [f"no gradient in trainable layer {i + 1}" for i, g in enumerate(grads) if not g.abs().sum()]
        problems += [f"gradient in frozen {name}" for name in frozen[:3]]
        if config.mic:
            terms = dict(loss.last_terms)
            # SCR as a whole (its variance floor is a hinge, 0 on a healthy layer by design)
            wanted = {"scr": config.lambda_corr or config.lambda_var, "sir": config.lambda_sir}
            wanted["distill"] = config.lambda_distill
            problems += [f"MIC term {k} is 0" for k, w in wanted.items() if w and not terms[k]]
            _, plain = layer_gradients(model, loss.loss, batch, top)
            frozen_count = len(layers) - config.trainable_layers
            shift = {
                layer: float((grads[layer - frozen_count - 1] - plain[layer - frozen_count - 1]).norm())
                for layer in loss.layers
            }
            problems += [f"the regularisers' gradient misses layer {k}" for k, v in shift.items() if not v > 0]
            report |= {"terms": terms, "regulariser_grad_norm": {str(k): v for k, v in shift.items()}}
    if problems:
        raise SubspacesError("arm check failed: " + "; ".join(problems))
    return report


# -- measurements ---------------------------------------------------------------------------------------------------


def full_dims(model: Any, dims: Sequence[int | None] = DIMS) -> list[int]:
    size = int(model.get_embedding_dimension())
    return [size if d is None else int(d) for d in dims]


def prefix_losses(
    model: Any,
    rows: Sequence[tuple[str, ...]],
    *,
    batch_size: int,
    max_length: int,
    temperature: float = 0.05,
    batches: int = START_LOSS_BATCHES,
) -> dict[str, float]:
    """Mean InfoNCE (hard negatives included) of each prefix over the first ``batches`` training batches of seed 0,
    in eval mode, no gradient: the per-prefix training loss at that point."""
    import torch

    from subspaces.losses.simcse import info_nce
    from subspaces.models.encoder import encode
    from subspaces.train.sentence import RowBatches

    order = RowBatches(rows, batch_size, 0, rank=0, world=1)
    n = min(batches, len(order))
    dims = full_dims(model)
    totals = dict.fromkeys(dims, 0.0)
    with evaluating(model, max_length):
        for index in range(n):
            batch = order.batch(0, index)
            columns = [
                torch.as_tensor(encode(model, [row[c] for row in batch], batch_size=len(batch)))
                for c in range(len(batch[0]))
            ]
            with torch.no_grad():
                for d in dims:
                    totals[d] += float(info_nce(*(x[:, :d] for x in columns), temperature=temperature, gather=False))
    return {str(d): totals[d] / n for d in dims}


def embed(model: Any, texts: Sequence[str], trainable_layers: int, cache: Path, show_progress: bool) -> np.ndarray:
    """``texts``' embeddings through the cached frozen bottom (one cache for every model: the bottom never trains)."""
    import torch

    from subspaces.models.encoder import encode
    from subspaces.models.partial import partial_fine_tuning

    model.eval()
    folder = cache / f"eval-len{model.max_seq_length}"  # inference length, not the training one
    with (
        partial_fine_tuning(model, trainable_layers, cache_dir=folder, show_progress=show_progress) as pft,
        torch.no_grad(),
    ):
        pft.prepare(texts, description="caching the evaluation texts' bottom layers")
        return np.asarray(encode(model, list(texts), batch_size=128, show_progress=show_progress), dtype=np.float32)


def score_rows(vectors: np.ndarray, texts: Sequence[str], data: dict[str, Any], dims: Sequence[int], C: float):
    """Per-row values of every task at each dim: ``{task: {dim: [...]}}`` (probe 0/1, pair cosine, per query)."""
    from subspaces.vectors import cosine_rows

    adapter = adapter_bench()
    where = {t: i for i, t in enumerate(texts)}

    def rows(part: Sequence[str]) -> np.ndarray:
        return vectors[[where[t] for t in part]]

    out: dict[str, dict[str, list[float]]] = {task: {} for task in TASKS}
    probes = {
        task: {part: rows(data[task][part][0]) for part in ("train", "test")} for task in ("Banking77", "Emotion")
    }
    s1, s2 = rows(data["STSB"][0]), rows(data["STSB"][1])
    queries, documents = rows(data["SNLI"]["queries"]), rows(data["SNLI"]["documents"])
    for d in dims:
        key = str(d)
        for task, x in probes.items():
            out[task][key] = adapter.probe_correct(
                adapter.unit(x["train"], d),
                data[task]["train"][1],
                adapter.unit(x["test"], d),
                data[task]["test"][1],
                C,
            )
        out["STSB"][key] = cosine_rows(adapter.unit(s1, d), adapter.unit(s2, d)).round(4).tolist()
        recall, ndcg = adapter.set_retrieval_scores(
            adapter.unit(queries, d), adapter.unit(documents, d), data["SNLI"]["relevant"]
        )
        out["SNLI R@10"][key], out["SNLI nDCG@10"][key] = recall, [round(v, 4) for v in ndcg]
    return out


def metrics(rows: dict[str, dict[str, list[float]]], gold: Sequence[float]) -> dict[str, dict[str, float]]:
    """Each task's metric x 100 at each dim from its per-row values (Spearman for STS-B, the mean otherwise)."""
    gold_array = np.asarray(gold, dtype=float)
    return {
        task: {
            d: float(metric_rows(np.asarray(v, dtype=float)[None], gold_array[None] if task == "STSB" else None)[0])
            for d, v in per_dim.items()
        }
        for task, per_dim in rows.items()
    }


def evaluate(model: Any, data: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    texts = evaluation_texts(data)
    vectors = embed(model, texts, args.trainable_layers, args.runs / "activations", not args.quiet)
    dims = full_dims(model)
    rows = score_rows(vectors, texts, data, dims, args.C)
    gold = list(data["STSB"][2])
    return {
        "dims": dims,
        "scores": metrics(rows, gold),
        "eval_seconds": time.perf_counter() - started,
        "rows": rows,
        "gold_sts": gold,
    }


# -- runs -----------------------------------------------------------------------------------------------------------


def settings(args: argparse.Namespace, train_rows: int) -> dict[str, Any]:
    """What a result depends on: a finished JSON with other settings is not mixed in."""
    keep = ("steps", "batch_size", "max_length", "lr", "trainable_layers", "C", "limit")
    return {
        "model": MODEL,
        **{k: getattr(args, k) for k in keep},
        "train_rows": train_rows,
        "train_data": "snli_devtest_triplets.csv, source snli_dev (anchor, entailment, contradiction)",
        "temperature": 0.05,
        "selection": "last step",
        "probe": {"scaler": None, "features": "L2-normalised prefixes"},
    }


def meta() -> dict[str, Any]:
    import torch

    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores (shared), torch {torch.__version__}, "
            f"{torch.get_num_threads()} thread(s)"
        ),
    }


def save_compact(path: Path, record: dict[str, Any]) -> None:
    """One-line JSON (the per-row values would make an indented file ~10x larger), written atomically."""
    from subspaces.io import atomic_open

    with atomic_open(path, "w", encoding="utf-8") as handle:
        json.dump(record, handle, separators=(",", ":"), ensure_ascii=False)
        handle.write("\n")


def finished(path: Path, expected: dict[str, Any]) -> bool:
    """Whether ``path`` holds a finished result of these settings (SystemExit if it holds other settings')."""
    if not path.is_file():
        return False
    found = json.loads(path.read_text(encoding="utf-8")).get("settings")
    if found != json.loads(json.dumps(expected)):
        raise SystemExit(f"{path} was made with other settings ({found} != {expected}): move it away or rerun those")
    return True


def train_arm(base: Any, arm: str, seed: int, rows: list[tuple[str, ...]], data: dict[str, Any], args) -> dict:
    from subspaces.models.encoder import load_encoder
    from subspaces.train.matryoshka import train_matryoshka
    from subspaces.train.output import STATE

    model = copy.deepcopy(base)
    out = args.runs / f"{arm}-seed{seed}"
    config = arm_config(
        arm,
        depth=len(model[0].auto_model.encoder.layer),
        trainable_layers=args.trainable_layers,
        output_dir=str(out),
        lr=args.lr,
        max_steps=args.steps,
        batch_size=args.batch_size,
        max_length=args.max_length,
        seed=seed,
        eval_steps=0,
        save_steps=args.save_steps,
        cache_dir=str(args.runs / "activations" / f"train-len{args.max_length}"),
        show_progress=not args.quiet,
        description=f"{arm} seed {seed}",
    )
    check = check_arm(model, config, rows)
    result = train_matryoshka(model, rows, config)
    state = json.loads((out / STATE).read_text(encoding="utf-8"))  # the run that finished (a rerun trains nothing)
    trained = load_encoder(str(out))
    history = result.history
    with_terms = [h for h in history if "terms" in h]
    return {
        "arm": arm,
        "seed": seed,
        "config": asdict(config),  # the whole MatryoshkaConfig: the objective and the loop
        "check": check,
        "steps": result.steps,
        "resumed_from": state["resumed_from"],
        "train_seconds": state["seconds"],  # the loop only, since the resume point when it resumed
        "seconds_per_step": state["seconds"] / max(1, state["steps"] - state["resumed_from"]),
        "history": history,
        "terms_first": with_terms[0] if with_terms else None,
        "terms_last": with_terms[-1] if with_terms else None,
        "end_prefix_loss": prefix_losses(trained, rows, batch_size=args.batch_size, max_length=args.max_length),
        **evaluate(trained, data, args),
    }


def run(args: argparse.Namespace) -> None:
    from subspaces.models.encoder import load_encoder

    rows = training_rows(args.train_limit)
    expected = settings(args, len(rows))
    todo = [(arm, seed) for seed in args.seeds for arm in args.arms]
    todo = [(a, s) for a, s in todo if not finished(args.results / f"{a}-seed{s}.json", expected)]
    start_path = args.results / "start.json"
    if not todo and finished(start_path, expected):
        print(f"every run is done already ({args.results})")
        return
    base = load_encoder(MODEL)
    data = evaluation_data(args.limit)
    if not finished(start_path, expected):
        record = {"arm": "start", "settings": expected, "meta": meta(), **evaluate(copy.deepcopy(base), data, args)}
        save_compact(start_path, record)
        print("start: " + brief(record))
    for arm, seed in todo:
        record = {"settings": expected, "meta": meta(), **train_arm(base, arm, seed, rows, data, args)}
        save_compact(args.results / f"{arm}-seed{seed}.json", record)
        print(f"{arm} seed {seed} ({record['seconds_per_step']:.2f} s/step): " + brief(record), flush=True)


def brief(record: dict[str, Any]) -> str:
    return ", ".join(f"{t} {v['16']:.1f}/{v['32']:.1f}" for t, v in record["scores"].items()) + " (at 16/32)"


def start_loss(args: argparse.Namespace) -> None:
    from subspaces.io import save_json
    from subspaces.models.encoder import load_encoder

    rows = training_rows(args.train_limit)
    model = load_encoder(MODEL)
    losses = prefix_losses(model, rows, batch_size=args.batch_size, max_length=args.max_length)
    low = [d for d, v in losses.items() if v < 0.5]
    record = {
        "model": MODEL,
        "batches": min(START_LOSS_BATCHES, len(rows) // args.batch_size),
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "temperature": 0.05,
        "rows": "the first batches of seed 0's order over the SNLI-dev triplets (hard negatives in), eval mode",
        "loss": losses,
        "below_0.5": low,
        "meta": meta(),
    }
    args.results.mkdir(parents=True, exist_ok=True)
    save_json(args.results / "start_loss.json", record)
    print("per-prefix InfoNCE at step 0: " + ", ".join(f"{d}: {v:.3f}" for d, v in losses.items()))
    print(f"below 0.5 (solved at step 0): {low}" if low else "every prefix is >= 0.5")


# Which of MIC's pieces each gradient share isolates: (arm whose loss minus MRL's gives it, the piece's name).
GRADIENT_PIECES = (
    ("mrl_scr", "gamma * SCR"),
    ("mrl_sir", "gamma * lambda_sir * SIR"),
    ("distill_only", "beta * distill"),
)


def geometry_of(
    model: Any,
    rows: Sequence[tuple[str, ...]],
    *,
    batch_size: int,
    max_length: int,
    dims: Sequence[int | None] = DIMS,
) -> dict[str, Any]:
    """What MIC acts on, measured on ``model`` (full forward, eval mode) over the start-loss batches of seed 0.

    ``terms``: MICLoss's unweighted terms at the mic arm's settings, averaged over the batches (no gradient), so
    every arm's trained model is read on the statistics MIC targets. ``gradient``: on the first batch, the norm over
    the top-2 layers' parameters of MRL's gradient and of each MIC piece's (that piece's arm's gradient minus MRL's;
    the loss is additive, so the difference is the piece alone).
    """
    import torch

    from subspaces.train.matryoshka import build_loss
    from subspaces.train.sentence import RowBatches, loss_step

    depth = len(model[0].auto_model.encoder.layer)
    top = model[0].auto_model.encoder.layer[depth - 2 :]
    order = RowBatches(rows, batch_size, 0, rank=0, world=1)
    batches = [order.batch(0, i) for i in range(min(START_LOSS_BATCHES, len(order)))]
    arms = ("mrl", "mic", "mrl_scr", "mrl_sir")
    configs = {arm: arm_config(arm, depth=depth, trainable_layers=2, dims=dims) for arm in arms}
    configs["distill_only"] = arm_config("mic", depth=depth, trainable_layers=2, dims=dims)
    configs["distill_only"].lambda_corr = configs["distill_only"].lambda_var = configs["distill_only"].lambda_sir = 0.0
    for config in configs.values():
        config.batch_size, config.max_length = batch_size, max_length
    with evaluating(model, max_length):
        mic = build_loss(model, configs["mic"])
        sums: dict[str, float] = {}
        with torch.no_grad():
            for batch in batches:
                loss_step(model, mic)(list(batch))
                for key, value in mic.last_terms.items():
                    sums[key] = sums.get(key, 0.0) + float(value) / len(batches)

        def gradient(arm: str) -> torch.Tensor:
            return torch.cat(layer_gradients(model, build_loss(model, configs[arm]), list(batches[0]), top)[1])

        plain = gradient("mrl")
        norms = {"mrl": float(plain.norm())}
        norms |= {name: float((gradient(arm) - plain).norm()) for arm, name in GRADIENT_PIECES}
    return {"terms": sums, "gradient_norm": norms, "batches": len(batches)}


def geometry_table(models: dict[str, Any]) -> str:
    """The Markdown table of ``geometry.json``'s models: MIC's terms, then the gradient norms of MRL and each piece."""
    keys = ("scr_corr", "scr_var", "sir_cv", "sir_unif", "distill")
    lines = [
        "| model | " + " | ".join(keys) + " | grad MRL | " + " | ".join(n for _, n in GRADIENT_PIECES) + " |",
        "|---|" + "---:|" * (len(keys) + 1 + len(GRADIENT_PIECES)),
    ]
    for name, g in models.items():
        grads = [g["gradient_norm"]["mrl"], *(g["gradient_norm"][n] for _, n in GRADIENT_PIECES)]
        terms = " | ".join(f"{g['terms'][k]:.4f}" for k in keys)
        lines.append(f"| {name} | {terms} | " + " | ".join(f"{v:.3f}" for v in grads) + " |")
    return "\n".join(lines)


def geometry(args: argparse.Namespace) -> None:
    """``geometry_of`` the start and of every finished run's trained model; ``geometry.json`` and a table.

    Models already in ``geometry.json`` keep their entry (``--redo``: measure again every model on disk): the
    trained models live under the git-ignored ``runs/``, which a fresh checkout lacks, while their results and
    this file are committed, so a later session adds the models it trained without dropping the others.
    """
    from subspaces.io import save_json
    from subspaces.models.encoder import load_encoder

    path = args.results / "geometry.json"
    kept: dict[str, Any] = {} if args.redo or not path.is_file() else json.loads(path.read_text())["models"]
    on_disk: dict[str, str] = {"start": MODEL}
    for arm, seeds in sorted(load_results(args.results)[1].items()):
        for seed in sorted(seeds):
            folder = args.runs / f"{arm}-seed{seed}"
            if (folder / "model.safetensors").is_file():
                on_disk[f"{arm} seed {seed}"] = str(folder)
    todo = {name: where for name, where in on_disk.items() if name not in kept}
    rows = training_rows(args.train_limit) if todo else []
    measured = {
        name: geometry_of(load_encoder(where), rows, batch_size=args.batch_size, max_length=args.max_length)
        | {"date": datetime.now(UTC).date().isoformat()}
        for name, where in todo.items()
    }
    out = dict(sorted((kept | measured).items(), key=lambda item: (item[0] != "start", item[0])))  # start first
    print(geometry_table(out))
    print(f"measured now: {', '.join(measured) or 'none'}; kept from {path.name}: {len(out) - len(measured)}")
    save_json(path, {"models": out, "meta": meta(), "doc": geometry_of.__doc__})


def step_costs(
    base: Any,
    rows: Sequence[tuple[str, ...]],
    arms: Sequence[str],
    *,
    steps: int,
    repeats: int,
    batch_size: int,
    max_length: int,
    cache_dir: str | None,
    dims: Sequence[int | None] = DIMS,
) -> dict[str, Any]:
    """Seconds per training step of each arm, the arms taking turns in one process (order rotated each repeat).

    Each turn trains a fresh copy of ``base`` (top 2 layers over the cached bottom, AdamW at 5e-5, train mode)
    for one untimed step and ``steps`` timed ones on the same batches, so load on the machine falls on every arm
    alike; the median turn is reported, with its ratio to MRL's. The training runs' own ``seconds_per_step`` are
    wall-clock of runs hours apart on a shared box; this is the comparison.
    """
    import torch

    from subspaces.models.partial import partial_fine_tuning
    from subspaces.train.matryoshka import build_loss
    from subspaces.train.sentence import RowBatches, loss_step

    depth = len(base[0].auto_model.encoder.layer)
    order = RowBatches(rows, batch_size, 0, rank=0, world=1)
    batches = [list(order.batch(0, i % len(order))) for i in range(steps + 1)]
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    for repeat in range(repeats):
        for arm in list(arms[repeat % len(arms) :]) + list(arms[: repeat % len(arms)]):
            model = copy.deepcopy(base)
            config = arm_config(arm, depth=depth, trainable_layers=2, dims=dims)
            config.batch_size, config.max_length = batch_size, max_length
            model.max_seq_length = max_length
            model.train()
            with partial_fine_tuning(model, 2, cache_dir=cache_dir, show_progress=False):
                step = loss_step(model, build_loss(model, config))
                optimiser = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-5)
                for index, batch in enumerate(batches):
                    if index == 1:
                        started = time.perf_counter()
                    optimiser.zero_grad(set_to_none=True)
                    step(batch).backward()
                    optimiser.step()
                times[arm].append((time.perf_counter() - started) / steps)
    median = {arm: float(np.median(t)) for arm, t in times.items()}
    reference = median.get("mrl")
    return {
        "seconds_per_step": median,
        "ratio_to_mrl": {arm: v / reference for arm, v in median.items()} if reference else None,
        "turns": times,
        "steps": steps,
        "repeats": repeats,
        "batch_size": batch_size,
    }


def cost(args: argparse.Namespace) -> None:
    """``step_costs`` of ``--arms`` on ``minilm-l6``; ``cost.json`` and a line per arm."""
    from subspaces.io import save_json
    from subspaces.models.encoder import load_encoder

    rows = training_rows(args.train_limit)
    cache = str(args.runs / "activations" / f"train-len{args.max_length}")
    steps, repeats = (2, 1) if args.smoke else (10, 3)
    report = step_costs(
        load_encoder(MODEL),
        rows,
        args.arms,
        steps=steps,
        repeats=repeats,
        batch_size=args.batch_size,
        max_length=args.max_length,
        cache_dir=cache,
    )
    for arm, value in report["seconds_per_step"].items():
        ratio = report["ratio_to_mrl"][arm] if report["ratio_to_mrl"] else float("nan")
        print(f"{arm}: {value:.3f} s/step ({ratio:.2f}x MRL)")
    save_json(args.results / "cost.json", report | {"meta": meta()})


# -- table ----------------------------------------------------------------------------------------------------------


def metric_rows(values: np.ndarray, gold: np.ndarray | None) -> np.ndarray:
    """The metric x 100 of each row of ``values`` (k, n): the mean, or with ``gold`` (k, n) Spearman against it."""
    if gold is None:
        return 100 * values.mean(axis=1)
    from scipy.stats import rankdata

    a, b = rankdata(values, axis=1), rankdata(gold, axis=1)
    a, b = a - a.mean(axis=1, keepdims=True), b - b.mean(axis=1, keepdims=True)
    return 100 * (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))


def paired_difference(
    a: np.ndarray, b: np.ndarray, gold: np.ndarray | None = None, n: int = 1000, seed: int = 0
) -> dict[str, float]:
    """metric(a) - metric(b) and its paired bootstrap 95 % interval.

    ``a``, ``b``: (seeds, rows) per-row values of two arms, row s of one paired with row s of the other (the same
    seed). Each resample draws the test rows with replacement once, for both arms and every seed; the difference
    is the mean over seeds of the per-seed differences. ``gold``: the STS scores (the metric is then Spearman).
    """
    if a.shape != b.shape:
        raise ValueError(f"paired arms need the same (seeds, rows), got {a.shape} and {b.shape}")

    def metric(values: np.ndarray, pick: np.ndarray) -> float:  # values: (rows, seeds) of the picked rows
        golds = None if gold is None else np.broadcast_to(gold[pick], values.T.shape)
        return float(metric_rows(values.T, golds).mean())

    from subspaces.eval.stats import paired_bootstrap

    # rows first: one resample of the test rows serves every seed of both arms
    result = paired_bootstrap(a.T, b.T, metric, n=n, seed=seed)
    lo, hi = result.low, result.high
    return {"diff": result.diff, "lo": lo, "hi": hi, "half_width": (hi - lo) / 2, "seeds": len(a)}


def load_results(folder: Path) -> tuple[dict[str, Any] | None, dict[str, dict[int, dict[str, Any]]]]:
    start_path = folder / "start.json"
    start = json.loads(start_path.read_text(encoding="utf-8")) if start_path.is_file() else None
    by_arm: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted(folder.glob("*-seed*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        by_arm.setdefault(record["arm"], {})[int(record["seed"])] = record
    return start, by_arm


def summarise(folder: Path, n_boot: int = 1000) -> dict[str, Any]:
    """The table's numbers: per arm, task and dim the mean and std over seeds; the comparisons at 16 and 32."""
    start, by_arm = load_results(folder)
    if not by_arm:
        raise SystemExit(f"no results under {folder}; run first")
    arms = [a for a in ARMS if a in by_arm]
    one = next(iter(by_arm[arms[0]].values()))
    gold = np.asarray(one["gold_sts"], dtype=float)
    cells: dict[str, Any] = {}
    for arm in arms:
        runs = list(by_arm[arm].values())
        cells[arm] = {
            task: {
                d: {
                    "mean": float(np.mean([r["scores"][task][d] for r in runs])),
                    "std": float(np.std([r["scores"][task][d] for r in runs], ddof=1)) if len(runs) > 1 else 0.0,
                    "seeds": len(runs),
                }
                for d in one["scores"][task]
            }
            for task in TASKS
        }
    differences: dict[str, Any] = {}
    for x, y in COMPARISONS:
        if x not in by_arm or y not in by_arm:
            continue
        seeds = sorted(set(by_arm[x]) & set(by_arm[y]))
        if not seeds:
            continue
        name = f"{x} - {y}"
        # the bootstrap resamples rows with the seeds paired; the per-seed differences show the seed-to-seed spread
        differences[name] = {
            task: {
                d: paired_difference(
                    np.asarray([by_arm[x][s]["rows"][task][d] for s in seeds], dtype=float),
                    np.asarray([by_arm[y][s]["rows"][task][d] for s in seeds], dtype=float),
                    gold if task == "STSB" else None,
                    n=n_boot,
                )
                | {"per_seed": [by_arm[x][s]["scores"][task][d] - by_arm[y][s]["scores"][task][d] for s in seeds]}
                for d in ("16", "32")
            }
            for task in TASKS
        }
    claim = None
    if "mic - mrl" in differences:
        diff = differences["mic - mrl"]
        two_points = [t for t in CLAIM_TASKS if all(diff[t][d]["diff"] >= 2 for d in ("16", "32"))]
        above_0 = [t for t in two_points if all(diff[t][d]["lo"] > 0 for d in ("16", "32"))]
        claim = {
            "statement": "MIC beats MRL at 16 and 32 dims by >= 2 points on >= 2 tasks, the intervals above 0",
            "tasks": list(CLAIM_TASKS),
            "tasks_with_2_points_at_16_and_32": two_points,
            "of_which_interval_above_0": above_0,
            "holds": len(above_0) >= 2,
        }
    start_scores = start["scores"] if start else None
    return {"start": start_scores, "arms": cells, "differences": differences, "claim": claim, "bootstrap": n_boot}


SCREEN_TASKS = (("Banking77", "Banking77"), ("Emotion", "Emotion"), ("STSB", "STS-B"), ("SNLI nDCG@10", "SNLI nDCG@10"))


def screen(summary: dict[str, Any]) -> str:
    """BENCHMARKS.md's table: each arm at 16 and 32 dims on the claim's tasks and SNLI at full size; then the
    paired differences with their intervals. (Step cost: ``cost``; the runs' own wall-clock is too noisy.)"""
    full = list(next(iter(next(iter(summary["arms"].values())).values())))[-1]
    head = " | ".join(f"{label} {d}" for _, label in SCREEN_TASKS for d in ("16", "32"))
    lines = [
        f"| arm | seeds | {head} | SNLI nDCG@10 {full} |",
        "|---|---:|" + "---:|" * (2 * len(SCREEN_TASKS) + 1),
    ]
    if summary["start"]:
        values = " | ".join(f"{summary['start'][t][d]:.2f}" for t, _ in SCREEN_TASKS for d in ("16", "32"))
        lines.append(f"| start | – | {values} | {summary['start']['SNLI nDCG@10'][full]:.2f} |")
    for arm, cells in summary["arms"].items():
        values = " | ".join(
            f"{cells[t][d]['mean']:.2f} ± {cells[t][d]['std']:.2f}" for t, _ in SCREEN_TASKS for d in ("16", "32")
        )
        snli = cells["SNLI nDCG@10"][full]
        seeds = cells[SCREEN_TASKS[0][0]]["16"]["seeds"]
        lines.append(f"| {arm} | {seeds} | {values} | {snli['mean']:.2f} ± {snli['std']:.2f} |")
    for name, per_task in summary["differences"].items():
        cells = [per_task[t][d] for t, _ in SCREEN_TASKS for d in ("16", "32")]
        values = " | ".join(f"{c['diff']:+.2f} [{c['lo']:+.2f}, {c['hi']:+.2f}]" for c in cells)
        lines.append(f"| Δ {name.replace(' - ', ' − ')} | {cells[0]['seeds']} | {values} | – |")
    return "\n".join(lines)


def table(args: argparse.Namespace) -> None:
    from subspaces.io import save_json

    summary = summarise(args.results, args.bootstrap)
    dims = list(next(iter(next(iter(summary["arms"].values())).values())))
    print(f"## {MODEL}, top {args.trainable_layers} layers trained; test rows; mean ± std over seeds\n")
    print("| task | arm | seeds | " + " | ".join(dims) + " |")
    print("|---|---|---:|" + "---:|" * len(dims))
    for task in TASKS:
        if summary["start"]:
            print(f"| {task} | start | - | " + " | ".join(f"{summary['start'][task][d]:.2f}" for d in dims) + " |")
        for arm, cells in summary["arms"].items():
            seeds = cells[task][dims[0]]["seeds"]
            values = " | ".join(f"{cells[task][d]['mean']:.2f} ± {cells[task][d]['std']:.2f}" for d in dims)
            print(f"| {task} | {arm} | {seeds} | {values} |")
    print("\n### paired differences, bootstrap 95 % intervals (test rows resampled, seeds paired); ± = half-width\n")
    print("| task | difference | seeds | at 16 | at 32 | per seed at 16 | per seed at 32 |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, per_task in summary["differences"].items():
        for task, at in per_task.items():
            cells = [
                f"{at[d]['diff']:+.2f} [{at[d]['lo']:+.2f}, {at[d]['hi']:+.2f}] ±{at[d]['half_width']:.2f}" for d in at
            ]
            cells += [" ".join(f"{v:+.2f}" for v in at[d]["per_seed"]) for d in at]
            print(f"| {task} | {name} | {at['16']['seeds']} | " + " | ".join(cells) + " |")
    claim = summary["claim"]
    if claim:
        print(
            f"\nclaim ({claim['statement']}): {'holds' if claim['holds'] else 'does not hold'}; tasks with >= 2 at "
            f"both: {claim['tasks_with_2_points_at_16_and_32'] or 'none'}, of which the interval excludes 0 at both: "
            f"{claim['of_which_interval_above_0'] or 'none'}"
        )
    print("\n### the BENCHMARKS.md screen: means ± std over seeds; Δ with paired bootstrap 95 % intervals\n")
    print(screen(summary))
    save_json(args.results / "summary.json", summary)


# -- command line ---------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("start-loss", "run", "table", "geometry", "cost"))
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=None, help="Training steps (default 1000; smoke 3).")
    parser.add_argument("--batch-size", type=int, default=None, help="Triplets per batch (default 64; smoke 8).")
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-5, help="One value for every arm (not tuned).")
    parser.add_argument("--trainable-layers", type=int, default=2)
    parser.add_argument("--save-steps", type=int, default=100, help="Checkpoint cadence (resume).")
    parser.add_argument("--C", type=float, default=10.0, help="Inverse L2 strength of the probes (unit features).")
    parser.add_argument("--limit", type=int, default=None, help="Cap every evaluation split (smoke runs).")
    parser.add_argument("--train-limit", type=int, default=None, help="Cap the training triplets (smoke runs).")
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument("--runs", type=Path, default=None, help="Checkpoints, models, activation caches.")
    parser.add_argument("--smoke", action="store_true", help="Tiny: 3 steps, batch 8, 100-row splits, temp folders.")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--redo", action="store_true", help="geometry: measure every model on disk again.")
    args = parser.parse_args(argv)
    if args.smoke:
        import warnings

        # 100-row probe subsets of Banking77's 77 classes: sklearn warns that the labels look continuous
        warnings.filterwarnings("ignore", message="The number of unique classes")
        folder = Path(tempfile.mkdtemp(prefix="matryoshka_encoder_smoke-"))
        args.results, args.runs = args.results or folder / "results", args.runs or folder / "runs"
        args.limit, args.train_limit, args.bootstrap = args.limit or 100, args.train_limit or 64, 100
        args.steps, args.batch_size = args.steps or 3, args.batch_size or 8
        print(f"smoke run under {folder}")
    args.steps, args.batch_size = args.steps or 1000, args.batch_size or 64
    args.results, args.runs = args.results or RESULTS, args.runs or RUNS
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = sorted(set(args.arms) - set(ARMS))
    if unknown:
        raise SystemExit(f"unknown arm(s) {unknown}; choose from {', '.join(ARMS)}")
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    return args


def main() -> None:
    args = parse_args()
    from subspaces.config import set_threads

    set_threads(args.threads)
    args.results.mkdir(parents=True, exist_ok=True)
    {"start-loss": start_loss, "run": run, "table": table, "geometry": geometry, "cost": cost}[args.command](args)


if __name__ == "__main__":
    main()
