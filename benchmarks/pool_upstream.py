"""A reasoning-model upstream to measure on: an OpenAI-compatible server that replays a sample pool.

It answers a question of a sample pool (the ``shared/data/pools`` format, read by
:func:`tts.benchmarks.pool.load_pool`) with that problem's stored samples, so strategies, stopping
rules and cancellation can be measured through ``tts serve --backend openai`` or ``tts.asolve``
against real reasoning models' answers and lengths, without a GPU.

    python benchmarks/pool_upstream.py --pool ../shared/data/pools/aime2024_reasoning_models.jsonl.gz \\
        --port 8100 --tokens-per-second 2000 [--seed 0] [--time-scale 1.0] [--problems FILE.jsonl]

prints one line with its base URL (``http://127.0.0.1:8100/v1``) when ready. From Python (tests,
benchmarks), ``with pool_upstream(pool_path, tokens_per_second=2000, time_scale=0.01) as url:``
starts it in a background thread on a free port and yields the same base URL.

The rate model and the pool's side (problem lookup, sample orders, reply tokens) are in
``pool_upstream_replay.py`` beside it; this file is the HTTP server, its counters and the command.

**Models and questions.** The request's ``model`` names one of the pool's models (``GET
/v1/models`` lists them). The problem is found from, in order: a ``problem_id`` in the body (top
level, e.g. the openai client's ``extra_body``, or in ``metadata``) or an ``X-Problem-Id`` header;
the last user message equal to a problem's text or id (whitespace normalised); a problem text
contained in it (prompt templates wrap the question), the longest first; a problem id standing as
a word in it. Pools hold no problem texts, so texts come from ``--problems`` (benchmark JSONL files
such as ``shared/data/benchmarks/math500.jsonl``, read by tts's own dataset loader) or a
``problem``/``question``/``prompt`` field on the pool's rows; without them, send the problem id as
the question. An unknown question or model is a 404 with an OpenAI error body.

**Which samples.** Each choice is one stored sample of that (model, problem), in the order of a
permutation seeded by (server seed, model, problem id). Requests without a ``seed`` (tts's OpenAI
backend sends none to a local server unless ``request_seeds="always"``) continue through it: no
sample repeats until that problem's samples are used up, then it wraps. ``POST /orders/reset``
starts every order again (with ``{"seed": S}`` under a new server seed), so two configurations can
be compared on the same samples. A request with a ``seed`` takes the start of its own permutation
(seeded by the request seed too): reproducible, and the shared order is left alone, but requests
with different seeds draw independently and may get the same samples. The ``correct`` field is
never read. A reply is filler tokens (``" think"``) followed by ``\\n\\n\\boxed{ANSWER}`` with the
stored answer (no box when the stored answer is null), exactly as many tokens as the sample's
stored ``num_tokens``: ``usage.completion_tokens`` is the stored count and ``logprobs.content`` has
one entry per token. A sample longer than ``max_tokens`` is cut there (its answer lost,
``finish_reason`` "length"), as :meth:`tts.benchmarks.pool.ModelPool.capped` models it. A sample
without ``num_tokens`` gets ``--missing-tokens`` (a warning at start says which models).
Logprobs and top logprobs are SYNTHETIC (a seeded cycle of values, not the model's): use them for
plumbing and timing, never to measure confidence methods. ``prompt_tokens`` is an estimate
(characters / 4).

**Rate model.** The server generates a fixed total of ``--tokens-per-second`` shared equally by
every choice in flight (processor sharing: k choices each get R/k tokens per second, optionally
capped per choice by ``--stream-tokens-per-second``), so 64 concurrent samples each go slower than
4, and a request's choices finish at different times by their lengths. Time is virtual: one
virtual second lasts ``--time-scale`` real seconds (0 = no delays: the clock jumps from event to
event). Streams (``stream: true``) send OpenAI chunks as tokens become due, at most
``--chunk-tokens`` tokens a chunk; a non-streaming reply comes when its last choice would have
finished. ``stream_options.include_usage`` adds the final usage chunk. Each choice's last chunk
(and a non-streaming reply) carries ``pool_upstream``: the problem id, sample_idx and the virtual
seconds it took.

**Speed.** The server renders about 0.6M tokens a second with logprobs (58 MB of JSON for 64
AIME samples in about 1 s); the official client's parse of that takes about 30 us a token (some
20 s for those 64 samples), so a measurement through tts, whose OpenAI backend always asks for
logprobs, is bound by the client.

**Counting.** ``GET /stats`` (also ``/v1/stats``) returns, in ``total`` and per model under
``models``: requests, choices, tokens_sent (handed to the client), tokens_unsent (what requests the
client closed early, streaming or not, would still have sent: counted at the disconnect),
cancelled_requests, cancelled_choices (those of them not complete); and open_streams,
peak_open_streams, in_flight_choices, peak_in_flight_choices, tokens_per_second_each (the rate each
choice in flight gets now), virtual_time and the settings. ``POST /stats/reset`` (also
``/v1/stats/reset``) zeroes the counters; peaks restart from what is open now.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the scripts of benchmarks/ are not a package
from pool_upstream_replay import FILLER, PoolReplay, Sample, SharedRate, UpstreamError, reply_tokens  # noqa: E402

__all__ = ["PoolReplay", "SharedRate", "Upstream", "create_app", "pool_upstream", "reply_tokens"]
logger = logging.getLogger("pool_upstream")


# --- serving ---------------------------------------------------------------------------------


@dataclass
class Counters:
    """What one model (or all of them) was asked and sent."""

    requests: int = 0
    choices: int = 0
    tokens_sent: int = 0
    tokens_unsent: int = 0
    cancelled_requests: int = 0
    cancelled_choices: int = 0


@dataclass(eq=False)
class Choice:
    """One choice being generated: its sample, its token budget and what was sent."""

    index: int
    sample: Sample
    target: int
    truncated: bool
    started: float
    sent: int = 0
    finished: bool = False
    virtual_seconds: float = 0.0


@dataclass(eq=False)
class Job:
    """One request's choices in flight; ``ready`` is set whenever any of them has tokens due."""

    model: str
    choices: list[Choice]
    ready: asyncio.Event = field(default_factory=asyncio.Event)


