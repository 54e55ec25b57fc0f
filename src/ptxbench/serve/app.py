"""The HTTP API over a ``JobService`` (FastAPI on Starlette).

Every answer that is not a success is ``{"error": "<one line>"}`` with a 4xx (or 5xx) status: a malformed
body is 400, a body that is not a valid request 422 naming the fields, an unknown job or task 404, a
conflict (a job that cannot be cancelled, a task that differs from the client's) 409, a body over the
size limit 413, a full queue 429 with ``Retry-After``, a missing or wrong token 401.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations, which name types imported
# inside ``create_app`` (the HTTP stack is imported only when a server is made).
import asyncio
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from ptxbench.errors import PtxbenchError, field_problems
from ptxbench.records.version import RecordVersionError
from ptxbench.serve.models import CandidateRequest, JobList, JobState, SubmitReply, SubmitRequest
from ptxbench.serve.service import JobService, ServiceError

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

POLL_S = 0.2  # how often an event stream looks for new stage results
KEEPALIVE_S = 15.0


async def _reply(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Gate:
    """Before any route: the access token (compared in constant time) and the request size limit (a
    ``Content-Length`` over it, or a body that grows over it, is 413 before it is parsed)."""

    def __init__(self, app: ASGIApp, token: str | None, max_bytes: int) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if self.token is not None:
            given = headers.get(b"authorization", b"")
            scheme, _, value = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(value.strip(), self.token):
                await _reply(send, 401, "a valid access token is required: Authorization: Bearer <token>")
                return
        length = headers.get(b"content-length")
        if length is not None:
            try:
                too_long = int(length) > self.max_bytes
            except ValueError:
                await _reply(send, 400, "Content-Length is not a number")
                return
            if too_long:
                await _reply(send, 413, f"the request is over {self.max_bytes} bytes")
                return
            await self.app(scope, receive, send)
            return
        # no length given (chunked): read the body here, within the limit, and hand it on
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await _reply(send, 413, f"the request is over {self.max_bytes} bytes")
                return
            if not message.get("more_body", False):
                break
        body, given_once = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal given_once
            if not given_once:
                given_once = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def parse_submission(body: bytes) -> list[CandidateRequest]:
    """One candidate, or ``{"candidates": [...]}``; raises ``ServiceError`` 400/422 with one line."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ServiceError(400, f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ServiceError(422, "the body is one candidate (an object) or {\"candidates\": [...]}")
    try:
        if "candidates" in data:
            return SubmitRequest.model_validate(data).candidates
        return [CandidateRequest.model_validate(data)]
    except ValidationError as exc:
        raise ServiceError(422, f"not a valid request: {field_problems(exc)}") from None
    except RecordVersionError as exc:
        raise ServiceError(422, str(exc)) from None


def create_app(service: JobService, *, token: str | None = None, max_request_bytes: int = 16 << 20) -> ASGIApp:
    """The API over ``service``; ``token``: required of every request when set."""
    from fastapi import FastAPI, Request, Response
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException

    api = FastAPI(title="ptxbench serve", version="1", docs_url=None, redoc_url=None, openapi_url="/v1/openapi.json")

    @api.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s is not None else None
        return JSONResponse({"error": str(exc)}, status_code=exc.status, headers=headers)

    @api.exception_handler(PtxbenchError)
    async def _harness_error(_: Request, exc: PtxbenchError) -> JSONResponse:
        return JSONResponse({"error": " ".join(str(exc).split())}, status_code=500)

    @api.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return JSONResponse({"error": f"not a valid request: {problems}"}, status_code=422)

    @api.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code)

    def _json(model: Any, status: int = 200) -> Response:
        return Response(model.model_dump_json(), status_code=status, media_type="application/json")

    @api.post("/v1/jobs", status_code=202)
    async def submit(request: Request) -> Response:
        candidates = parse_submission(await request.body())
        accepted = await run_in_threadpool(service.submit, candidates)
        return _json(SubmitReply(jobs=accepted), 202)

    @api.get("/v1/jobs")
    def listed(state: JobState | None = None, limit: int = 100, after: str | None = None) -> Response:
        if not 1 <= limit <= 1000:
            raise ServiceError(422, "limit is from 1 to 1000")
        return _json(JobList(jobs=service.listed(state, limit, after)))

    @api.get("/v1/jobs/{job_id}")
    def job(job_id: str) -> Response:
        return _json(service.view(job_id))

    @api.delete("/v1/jobs/{job_id}")
    def cancel(job_id: str) -> Response:
        return _json(service.cancel(job_id))

    @api.get("/v1/jobs/{job_id}/events")
    async def events(job_id: str, request: Request) -> StreamingResponse:
        last = request.headers.get("last-event-id")
        after = int(last) if last is not None and last.strip().lstrip("-").isdigit() else -1
        await run_in_threadpool(service.view, job_id)  # 404 before the stream starts

        async def stream() -> AsyncIterator[str]:
            nonlocal after
            quiet = 0.0
            while True:
                found, state = await run_in_threadpool(service.events, job_id, after)
                for event in found:
                    after = event.seq
                    yield f"id: {event.seq}\nevent: {event.stage}\ndata: {event.model_dump_json()}\n\n"
                if state.finished:
                    view = await run_in_threadpool(service.view, job_id)
                    yield f"event: job\ndata: {view.model_dump_json()}\n\n"
                    return
                quiet = 0.0 if found else quiet + POLL_S
                if quiet >= KEEPALIVE_S:
                    quiet = 0.0
                    yield ": still working\n\n"
                await asyncio.sleep(POLL_S)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @api.get("/v1/health")
    def health() -> Response:
        return _json(service.health())

    @api.get("/v1/metrics")
    def metrics() -> Response:
        return _json(service.metrics())

    return Gate(api, token, max_request_bytes)
