"""Running a checked plan: admission (token rate limit, concurrency gate), the solves, the answer.

Solves of concurrent requests share batched engine calls through the session. A client that
disconnects cancels its solves (queued engine requests are dropped; the strategy stops at its next
step). A streamed request starts its 200 only once its solves have made their first engine call (or
finished), so that a request the strategy refuses still gets a 4xx instead of an error inside a
stream. Every admitted request leaves the gate and is counted in the metrics exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from tts.serve import replies
from tts.serve.errors import APIError
from tts.serve.failures import solve_error, solve_headers
from tts.serve.planning import RequestPlan
from tts.serve.responses import json_bytes
from tts.serve.state import ServerState

CLIENT_GONE = 499
"""nginx's "client closed request": the status a request whose client went away is counted under."""


async def disconnected(request: Request) -> None:
    """Return once the client has gone away (ASGI ``http.disconnect``), with no polling.

    After the body is read, the server's next message is the disconnect, so a waiting request
    watches one task instead of asking ``is_disconnected()`` every few milliseconds; the watch must
    be cancelled before a StreamingResponse starts (it listens for the disconnect itself).
    """
    while (await request.receive())["type"] != "http.disconnect":
        pass


def admit(state: ServerState, p: RequestPlan, caller: str) -> None:
    """Reserve the request's worst case from its caller's token bucket, then enter the gate.

    Raises:
        APIError: 429 with Retry-After: the bucket cannot hold the reservation, or the server is
            solving ``max_concurrent`` requests.
    """
    limiter, config = state.limiter, state.config
    if limiter is not None:
        wait = limiter.reserve(caller, p.reserve_tokens)
        if wait:
            raise APIError(f"this request may generate {p.reserve_tokens} tokens and this API key has "
                           f"{int(limiter.available(caller))} of its {limiter.per_minute} generated tokens a minute "
                           f"left; retry after {wait} s or send a smaller tts.budget", 429,
                           code="rate_limit_exceeded", headers={"Retry-After": str(wait)}, reason="rate_limited")
        p.rate_key = caller
    if not state.gate.try_enter():
        refund(state, p)
        raise APIError(f"this server is solving {config.max_concurrent} requests, its limit; retry after "
                       f"{config.retry_after} s", 429, code="too_many_requests",
                       headers={"Retry-After": str(config.retry_after)}, reason="too_many_requests")
    state.metrics.in_flight.inc()


def leave(state: ServerState, request: Request, status: int) -> None:
    """An admitted request is done: out of the gate, counted under ``status``."""
    state.gate.leave()
    state.metrics.in_flight.dec()
    state.metrics.observe(request.state.endpoint, status, time.perf_counter() - request.state.t0)


def refund(state: ServerState, p: RequestPlan, sols: list[Any] | None = None) -> None:
    """Give back what a request reserved and did not spend: all of it when it never ran, the
    rest of it when it finished (a failed or cancelled request keeps its reservation spent)."""
    if state.limiter is None or p.rate_key is None:
        return
    spent = 0 if sols is None else sum(int(s.usage.completion_tokens) for s in sols)
    state.limiter.refund(p.rate_key, p.reserve_tokens - spent)
    p.rate_key = None


def solved(state: ServerState, p: RequestPlan, tasks: list[asyncio.Task]) -> list[Any]:
    """The solutions of finished solves, counted in the metrics and the rate limit."""
    sols = [t.result() for t in tasks]
    for s in sols:
        state.metrics.spent(s.cost)
    refund(state, p, sols)
    return sols


def start(state: ServerState, p: RequestPlan, on_progress: Callable[[int, Any], None] | None = None) -> list[asyncio.Task]:
    """One task per job; ``on_progress(index, event)`` hears the strategy's progress."""
    from tts.session.batching import CallContext

    tasks = []
    for job in p.jobs:
        ctx = CallContext(on_progress=None if on_progress is None else
                          (lambda ev, i=job.index: on_progress(i, ev)))
        tasks.append(asyncio.ensure_future(state.session.asolve(job.question, context=ctx, **job.kwargs)))
    return tasks