class Upstream:
    """The server's state: the pool, the shared-rate clock that drives every choice, and the counters."""

    def __init__(self, replay: PoolReplay, *, tokens_per_second: float = 2000.0, time_scale: float = 1.0,
                 stream_tokens_per_second: float | None = None, chunk_tokens: int = 16, tick_s: float = 0.01) -> None:
        if time_scale < 0:
            raise ValueError(f"time_scale must be 0 (no delays) or positive, got {time_scale}")
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be at least 1, got {chunk_tokens}")
        self.replay = replay
        self.rate = SharedRate(tokens_per_second, stream_tokens_per_second)
        self.time_scale = float(time_scale)
        self.chunk_tokens = int(chunk_tokens)
        self.tick_s = float(tick_s)
        self._owner: dict[Choice, Job] = {}
        self._wake: asyncio.Event | None = None
        self._virtual = 0.0  # the clock when time_scale is 0
        self._real0 = time.monotonic()
        self.open_streams = 0
        self.reset_stats()

    # clock and driver
    def now(self) -> float:
        """Virtual seconds since start."""
        if self.time_scale == 0:
            return self._virtual
        return (time.monotonic() - self._real0) / self.time_scale

    def start(self, model: str, samples: list[Sample], max_tokens: int | None) -> Job:
        """Put a request's choices in flight."""
        now = self.now()
        choices = []
        for i, s in enumerate(samples):
            target = s.tokens if max_tokens is None else min(s.tokens, max_tokens)
            choices.append(Choice(i, s, target, target < s.tokens, now))
        job = Job(model, choices)
        self._collect(self.rate.advance(now))  # settle the others first: add() would drop who finishes now
        for c in choices:
            if c.target <= 0:  # a stored empty sample: done at once
                c.finished = True
                continue
            self.rate.add(c, c.target, now)
            self._owner[c] = job
        self._bump(model, requests=1, choices=len(choices))
        self.peak_in_flight = max(self.peak_in_flight, len(self._owner))
        if self._wake is not None:
            self._wake.set()
        return job

    def due(self, c: Choice) -> int:
        """Tokens of a choice generated so far (what may be sent)."""
        if c.finished:
            return c.target
        if c not in self._owner:  # taken out of flight unfinished: nothing more comes
            return c.sent
        return min(c.target, int(self.rate.generated(c) + 1e-6))

    def _collect(self, finished: list[Any]) -> None:
        for c in finished:
            c.finished = True
            c.virtual_seconds = self.rate.finished_at[c] - c.started
            self.rate.remove(c, self.rate.now)
            self._owner.pop(c).ready.set()

    async def drive(self) -> None:
        """Advance the virtual clock and wake the requests whose choices have tokens due."""
        self._wake = asyncio.Event()
        while True:
            if not len(self.rate):
                await self._wake.wait()
                self._wake.clear()
                continue
            now = self.now()
            self._collect(self.rate.advance(now))
            for job in set(self._owner.values()):
                job.ready.set()
            nxt = self.rate.next_finish()
            if nxt is None:
                continue
            if self.time_scale == 0:
                self._virtual = nxt
                await asyncio.sleep(0)
                continue
            delay = min(self.tick_s, max(0.0, (nxt - now) * self.time_scale))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
            self._wake.clear()

    def finish(self, job: Job, *, cancelled: bool) -> None:
        """Take a request's choices out of flight; for a cancelled one, count what was never sent."""
        now = self.now()
        self._collect(self.rate.advance(now))
        unsent = 0
        for c in job.choices:
            if c in self._owner:
                self.rate.remove(c, now)
                del self._owner[c]
            if cancelled and c.sent < c.target:
                unsent += c.target - c.sent
        if cancelled:
            left = sum(c.sent < c.target for c in job.choices)
            self._bump(job.model, tokens_unsent=unsent, cancelled_requests=1, cancelled_choices=left)

    # counters
    def _bump(self, model: str, **counts: int) -> None:
        for counters in (self.total, self.per_model.setdefault(model, Counters())):
            for name, value in counts.items():
                setattr(counters, name, getattr(counters, name) + value)

    def sent(self, model: str, tokens: int) -> None:
        """Count tokens handed to the client."""
        self._bump(model, tokens_sent=tokens)

    def reset_stats(self) -> None:
        """Zero the counters; peaks restart from what is open now."""
        self.total = Counters()
        self.per_model: dict[str, Counters] = {}
        self.peak_open = self.open_streams
        self.peak_in_flight = len(self._owner)

    def stats(self) -> dict[str, Any]:
        """The counters as JSON."""
        return {"total": vars(self.total), "models": {m: vars(c) for m, c in self.per_model.items()},
                "open_streams": self.open_streams, "peak_open_streams": self.peak_open,
                "in_flight_choices": len(self._owner), "peak_in_flight_choices": self.peak_in_flight,
                "tokens_per_second_each": self.rate.per_stream(len(self.rate)),
                "virtual_time": self.now(), "tokens_per_second": self.rate.rate,
                "stream_tokens_per_second": self.rate.cap, "time_scale": self.time_scale}


