"""``subspaces serve``: the HTTP embedding server (:mod:`subspaces.serve`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from subspaces.cli.common import ThreadsOpt, echo, given, recipe_options
from subspaces.cli.groups import app
from subspaces.errors import SubspacesError
from subspaces.models.backends import AUTO
from subspaces.models.registry import check_model
from subspaces.serve.settings import ServeSettings, read_api_key

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@app.command("serve", interrupted="the server stopped")
@recipe_options(ServeSettings, skip=("api_key", "max_body_bytes"))
def serve_cmd(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on; the default is this machine only.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    api_key_file: Annotated[
        Optional[Path], typer.Option(help="File whose first line is the API key routes but /health need (Bearer).")
    ] = None,
    max_body_mb: Annotated[float, typer.Option(help="Size of one request body in MiB; more is answered 413.")] = 2.0,
    query_prompt: Annotated[Optional[str], typer.Option(help="The prompt named 'query' (over the model's).")] = None,
    document_prompt: Annotated[
        Optional[str], typer.Option(help="The prompt named 'document' (over the model's).")
    ] = None,
    threads: ThreadsOpt = None,
    stay_up_on_error: Annotated[
        bool, typer.Option("--stay-up-on-error", help="When loading fails, answer 503 instead of exiting (status 2).")
    ] = False,
    *,
    config: ServeSettings,
) -> None:
    """Serve embeddings over HTTP: OpenAI's /v1/embeddings, /v1/similarity (a condition under --head), /v1/search
    (with --store), /v1/models, /health, /metrics and a search page at /. See docs/serve.md.

    The model loads after the server starts (/health says when). Every setting of ServeSettings is an option here
    or a key of a --config file."""

    try:
        import uvicorn

        from subspaces.serve.app import create_app
    except ImportError as exc:
        raise SubspacesError(
            f"serving needs the serve extra ({exc.name} is missing): pip install 'subspaces[serve]'"
        ) from None
    from subspaces.models.encoder import resolve_device

    # Checked before the server starts, not at the first request.
    check_model(config.model)
    for name, folder in (("--head", config.head), ("--store", config.store), ("--adapter", config.adapter)):
        if folder is not None and not folder.is_dir():
            raise SubspacesError(f"{name} {folder} is not a folder")
    if not 0 < port < 65536:
        raise SubspacesError(f"--port must be between 1 and 65535, got {port}")
    if given(ctx, "max_body_mb") and not max_body_mb > 0:
        raise SubspacesError(f"--max-body-mb must be positive, got {max_body_mb}")
    # The options declared here win over --config where given on the command line.
    prompts = {"query": query_prompt, "document": document_prompt}
    settings = replace(
        config,
        api_key=read_api_key(api_key_file) if api_key_file is not None else config.api_key,
        max_body_bytes=max(1, int(max_body_mb * 2**20)) if given(ctx, "max_body_mb") else config.max_body_bytes,
        prompts={**config.prompts, **{name: text for name, text in prompts.items() if text is not None}},
    )
    resolve_device(settings.device)
    if host not in LOOPBACK and settings.api_key is None:
        echo(
            f"listening on {host} without --api-key-file: anyone who reaches it may use it",
            label="warning:",
            style="yellow",
        )
    auto = " (auto)" if settings.backend == AUTO else ""
    echo(
        f"serving {settings.served_id!r} ({' '.join(settings.runtime)}{auto}) on http://{host}:{port} "
        "(the model loads now; GET /health says when)"
    )
    failures: list[str] = []
    server: uvicorn.Server | None = None

    def stop(reason: str) -> None:  # called from the loading thread
        failures.append(reason)
        if server is not None:
            server.should_exit = True  # uvicorn's loop checks it every 0.1 s, then shuts down as on Ctrl-C

    app = create_app(settings, on_load_failure=None if stay_up_on_error else stop)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=5))
    server.run()
    if failures:
        raise SubspacesError(f"loading failed, so the server stopped (--stay-up-on-error keeps it up): {failures[0]}")