async def cancel(tasks: list[asyncio.Task]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _failed(tasks: Any) -> asyncio.Task | None:
    return next((t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None), None)


def failure(exc: BaseException) -> Response:
    """The answer of a failed solve (see :func:`tts.serve.failures.solve_error`)."""
    status, message, code = solve_error(exc)
    return APIError(message, status, code=code, headers=solve_headers(exc), reason=None).response()


class EventWriter(Protocol):
    """The server-sent events of one streamed reply, in its API's shape: chat and text completions'
    chunks (:class:`tts.serve.replies.Chunks`) or a Response's events
    (:class:`tts.serve.responses_reply.ResponseEvents`)."""

    def opening(self) -> list[bytes]: ...
    def progress(self, index: int, ev: dict[str, Any]) -> bytes: ...
    def answers(self, sols: list[Any]) -> list[bytes]: ...
    def failed(self, message: str, status: int, code: str | None) -> list[bytes]: ...
    def closing(self) -> list[bytes]: ...


async def answer(state: ServerState, request: Request, p: RequestPlan,
                 reply: Callable[[RequestPlan, list[Any]], Any] = replies.response) -> Response:
    """Solve an admitted request and answer it whole, with ``reply(plan, solutions)`` (the chat or
    text completion; a Response for /v1/responses)."""
    status = 500
    tasks = start(state, p)
    gone = asyncio.ensure_future(disconnected(request))
    try:
        pending = set(tasks)
        while pending:
            done, _ = await asyncio.wait({*pending, gone}, return_when=asyncio.FIRST_COMPLETED)
            pending -= done
            failed = _failed(done - {gone})
            if failed is not None:
                await cancel(tasks)
                response = failure(failed.exception())
                status = response.status_code
                return response
            if pending and gone.done():
                await cancel(tasks)
                state.metrics.disconnected()
                status = CLIENT_GONE  # nobody reads it
                return Response(status_code=CLIENT_GONE)
        sols = solved(state, p, tasks)
        unmet = replies.unmet_tool_choice(p, sols)
        if unmet is not None:
            status = 422
            return APIError(unmet, 422, code="no_tool_call", reason=None).response()
        body = json_bytes(reply(p, sols))
        status = 200
        return Response(body, media_type="application/json")
    finally:
        gone.cancel()
        leave(state, request, status)


async def stream(state: ServerState, request: Request, p: RequestPlan, writer: EventWriter | None = None) -> Response:
    """``stream: true``: progress events while sampling, then the answer and usage, written by
    ``writer`` (default: chat and text completion chunks, then [DONE])."""
    run = _Stream(state, request, p, writer or replies.Chunks(p))
    refused = await run.begin()
    return refused if refused is not None else StreamingResponse(
        run.events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


class _Stream:
    """One streamed request: its solves, their progress queue, and its accounting (once)."""

    def __init__(self, state: ServerState, request: Request, p: RequestPlan, writer: EventWriter) -> None:
        loop = asyncio.get_running_loop()
        self.state, self.request, self.plan = state, request, p
        self.queue: asyncio.Queue = asyncio.Queue()
        self.tasks = start(state, p, lambda i, ev: loop.call_soon_threadsafe(self.queue.put_nowait, (i, ev)))
        self.next: asyncio.Future = asyncio.ensure_future(self.queue.get())
        self.writer = writer
        self.status = 200
        self.closed = False

    def finish(self) -> None:
        if not self.closed:
            self.closed = True
            leave(self.state, self.request, self.status)

    async def stop(self, status: int) -> None:
        """Cancel the solves; the request ends with ``status``."""
        self.status = status
        self.next.cancel()
        await cancel(self.tasks)

    async def begin(self) -> Response | None:
        """Wait for the first sign of work: None to start the stream, else the response instead
        (a failed solve's 4xx or 5xx, or nothing for a client that went away)."""
        gone = asyncio.ensure_future(disconnected(self.request))
        try:
            while True:
                await asyncio.wait({self.next, gone, *self.tasks}, return_when=asyncio.FIRST_COMPLETED)
                failed = _failed(self.tasks)
                if failed is not None:
                    await self.stop(500)
                    response = failure(failed.exception())
                    self.status = response.status_code
                    return response
                if self.next.done() or all(t.done() for t in self.tasks):
                    return None
                if gone.done():
                    await self.stop(CLIENT_GONE)
                    self.state.metrics.disconnected()
                    return Response(status_code=CLIENT_GONE)
        except BaseException:
            await self.stop(CLIENT_GONE)
            raise
        finally:
            gone.cancel()  # the StreamingResponse watches for the disconnect from here on
            if self.status != 200:
                self.finish()

    async def events(self) -> AsyncIterator[bytes]:
        p, writer = self.plan, self.writer
        try:
            for event in writer.opening():
                yield event
            while True:
                if self.next.done():
                    index, ev = self.next.result()
                    yield writer.progress(index, ev)
                    self.next = asyncio.ensure_future(self.queue.get())
                    continue
                if all(t.done() for t in self.tasks):
                    break
                await asyncio.wait({self.next, *self.tasks}, return_when=asyncio.FIRST_COMPLETED)
            self.next.cancel()
            failed = _failed(self.tasks)
            if failed is not None:
                status, message, code = solve_error(failed.exception())
                self.status = status
                events = writer.failed(message, status, code)
            else:
                sols = solved(self.state, p, self.tasks)
                unmet = replies.unmet_tool_choice(p, sols)
                if unmet is not None:
                    self.status = 422
                    events = writer.failed(unmet, 422, "no_tool_call")
                else:
                    events = writer.answers(sols)
            for event in [*events, *writer.closing()]:
                yield event
        except BaseException:  # the client went away: stop its solves
            self.state.metrics.disconnected()
            await self.stop(CLIENT_GONE)
            raise
        finally:
            self.finish()
