"""The ASGI app: OpenAI's routes over one EngineService, and effctx's own two for a
console that watches the engine (a turn from a node, a restore: api/console_turns.py).

Requests queue for the one engine in arrival order. A stream sends the reply as it is
decoded (SSE, ending `data: [DONE]`); a client that goes away cancels its request at the
next prefill chunk or token, found by listening for `http.disconnect` (Starlette does
this for a stream; a plain request races its job against it, as vLLM does), and never
because another request is waiting.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from effctx_core.api import DEFAULT_MAX_BODY, errors
from effctx_core.api.console_turns import console_restore, console_turn
from effctx_core.api.errors import ApiError
from effctx_core.api.logline import log_line
from effctx_core.api.models import (
    ChatCompletionRequest,
    CompletionRequest,
    ConsoleTurnRequest,
    NodeRestoreRequest,
    param_of,
)
from effctx_core.api.responses import (
    chat_completion,
    chunk,
    effctx_object,
    served_event,
    text_completion,
    timings,
    usage,
)
from effctx_core.api.serving import Delta, Served, new_id, serve_chat, serve_completion, tool_call_json
from effctx_core.cancel import CancelToken
from effctx_core.engine.service import EngineService, Job, JobFn, ServiceState
from effctx_core.engine.session_engine import SessionEngine
from effctx_core.errors import EffctxError, EngineLoadFailed, QueueFull, ServiceStopping, SessionFatalError
from effctx_core.events.trace import RequestQueued, RequestServed

log = logging.getLogger("effctx.api")

T = TypeVar("T")

BODY_CHUNK_TIMEOUT_S = 10.0  # the longest wait for the next piece of a request's body


@dataclass(frozen=True)
class ApiSettings:
    model_name: str  # what /v1/models says before the model is loaded
    api_key: str | None = None
    max_body: int = DEFAULT_MAX_BODY
    retry_after: int = 1  # seconds a 429 asks a client to wait
    # Runs on the engine thread after each served request (the conversations kept on disk).
    after_request: Callable[[SessionEngine], None] | None = None


def _log(error: ApiError) -> None:
    log.info("refused · %d %s: %s", error.status, error.code or error.type, error.message)


def _json(error: ApiError) -> JSONResponse:
    """An error response, and the request's one line in the log."""
    _log(error)
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


class Guard:
    """Pure ASGI, outermost: the API key on every route (constant-time) and the body limit,
    before any route reads a byte of the body."""

    def __init__(self, app: ASGIApp, settings: ApiSettings):
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        key = self.settings.api_key
        if key is not None and not _key_ok(headers, key):
            await _json(errors.unauthorized())(scope, receive, send)
            return
        limit = self.settings.max_body
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await _json(errors.too_large(limit))(scope, receive, send)
            return
        # The whole body is read here, within the limit and a deadline per chunk, before a
        # route sees it: a body sent without a length, or one that trickles in, is bounded
        # too, and the route then reads it from memory.
        chunks, received, more = [], 0, True
        while more:
            try:
                message = await asyncio.wait_for(receive(), BODY_CHUNK_TIMEOUT_S)
            except asyncio.TimeoutError:
                await _json(errors.too_slow(BODY_CHUNK_TIMEOUT_S))(scope, receive, send)
                return
            if message["type"] != "http.request":
                return  # the client went away while sending
            chunks.append(message.get("body", b""))
            received += len(chunks[-1])
            if received > limit:
                await _json(errors.too_large(limit))(scope, receive, send)
                return
            more = message.get("more_body", False)
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # then what the connection says: a disconnect

        await self.app(scope, replay, send)


def _key_ok(headers: dict[str, str], key: str) -> bool:
    given = headers.get("authorization", "")
    token = given[7:] if given.lower().startswith("bearer ") else headers.get("x-api-key", "")
    return hmac.compare_digest(token.encode(), key.encode())


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone away."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _finished(work: asyncio.Future, request: Request) -> bool:
    """Whether `work` finished (its result or its error is there to read) before the
    client went away; when the client went first, `work` is cancelled."""
    gone = asyncio.ensure_future(_disconnected(request))
    done, _ = await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    if work in done:
        gone.cancel()
        return True
    work.cancel()
    return False


