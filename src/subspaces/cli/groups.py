"""The typer apps every command module attaches to. Kept apart from ``app`` so modules can import them."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="subspaces",
    help="Sentence embeddings that adapt: SimCSE, Hyper-CL, Matryoshka+MIC, mini-vec2vec.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
eval_app = typer.Typer(help="Evaluate encoders (STS, truncated dimensions).", no_args_is_help=True)
train_app = typer.Typer(help="Train encoders (SimCSE, Matryoshka/MIC).", no_args_is_help=True)
align_app = typer.Typer(help="Unsupervised alignment of embedding spaces (mini-vec2vec).", no_args_is_help=True)
cond_app = typer.Typer(help="Conditional similarity (Hyper-CL tri-encoders) on WiC and C-STS.", no_args_is_help=True)
kgc_app = typer.Typer(
    help="Knowledge-graph completion (SimKGC bi-encoder, Hyper-CL tri-encoder).", no_args_is_help=True
)
bench_app = typer.Typer(help="Benchmarks that time and compare implementations.", no_args_is_help=True)

app.add_typer(eval_app, name="eval")
app.add_typer(train_app, name="train")
app.add_typer(align_app, name="align")
app.add_typer(cond_app, name="cond")
app.add_typer(kgc_app, name="kgc")
app.add_typer(bench_app, name="bench")