# --- replies -----------------------------------------------------------------------------------

_ALTERNATIVES = (" hmm", " wait", " so", " then", " well", " now", " thus", " check", " also", " next",
                 " maybe", " first", " note", " again", " here", " okay", " right", " fine", " let", " but")
_CYCLE = 97  # synthetic logprobs repeat with this period, so their fragments can be cached


class LogprobText:
    """Synthetic per-token logprobs as JSON fragments (cached: a reply may have 100k tokens)."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng([seed & 0xFFFFFFFF, 7])
        self._lp = -rng.gamma(0.6, 0.4, size=_CYCLE) - 1e-3
        self._cache: dict[tuple[str, int, int], str] = {}

    def entry(self, token: str, pos: int, top: int) -> str:
        """One ``logprobs.content`` entry of token number ``pos`` with ``top`` alternatives."""
        key = (token, pos % _CYCLE, top)
        frag = self._cache.get(key) if token == FILLER else None
        if frag is None:
            lp = float(self._lp[pos % _CYCLE])
            tops = [{"token": token, "logprob": lp, "bytes": None}]
            tops += [{"token": alt, "logprob": lp - 1.0 - 0.5 * j, "bytes": None}
                     for j, alt in enumerate(a for a in _ALTERNATIVES if a != token)][: max(top - 1, 0)]
            frag = json.dumps({"token": token, "logprob": lp, "bytes": None, "top_logprobs": tops[:top]})
            if token == FILLER:
                self._cache[key] = frag
        return frag


@dataclass
class Ask:
    """A chat-completions request as the upstream reads it."""

    model: str
    message: str
    problem_id: str | None
    n: int
    max_tokens: int | None
    stream: bool
    include_usage: bool
    logprobs: bool
    top_logprobs: int
    seed: int | None
    prompt_chars: int


def _int(body: dict[str, Any], name: str, low: int, high: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise UpstreamError(400, f"{name} must be an integer {bound}, got {value!r}")
    return value


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def parse_ask(body: Any, header_problem: str | None) -> Ask:
    """Read what the upstream needs from a request body; a one-line 400 for what it cannot use."""
    if not isinstance(body, dict):
        raise UpstreamError(400, "the body must be a JSON object (an OpenAI chat-completions request)")
    model, messages = body.get("model"), body.get("messages")
    if not isinstance(model, str):
        raise UpstreamError(400, "model must be a string: one of the pool's models (GET /v1/models)")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise UpstreamError(400, "messages must be a non-empty list of chat messages")
    users = [m for m in messages if m.get("role") == "user"]
    if not users:
        raise UpstreamError(400, "messages has no user message; the last user message names the problem")
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    pid = body.get("problem_id", meta.get("problem_id", header_problem))
    opts = body.get("stream_options") or {}
    max_tokens = _int(body, "max_tokens", 1)
    return Ask(model=model, message=_text(users[-1].get("content")), problem_id=None if pid is None else str(pid),
               n=_int(body, "n", 1, 4096) or 1, max_tokens=max_tokens if max_tokens is not None else
               _int(body, "max_completion_tokens", 1), stream=bool(body.get("stream")),
               include_usage=bool(isinstance(opts, dict) and opts.get("include_usage")),
               logprobs=bool(body.get("logprobs")), top_logprobs=_int(body, "top_logprobs", 0, 20) or 0,
               seed=_int(body, "seed", -(2 ** 63)), prompt_chars=sum(len(_text(m.get("content"))) for m in messages))


def _usage(ask: Ask, job: Job) -> dict[str, int]:
    prompt = max(1, ask.prompt_chars // 4)
    done = sum(c.sent for c in job.choices)
    return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}


class Renderer:
    """Turns choices' token ranges into OpenAI JSON (content and, when asked, logprobs)."""

    def __init__(self, ask: Ask, pid: str, job: Job, lp: LogprobText) -> None:
        self.ask, self.pid, self.job, self.lp = ask, pid, job, lp
        self.id, self.created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        self.tokens = [reply_tokens(c.sample)[: c.target] for c in job.choices]  # by choice index

    def _logprobs(self, c: Choice, a: int, b: int) -> str:
        if not self.ask.logprobs:
            return "null"
        toks = self.tokens[c.index]
        return '{"content":[' + ",".join(self.lp.entry(toks[j], j, self.ask.top_logprobs) for j in range(a, b)) + "]}"

    def finish_reason(self, c: Choice) -> str:
        return "length" if c.truncated else "stop"

    def extra(self, c: Choice) -> dict[str, Any]:
        return {"problem_id": self.pid, "sample_idx": c.sample.sample_idx, "virtual_seconds": c.virtual_seconds}

    def _chunk(self, choice: str, extra: str = "") -> str:
        return (f'data: {{"id":"{self.id}","object":"chat.completion.chunk","created":{self.created},'
                f'"model":{json.dumps(self.ask.model)},"choices":[{choice}]{extra}}}\n\n')

    def delta(self, c: Choice, a: int, b: int, first: bool) -> str:
        delta = {"content": "".join(self.tokens[c.index][a:b])}
        if first:
            delta = {"role": "assistant", **delta}
        return self._chunk(f'{{"index":{c.index},"delta":{json.dumps(delta)},"logprobs":{self._logprobs(c, a, b)},'
                           f'"finish_reason":null}}')

    def end(self, c: Choice) -> str:
        return self._chunk(f'{{"index":{c.index},"delta":{{}},"logprobs":null,'
                           f'"finish_reason":"{self.finish_reason(c)}"}}',
                           f',"pool_upstream":{json.dumps(self.extra(c))}')

    def usage_chunk(self) -> str:
        return self._chunk("", f',"usage":{json.dumps(_usage(self.ask, self.job))}')

    def whole(self) -> str:
        parts = []
        for c in self.job.choices:
            message = json.dumps({"role": "assistant", "content": "".join(self.tokens[c.index])})
            parts.append(f'{{"index":{c.index},"message":{message},"logprobs":{self._logprobs(c, 0, c.target)},'
                         f'"finish_reason":"{self.finish_reason(c)}"}}')
        extra = {"problem_id": self.pid, "sample_idx": [c.sample.sample_idx for c in self.job.choices],
                 "virtual_seconds": [c.virtual_seconds for c in self.job.choices]}
        return (f'{{"id":"{self.id}","object":"chat.completion","created":{self.created},'
                f'"model":{json.dumps(self.ask.model)},"choices":[{",".join(parts)}],'
                f'"usage":{json.dumps(_usage(self.ask, self.job))},"pool_upstream":{json.dumps(extra)}}}')


