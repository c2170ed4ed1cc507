"""The FastAPI app of ``tts serve``: OpenAI-compatible endpoints over a :class:`~tts.session.Session`.

Every request is checked before any compute is spent (API key, body size, JSON, fields, model and
strategy, ``n``, ``max_tokens``, budget, concurrency) and refused with a 4xx whose message says what
to change; the server keeps serving the others. A request without a budget runs under the
server's ``max_budget_tokens``, so no request can spend more than the operator allows. Solves of
concurrent requests share batched engine calls through the session. A client that disconnects
cancels its solves (queued engine requests are dropped; the strategy stops at its next step).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tts.serve import protocol
from tts.serve.config import ServeConfig
from tts.serve.guard import ConcurrencyGate, key_matches
from tts.serve.metrics import Metrics
from tts.serve.protocol import BadRequest, ChatRequest, CompletionRequest
from tts.serve.routing import RoutingError, listed_models, route, strategy_spec

logger = logging.getLogger(__name__)

_POLL_SECONDS = 0.1  # how often a waiting request checks that its client is still there


@dataclass
class _Job:
    """One choice to solve: the question and the solve's keyword arguments."""

    question: str
    kwargs: dict[str, Any]
    index: int


@dataclass
class _Plan:
    kind: str  # "chat" or "completions"
    body: Any
    jobs: list[_Job]
    tool_calls: bool
    answer_only: bool
    model: str
    extras: dict[str, Any] = field(default_factory=dict)


class _Refused(Exception):
    def __init__(self, response: Response, reason: str) -> None:
        self.response = response
        self.reason = reason