def create_app(service: EngineService, settings: ApiSettings) -> ASGIApp:
    app = FastAPI(title="effctx", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = tuple(first.get("loc", ()))
        if first.get("type") == "json_invalid":
            return _json(errors.bad_request(f"malformed JSON in the request body ({first.get('msg', '')})"))
        param = param_of(loc)
        if first.get("type") == "extra_forbidden":
            message = f"{param} is not supported by effctx"
        else:
            message = f"{param or 'body'}: {first.get('msg', 'invalid value')}"
        return _json(errors.bad_request(message, param))

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _json(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Starlette's own refusals (an unknown route, a wrong method) in OpenAI's shape.
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return _json(ApiError(exc.status_code, str(exc.detail), kind, None, None, dict(exc.headers or {})))

    def _model_name() -> str:
        return service.model_name or settings.model_name

    def _ready() -> None:
        status = service.status
        if status.state is ServiceState.LOADING or status.state is ServiceState.NEW:
            p = status.progress
            detail = f"{p.stage} {p.done}/{p.total}" if p is not None and p.total else (p.stage if p else "starting")
            raise errors.loading(detail)
        if status.state is ServiceState.FAILED:
            raise errors.unavailable(f"the model failed to load: {status.reason}")
        if status.state is not ServiceState.READY:
            raise errors.unavailable("the server is stopping")

    def _enqueue(job: JobFn[T]) -> Job[T]:
        _ready()
        try:
            return service.submit(job)
        except QueueFull as exc:
            raise errors.queue_full(service.status.queued, settings.retry_after) from exc
        except ServiceStopping as exc:
            raise errors.unavailable(str(exc)) from exc

    def _submit(fn: Callable[[SessionEngine, CancelToken], Served], rid: str, endpoint: str) -> Job[Served]:
        after = settings.after_request
        t0 = time.perf_counter()

        def job(engine: SessionEngine, token: CancelToken) -> Served:
            queue_ms = (time.perf_counter() - t0) * 1000
            try:
                served = fn(engine, token)
            except BaseException as exc:
                error = _failure(exc) if isinstance(exc, Exception) else errors.server_error(type(exc).__name__)
                if isinstance(exc, SessionFatalError):
                    engine.reopen()  # the next request gets a fresh session of the same cell
                engine.note(RequestServed, request=rid, status="failed", endpoint=endpoint, error=error.message,
                            queue_ms=round(queue_ms, 3))
                raise
            engine.note(RequestServed, **served_event(served, endpoint, queue_ms))
            if after is not None:
                after(engine)
            return served

        submitted = _enqueue(job)
        engine = service.engine
        if engine is not None:
            status = service.status
            engine.note(RequestQueued, request=rid, endpoint=endpoint,
                        ahead=(submitted.position or 0) + (1 if status.running else 0))
        return submitted

    @app.get("/health")
    async def health() -> Response:
        status = service.status
        if status.state is ServiceState.READY:
            return JSONResponse({"status": "ok", "queued": status.queued, "running": status.running})
        try:
            _ready()
        except ApiError as exc:
            # Not logged: a client polls health while the model loads.
            return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)
        return JSONResponse({"status": "ok"})

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": _model_name(), "object": "model", "created": 0,
                                            "owned_by": "effctx"}]}

    async def _answer(request: Request, req: Any, serve: Callable[..., Served], respond: Callable[[Served], dict],
                      rid: str, chat: bool) -> Response:
        endpoint = "chat" if chat else "completion"
        if not req.stream:
            job = _submit(lambda engine, token: serve(engine, token, req, rid, None), rid, endpoint)
            served = await _await_job(service, job, request, rid, endpoint)
            return Response(status_code=499) if served is None else JSONResponse(respond(served))
        return await _stream(service, request, lambda fn: _submit(fn, rid, endpoint), rid, lambda on_text: (
            lambda engine, token: serve(engine, token, req, rid, on_text)), req.include_usage, chat, _model_name())

    @app.post("/v1/chat/completions")
    async def chat(req: ChatCompletionRequest, request: Request) -> Response:
        return await _answer(request, req, serve_chat, chat_completion, new_id("chatcmpl"), True)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request) -> Response:
        return await _answer(request, req, serve_completion, text_completion, new_id("cmpl"), False)

    async def _console(request: Request, work: Callable[[SessionEngine], dict]) -> Response:
        """A watching console's command (api/console_turns.py), in the queue as a request is."""
        after = settings.after_request

        def job(engine: SessionEngine, _token: CancelToken) -> dict:
            try:
                answer = work(engine)
            except SessionFatalError:
                engine.reopen()  # as after a request: the next one gets a fresh session
                raise
            if after is not None:
                after(engine)
            return answer

        submitted = _enqueue(job)
        answer = await _outcome(submitted, request, lambda: service.cancel(submitted))
        return Response(status_code=499) if answer is None else JSONResponse(answer)

    @app.post("/v1/effctx/turn")
    async def turn(req: ConsoleTurnRequest, request: Request) -> Response:
        return await _console(request, lambda engine: console_turn(engine, req))

    @app.post("/v1/effctx/restore")
    async def restore(req: NodeRestoreRequest, request: Request) -> Response:
        return await _console(request, lambda engine: console_restore(engine, req))

    return Guard(app, settings)