# --- the HTTP app --------------------------------------------------------------------------------


def create_app(upstream: Upstream) -> FastAPI:
    """The FastAPI app of an :class:`Upstream` (its clock runs while the app does)."""
    lp = LogprobText(upstream.replay.seed)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any):
        task = asyncio.create_task(upstream.drive())
        yield
        task.cancel()

    app = FastAPI(title="pool upstream", lifespan=lifespan)

    @app.exception_handler(UpstreamError)
    async def _refused(_request: Request, exc: UpstreamError) -> JSONResponse:
        kind = "invalid_request_error" if exc.status < 500 else "server_error"
        return JSONResponse({"error": {"message": exc.message, "type": kind, "param": None, "code": exc.code}},
                            status_code=exc.status)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "pool"}
                                           for m in upstream.replay.models]}

    @app.get("/stats")
    @app.get("/v1/stats")
    async def stats() -> dict[str, Any]:
        return upstream.stats()

    @app.post("/stats/reset")
    @app.post("/v1/stats/reset")
    async def reset() -> dict[str, Any]:
        upstream.reset_stats()
        return upstream.stats()

    @app.post("/orders/reset")
    @app.post("/v1/orders/reset")
    async def restart(request: Request) -> dict[str, Any]:
        body = await request.json() if await request.body() else {}
        seed = body.get("seed") if isinstance(body, dict) else None
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise UpstreamError(400, f"seed must be an integer, got {seed!r}")
        upstream.replay.restart(seed)
        return {"seed": upstream.replay.seed}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            raise UpstreamError(400, "the body is not valid JSON") from None
        ask = parse_ask(body, request.headers.get("x-problem-id"))
        upstream.replay.model(ask.model)
        pid = upstream.replay.find_problem(ask.message, ask.problem_id)
        samples = upstream.replay.draw(ask.model, pid, ask.n, ask.seed)
        job = upstream.start(ask.model, samples, ask.max_tokens)
        render = Renderer(ask, pid, job, lp)
        if ask.stream:
            return StreamingResponse(_stream(upstream, render), media_type="text/event-stream")
        return Response(await _whole(upstream, render, request), media_type="application/json")

    return app