def _error(message: str, status: int, param: str | None = None, code: str | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(protocol.error_body(message, status, param, code), status_code=status, headers=headers)


def create_app(session: Any, config: ServeConfig | None = None) -> FastAPI:
    """The server app over ``session`` (which the caller opens and closes).

    Args:
        session: A :class:`tts.session.Session`.
        config: Limits and the served model name (default: ServeConfig with the session's model).
    """
    from tts.prompts import PromptTemplate
    from tts.registry import STRATEGIES

    config = config or ServeConfig(model=session.model_name or "tts")
    metrics = Metrics()
    gate = ConcurrencyGate(config.max_concurrent)
    plain = PromptTemplate()
    app = FastAPI(title="tts serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.session, app.state.config, app.state.metrics = session, config, metrics

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        hint = " (see GET /v1/models; endpoints: /v1/chat/completions, /v1/completions)" if exc.status_code == 404 else ""
        return _error(f"{exc.detail}{hint}", exc.status_code)

    # --- checks before any compute -------------------------------------------------------------

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        limit = config.max_body_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _Refused(_error(f"the request body has {declared} bytes, over this server's limit of {limit}; "
                                  "send a shorter prompt or fewer messages", 413, code="body_too_large"), "body_too_large")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _Refused(_error(f"the request body is over this server's limit of {limit} bytes; send a "
                                      "shorter prompt or fewer messages", 413, code="body_too_large"), "body_too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    def check_key(request: Request) -> None:
        if not key_matches(request.headers.get("authorization"), config.api_key):
            raise _Refused(_error("missing or wrong API key; send the server's key as 'Authorization: Bearer <key>' "
                                  "(the openai client's api_key)", 401, code="invalid_api_key"), "auth")

    def plan(kind: str, body: Any) -> _Plan:
        from tts.session.budget import BudgetError, SolveBudget

        opts = body.tts
        try:
            if opts.strategy is None:
                spec = route(body.model, config.model, config.default_strategy)
            elif isinstance(opts.strategy, str):
                route(body.model, config.model, config.default_strategy)  # the model must still be ours
                spec = strategy_spec(opts.strategy)
            else:
                route(body.model, config.model, config.default_strategy)
                spec = dict(opts.strategy)
        except RoutingError as exc:
            param = "tts.strategy" if opts.strategy is not None and exc.status == 404 and "strategy" in str(exc) else exc.param
            raise BadRequest(str(exc), exc.status if param == "model" else 400, param,
                             "model_not_found" if exc.status == 404 and param == "model" else None) from None
        if not 1 <= body.n <= config.max_choices:
            raise BadRequest(f"n={body.n}: n (choices, each an independent solve) must be between 1 and "
                             f"{config.max_choices} on this server; for more samples per answer raise the strategy's n "
                             "(sc-16/<model> or tts.n)", param="n")
        max_tokens = getattr(body, "max_completion_tokens", None) or body.max_tokens
        if max_tokens is not None and max_tokens > config.max_tokens:
            raise BadRequest(f"max_tokens={max_tokens} is over this server's limit of {config.max_tokens}; lower it",
                             param="max_tokens")
        sample_tokens = max_tokens or session.sampling.max_tokens
        try:
            budget = SolveBudget.parse(opts.budget)
            if budget is not None:
                tokens = session.pricer.allowance(budget, 64, sample_tokens)
                if tokens > config.max_budget_tokens:
                    raise BadRequest(f"a budget of {budget} allows {tokens} generated tokens, over this server's limit "
                                     f"of {config.max_budget_tokens} per request; lower the budget", param="tts.budget",
                                     code="budget_too_large")
            else:  # never more than the operator allows
                budget = SolveBudget(config.max_budget_tokens, "tokens")
        except BudgetError as exc:
            raise BadRequest(str(exc), param="tts.budget") from None
        try:
            strategy_config = session.strategy_config(spec, opts.n, budget)
        except ValueError as exc:  # unknown strategy (UnknownNameError) or settings it refuses
            raise BadRequest(f"strategy {spec}: {exc}", param="tts.strategy") from None
        samples = getattr(strategy_config, "n", None)
        if samples is not None and samples > config.max_samples:
            raise BadRequest(f"the strategy asks for n={samples} samples, over this server's limit of "
                             f"{config.max_samples}; lower n (in the model name or tts.n)", param="tts.n")
        common: dict[str, Any] = {"strategy": strategy_config, "budget": budget, "temperature": body.temperature,
                                  "top_p": body.top_p, "max_tokens": max_tokens, "seed": body.seed,
                                  "prompt": plain if opts.prompt == "plain" else None}
        jobs: list[_Job] = []
        tools = False
        if kind == "chat":
            messages = [m.model_dump(exclude_none=True) for m in body.messages]
            for m, raw in zip(messages, body.messages, strict=True):
                m["content"] = raw.text()
            question = body.messages[-1].text()
            if not question.strip():
                raise BadRequest("the last message has no text; put the question in it", param="messages")
            extra = {"messages": messages, "tools": body.tools}
            jobs = [_Job(question, {**common, **extra}, i) for i in range(body.n)]
            cls = STRATEGIES.load(strategy_config.kind)
            tools = bool(body.tools) and (strategy_config.kind == "tool_vote" or getattr(cls, "returns_tool_calls", False))
        else:
            prompts = [body.prompt] if isinstance(body.prompt, str) else list(body.prompt)
            if not prompts or len(prompts) > config.max_prompts:
                raise BadRequest(f"give 1 to {config.max_prompts} prompts, got {len(prompts)}", param="prompt")
            if any(not p.strip() for p in prompts):
                raise BadRequest("a prompt is empty; put the question in it", param="prompt")
            jobs = [_Job(p, dict(common), i * body.n + j) for i, p in enumerate(prompts) for j in range(body.n)]
        return _Plan(kind, body, jobs, tools, opts.answer_only, body.model)

    async def admit(request: Request, kind: str) -> _Plan:
        check_key(request)
        raw = await read_body(request)
        try:
            body = protocol.parse_body(raw, ChatRequest if kind == "chat" else CompletionRequest)
            return plan(kind, body)
        except BadRequest as exc:
            raise _Refused(_error(str(exc), exc.status, exc.param, exc.code), "bad_request") from None

    # --- solving ---------------------------------------------------------------------------------

    def solve_error(exc: BaseException) -> tuple[int, str, str]:
        """(status, message, code) of a solve that failed."""
        from tts.backends.base import BackendError
        from tts.search.base import StrategyInputError

        if isinstance(exc, (StrategyInputError, ValueError)):
            return 400, str(exc), "invalid_strategy_input"
        if isinstance(exc, BackendError):
            return 502, f"the generation backend failed: {exc}", "backend_error"
        if isinstance(exc, RuntimeError) and "closed" in str(exc):
            return 503, "the server is shutting down; retry on another instance", "shutting_down"
        logger.error("solve failed", exc_info=exc)
        return 500, f"internal error while solving ({type(exc).__name__}: {exc}); please report it", "internal_error"

    def start(p: _Plan, on_progress: Any = None) -> list[asyncio.Task]:
        from tts.session.batching import CallContext

        tasks = []
        for job in p.jobs:
            ctx = CallContext(on_progress=None if on_progress is None else
                              (lambda ev, i=job.index: on_progress(i, ev)))
            tasks.append(asyncio.ensure_future(session.asolve(job.question, context=ctx, **job.kwargs)))
        return tasks

    async def cancel(tasks: list[asyncio.Task]) -> None:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def choice(p: _Plan, job: _Job, sol: Any) -> dict[str, Any]:
        ext = protocol.tts_block(sol)
        if p.kind == "completions":
            return {"index": job.index, "text": protocol.message_text(sol, p.answer_only), "finish_reason": "stop",
                    "logprobs": None, "tts": ext}
        calls = protocol.tool_call(sol) if p.tool_calls else None
        message: dict[str, Any] = ({"role": "assistant", "content": None, "tool_calls": calls} if calls else
                                   {"role": "assistant", "content": protocol.message_text(sol, p.answer_only)})
        return {"index": job.index, "message": message, "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": None, "tts": ext}

    def summary(sols: list[Any]) -> dict[str, Any]:
        first = sols[0]
        return {"strategy": first.strategy, "answer": first.answer, "confidence": first.confidence,
                "cost": _sum_costs([s.cost for s in sols]), "answers": [s.answer for s in first.trace.samples],
                "budget": first.budget}

    def response_body(p: _Plan, sols: list[Any], rid: str) -> dict[str, Any]:
        return {"id": rid, "object": "chat.completion" if p.kind == "chat" else "text_completion",
                "created": protocol.now(), "model": p.model,
                "choices": [choice(p, j, s) for j, s in zip(p.jobs, sols, strict=True)],
                "usage": protocol.usage_block(sols), "tts": summary(sols)}

    async def handle(request: Request, kind: str) -> Response:
        t0 = time.perf_counter()
        endpoint = f"/v1/{'chat/completions' if kind == 'chat' else 'completions'}"
        try:
            p = await admit(request, kind)
        except _Refused as refused:
            metrics.reject(refused.reason)
            metrics.observe(endpoint, refused.response.status_code, time.perf_counter() - t0)
            return refused.response
        if not gate.try_enter():
            metrics.reject("too_many_requests")
            metrics.observe(endpoint, 429, time.perf_counter() - t0)
            return _error(f"this server is solving {config.max_concurrent} requests, its limit; retry after "
                          f"{config.retry_after} s", 429, code="too_many_requests",
                          headers={"Retry-After": str(config.retry_after)})
        metrics.in_flight += 1
        if p.body.stream:
            return await stream(request, p, endpoint, t0)
        status = 500
        try:
            tasks = start(p)
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, timeout=_POLL_SECONDS,
                                                   return_when=asyncio.FIRST_EXCEPTION)
                failed = next((t for t in done if not t.cancelled() and t.exception() is not None), None)
                if failed is not None:
                    await cancel(tasks)
                    status, message, code = solve_error(failed.exception())
                    return _error(message, status, code=code)
                if pending and await request.is_disconnected():
                    await cancel(tasks)
                    metrics.disconnects += 1
                    status = 499  # nginx's "client closed request"; nobody reads it
                    return Response(status_code=499)
            sols = [t.result() for t in tasks]
            for s in sols:
                metrics.spent(s.cost)
            status = 200
            return JSONResponse(response_body(p, sols, protocol.new_id("chatcmpl" if kind == "chat" else "cmpl")))
        finally:
            gate.leave()
            metrics.in_flight -= 1
            metrics.observe(endpoint, status, time.perf_counter() - t0)

    async def stream(request: Request, p: _Plan, endpoint: str, t0: float) -> Response:
        """``stream: true``: progress events while sampling, then the answer, usage and [DONE].

        The stream starts only once the solves have made their first engine call (or finished), so
        that a request the strategy refuses still gets a 4xx instead of an error inside a 200 stream.
        """
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        tasks = start(p, lambda i, ev: loop.call_soon_threadsafe(events.put_nowait, (i, ev)))
        rid = protocol.new_id("chatcmpl" if p.kind == "chat" else "cmpl")
        created = protocol.now()
        obj = "chat.completion.chunk" if p.kind == "chat" else "text_completion"
        include_usage = bool((p.body.stream_options or {}).get("include_usage"))
        state = {"status": 200, "closed": False}

        def finish() -> None:
            if not state["closed"]:
                state["closed"] = True
                gate.leave()
                metrics.in_flight -= 1
                metrics.observe(endpoint, state["status"], time.perf_counter() - t0)

        def chunk(index: int, delta: dict[str, Any] | None, finish_reason: str | None = None,
                  **extra: Any) -> str:
            if p.kind == "chat":
                choices = [] if delta is None else [{"index": index, "delta": delta, "finish_reason": finish_reason,
                                                     "logprobs": None}]
            else:
                choices = [] if delta is None else [{"index": index, "text": delta.get("content", ""),
                                                     "finish_reason": finish_reason, "logprobs": None}]
            body = {"id": rid, "object": obj, "created": created, "model": p.model, "choices": choices, **extra}
            return f"data: {json.dumps(body)}\n\n"

        # Wait for the first sign of work, or failure.
        first: asyncio.Task = asyncio.ensure_future(events.get())
        try:
            while True:
                done, _ = await asyncio.wait({first, *tasks}, timeout=_POLL_SECONDS,
                                             return_when=asyncio.FIRST_COMPLETED)
                failed = next((t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None), None)
                if failed is not None:
                    await cancel(tasks)
                    status, message, code = solve_error(failed.exception())
                    state["status"] = status
                    return _error(message, status, code=code)
                if first.done() or all(t.done() for t in tasks):
                    break
                if await request.is_disconnected():
                    await cancel(tasks)
                    metrics.disconnects += 1
                    state["status"] = 499
                    return Response(status_code=499)
        except BaseException:
            first.cancel()
            await cancel(tasks)
            state["status"] = 499
            finish()
            raise
        finally:
            if state["status"] != 200:
                first.cancel()
                finish()

        async def body() -> AsyncIterator[str]:
            nonlocal first
            try:
                if p.kind == "chat":
                    for job in p.jobs:
                        yield chunk(job.index, {"role": "assistant", "content": ""})
                while True:
                    if first.done():
                        index, ev = first.result()
                        yield chunk(index, {}, tts={"event": "progress", **ev})
                        first = asyncio.ensure_future(events.get())
                        continue
                    if all(t.done() for t in tasks):
                        break
                    await asyncio.wait({first, *tasks}, return_when=asyncio.FIRST_COMPLETED)
                first.cancel()
                failed = next((t for t in tasks if not t.cancelled() and t.exception() is not None), None)
                if failed is not None:
                    status, message, code = solve_error(failed.exception())
                    state["status"] = status
                    yield f"data: {json.dumps(protocol.error_body(message, status, code=code))}\n\n"
                    yield "data: [DONE]\n\n"
                    return
                sols = [t.result() for t in tasks]
                for s in sols:
                    metrics.spent(s.cost)
                for job, sol in zip(p.jobs, sols, strict=True):
                    full = choice(p, job, sol)
                    if p.kind == "chat":
                        msg = full["message"]
                        delta = ({"tool_calls": [{**c, "index": k} for k, c in enumerate(msg["tool_calls"])]}
                                 if msg.get("tool_calls") else {"content": msg["content"]})
                    else:
                        delta = {"content": full["text"]}
                    yield chunk(job.index, delta)
                    last_extra: dict[str, Any] = {"tts": {"event": "answer", **full["tts"]}}
                    if not include_usage and job is p.jobs[-1]:
                        last_extra["usage"] = protocol.usage_block(sols)
                    yield chunk(job.index, {}, full["finish_reason"], **last_extra)
                if include_usage:
                    yield chunk(0, None, usage=protocol.usage_block(sols), tts=summary(sols))
                yield "data: [DONE]\n\n"
            except BaseException:  # the client went away: stop its solves
                state["status"] = 499
                metrics.disconnects += 1
                first.cancel()
                await cancel(tasks)
                raise
            finally:
                finish()

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    # --- routes ----------------------------------------------------------------------------------

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await handle(request, "chat")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await handle(request, "completions")

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        try:
            check_key(request)
        except _Refused as refused:
            metrics.reject(refused.reason)
            return refused.response
        created = protocol.now()
        return JSONResponse({"object": "list", "data": [
            {"id": m, "object": "model", "created": created, "owned_by": "tts"} for m in listed_models(config.model)]})

    @app.get("/health")
    async def health() -> Response:
        ok = not getattr(session, "closed", False)
        return JSONResponse({"status": "ok" if ok else "closed", "model": config.model, "in_flight": gate.inside},
                            status_code=200 if ok else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return PlainTextResponse(metrics.render(session.stats), media_type="text/plain; version=0.0.4")

    return app


def _sum_costs(costs: list[dict[str, Any]]) -> dict[str, Any]:
    """Costs of several choices added up (numbers summed, labels kept)."""
    out: dict[str, Any] = {}
    for c in costs:
        for k, v in c.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k in out and out[k] is not None:
                out[k] += v
            elif k not in out:
                out[k] = v
    return out
