"""The FastAPI app: ``create_app(settings)`` builds one; nothing is loaded until it starts.

The routes are :data:`ROUTES` (``GET /openapi.json`` is their schema, from the typed models of
:mod:`~subspaces.serve.schemas`); every error is a JSON body ``{"error": {"message", "type", "code"}}`` with a status
of :data:`ERRORS` (503s with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from concurrent.futures import Future
from contextlib import asynccontextmanager
from typing import Any, cast

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from subspaces import __version__
from subspaces.errors import SubspacesError
from subspaces.serve.batcher import Batcher, QueueFull
from subspaces.serve.engine import Engine
from subspaces.serve.metrics import Metrics
from subspaces.serve.page import page
from subspaces.serve.schemas import (
    Embedding,
    EmbeddingRequest,
    EmbeddingResponse,
    ErrorResponse,
    Health,
    ModelCard,
    ModelList,
    SearchRequest,
    SearchResponse,
    SearchResult,
    Similarity,
    SimilarityRequest,
    SimilarityResponse,
    Usage,
)
from subspaces.serve.settings import ServeSettings

log = logging.getLogger("subspaces.serve")

ROUTES = ("/", "/health", "/metrics", "/openapi.json", "/v1/models", "/v1/embeddings", "/v1/similarity", "/v1/search")
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": why}
    for code, why in (
        (401, "no valid API key"),
        (404, "a model this server does not serve"),
        (413, "over the request limits"),
        (422, "malformed or invalid request"),
        (503, "loading, or the queue is full"),
        (504, "timed out"),
    )
}


class ApiError(HTTPException):
    """An error answered as OpenAI's JSON error body."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", **headers: str) -> None:
        super().__init__(status, message, headers=headers or None)
        self.kind = kind