async def _stream(upstream: Upstream, render: Renderer):
    """The SSE body of a streaming request; closing it early (client gone) counts what was not sent."""
    job, complete = render.job, False
    upstream.open_streams += 1
    upstream.peak_open = max(upstream.peak_open, upstream.open_streams)
    started: set[int] = set()
    ended: set[int] = set()
    try:
        while len(ended) < len(job.choices):
            events, sent = [], []
            for c in job.choices:
                due = upstream.due(c)
                for a in range(c.sent, due, upstream.chunk_tokens):
                    b = min(due, a + upstream.chunk_tokens)
                    events.append(render.delta(c, a, b, first=c.index not in started))
                    started.add(c.index)
                    sent.append((c, b))
                if c.finished and c.index not in ended and due == c.target:
                    if c.index not in started:  # an empty reply still says who speaks
                        events.append(render.delta(c, 0, 0, first=True))
                        started.add(c.index)
                    events.append(render.end(c))
                    ended.add(c.index)
            if events:
                yield "".join(events)
                for c, b in sent:  # counted once the client took them
                    upstream.sent(job.model, b - c.sent)
                    c.sent = b
            if len(ended) < len(job.choices):
                await job.ready.wait()
                job.ready.clear()
        if render.ask.include_usage:
            yield render.usage_chunk()
        yield "data: [DONE]\n\n"
        complete = True
    finally:
        upstream.open_streams -= 1
        upstream.finish(job, cancelled=not complete)


