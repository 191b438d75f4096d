"""Plain SimCSE vs MRL vs MRL+MIC from the same start, then every model at truncated dimensions.

Same start model, same WordNet sentences, same steps, batch, learning rate and seed for the three objectives.
Writes into ``--out`` (default ``runs/matryoshka``, git-ignored):

- ``<method>-seed<k>/``: the trained models (sentence-transformers folders);
- ``timing.json``: per-step time of each objective, interleaved on the same batches in one process, so the ratios
  are comparable even on a shared machine;
- ``dims.json`` + ``dims.png``: :class:`subspaces.eval.dims.DimsEvaluator` on the start model and each trained one.

Example (the figures in BENCHMARKS.md section 3)::

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/matryoshka_compare.py --model paraphrase-l3 \
        --steps 150 --batch-size 64 --tasks Banking77,TweetEval-emotion,MRPC,STSBenchmark \
        --max-train 2000 --max-test 1000
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from subspaces.data.text import wordnet_sentences
from subspaces.eval.dims import DimsEvaluator, plot_dims
from subspaces.io import save_json
from subspaces.losses.matryoshka import matryoshka_simcse_loss
from subspaces.losses.mic import MICLoss
from subspaces.losses.simcse import SimCSELoss
from subspaces.models.encoder import load_encoder
from subspaces.train.sentence import EncoderTrainConfig as TrainConfig
from subspaces.train.sentence import train_sentence_loss as train

METHODS = ("simcse", "mrl", "mic")


class StopAtSnapshot(Exception):
    """Raised from the training callback to end a run right after its snapshot (``--stop-at-snapshot``)."""


def build_loss(method: str, model, dims: list[int], args: argparse.Namespace):
    if method == "simcse":
        return SimCSELoss(model, temperature=args.temperature)
    mrl = matryoshka_simcse_loss(model, dims, temperature=args.temperature)
    if method == "mrl":
        return mrl
    return MICLoss(model, mrl, gamma=args.gamma, tau_corr=args.tau_corr, lambda_var=args.lambda_var, t=args.t)


def time_steps(args: argparse.Namespace, dims: list[int], sentences: list[str]) -> dict:
    """Forward + backward of each objective on the same batches, interleaved round by round.

    The ratios use this process's CPU time (``time.process_time``; run with OMP_NUM_THREADS=1): on a shared machine
    wall-clock time mostly measures the other jobs. Wall-clock medians are kept alongside.
    """
    model = load_encoder(args.model, max_seq_length=args.max_length)
    model.train()
    losses = {m: build_loss(m, model, dims, args) for m in METHODS}
    times: dict[str, list[float]] = {m: [] for m in METHODS}
    walls: dict[str, list[float]] = {m: [] for m in METHODS}
    generator = torch.Generator().manual_seed(args.seed)
    for round_ in range(args.timing_rounds + 1):
        idx = torch.randperm(len(sentences), generator=generator)[: args.batch_size].tolist()
        features = [model.preprocess([sentences[i] for i in idx])]
        for method in METHODS:
            start, wall = time.process_time(), time.perf_counter()
            value = losses[method](features, None)
            value.backward()
            elapsed, wall = time.process_time() - start, time.perf_counter() - wall
            model.zero_grad(set_to_none=True)
            if round_ > 0:  # round 0 warms up allocators and kernels
                times[method].append(elapsed)
                walls[method].append(wall)
    median = {m: statistics.median(v) for m, v in times.items()}
    return {
        "rounds": args.timing_rounds,
        "torch_threads": torch.get_num_threads(),
        "median_cpu_seconds_per_step": median,
        "median_wall_seconds_per_step": {m: statistics.median(v) for m, v in walls.items()},
        "mic_over_mrl": median["mic"] / median["mrl"],
        "mrl_over_simcse": median["mrl"] / median["simcse"],
        "mic_over_simcse": median["mic"] / median["simcse"],
        "all_cpu_seconds": times,
    }


@torch.no_grad()
def prefix_geometry(model, sentences: list[str], dims: list[int], batch_size: int = 64) -> dict:
    """What MIC's regularisers target, measured on held-out sentences at the last layer, per prefix size.

    ``mean_abs_corr``: mean |C_uv| between prefix and residual token dims (SCR's C); ``variance_cv`` and
    ``uniformity`` of the pooled prefixes (SIR's two terms, uniformity over all pairs of the batch).
    """
    from subspaces.losses.mic import token_statistics
    from subspaces.models.pooling import masked_mean

    model.eval()
    transformer = model[0]
    config = transformer.model.config
    previous, config.output_hidden_states = config.output_hidden_states, True
    corr_sum, pooled_all, batches = None, [], 0
    try:
        for start in range(0, len(sentences), batch_size):
            features = model.preprocess(sentences[start : start + batch_size])
            out = model(features)
            hidden, mask = out["all_layer_embeddings"][-1], out["attention_mask"]
            corr, _ = token_statistics(hidden, mask)
            corr_sum = corr if corr_sum is None else corr_sum + corr
            pooled_all.append(masked_mean(hidden, mask))
            batches += 1
    finally:
        config.output_hidden_states = previous
    corr = corr_sum / batches
    pooled = torch.cat(pooled_all)
    result = {}
    for d in dims:
        if d >= corr.shape[0]:
            continue
        z = pooled[:, :d]
        v = z.var(dim=0, unbiased=False)
        unit = torch.nn.functional.normalize(z, dim=-1)
        sq = torch.pdist(unit).pow(2)
        result[str(d)] = {
            "mean_abs_corr": float(corr[:d, d:].abs().mean()),
            "variance_cv": float(v.std(unbiased=False) / v.mean()),
            "uniformity": float(torch.logsumexp(-2.0 * sq, 0) - torch.log(torch.tensor(float(sq.numel())))),
        }
    return result


def markdown_table(reports: list[dict]) -> str:
    """Rows = task x model, columns = dims: the table BENCHMARKS.md shows, made from the JSON reports."""
    dims = [str(d) for d in reports[0]["dims"]]
    lines = ["| task (metric) | model | " + " | ".join(dims) + " |", "|---|---|" + "---:|" * len(dims)]
    for task in reports[0]["scores"]:
        for report in reports:
            cells = " | ".join(f"{report['scores'][task][d]:.2f}" for d in dims)
            lines.append(f"| {task} ({report['metrics'][task]}) | {report['model']} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="paraphrase-l3")
    parser.add_argument("--dims", default="16,32,64,128,384")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--temperature", type=float, default=0.05)
    parser.add_argument("--gamma", type=float, default=0.1)
    parser.add_argument("--tau-corr", type=float, default=0.1)
    parser.add_argument("--lambda-var", type=float, default=1.0)
    parser.add_argument("--t", type=float, default=2.0)
    parser.add_argument("--seeds", default="42")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--tasks", default="Banking77,TweetEval-emotion,MRPC,STSBenchmark")
    parser.add_argument("--max-train", type=int, default=2000)
    parser.add_argument("--max-test", type=int, default=1000)
    parser.add_argument("--timing-rounds", type=int, default=5)
    parser.add_argument("--timing-file", default="timing.json")
    parser.add_argument("--geometry-sentences", type=int, default=512)
    parser.add_argument(
        "--snapshot-step", type=int, default=None, help="also save each model after this many steps; evaluate that"
    )
    parser.add_argument("--stop-at-snapshot", action="store_true", help="end each run at --snapshot-step")
    parser.add_argument(
        "--checkpoint-dir", default=None, help="evaluate <dir>/<method>.pt resume checkpoints instead of training"
    )
    parser.add_argument("--skip", default="", help="comma list of phases to skip: timing, train, eval, geometry")
    parser.add_argument("--out", default="runs/matryoshka")
    args = parser.parse_args()
    args.seed = int(args.seeds.split(",")[0])

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dims = [int(d) for d in args.dims.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    methods = [m for m in args.methods.split(",") if m]
    seeds = [int(s) for s in args.seeds.split(",")]
    sentences = wordnet_sentences()
    settings = {k: v for k, v in vars(args).items() if k != "skip"}

    if "timing" not in skip:
        timing = time_steps(args, dims, sentences)
        save_json(out / args.timing_file, {"settings": settings, **timing})
        print(json.dumps({k: v for k, v in timing.items() if k != "all_cpu_seconds"}, indent=2))

    runs: dict[str, Path] = {}
    if args.checkpoint_dir:
        # Evaluate models restored from resume checkpoints (<dir>/<method>.pt), e.g. all three taken at the same
        # step of the same schedule when a run had to be cut short.
        for method in methods:
            state = torch.load(Path(args.checkpoint_dir) / f"{method}.pt", map_location="cpu", weights_only=False)
            name = f"{method}-seed{state['config']['seed']}-step{state['step']}"
            folder = out / name
            if not (folder / "modules.json").is_file():
                model = load_encoder(args.model, max_seq_length=args.max_length)
                model.load_state_dict(state.get("module", state.get("model")))  # engine checkpoints: "module"
                model.save(str(folder))
            runs[name] = folder
    for seed in seeds if not args.checkpoint_dir else []:
        for method in methods:
            folder = out / f"{method}-seed{seed}"
            snapshot = out / f"{method}-seed{seed}-step{args.snapshot_step}" if args.snapshot_step else None
            runs[snapshot.name if snapshot else folder.name] = snapshot or folder
            if "train" in skip or (folder / "trainer_state.json").is_file():
                continue
            if snapshot is not None and args.stop_at_snapshot and (snapshot / "modules.json").is_file():
                continue
            model = load_encoder(args.model, max_seq_length=args.max_length)
            config = TrainConfig(
                output_dir=str(folder),
                batch_size=args.batch_size,
                lr=args.lr,
                max_steps=args.steps,
                max_length=args.max_length,
                seed=seed,
                eval_steps=0,
                save_steps=50,
            )

            def take_snapshot(step: int, loss: float, model=model, snapshot=snapshot) -> None:
                # The model after `step` steps of a `--steps`-long schedule (the LR has not decayed to 0 yet).
                if snapshot is not None and step == args.snapshot_step:
                    model.save(str(snapshot))
                    if args.stop_at_snapshot:
                        raise StopAtSnapshot

            cpu = time.process_time()
            try:
                result = train(
                    model,
                    build_loss(method, model, dims, args),
                    [(s,) for s in sentences],
                    config,
                    callback=take_snapshot,
                )
            except StopAtSnapshot:
                print(f"{method} seed {seed}: stopped at step {args.snapshot_step}, model in {snapshot}")
                continue
            cpu = time.process_time() - cpu
            save_json(
                folder / "cpu_seconds.json", {"steps": result.steps, "cpu_seconds": cpu, "wall_seconds": result.seconds}
            )
            print(
                f"{method} seed {seed}: {result.steps} steps in {result.seconds:.0f} s "
                f"({result.seconds / max(result.steps, 1):.2f} s/step)"
            )

    if "eval" not in skip:
        evaluator = DimsEvaluator(
            tasks=args.tasks.split(","),
            dims=dims,
            max_train=args.max_train,
            max_test=args.max_test,
            show_progress=True,
        )
        reports = []
        for name, target in [("start", args.model), *runs.items()]:
            cached = out / f"dims-{name}.json"
            if cached.is_file():
                reports.append(json.loads(cached.read_text()))
                continue
            report = evaluator.report(load_encoder(str(target), max_seq_length=args.max_length), name=name).to_dict()
            save_json(cached, report)
            reports.append(report)
        if "geometry" not in skip:
            from subspaces.data.sts import load_stsb

            held_out = list(dict.fromkeys(load_stsb("test").sentences1))[: args.geometry_sentences]
            geometry = {}
            for name, target in [("start", args.model), *runs.items()]:
                model = load_encoder(str(target), max_seq_length=args.max_length)
                geometry[name] = prefix_geometry(model, held_out, dims)
            save_json(out / "geometry.json", {"sentences": len(held_out), "layer": "last", "models": geometry})
            print(json.dumps(geometry, indent=1))
        save_json(out / "dims.json", {"settings": settings, "reports": reports})
        plot_dims(reports, out / "dims.png")
        print(markdown_table(reports))


if __name__ == "__main__":
    main()