def _failure(exc: BaseException) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, EngineLoadFailed):
        return errors.unavailable(str(exc))
    if isinstance(exc, ServiceStopping):
        return errors.unavailable(str(exc))
    if isinstance(exc, SessionFatalError):
        return errors.server_error(f"{exc} (the session was reopened for the next request)")
    if isinstance(exc, EffctxError):
        return errors.bad_request(str(exc))
    log.exception("request failed", exc_info=exc)
    return errors.server_error(f"internal error: {type(exc).__name__}: {exc}")


def _client_left(service: EngineService, job: Job[Served], rid: str, endpoint: str) -> None:
    """The client went away: its request stops (at its next chunk or token when it runs,
    at once when it waits), and a request that never ran says so itself."""
    waiting = job.position is not None
    service.cancel(job)
    log.info("%s · client went away: request cancelled", rid[-8:])
    engine = service.engine
    if waiting and engine is not None:
        engine.note(RequestServed, request=rid, status="cancelled", endpoint=endpoint)


async def _outcome(job: Job[T], request: Request, left: Callable[[], object]) -> T | None:
    """The job's result, its error as the client's answer, or None when the client went
    away first (`left` then stops the job)."""
    if not await _finished(asyncio.wrap_future(job.future), request):
        left()
        return None
    exc = job.future.exception()
    if exc is not None:
        raise _failure(exc)
    return job.future.result()


async def _await_job(service: EngineService, job: Job[Served], request: Request, rid: str,
                     endpoint: str) -> Served | None:
    served = await _outcome(job, request, lambda: _client_left(service, job, rid, endpoint))
    if served is not None:
        log.info(log_line(served))
    return served


_DONE = object()


def _sse(payload: dict | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n".encode("utf-8")


async def _stream(service: EngineService, request: Request, submit: Callable[[Any], Job[Served]], rid: str,
                  make_job: Callable[[Callable[[Delta], None]], Any], include_usage: bool, chat: bool,
                  model: str) -> Response:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def on_text(delta: Delta) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, delta)

    job = submit(make_job(on_text))
    job.future.add_done_callback(lambda _f: loop.call_soon_threadsafe(queue.put_nowait, _DONE))
    # Wait for the first text (or the end) before answering: an error before any text is
    # an HTTP error with its status, not an event inside a 200 stream.
    endpoint = "chat" if chat else "completion"
    getting = asyncio.ensure_future(queue.get())
    if not await _finished(getting, request):
        _client_left(service, job, rid, endpoint)
        return Response(status_code=499)
    first = getting.result()
    if first is _DONE and job.future.exception() is not None:
        raise _failure(job.future.exception())  # type: ignore[arg-type]
    created = int(time.time())

    async def events() -> AsyncIterator[bytes]:
        item: Any = first
        try:
            if chat:
                yield _sse(chunk(rid, created, model, {"role": "assistant", "content": ""}))
            while item is not _DONE:
                yield _sse(chunk(rid, created, model, {"content": item.text}, logprobs=item.logprobs or None,
                                 chat=chat))
                item = await queue.get()
            exc = job.future.exception()
            if exc is not None:
                error = _failure(exc)
                _log(error)
                yield _sse(error.body())
                yield _sse("[DONE]")
                return
            served = job.future.result()
            log.info(log_line(served))
            if served.reply.calls:
                for i, call in enumerate(tool_call_json(served.reply.calls)):
                    yield _sse(chunk(rid, created, model, {"tool_calls": [{"index": i, **call}]}))
            last = chunk(rid, created, model, {}, served.finish_reason, chat=chat)
            extras = {"timings": timings(served), "effctx": effctx_object(served)}
            if include_usage:
                yield _sse(last)
                yield _sse({**chunk(rid, created, model, None, chat=chat), "choices": [], "usage": usage(served),
                            **extras})
            else:
                # As llama-server attaches its timings to the last chunk.
                yield _sse({**last, **extras})
            yield _sse("[DONE]")
        finally:
            # The client went away mid-stream (Starlette cancels this generator), or the
            # stream ended: either way the job is not left running for nobody.
            if not job.future.done():
                _client_left(service, job, rid, endpoint)

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

