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
import re
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tts.serve import protocol
from tts.serve.config import ServeConfig
from tts.serve.guard import ConcurrencyGate, key_matches, rate_key
from tts.serve.metrics import Metrics
from tts.serve.policy import PolicyError, ServePolicy
from tts.serve.protocol import BadRequest, ChatRequest, CompletionRequest
from tts.serve.ratelimit import TokenRateLimit
from tts.serve.routing import RoutingError, listed_models, route, strategy_spec

logger = logging.getLogger(__name__)

async def _disconnected(request: Request) -> None:
    """Return once the client has gone away (ASGI ``http.disconnect``), with no polling.

    After the body is read, the server's next message is the disconnect, so a waiting request
    watches one task instead of asking ``is_disconnected()`` every few milliseconds; the watch must
    be cancelled before a StreamingResponse starts (it listens for the disconnect itself).
    """
    while (await request.receive())["type"] != "http.disconnect":
        pass


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
    policy = app.state.policy = ServePolicy.build(config, session)  # what requests may name and set

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
        try:
            async with asyncio.timeout(config.body_timeout):  # a stalled upload must not hold its connection
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise _Refused(_error(f"the request body is over this server's limit of {limit} bytes; send "
                                              "a shorter prompt or fewer messages", 413, code="body_too_large"),
                                       "body_too_large")
                    chunks.append(chunk)
        except TimeoutError:
            raise _Refused(_error(f"the request body did not arrive within {config.body_timeout:g} s, this server's "
                                  "limit; send the whole body at once", 408, code="body_timeout",
                                  headers={"Connection": "close"}), "body_timeout") from None
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
        try:  # only what the operator allowed: strategies, verifiers and calibrations by name, knobs in range
            spec = policy.resolve(spec)
        except PolicyError as exc:
            from_model = opts.strategy is None and exc.param == "tts.strategy"
            raise BadRequest(str(exc), 404 if from_model else 400, "model" if from_model else exc.param,
                             "model_not_found" if from_model else "setting_not_allowed") from None
        if not 1 <= body.n <= config.max_choices:
            raise BadRequest(f"n={body.n}: n (choices, each an independent solve) must be between 1 and "
                             f"{config.max_choices} on this server; for more samples per answer raise the strategy's n "
                             "(sc-16/<model> or tts.n)", param="n")
        max_tokens = getattr(body, "max_completion_tokens", None) or body.max_tokens
        if max_tokens is not None and max_tokens > config.max_tokens:
            raise BadRequest(f"max_tokens={max_tokens} is over this server's limit of {config.max_tokens}; lower it",
                             param="max_tokens")
        sample_tokens = max_tokens or session.sampling.max_tokens
        # The cap holds per request: its solves (n choices x prompts) split it evenly, each solve a
        # budget its strategy plans within, so that together they cannot spend more. A client's
        # budget is per choice, and all of the request's solves together must fit the cap.
        prompts = getattr(body, "prompt", "")
        solves = body.n * (1 if isinstance(prompts, str) else min(max(len(prompts), 1), config.max_prompts))
        cap, why = config.max_budget_tokens, "this server's limit"
        if config.rate_limit_tokens is not None and config.rate_limit_tokens < cap:
            cap, why = config.rate_limit_tokens, "this server's rate limit"
        each = f" x {solves} solves (n choices x prompts) = " if solves > 1 else " = "
        try:
            budget = SolveBudget.parse(opts.budget)
            if budget is not None:  # its token worst case at the shortest prompt: no solve's allowance is larger
                tokens = session.pricer.allowance(budget, 1, sample_tokens)
                if tokens * solves > cap:
                    raise BadRequest(f"a budget of {budget} allows {tokens} generated tokens{each}{tokens * solves}, "
                                     f"over {why} of {cap} per request; lower the budget"
                                     f"{' or n' if solves > 1 else ''}", param="tts.budget", code="budget_too_large")
            else:  # never more than the operator allows
                share = protocol.REASONING_EFFORT_SHARE[body.reasoning_effort or "high"]  # a share of the cap
                tokens = int(cap * share) // solves
                if tokens < sample_tokens:
                    raise BadRequest(f"{why} of {cap} generated tokens per request, split over {solves} solves "
                                     f"(n choices x prompts), leaves {tokens} each, less than one sample of max_tokens="
                                     f"{sample_tokens}; lower n, send fewer prompts or lower max_tokens",
                                     param="n" if body.n > 1 else "max_tokens", code="budget_too_large")
                budget = SolveBudget(tokens, "tokens")
        except BudgetError as exc:
            raise BadRequest(_one_line(exc), param="tts.budget") from None
        reserve_tokens = tokens * solves
        try:
            strategy_config = session.strategy_config(spec, opts.n, budget)
        except ValueError as exc:  # unknown strategy (UnknownNameError) or settings it refuses
            raise BadRequest(f"strategy {spec.get('kind', spec)!r}: {_one_line(exc)}", param="tts.strategy") from None
        samples = getattr(strategy_config, "n", None)
        if samples is not None and samples > config.max_samples:
            raise BadRequest(f"the strategy asks for n={samples} samples, over this server's limit of "
                             f"{config.max_samples}; lower n (in the model name or tts.n)", param="tts.n")
        from tts.session.session import SampleOptions

        notes: list[str] = []  # what the tts extension must say about how the request was served
        schema = body.response_format.schema_text() if body.response_format is not None else None
        options = SampleOptions(stop=body.stops(), presence_penalty=body.presence_penalty or 0.0,
                                frequency_penalty=body.frequency_penalty or 0.0, logit_bias=body.bias(),
                                json_schema=schema, logprobs=body.logprobs_asked())
        try:
            vocab = getattr(session.generator, "vocab_size", None)
        except Exception:  # a closed engine: the solve says so
            vocab = None
        outside = [t for t, _ in options.logit_bias if isinstance(vocab, int) and t >= vocab]
        if outside:  # refused here, not by the engine, where it would fail a batch shared with other requests
            raise BadRequest(f"logit_bias token id {outside[0]} is outside this model's vocabulary of {vocab} tokens; "
                             f"give ids 0..{vocab - 1}", param="logit_bias")
        if body.temperature == 0 and (samples or 1) > 1:
            notes.append(f"temperature 0 is greedy: the strategy's {samples} samples are one greedy sample repeated "
                         "(drawn once), so they all agree; raise the temperature for a vote that means something")
        if body.seed is not None and getattr(session.generator, "honours_seeds", True) is False:
            notes.append(f"seed {body.seed} was not honoured: this engine ignores request seeds (vLLM on CPU does "
                         "unless started in deterministic mode); only the server's run seed applies")
        common: dict[str, Any] = {"strategy": strategy_config, "budget": budget, "temperature": body.temperature,
                                  "top_p": body.top_p, "max_tokens": max_tokens, "seed": body.seed,
                                  # JSON output is asked for by the schema, not by the math prompt's \boxed{}
                                  "prompt": plain if opts.prompt == "plain" or schema is not None else None,
                                  "options": options}
        jobs: list[_Job] = []
        tools = False
        if kind == "chat":
            messages = [m.model_dump(exclude_none=True) for m in body.messages]
            for m, raw in zip(messages, body.messages, strict=True):
                m["content"] = raw.text()
            question = body.messages[-1].text()
            if not question.strip():
                raise BadRequest("the last message has no text; put the question in it", param="messages")
            offered, replacement = tool_plan(body, strategy_config, budget, notes)
            if replacement is not None:
                strategy_config = replacement
            extra = {"messages": messages, "tools": offered, "strategy": strategy_config}
            jobs = [_Job(question, {**common, **extra}, i) for i in range(body.n)]
            tools = bool(offered) and returns_tool_calls(strategy_config)
        else:
            prompts = [body.prompt] if isinstance(body.prompt, str) else list(body.prompt)
            if not prompts or len(prompts) > config.max_prompts:
                raise BadRequest(f"give 1 to {config.max_prompts} prompts, got {len(prompts)}", param="prompt")
            if any(not p.strip() for p in prompts):
                raise BadRequest("a prompt is empty; put the question in it", param="prompt")
            jobs = [_Job(p, dict(common), i * body.n + j) for i, p in enumerate(prompts) for j in range(body.n)]
        return _Plan(kind, body, jobs, tools, opts.answer_only, body.model,
                     {"reserve_tokens": reserve_tokens, "notes": notes})

    def returns_tool_calls(strategy_config: Any) -> bool:
        """Whether a strategy answers with a tool call (tool_vote, or one that says so)."""
        return strategy_config.kind == "tool_vote" or bool(
            getattr(STRATEGIES.load(strategy_config.kind), "returns_tool_calls", False))

    def tool_plan(body: ChatRequest, strategy_config: Any, budget: Any,
                  notes: list[str]) -> tuple[list[dict[str, Any]] | None, Any]:
        """(the tools the model is shown, a strategy config to run instead or None) for ``tool_choice``:
        ``none`` shows no tools (a tool_vote request is answered in text by self_consistency with
        the same n), ``auto`` lets a tool-choosing strategy call one, ``required`` and a named
        function need such a strategy (a named function is the only tool shown)."""
        wanted, offered = body.tool_choice, body.tools
        if wanted is not None and not offered:
            raise BadRequest("tool_choice needs tools; send the tools or leave tool_choice out", param="tool_choice")
        if wanted == "none":
            if not returns_tool_calls(strategy_config):
                return None, None
            try:
                replacement = session.strategy_config("self_consistency", getattr(strategy_config, "n", None), budget)
            except ValueError as exc:
                raise BadRequest(f"tool_choice 'none': {exc}", param="tool_choice") from None
            notes.append(f"tool_choice 'none': {strategy_config.kind} answers only with tool calls, so "
                         f"{replacement.label} answered in text")
            return None, replacement
        if isinstance(wanted, protocol.NamedToolChoice):
            name = wanted.function.name
            offered = [t for t in offered or [] if (t.get("function") or {}).get("name") == name]
            if not offered:
                have = ", ".join(repr((t.get("function") or {}).get("name")) for t in body.tools or [])
                raise BadRequest(f"tool_choice names {name!r}, which is not one of the tools ({have}); name one "
                                 "of them", param="tool_choice")
        if wanted is not None and wanted != "auto" and not returns_tool_calls(strategy_config):
            how = f"'{wanted}'" if isinstance(wanted, str) else "naming a function"
            raise BadRequest(f"tool_choice {how} needs a strategy that answers with a tool call, not "
                             f"{strategy_config.kind}; use model tool_vote-8/{config.model} (or tts.strategy "
                             "'tool_vote')", param="tool_choice")
        return offered, None

    async def admit(request: Request, kind: str) -> _Plan:
        check_key(request)
        raw = await read_body(request)
        try:
            body = protocol.parse_body(raw, ChatRequest if kind == "chat" else CompletionRequest,
                                       max_depth=config.max_json_depth)
            return plan(kind, body)
        except BadRequest as exc:
            raise _Refused(_error(str(exc), exc.status, exc.param, exc.code), "bad_request") from None

    # --- solving ---------------------------------------------------------------------------------

    limiter = TokenRateLimit(config.rate_limit_tokens) if config.rate_limit_tokens is not None else None

    def take_tokens(request: Request, p: _Plan) -> Response | None:
        """Reserve the request's worst case from its key's token bucket; a 429 when it does not fit."""
        if limiter is None:
            return None
        key = rate_key(request.headers.get("authorization"), config.api_key)
        tokens = int(p.extras.get("reserve_tokens", 0))
        wait = limiter.reserve(key, tokens)
        if wait:
            metrics.reject("rate_limited")
            return _error(f"this request may generate {tokens} tokens and this API key has "
                          f"{int(limiter.available(key))} of its {limiter.per_minute} generated tokens a minute left; "
                          f"retry after {wait} s or send a smaller tts.budget", 429, code="rate_limit_exceeded",
                          headers={"Retry-After": str(wait)})
        p.extras["rate_key"] = key
        return None

    def return_tokens(p: _Plan, sols: list[Any] | None = None) -> None:
        """Give back what a request reserved and did not spend: all of it when it never ran, the
        rest of it when it finished (a failed or cancelled request keeps its reservation spent)."""
        if limiter is None or "rate_key" not in p.extras:
            return
        spent = 0 if sols is None else sum(int(s.usage.completion_tokens) for s in sols)
        limiter.refund(p.extras.pop("rate_key"), int(p.extras.get("reserve_tokens", 0)) - spent)

    def solve_error(exc: BaseException) -> tuple[int, str, str]:
        """(status, one-line message, code) of a solve that failed.

        A prompt over the model's context is the client's to fix (400), however the backend said
        it: the vLLM backend's own check, vLLM's client errors, an upstream's 400 (vLLM's server
        or OpenAI's ``context_length_exceeded``). An upstream 429 or 503 keeps its status (its
        Retry-After goes on with :func:`solve_headers`). Internals (class names, tracebacks) stay
        in the log.
        """
        from tts.backends.base import BackendError
        from tts.search.base import StrategyInputError

        chain = _causes(exc)
        upstream = next((e for e in chain if isinstance(getattr(e, "status_code", None), int)), None)
        status = upstream.status_code if upstream is not None else None
        if any(_too_long(e) for e in chain) and (status in (None, 400, 413, 422)):
            return (400, f"the prompt does not fit the model's context: {_context_detail(chain)}; shorten the "
                    "messages or lower max_tokens", "context_length_exceeded")
        if status in (429, 503):
            wait = solve_headers(exc)
            after = f"; retry after {wait['Retry-After']} s" if wait else "; retry later"
            return (status, f"the model server behind tts is {'rate limiting' if status == 429 else 'overloaded'} "
                    f"(HTTP {status}){after}", "upstream_rate_limited" if status == 429 else "upstream_unavailable")
        if any(_vllm_client_error(e) for e in chain):
            return 400, _one_line(next(e for e in chain if _vllm_client_error(e))), "invalid_request"
        if isinstance(exc, (StrategyInputError, ValueError)):
            return 400, _one_line(exc), "invalid_strategy_input"
        if isinstance(exc, BackendError):
            return 502, f"the generation backend failed: {_one_line(exc)}", "backend_error"
        if isinstance(exc, RuntimeError) and "closed" in str(exc):
            return 503, "the server is shutting down; retry on another instance", "shutting_down"
        logger.error("solve failed", exc_info=exc)
        return 500, "internal error while solving (the server's log has the details); please report it", "internal_error"

    def solve_headers(exc: BaseException) -> dict[str, str] | None:
        """The upstream's Retry-After (of a 429 or 503 inside ``exc``), to pass on; None without one."""
        for e in _causes(exc):
            if getattr(e, "status_code", None) in (429, 503):
                value = str(getattr(getattr(e, "response", None), "headers", {}).get("retry-after") or "").strip()
                if value and len(value) <= 64 and value.replace(" ", "").replace(",", "").replace(":", "").isalnum():
                    return {"Retry-After": value}
        return None

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
        if p.extras.get("notes"):
            ext["notes"] = list(p.extras["notes"])
        logprobs = protocol.logprobs_block(sol, p.kind, p.answer_only)
        if p.kind == "completions":
            return {"index": job.index, "text": protocol.message_text(sol, p.answer_only), "finish_reason": "stop",
                    "logprobs": logprobs, "tts": ext}
        calls = protocol.tool_call(sol) if p.tool_calls else None
        message: dict[str, Any] = ({"role": "assistant", "content": None, "tool_calls": calls} if calls else
                                   {"role": "assistant",
                                    "content": protocol.message_text(sol, p.answer_only, without_reasoning=True)})
        if p.tool_calls and calls is None and p.body.tool_choice not in (None, "auto"):
            ext["notes"] = [*ext.get("notes", []), "tool_choice asked for a tool call, but no sample held a valid "
                            "call to an offered tool, so the reply is text"]
        reasoning = None if calls else protocol.reasoning_text(sol, p.answer_only)
        if reasoning is not None:  # vLLM's field for a reasoning model's <think> section
            message["reasoning_content"] = reasoning
        return {"index": job.index, "message": message, "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": None if calls else logprobs, "tts": ext}

    def summary(sols: list[Any]) -> dict[str, Any]:
        first = sols[0]
        return {"strategy": first.strategy, "answer": first.answer, "confidence": first.confidence,
                "cost": _sum_costs([s.cost for s in sols]), "answers": [s.answer for s in first.trace.samples],
                "budget": first.budget}

    def response_body(p: _Plan, sols: list[Any], rid: str) -> dict[str, Any]:
        return {"id": rid, "object": "chat.completion" if p.kind == "chat" else "text_completion",
                "created": protocol.now(), "model": p.model,
                "choices": [choice(p, j, s) for j, s in zip(p.jobs, sols, strict=True)],
                "usage": protocol.usage_block(sols),
                "tts": {**summary(sols), **({"notes": p.extras["notes"]} if p.extras.get("notes") else {})}}

    async def handle(request: Request, kind: str) -> Response:
        t0 = time.perf_counter()
        endpoint = f"/v1/{'chat/completions' if kind == 'chat' else 'completions'}"
        try:
            p = await admit(request, kind)
        except _Refused as refused:
            metrics.reject(refused.reason)
            metrics.observe(endpoint, refused.response.status_code, time.perf_counter() - t0)
            return refused.response
        limited = take_tokens(request, p)
        if limited is not None:
            metrics.observe(endpoint, 429, time.perf_counter() - t0)
            return limited
        if not gate.try_enter():
            return_tokens(p)
            metrics.reject("too_many_requests")
            metrics.observe(endpoint, 429, time.perf_counter() - t0)
            return _error(f"this server is solving {config.max_concurrent} requests, its limit; retry after "
                          f"{config.retry_after} s", 429, code="too_many_requests",
                          headers={"Retry-After": str(config.retry_after)})
        metrics.in_flight += 1
        if p.body.stream:
            return await stream(request, p, endpoint, t0)
        status = 500
        gone: asyncio.Task | None = None
        try:
            tasks = start(p)
            gone = asyncio.ensure_future(_disconnected(request))
            pending = set(tasks)
            while pending:
                done, _ = await asyncio.wait({*pending, gone}, return_when=asyncio.FIRST_COMPLETED)
                pending -= done
                failed = next((t for t in done if t is not gone and not t.cancelled() and t.exception() is not None),
                              None)
                if failed is not None:
                    await cancel(tasks)
                    status, message, code = solve_error(failed.exception())
                    return _error(message, status, code=code, headers=solve_headers(failed.exception()))
                if pending and gone.done():
                    await cancel(tasks)
                    metrics.disconnects += 1
                    status = 499  # nginx's "client closed request"; nobody reads it
                    return Response(status_code=499)
            sols = [t.result() for t in tasks]
            for s in sols:
                metrics.spent(s.cost)
            return_tokens(p, sols)
            status = 200
            return JSONResponse(response_body(p, sols, protocol.new_id("chatcmpl" if kind == "chat" else "cmpl")))
        finally:
            if gone is not None:
                gone.cancel()
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
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            while True:
                await asyncio.wait({first, gone, *tasks}, return_when=asyncio.FIRST_COMPLETED)
                failed = next((t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None), None)
                if failed is not None:
                    await cancel(tasks)
                    status, message, code = solve_error(failed.exception())
                    state["status"] = status
                    return _error(message, status, code=code, headers=solve_headers(failed.exception()))
                if first.done() or all(t.done() for t in tasks):
                    break
                if gone.done():
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
            gone.cancel()  # the StreamingResponse watches for the disconnect from here on
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
                return_tokens(p, sols)
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

    # GET /v1/models lists the candidate ids (routing.listed_models) that work with this server's
    # configuration: the request a client would send with the id alone passes every check, and a
    # dry run of its solve reaches the engine (a strategy that refuses the server's budget, or
    # needs a calibration or a graph file it was not given, stops before). Found once, then kept.
    probe_lock = threading.Lock()
    why_not: dict[str, str | None] = {}  # model id -> None when it works, else why not
    created = protocol.now()

    def check_model(model_id: str) -> str | None:
        """None when a request naming ``model_id`` alone would be served, else why not (one line)."""
        from tts.session import Session

        try:
            p = plan("chat", ChatRequest.model_validate(
                {"model": model_id, "messages": [{"role": "user", "content": "What is 1 + 1?"}]}))
        except BadRequest as exc:
            return str(exc)
        probe = Session(generator=_DryRun(session.generator), strategy=session.default_strategy,
                        temperature=session.sampling.temperature, top_p=session.sampling.top_p,
                        max_tokens=session.sampling.max_tokens, prompt=session.template, seed=session.seed,
                        batch_window=0.0, max_workers=1, price_as=session.pricer.model or None, gpu=session.pricer.gpu,
                        prices=session.pricer.prices, strategy_settings=session.strategy_settings)
        try:
            probe.solve(p.jobs[0].question, **p.jobs[0].kwargs)
        except _WouldGenerate:
            return None
        except Exception as exc:  # what the solve would have answered
            return solve_error(exc)[1]
        finally:
            probe.close()
        return None

    def usable(model_id: str) -> str | None:
        with probe_lock:
            if model_id not in why_not:
                if len(why_not) > 4096:  # retrieve of many ids: forget the ones that are not listed
                    listed = set(listed_models(config.model))
                    for k in [k for k in why_not if k not in listed]:
                        del why_not[k]
                why_not[model_id] = check_model(model_id)
            return why_not[model_id]

    def model_card(model_id: str) -> dict[str, Any]:
        return {"id": model_id, "object": "model", "created": created, "owned_by": "tts"}

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        try:
            check_key(request)
        except _Refused as refused:
            metrics.reject(refused.reason)
            return refused.response
        ids = await asyncio.to_thread(lambda: [m for m in listed_models(config.model) if usable(m) is None])
        return JSONResponse({"object": "list", "data": [model_card(m) for m in ids]})

    @app.get("/v1/models/{model_id:path}")
    async def retrieve_model(request: Request, model_id: str) -> Response:
        try:
            check_key(request)
        except _Refused as refused:
            metrics.reject(refused.reason)
            return refused.response
        why = await asyncio.to_thread(usable, model_id)
        if why is not None:
            return _error(why if repr(model_id) in why else f"model {model_id!r} cannot be used on this server: {why}",
                          404, param="model", code="model_not_found")
        return JSONResponse(model_card(model_id))

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