async def _whole(upstream: Upstream, render: Renderer, request: Request) -> str:
    """A non-streaming reply, after its last choice would have finished (a client that leaves is counted)."""
    job, complete = render.job, False
    try:
        check = time.monotonic()
        while not all(c.finished for c in job.choices):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(job.ready.wait(), timeout=0.05)
            job.ready.clear()
            if time.monotonic() >= check:  # the clock wakes us every tick: look for the client every 50 ms
                if await request.is_disconnected():
                    return ""
                check = time.monotonic() + 0.05
        for c in job.choices:
            upstream.sent(job.model, c.target - c.sent)
            c.sent = c.target
        complete = True
        return render.whole()
    finally:
        upstream.finish(job, cancelled=not complete)


# --- running it --------------------------------------------------------------------------------


@contextlib.contextmanager
def pool_upstream(pool: str | Path | PoolReplay, *, tokens_per_second: float = 2000.0, time_scale: float = 1.0,
                  seed: int = 0, problems: Sequence[str | Path] = (), stream_tokens_per_second: float | None = None,
                  chunk_tokens: int = 16, missing_tokens: int = 1000, host: str = "127.0.0.1",
                  port: int = 0) -> Iterator[str]:
    """Serve a pool in a background thread (port 0: a free one); yields the base URL ``http://host:port/v1``.

    ``pool`` may be a loaded :class:`PoolReplay` (``seed``, ``problems`` and ``missing_tokens`` are
    then its own) so that several servers share one load.
    """
    import uvicorn

    replay = pool if isinstance(pool, PoolReplay) else PoolReplay(pool, seed=seed, problems=problems,
                                                                  missing_tokens=missing_tokens)
    upstream = Upstream(replay, tokens_per_second=tokens_per_second, time_scale=time_scale,
                        stream_tokens_per_second=stream_tokens_per_second, chunk_tokens=chunk_tokens)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = uvicorn.Server(uvicorn.Config(create_app(upstream), log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="pool-upstream", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError(f"the pool upstream did not start on {host}:{port}")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def main(argv: Sequence[str] | None = None) -> None:
    """The command line: serve a pool until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", required=True, help="A sample pool file (.jsonl or .jsonl.gz).")
    parser.add_argument("--port", type=int, default=8100, help="Port (0: a free one). Default 8100.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--tokens-per-second", type=float, default=2000.0,
                        help="Total generated tokens per virtual second, shared by every choice in flight.")
    parser.add_argument("--stream-tokens-per-second", type=float, default=None,
                        help="Cap on one choice's rate (a lone request does not get the whole server). Default none.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the sample orders.")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="Real seconds per virtual second (0: no delays). Default 1.")
    parser.add_argument("--chunk-tokens", type=int, default=16, help="Most tokens in one stream chunk.")
    parser.add_argument("--problems", action="append", default=[],
                        help="A benchmark JSONL with the pool's problem ids and texts (repeatable).")
    parser.add_argument("--missing-tokens", type=int, default=1000,
                        help="Length served for a sample whose num_tokens is null.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        replay = PoolReplay(args.pool, seed=args.seed, problems=args.problems, missing_tokens=args.missing_tokens)
        with pool_upstream(replay, tokens_per_second=args.tokens_per_second, time_scale=args.time_scale,
                           chunk_tokens=args.chunk_tokens, stream_tokens_per_second=args.stream_tokens_per_second,
                           host=args.host, port=args.port) as url:
            print(f"pool upstream at {url} serving {', '.join(replay.models)} of {args.pool}", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
    except (ValueError, OSError, RuntimeError) as exc:
        raise SystemExit(f"pool_upstream: {exc}") from None

if __name__ == "__main__":
    main()