class _State:
    """What the app holds once started: the engine and its batcher, or why they are not there (yet)."""

    def __init__(
        self, settings: ServeSettings, engine: Engine | None, on_failure: Callable[[str], None] | None = None
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.on_failure = on_failure
        self.batcher: Batcher | None = None
        self.failure: str | None = None
        self.metrics = Metrics(
            queue_depth=lambda: float(self.batcher.depth) if self.batcher else 0.0,
            cache_stats=lambda: self.engine.cache_stats() if self.engine and self.batcher else {},
        )

    def load(self) -> None:
        try:
            engine = self.engine or Engine(self.settings)
        except Exception as exc:  # noqa: BLE001 - reported by /health, the log, and on_failure (the CLI exits)
            self.failure = f"{type(exc).__name__}: {' '.join(str(exc).split())}"  # one line
            log.error("could not load the model: %s", self.failure)
            if self.on_failure is not None:
                self.on_failure(self.failure)
            return
        s = self.settings
        self.engine = engine
        self.batcher = Batcher(
            engine.forward,
            max_batch_tokens=s.max_batch_tokens,
            max_wait=s.max_wait_ms / 1000,
            max_queue=s.max_queue,
            on_batch=self.metrics.observe_batch,
            on_reject=self.metrics.rejected.inc,
            join=engine.join,
        )  # set last: its presence means ready

    def ready(self, model: str | None = None) -> Engine:
        """The engine, for a request that names ``model`` (refused unless served here)."""
        if self.engine is None or self.batcher is None:
            if self.failure:
                raise ApiError(503, f"the model failed to load: {self.failure}", "server_error")
            raise ApiError(503, "the model is loading", "server_error", **{"Retry-After": "1"})
        served = self.settings.served_names
        if model is not None and not self.settings.accept_any_model and model not in served:
            raise ApiError(
                404,
                f"model {model!r} is not served here; this server serves {', '.join(repr(n) for n in served)} "
                "(--served-model-name adds a name, --accept-any-model-name serves any)",
            )
        return self.engine

    async def encode(self, texts: list[str], prompt_name: str | None = None, *, prompt: str | None = None) -> Any:
        """Full-size rows of ``texts`` through the batcher (prompts as :meth:`Engine.tokenize`), and their tokens."""
        engine, batcher = cast("tuple[Engine, Batcher]", (self.engine, self.batcher))
        tokenized = await run_in_threadpool(engine.tokenize, texts, prompt_name, prompt=prompt)
        counts = tokenized.counts
        return await self.result(lambda: batcher.encode(tokenized.inputs, counts)), sum(counts)

    async def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()``, run on the batcher's worker between batches."""
        return await self.result(lambda: cast(Batcher, self.batcher).call(fn))

    async def result(self, submit: Callable[[], Future]) -> Any:
        """The result of the job ``submit()`` queues: a full queue is a 503, a timeout a 504 (the job is cancelled,
        so the worker drops it unrun), a refused input a 422."""
        try:
            future = submit()
        except QueueFull as exc:
            raise ApiError(
                503, f"the server is busy ({exc}); retry shortly", "server_error", **{"Retry-After": "1"}
            ) from None
        timeout = self.settings.request_timeout_s
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:
            raise ApiError(504, f"no result within {timeout:g} s", "server_error") from None
        except SubspacesError as exc:
            raise ApiError(422, str(exc)) from None


def create_app(
    settings: ServeSettings, *, engine: Engine | None = None, on_load_failure: Callable[[str], None] | None = None
) -> FastAPI:
    """The server's app; the model loads in a thread when it starts, unless ``engine`` is given. A failed load
    leaves it answering 503 with the reason and calls ``on_load_failure(reason)``."""
    state = _State(settings, engine, on_load_failure)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if engine is not None:
            state.load()
        else:
            threading.Thread(target=state.load, name="subspaces-load", daemon=True).start()
        yield
        if state.batcher is not None:
            await run_in_threadpool(state.batcher.close)

    app = FastAPI(
        title="subspaces",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,  # the interactive pages load scripts from a CDN; the schema itself is served
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.serve = state
    _add_error_handlers(app)
    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"])
    app.add_middleware(_Guard, state=state)  # outermost: sees every response, 413s included

    def authorised(request: Request) -> None:
        if settings.api_key is None:
            return
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not settings.key_matches(key.strip()):
            raise ApiError(
                401, "a valid API key is needed: Authorization: Bearer <key>", **{"WWW-Authenticate": "Bearer"}
            )

    guarded = [Depends(authorised)]

    @app.get("/")
    async def index() -> Response:
        body, headers = page()
        return Response(body, media_type="text/html; charset=utf-8", headers=headers)

    @app.get(
        "/health",
        response_model=Health,
        response_model_exclude_none=True,
        responses={503: {"model": Health, "description": "not ready"}},
    )
    async def health() -> Any:
        if state.batcher is not None:
            return Health(status="ok", model=settings.served_id, backend=state.engine.backend)  # type: ignore[union-attr]
        status = "failed" if state.failure else "loading"
        return JSONResponse({"status": status, "error": state.failure}, status_code=503)

    @app.get("/metrics", dependencies=guarded)
    async def metrics() -> Response:
        body, content_type = state.metrics.render()
        return Response(body, media_type=content_type)

    @app.get("/v1/models", dependencies=guarded, response_model=ModelList, responses=ERRORS)
    async def models() -> ModelList:
        engine = state.ready()
        names = list(settings.served_names)
        cards = [
            ModelCard(
                id=name,
                dimensions=engine.dim,
                backend=engine.backend,
                precision=engine.precision,
                dtype=engine.dtype,  # type: ignore[arg-type]
                search=engine.store is not None,  # what the page offers
                conditions=engine.tri is not None,
                dimensions_basis=engine.dimensions_basis,  # type: ignore[arg-type]
                prompts=engine.prompts,
                default_prompt_name=engine.default_prompt_name,
                aliases=names,
                accepts_any_model_name=settings.accept_any_model,
            )
            for name in names
        ]
        return ModelList(data=cards)

    @app.post("/v1/embeddings", dependencies=guarded, response_model=EmbeddingResponse, responses=ERRORS)
    async def embeddings(body: EmbeddingRequest) -> Response:
        engine = state.ready(body.model)
        ids = body.token_ids()
        count = len(ids) if ids is not None else 1 if isinstance(body.input, str) else len(body.input)
        _check_inputs(count, settings, "input")
        _checked(engine.check_dimensions, body.dimensions)
        _checked(engine.prompt, body.prompt_name)
        if ids is not None:
            texts: list[str] = await run_in_threadpool(_checked, engine.decode_ids, ids)
        else:
            texts = [body.input] if isinstance(body.input, str) else cast("list[str]", body.input)
        rows, tokens = await state.encode(texts, body.prompt_name)
        rows = engine.prefix(rows, body.dimensions)
        data = [
            Embedding.model_construct(object="embedding", index=i, embedding=_format(row, body.encoding_format))
            for i, row in enumerate(rows)
        ]
        out = EmbeddingResponse.model_construct(
            object="list", data=data, model=settings.served_id, usage=Usage.of(tokens)
        )
        # Serialised in one pass: FastAPI would dump, validate and dump again up to max_inputs x dim floats.
        return Response(out.model_dump_json(), media_type="application/json")

    @app.post("/v1/similarity", dependencies=guarded, response_model=SimilarityResponse, responses=ERRORS)
    async def similarity(body: SimilarityRequest) -> SimilarityResponse:
        engine = state.ready(body.model)
        _check_inputs(len(body.pairs), settings, "pairs")
        if body.condition is None:
            _checked(engine.check_dimensions, body.dimensions)
            _checked(engine.prompt, body.prompt_name)
            texts = [t for pair in body.pairs for t in pair]
            rows, tokens = await state.encode(texts, body.prompt_name)
            rows = engine.prefix(rows, body.dimensions)
            scores = np.einsum("ij,ij->i", rows[0::2], rows[1::2])
        else:
            _check_condition(engine, body.dimensions, body.prompt_name)
            first, second = [a for a, _ in body.pairs], [b for _, b in body.pairs]
            conditions = [body.condition] * len(body.pairs)
            tokens = sum(await run_in_threadpool(engine.token_counts, [*first, *second, body.condition]))
            scores = await state.call(lambda: engine.tri.similarity(first, second, conditions))  # type: ignore[union-attr]
        data = [Similarity(index=i, score=float(s)) for i, s in enumerate(scores)]
        return SimilarityResponse(data=data, model=settings.served_id, condition=body.condition, usage=Usage.of(tokens))

    if settings.store is not None:

        @app.post("/v1/search", dependencies=guarded, response_model=SearchResponse, responses=ERRORS)
        async def search(body: SearchRequest) -> SearchResponse:
            engine = state.ready(body.model)
            if body.condition is not None:
                _check_condition(engine, body.dimensions)
            if body.dimensions is not None and not 0 < body.dimensions <= engine.dim:
                _checked(engine.check_dimensions, body.dimensions)  # the store's funnel has a basis for any model
            prompt = _checked(engine.query_prompt, body.prompt_name)
            rows, tokens = await state.encode([body.query], prompt=prompt)
            query, condition, basis = engine.prefix(rows, None)[0], body.condition, body.basis
            hits = await state.call(lambda: engine.search(query, body.k, body.dimensions, condition, basis))
            data = [
                SearchResult(rank=i, id=str(id_), score=float(score), text=text)
                for i, (id_, score, text) in enumerate(zip(hits.ids, hits.scores, hits.texts, strict=True))
            ]
            return SearchResponse(data=data, model=settings.served_id, usage=Usage.of(tokens))

    return app


def _checked(check: Callable[[Any], Any], value: Any) -> Any:
    try:
        return check(value)
    except SubspacesError as exc:
        raise ApiError(422, str(exc)) from None


def _check_condition(engine: Engine, dimensions: int | None, prompt_name: str | None = None) -> None:
    if dimensions is not None:
        raise ApiError(422, "dimensions cannot be combined with a condition: the head works at full size")
    if prompt_name is not None:
        raise ApiError(422, "prompt_name cannot be combined with a condition: the head encodes its own way")
    if engine.tri is None:
        raise ApiError(422, "this server has no condition head (start it with --head DIR)")


def _check_inputs(count: int, settings: ServeSettings, what: str) -> None:
    if count == 0:
        raise ApiError(422, f"{what} is empty")
    if count > settings.max_inputs:
        raise ApiError(413, f"{count} {what} in one request; at most {settings.max_inputs}")


def _format(row: np.ndarray, encoding: str) -> list[float] | str:
    """A row as JSON floats, or as OpenAI's base64: the little-endian float32 bytes."""
    if encoding == "base64":
        return base64.b64encode(row.astype("<f4").tobytes()).decode("ascii")
    return row.tolist()


def _error_body(status: int, message: str, kind: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": status, **extra}}


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(HTTPException)
    async def http_error(_request: Request, exc: HTTPException) -> JSONResponse:
        kind = getattr(exc, "kind", "invalid_request_error" if exc.status_code < 500 else "server_error")
        return JSONResponse(_error_body(exc.status_code, str(exc.detail), kind), exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # Only location and message: an error's context may hold objects that are not JSON.
        problems = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))} for e in exc.errors()]
        message = "; ".join(f"{'.'.join(p['loc'])}: {p['msg']}" for p in problems) or "invalid request"
        return JSONResponse(_error_body(422, message, "invalid_request_error", errors=problems), 422)

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error", exc_info=exc)
        return JSONResponse(_error_body(500, f"internal error: {type(exc).__name__}", "server_error"), 500)


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class _Guard:
    """ASGI middleware: refuses bodies over ``max_body_bytes`` (413, before parsing) and records every response's
    route (unknown paths as ``other``, so metrics stay bounded), status and latency."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], state: _State) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        route = scope["path"] if scope["path"] in ROUTES else "other"
        status = 500  # if the app fails before it starts a response

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            limited = await self._read_body(scope, receive)
            if limited is None:
                too_large = f"the request body is over {self.state.settings.max_body_bytes} bytes"
                await _send_json(observed_send, 413, _error_body(413, too_large, "invalid_request_error"))
            else:
                await self.app(scope, limited, observed_send)
        finally:
            self.state.metrics.observe_request(route, status, time.perf_counter() - start)

    async def _read_body(self, scope: Scope, receive: Receive) -> Receive | None:
        """A ``receive`` that replays the whole body, or None when the body is over the limit."""
        limit = self.state.settings.max_body_bytes
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return None
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left: let the app see it
                return _replay(b"", receive, first=message)
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:  # a chunked body that never declared its length
                return None
            more = message.get("more_body", False)
        return _replay(b"".join(chunks), receive)


def _replay(body: bytes, receive: Receive, first: Message | None = None) -> Receive:
    """A ``receive`` that gives ``first`` (or the whole ``body``) once, then defers to the real one."""
    pending: list[Message] = [first or {"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


async def _send_json(send: Send, status: int, content: dict[str, Any]) -> None:
    response = JSONResponse(content, status)
    await send({"type": "http.response.start", "status": status, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})
