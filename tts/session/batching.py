"""Coalesce the generate calls of many concurrent solves into batched engine calls.

A :class:`~tts.session.Session` runs each solve in its own worker thread, and every strategy
calls ``generator.generate(requests)`` once per search step. :class:`BatchingGenerator` stands
between those calls and the one real generator: a call puts its requests on a queue and waits;
one dispatcher thread takes everything queued within a short *batching window* and sends it to
the engine as ONE ``generate`` call, then hands each caller its own results, in order. So 100
agents whose self-consistency step lands at the same moment cost one engine call, not 100, and
the engine (not thread-safe, in vLLM's case) is only ever called from one thread.

The window closes early when every solve that is running has its requests queued and no solve is
about to start (nobody else could join), so a lone caller pays no window latency. Solves announce
themselves with :meth:`BatchingGenerator.expect` (submitted to a worker, not yet running),
:meth:`BatchingGenerator.begin` and :meth:`BatchingGenerator.end`.

Cancellation: a solve carries a :class:`CallContext` (thread-local while it runs). Cancelling it
drops its requests that are still queued and makes its next ``generate`` raise
:class:`SolveCancelled`, so the strategy stops at its next step. Requests already inside an
engine call finish with that call (an offline engine call cannot be split), and their results are
dropped.

Errors stay with the caller that caused them: when a batched engine call fails, its callers are
split in halves and each half is sent again (bisection), until the failing callers are alone
and get their error while every other caller gets its results. One bad request among k callers
costs about 2 log2(k) extra engine calls; an engine that is down fails every caller as before.

Generators that take concurrent calls (an HTTP upstream: ``concurrent_calls = True`` on the
generator, whose ``generate`` then accepts ``cancel=``, a :class:`threading.Event`) are not
batched at all: each solve's call goes straight to the generator from the solve's own thread,
as many at once as there are solves, and cancelling the solve sets ``cancel`` so the generator
aborts that call's requests in flight. A single dispatcher is right for an in-process engine,
and wrong for a server that schedules its own requests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tts.backends.base import GenerationRequest, GenerationResult, Generator
from tts.backends.streaming import BatchStream, FinishedSample, SampleStream

logger = logging.getLogger(__name__)


class SolveCancelled(Exception):
    """The solve was cancelled (its caller went away); raised inside the strategy's thread."""


@dataclass
class CallContext:
    """One solve's handle: its cancel flag and an optional progress callback.

    Args:
        on_progress: Called after each of the solve's generate calls with a dict of running totals
            (``step``, ``requests``, ``samples``, ``completion_tokens``), from the solve's thread.
    """

    on_progress: Callable[[dict[str, Any]], None] | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    steps: int = 0
    requests: int = 0
    samples: int = 0
    completion_tokens: int = 0

    def cancel(self) -> None:
        """Stop the solve at its next step and drop its queued requests."""
        self.cancelled.set()


@dataclass
class _Pending:
    requests: Sequence[GenerationRequest]
    context: CallContext | None
    done: threading.Event = field(default_factory=threading.Event)
    results: list[GenerationResult] | None = None
    error: BaseException | None = None


@dataclass
class BatchStats:
    """What the dispatcher has done: engine calls, and the generate calls and requests they served."""

    engine_calls: int = 0
    generate_calls: int = 0
    requests: int = 0
    sequences: int = 0
    dropped_requests: int = 0
    largest_batch: int = 0
    isolated_failures: int = 0
    """Callers that failed alone after their batch failed and was split (the others were served)."""
    aborted_requests: int = 0
    """Requests in flight at a concurrent generator that were aborted because their solve was cancelled."""


_LOCAL = threading.local()


