"""``subspaces serve``: the HTTP embedding server (:mod:`subspaces.serve`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from subspaces.cli.common import (
    DEVICE,
    BackendOpt,
    DeviceOpt,
    DtypeOpt,
    ModelOpt,
    PrecisionOpt,
    ThreadsOpt,
    console,
    user_errors,
)
from subspaces.cli.groups import app
from subspaces.errors import SubspacesError
from subspaces.models.registry import check_model
from subspaces.serve.settings import TOKEN_IDS, ServeSettings, read_api_key

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@app.command("serve")
@user_errors(interrupted="the server stopped")
def serve_cmd(
    model: ModelOpt,
    head: Annotated[
        Optional[Path], typer.Option(help="A saved Hyper-CL tri-encoder folder, for /v1/similarity's condition.")
    ] = None,
    store: Annotated[Optional[Path], typer.Option(help="A store folder, for /v1/search.")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on; the default is this machine only.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    api_key_file: Annotated[
        Optional[Path],
        typer.Option(help="File whose first line is the API key every route but /health then needs (Bearer)."),
    ] = None,
    model_id: Annotated[
        Optional[str], typer.Option(help="The model name clients use (default: the model's name or folder name).")
    ] = None,
    max_batch_tokens: Annotated[int, typer.Option(help="Padded tokens (texts x longest) in one batch.")] = 16384,
    max_wait_ms: Annotated[
        float, typer.Option(help="How long a batch waits for more requests to join it (0: take what has queued).")
    ] = 0.0,
    max_queue: Annotated[int, typer.Option(help="Requests that may wait; more are answered 503.")] = 256,
    max_inputs: Annotated[int, typer.Option(help="Texts (or pairs) in one request; more are answered 413.")] = 2048,
    max_body_mb: Annotated[float, typer.Option(help="Size of one request body in MiB; more is answered 413.")] = 2.0,
    timeout: Annotated[float, typer.Option(help="Seconds a request may take before it is answered 504.")] = 30.0,
    cors_origin: Annotated[
        Optional[list[str]],
        typer.Option(help="An origin browsers may call the API from (repeatable); none by default."),
    ] = None,
    served_model_name: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Another name requests may give as model (repeatable), e.g. an SDK's default text-embedding-3-small."
        ),
    ] = None,
    accept_any_model_name: Annotated[
        bool, typer.Option("--accept-any-model-name", help="Serve every request whatever model it names.")
    ] = False,
    query_prompt: Annotated[
        Optional[str], typer.Option(help="The prompt named 'query' (over the model folder's own prompts).")
    ] = None,
    document_prompt: Annotated[
        Optional[str], typer.Option(help="The prompt named 'document' (over the model folder's own prompts).")
    ] = None,
    adapter: Annotated[
        Optional[Path],
        typer.Option(help="A fitted Matryoshka adapter folder (subspaces adapt fit): dimensions reads its prefix."),
    ] = None,
    token_ids: Annotated[
        Literal[TOKEN_IDS],  # type: ignore[valid-type]
        typer.Option(
            help="How token-id inputs are read: tiktoken (OpenAI's cl100k_base ids, what OpenAI's SDKs and "
            "LangChain send; decoded to text) or model (the served model's own tokenizer's ids)."
        ),
    ] = "tiktoken",
    device: DeviceOpt = DEVICE,
    backend: BackendOpt = "torch",
    precision: PrecisionOpt = "fp32",
    dtype: DtypeOpt = "float32",
    threads: ThreadsOpt = None,
    stay_up_on_error: Annotated[
        bool,
        typer.Option(
            "--stay-up-on-error",
            help="When the model, head or store fails to load, keep answering (503, /health says why) instead of "
            "exiting with status 2.",
        ),
    ] = False,
) -> None:
    """Serve embeddings over HTTP: OpenAI's /v1/embeddings (with Matryoshka dimensions), /v1/similarity (with a
    condition under --head), /v1/search (with --store, and a condition under --head), /v1/models, /health, /metrics,
    and a search page at /. See docs/serve.md.

    The model loads after the server starts (/health says when). If it fails to load, the server stops and the
    command exits with status 2, as a supervisor expects, unless --stay-up-on-error."""

    try:
        import uvicorn

        from subspaces.serve.app import create_app
    except ImportError as exc:
        raise SubspacesError(
            f"serving needs the serve extra ({exc.name} is missing): pip install 'subspaces[serve]'"
        ) from None
    from subspaces.models.encoder import resolve_device

    # Everything the user typed is checked before the server starts: a bad value fails now, not at the first request.
    check_model(model)
    for name, folder in (("--head", head), ("--store", store), ("--adapter", adapter)):
        if folder is not None and not folder.is_dir():
            raise SubspacesError(f"{name} {folder} is not a folder")
    if not 0 < port < 65536:
        raise SubspacesError(f"--port must be between 1 and 65535, got {port}")
    if store is not None:
        try:
            import subspaces.store  # noqa: F401
        except ImportError:
            raise SubspacesError("--store needs subspaces.store, which this installation lacks") from None
    resolve_device(device)
    settings = ServeSettings(
        model=model,
        head=head,
        store=store,
        device=device,
        backend=backend,
        precision=precision,
        dtype=dtype,
        model_id=model_id,
        api_key=read_api_key(api_key_file) if api_key_file is not None else None,
        max_batch_tokens=max_batch_tokens,
        max_wait_ms=max_wait_ms,
        max_queue=max_queue,
        max_inputs=max_inputs,
        max_body_bytes=max(1, int(max_body_mb * 2**20)),
        request_timeout_s=timeout,
        cors_origins=tuple(cors_origin or ()),
        aliases=tuple(served_model_name or ()),
        accept_any_model=accept_any_model_name,
        prompts={
            name: text for name, text in (("query", query_prompt), ("document", document_prompt)) if text is not None
        },
        adapter=adapter,
        token_ids=token_ids,
    )
    if host not in LOOPBACK and settings.api_key is None:
        console.print(
            f"[yellow]warning:[/] listening on {host} without --api-key-file: anyone who reaches it may use it"
        )
    console.print(
        f"serving {settings.served_id!r} ({backend} {precision}, --dtype {dtype}) on http://{host}:{port} "
        "(the model loads now; GET /health says when)"
    )
    failures: list[str] = []
    server: uvicorn.Server | None = None

    def stop(reason: str) -> None:  # called from the loading thread
        failures.append(reason)
        if server is not None:
            server.should_exit = True  # uvicorn's loop checks it every 0.1 s, then shuts down as on Ctrl-C

    app = create_app(settings, on_load_failure=None if stay_up_on_error else stop)
    config = uvicorn.Config(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    server.run()
    if failures:
        raise SubspacesError(f"loading failed, so the server stopped (--stay-up-on-error keeps it up): {failures[0]}")