_CONTEXT = re.compile(r"maximum context length|maximum model length|max_model_len|context_length_exceeded|"
                      r"context window", re.IGNORECASE)


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps: causes, contexts and a retry wrapper's last error."""
    out: list[BaseException] = []
    stack: list[Any] = [exc]
    while stack:
        e = stack.pop()
        if not isinstance(e, BaseException) or any(e is seen for seen in out):
            continue
        out.append(e)
        stack += [getattr(e, "last", None), e.__context__, e.__cause__]
    return out


def _upstream_message(e: BaseException) -> str:
    """An upstream error's own message (the openai client's ``body``), else the exception's text."""
    body = getattr(e, "body", None)
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return str(e)


def _too_long(e: BaseException) -> bool:
    """Whether ``e`` says a prompt is over the model's context (how vLLM, its server and OpenAI say it)."""
    return getattr(e, "code", None) == "context_length_exceeded" or bool(_CONTEXT.search(_upstream_message(e)))


def _context_detail(chain: list[BaseException]) -> str:
    """What the innermost error said about the context, as one line for a client (no internal
    request keys, no advice meant for the operator)."""
    e = next(e for e in reversed(chain) if _too_long(e))
    text = re.sub(r"Prompt of request \S+ has", "the prompt has", _one_line(e, _upstream_message(e)))
    sentences = [x for x in re.split(r"(?<=\.)\s+", text)
                 if x and not x.startswith(("Please", "Make sure", "Raise", "Error code"))]
    return " ".join(sentences).rstrip(".") or "the prompt is too long"