class BatchingGenerator:
    """A Generator that many threads share; it batches their calls into one engine call per window.

    Args:
        inner: The real generator; only the dispatcher thread calls its ``generate``.
        window: Seconds the dispatcher waits, after the first queued call, for others to join.
        max_requests: Most requests in one engine call (the rest wait for the next one).

    Attributes that the strategies read from a generator (``model_name``, ``config``,
    ``prompt_tokens``, ...) are the inner generator's.
    """

    def __init__(self, inner: Generator, window: float = 0.01, max_requests: int = 4096) -> None:
        if window < 0:
            raise ValueError(f"batching window must be >= 0 seconds, got {window}")
        if max_requests < 1:
            raise ValueError(f"max_requests must be >= 1, got {max_requests}")
        self.inner = inner
        self.direct = bool(getattr(inner, "concurrent_calls", False))
        """The inner generator takes concurrent calls: each solve calls it directly (no batching)."""
        self.window = window
        self.max_requests = max_requests
        self.active = 0  # solves between begin() and end()
        self.expected = 0  # solves submitted to a worker that have not begun
        self.stats = BatchStats()
        self._queue: list[_Pending] = []
        self._cond = threading.Condition()
        self._closed = False
        self._inner_lock = threading.Lock()  # helpers of the inner generator (tokenizers) used by many threads
        self._thread = threading.Thread(target=self._run, name="tts-batcher", daemon=True)
        self._thread.start()

    # --- the Generator protocol, as the strategies see it ------------------------------------

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "inner":
            raise AttributeError(name)
        value = getattr(self.inner, name)
        if callable(value):
            def locked(*args: Any, **kwargs: Any) -> Any:
                with self._inner_lock:
                    return value(*args, **kwargs)
            return locked
        return value

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Queue the requests, wait for the engine call that serves them, return their results."""
        context: CallContext | None = getattr(_LOCAL, "context", None)
        if context is not None and context.cancelled.is_set():
            raise SolveCancelled()
        if not requests:
            return []
        if self.direct:
            return self._direct(list(requests), context)
        pending = _Pending(list(requests), context)
        with self._cond:
            if self._closed:
                raise RuntimeError("the session is closed; open a new one")
            self._queue.append(pending)
            self._cond.notify_all()
        while not pending.done.wait(0.05):
            if context is not None and context.cancelled.is_set():
                with self._cond:
                    if pending in self._queue:  # not sent yet: drop it
                        self._queue.remove(pending)
                        self.stats.dropped_requests += len(pending.requests)
                        raise SolveCancelled()
                # inside an engine call: wait for it, then drop the results below
        if pending.error is not None:
            raise pending.error
        if context is not None:
            if context.cancelled.is_set():
                raise SolveCancelled()
            self._progress(context, pending)
        assert pending.results is not None
        return pending.results

    def stream_samples(self, requests: Sequence[GenerationRequest]) -> SampleStream:
        """The samples of ``requests`` as they finish (a per-request stop reads them so).

        A generator that takes concurrent calls (an HTTP upstream) streams them itself, from the
        solve's thread; cancelling the solve cancels the stream (its upstream requests are
        aborted) and the next read raises :class:`SolveCancelled`. An in-process engine is driven by
        the dispatcher alone, so its samples come through one batched ``generate`` call, whole (a
        stop then decides between waves).
        """
        own = getattr(self.inner, "stream_samples", None)
        if not (self.direct and callable(own)):
            return BatchStream(self, requests)
        context: CallContext | None = getattr(_LOCAL, "context", None)
        if context is not None and context.cancelled.is_set():
            raise SolveCancelled()
        return _CancellableStream(own(requests), context)

    def expect(self, count: int = 1) -> None:
        """Solves were submitted to workers and will begin soon (-1: one of them never will)."""
        with self._cond:
            self.expected += count
            self._cond.notify_all()

    def begin(self, expected: bool = False) -> None:
        """A solve starts (``expected``: announced by :meth:`expect`); the window may close early
        only once it, too, has queued."""
        with self._cond:
            self.active += 1
            if expected:
                self.expected -= 1

    def end(self) -> None:
        """A solve ended (it will queue nothing more)."""
        with self._cond:
            self.active -= 1
            self._cond.notify_all()

    def close(self) -> None:
        """Stop the dispatcher (queued calls fail) and close the inner generator."""
        self.stop()
        self.inner.close()

    def stop(self) -> None:
        """Stop the dispatcher without closing the inner generator."""
        with self._cond:
            self._closed = True
            for p in self._queue:
                p.error = RuntimeError("the session closed before this request was served")
                p.done.set()
            self._queue.clear()
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def _direct(self, requests: list[GenerationRequest], context: CallContext | None) -> list[GenerationResult]:
        """Call a generator that takes concurrent calls from this (the solve's) thread; a cancelled
        solve's requests in flight are aborted by the generator."""
        if self._closed:
            raise RuntimeError("the session is closed; open a new one")
        cancel = context.cancelled if context is not None else None
        try:
            results = self.inner.generate(requests, cancel=cancel)  # type: ignore[call-arg]
        except Exception as exc:
            if cancel is not None and cancel.is_set():
                with self._cond:
                    self.stats.aborted_requests += len(requests)
                raise SolveCancelled() from exc
            raise
        if len(results) != len(requests):
            raise RuntimeError(f"the generator returned {len(results)} results for {len(requests)} requests")
        with self._cond:
            self.stats.engine_calls += 1
            self.stats.generate_calls += 1
            self.stats.requests += len(requests)
            self.stats.sequences += sum(r.n for r in requests)
            self.stats.largest_batch = max(self.stats.largest_batch, len(requests))
        if context is not None:
            if context.cancelled.is_set():
                raise SolveCancelled()
            self._progress(context, _Pending(requests, context, results=list(results)))
        return list(results)

    # --- the dispatcher ----------------------------------------------------------------------

    @staticmethod
    def _progress(context: CallContext, pending: _Pending) -> None:
        context.steps += 1
        context.requests += len(pending.requests)
        for r in pending.results or ():
            context.samples += len(r.completions)
            context.completion_tokens += r.usage.completion_tokens
        if context.on_progress is not None:
            try:
                context.on_progress({"step": context.steps, "requests": context.requests,
                                     "samples": context.samples, "completion_tokens": context.completion_tokens})
            except Exception:  # a broken listener must not fail the solve
                logger.warning("progress callback failed", exc_info=True)

    def _take_batch(self) -> list[_Pending] | None:
        """Wait for work, keep the window open while others may join, and take one batch."""
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            deadline = time.monotonic() + self.window
            while not self._closed:
                queued = sum(len(p.requests) for p in self._queue)
                waiting = len({id(p.context) for p in self._queue})
                now = time.monotonic()
                everyone_in = waiting >= self.active and self.expected <= 0
                left = deadline - now
                if left <= 0 or everyone_in or queued >= self.max_requests or not self._queue:
                    break
                self._cond.wait(left)
            batch: list[_Pending] = []
            count = 0
            while self._queue and (not batch or count + len(self._queue[0].requests) <= self.max_requests):
                p = self._queue.pop(0)
                batch.append(p)
                count += len(p.requests)
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            if batch:
                self._serve(batch)

    def _serve(self, batch: list[_Pending], split: bool = False) -> None:
        """One engine call for ``batch``; when it fails, its halves are served apart, so that an
        error reaches only the callers whose requests cause it (``split``: a half of a failed batch)."""
        if split:  # a caller cancelled while its batch was being split: drop it
            for p in [p for p in batch if p.context is not None and p.context.cancelled.is_set()]:
                batch.remove(p)
                self.stats.dropped_requests += len(p.requests)
                p.error = SolveCancelled()
                p.done.set()
            if not batch:
                return
        flat = [r for p in batch for r in p.requests]
        try:
            with self._inner_lock:
                results = self.inner.generate(flat)
            if len(results) != len(flat):
                raise RuntimeError(f"the generator returned {len(results)} results for {len(flat)} requests")
        except Exception as exc:
            if len(batch) == 1 or self._closed:
                for p in batch:
                    p.error = exc
                    p.done.set()
                if split and len(batch) == 1:
                    self.stats.isolated_failures += 1
                return
            logger.info("an engine call of %d callers failed (%s); serving its halves apart to find the cause",
                        len(batch), exc)
            half = len(batch) // 2
            self._serve(batch[:half], split=True)
            self._serve(batch[half:], split=True)
            return
        except BaseException as exc:  # interpreter exit: every caller of this batch gets it
            for p in batch:
                p.error = exc
                p.done.set()
            raise
        with self._cond:
            self.stats.engine_calls += 1
            self.stats.generate_calls += len(batch)
            self.stats.requests += len(flat)
            self.stats.sequences += sum(r.n for r in flat)
            self.stats.largest_batch = max(self.stats.largest_batch, len(flat))
        at = 0
        for p in batch:
            p.results = list(results[at:at + len(p.requests)])
            at += len(p.requests)
            p.done.set()


class _CancellableStream(SampleStream):
    """A generator's own stream, cancelled when its solve is: a watcher thread cancels it once the
    solve's context is cancelled (a read blocked on the next sample then ends), and the read
    raises :class:`SolveCancelled`."""

    def __init__(self, inner: SampleStream, context: CallContext | None) -> None:
        super().__init__(inner.requests)
        self.inner = inner
        self.live = inner.live
        self.context = context
        self._ended = threading.Event()
        if context is not None:
            threading.Thread(target=self._watch, name="tts-stream-watch", daemon=True).start()

    def _watch(self) -> None:
        assert self.context is not None
        while not self._ended.is_set():
            if self.context.cancelled.wait(0.05):
                self.inner.cancel()
                return

    def __iter__(self) -> Iterator[FinishedSample]:
        try:
            for item in self.inner:
                if self.context is not None and self.context.cancelled.is_set():
                    raise SolveCancelled()
                yield item
            if self.context is not None and self.context.cancelled.is_set():
                raise SolveCancelled()
        finally:
            self._ended.set()

    def cancel(self, requests: Iterable[int] | None = None) -> None:
        self.inner.cancel(requests)
        if requests is None:
            self._ended.set()

    def results(self) -> list[GenerationResult]:
        return self.inner.results()


def set_context(context: CallContext | None) -> None:
    """Make ``context`` the current thread's solve (None: no solve)."""
    _LOCAL.context = context