def _vllm_client_error(e: BaseException) -> bool:
    """vLLM's errors caused by the request (``VLLMClientError``; vLLM answers them with a 4xx),
    recognised without importing vllm."""
    return any(c.__name__ == "VLLMClientError" for c in type(e).__mro__)


def _one_line(exc: BaseException, text: str | None = None) -> str:
    """A message on one line for a client: pydantic's first error as 'field: problem', no
    links, no pydantic type tags or model class names."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError) and text is None:
        errors = exc.errors()
        first = errors[0]
        loc = ".".join(str(x) for x in first["loc"])
        msg = f"{loc!r} is required" if first["type"] == "missing" else (f"{loc}: {first['msg']}" if loc else first["msg"])
        return msg + (f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else "")
    text = str(exc) if text is None else text
    text = re.sub(r"\d+ validation errors? for \S+", "", text)
    text = re.sub(r"\s*For further information visit \S+", "", text)
    text = re.sub(r"\s*\[type=[^\]]*\]", "", text)
    text = re.sub(r"https?://\S+", "", text)
    return " ".join(text.split()) or "the request failed"


class _WouldGenerate(Exception):
    """Raised by :class:`_DryRun`: the solve got as far as the engine."""


class _DryRun:
    """The served generator, except that a solve stops at its first engine call (GET
    /v1/models' dry runs); what it can do (prompt counting, confidence stops) is the real one's."""

    def __init__(self, generator: Any) -> None:
        self._generator = generator

    def __getattr__(self, name: str) -> Any:
        return getattr(self._generator, name)

    def generate(self, requests: Any, **kwargs: Any) -> Any:  # kwargs: what a concurrent generator takes (cancel)
        raise _WouldGenerate()

    def close(self) -> None:
        pass
