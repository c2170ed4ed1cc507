"""The in-process vLLM engine's samples as each finishes, and aborting the rest inside the engine.

``VLLMGenerator.generate`` hands a batch to ``LLM.generate``, which returns once every sample is
done. A per-request stop (:mod:`tts.backends.streaming`) wants each sample the moment it finishes
and the others aborted, so :class:`EngineStream` drives the engine itself, step by step, through
vLLM's ``LLMEngine`` (``llm.llm_engine``): ``add_request``, ``step``, ``abort_request``.

How samples are seen: each request goes to the engine as one request of ``n``, as ``LLM.generate``
sends it. vLLM fans it out into n child requests (seeded ``seed + i`` when the request has a seed)
that share the prompt's KV blocks; with ``output_kind`` CUMULATIVE (``LLM.generate`` asks for
FINAL_ONLY) every step returns, for each child that advanced, its output so far, carrying its
finish reason once it is done. So a sample is yielded in the step it finishes, and the length of
every unfinished one is known, which is what a cancel counts. Aborting the request's id aborts
all its children still running (vLLM maps the id to them), which is all :meth:`cancel` needs, so
the request is not split into n requests of one. A finished child's ``CompletionOutput`` holds what
``LLM.generate`` returns for it (text, token ids, log-probabilities, finish and stop reasons), and
the generator turns it into a :class:`Completion` with the same function as ``generate``.

What a cancel counts: the tokens of each unfinished sample in the last output read. vLLM-CPU's
engine core runs in a process of its own and keeps stepping while the caller reads: the tokens it
generates after that output and before the abort reaches it (typically a step's worth) are
generated but not counted.

One caller at a time: ``LLMEngine`` is not thread-safe, and ``LLM.generate`` steps the engine
until no request is left, its own or another's. :class:`EngineGuard` is held by ``generate`` and
by a stream from its first read until its last request finished or was cancelled; another thread
waits for it, and the stream's own thread gets a one-line error instead of a deadlock.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tts.backends.base import (
    BackendError,
    Completion,
    GenerationRequest,
    GenerationResult,
    request_usage,
    split_wall_time,
)
from tts.backends.streaming import FinishedSample, SampleStream
from tts.backends.thinking import count_reasoning_tokens

logger = logging.getLogger(__name__)

_stream_ids = itertools.count()

_PENDING, _RUNNING, _FINISHED, _CANCELLED = "pending", "running", "finished", "cancelled"

Complete = Callable[[int, Any, Sequence[int]], Completion]
"""(request index, vLLM CompletionOutput, prompt token ids) -> the Completion ``generate`` makes of it."""


class EngineGuard:
    """One caller at a time on an engine: ``generate`` holds it for its call, a stream while it has
    requests in the engine. A thread that already holds it (its stream is open) is refused rather
    than left waiting on itself."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None

    def acquire(self) -> None:
        """Wait for the engine; refuse the thread whose own open stream holds it.

        Raises:
            BackendError: This thread's sample stream still has requests in the engine.
        """
        me = threading.get_ident()
        if self._owner == me:
            raise BackendError("this vLLM engine is busy with an open sample stream of the same thread: read the "
                               "stream to its end or cancel it (leave its `with` block) before using the engine again")
        self._lock.acquire()
        self._owner = me

    def release(self) -> None:
        """Free the engine for the next caller."""
        self._owner = None
        self._lock.release()

    @contextmanager
    def held(self) -> Iterator[None]:
        """The engine, for the length of a ``with`` block."""
        self.acquire()
        try:
            yield
        finally:
            self.release()


class EngineStream(SampleStream):
    """The samples of a batch of requests on one vLLM engine, yielded as each finishes.

    Args:
        engine: vLLM's ``LLMEngine`` (``llm.llm_engine``), or anything with its ``add_request``,
            ``step``, ``abort_request`` and ``has_unfinished_requests``.
        requests: The requests, in the caller's order (indices of :class:`FinishedSample`).
        prompts: Each request's prompt for the engine (a dict with ``prompt_token_ids``).
        params: Each request's ``SamplingParams``; their ``n`` is the samples the engine draws
            (1 for a greedy request with n > 1, whose one sample is yielded n times, as
            ``generate`` repeats it). Their ``output_kind`` is set to CUMULATIVE.
        complete: Makes a finished ``CompletionOutput`` a :class:`Completion`.
        guard: The engine's :class:`EngineGuard`.
        loras: Each request's ``LoRARequest`` (None: the base model), or None for an engine without LoRA.

    Requests are sent when the stream is first read, all at once as ``generate`` sends them; the
    engine is left with none of them when iteration ends, is abandoned, or fails, and when
    :meth:`cancel` covers every request still running. Cancel from the thread that reads the
    stream or from another one: an abort asked for while the reader waits in an engine step is
    sent as soon as the step returns.
    """

    def __init__(self, engine: Any, requests: Sequence[GenerationRequest], prompts: Sequence[Any],
                 params: Sequence[Any], complete: Complete, guard: EngineGuard,
                 loras: Sequence[Any] | None = None) -> None:
        super().__init__(requests)
        if not len(prompts) == len(params) == len(self.requests):
            raise ValueError(f"EngineStream needs one prompt and one SamplingParams per request, got "
                             f"{len(prompts)} prompts and {len(params)} params for {len(self.requests)} requests")
        from vllm.sampling_params import RequestOutputKind

        for p in params:
            p.output_kind = RequestOutputKind.CUMULATIVE  # every step: each advancing sample so far
        self._engine, self._prompts, self._params = engine, list(prompts), list(params)
        self._complete, self._guard = complete, guard
        self._loras = list(loras) if loras is not None else None
        tag = next(_stream_ids)
        self._ids = [f"tts-stream-{tag}-{i}" for i in range(len(self.requests))]
        self._index = {rid: i for i, rid in enumerate(self._ids)}
        self._drawn = [int(p.n) for p in self._params]
        self._repeats = [r.n // p.n for r, p in zip(self.requests, self._params, strict=True)]
        k = len(self.requests)
        self._state = [_PENDING] * k
        self._sent = [False] * k
        self._done: list[list[Completion]] = [[] for _ in range(k)]  # samples the engine finished
        self._done_children: list[set[int]] = [set() for _ in range(k)]
        self._yielded: list[list[Completion]] = [[] for _ in range(k)]
        self._seen: list[dict[int, int]] = [{} for _ in range(k)]  # child index -> tokens so far
        self._cached = [0] * k
        self._partial: list[tuple[int, ...]] = [() for _ in range(k)]
        self._wall = 0.0
        self._reading = False
        self._in_step = False
        self._abort_later: list[str] = []
        self._mutex = threading.Lock()  # cancel() from another thread vs. the reader's engine calls

    # --- reading ---------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[FinishedSample]:
        if self._reading:
            raise RuntimeError("this sample stream is already being read; read it once")
        self._reading = True
        try:
            yield from self._read()
        finally:
            self._reading = False

    def _read(self) -> Iterator[FinishedSample]:
        todo = [i for i, s in enumerate(self._state) if s == _PENDING]
        if not todo:
            return
        self._guard.acquire()
        start, steps = time.perf_counter(), 0
        try:
            with self._mutex:
                for i in todo:
                    if self._state[i] == _PENDING:  # not cancelled before it was sent
                        self._state[i] = _RUNNING  # before add_request: a failed add is aborted too
                        self._sent[i] = True
                        lora = {} if self._loras is None else {"lora_request": self._loras[i]}
                        self._engine.add_request(self._ids[i], self._prompts[i], self._params[i], **lora)
            while _RUNNING in self._state:
                with self._mutex:
                    if not self._engine.has_unfinished_requests():
                        raise BackendError("the vLLM engine has no request left while samples of this stream are "
                                           "unfinished (were they aborted elsewhere?)")
                    self._in_step = True
                try:
                    steps += 1
                    outputs = self._engine.step()
                finally:
                    with self._mutex:
                        self._in_step = False
                        self._flush_aborts()
                # Every sample's progress in this step first: a cancel while a sample of it is read
                # counts what the step generated for the others too.
                for out in outputs:
                    self._count(out)
                for out in outputs:
                    yield from self._take(out)
        finally:
            self._wall += time.perf_counter() - start
            logger.debug("sample stream of %d requests read in %.3f s over %d engine steps", len(todo),
                         self._wall, steps)
            try:
                self.cancel()  # whatever is still running: the caller stopped reading, or a step failed
            except Exception:  # a dead engine cannot abort; the caller's own error (if any) is the one to see
                logger.warning("aborting the unfinished samples of a stream failed", exc_info=True)
            finally:
                self._guard.release()

    def _count(self, out: Any) -> None:
        """The tokens so far of each sample of one engine output (what a cancel counts)."""
        i = self._index.get(out.request_id)
        if i is None or self._state[i] != _RUNNING:
            return  # an aborted request's last output, or none of ours
        self._cached[i] = out.num_cached_tokens or 0
        for c in out.outputs:
            self._seen[i][c.index] = len(c.token_ids)

    def _take(self, out: Any) -> Iterator[FinishedSample]:
        """The samples of one engine output that finished."""
        i = self._index.get(out.request_id)
        if i is None or self._state[i] != _RUNNING:
            return  # an aborted request's last output, or none of ours
        for c in out.outputs:
            if self._state[i] != _RUNNING:
                return  # cancelled while a sample before it was being read
            if c.finish_reason is None or c.index in self._done_children[i]:
                continue
            completion = self._complete(i, c, out.prompt_token_ids)
            self._done[i].append(completion)
            self._done_children[i].add(c.index)
            for _ in range(self._repeats[i]):  # a greedy request's one sample, n times
                if self._state[i] != _RUNNING:
                    return  # cancelled while an earlier copy was being read
                self._yielded[i].append(completion)
                yield FinishedSample(i, completion)
            if len(self._done_children[i]) == self._drawn[i] and self._state[i] == _RUNNING:
                self._state[i] = _FINISHED
        if out.finished and self._state[i] == _RUNNING:
            self._state[i] = _FINISHED

    # --- cancelling ------------------------------------------------------------------------------

    def cancel(self, requests: Iterable[int] | None = None) -> None:
        """Abort in the engine the unfinished samples of ``requests`` (None: all), counting the
        tokens each had generated in the last output read. Idempotent."""
        chosen = range(len(self.requests)) if requests is None else list(requests)
        for i in chosen:
            if not 0 <= i < len(self.requests):
                raise IndexError(f"cancel: request index {i} is not in 0..{len(self.requests) - 1}")
        with self._mutex:
            ids = []
            for i in chosen:
                if self._state[i] in (_FINISHED, _CANCELLED):
                    continue
                if self._state[i] == _RUNNING and len(self._done_children[i]) < self._drawn[i]:
                    ids.append(self._ids[i])  # (its last sample being read: nothing left to abort)
                self._partial[i] = tuple(self._seen[i].get(j, 0) for j in range(self._drawn[i])
                                         if j not in self._done_children[i])
                self._state[i] = _CANCELLED
            self._abort_later.extend(ids)
            if not self._in_step:
                self._flush_aborts()

    def _flush_aborts(self) -> None:
        """Send the aborts asked for (under the mutex, never while the reader is inside a step)."""
        ids, self._abort_later = self._abort_later, []
        if ids:
            start = time.perf_counter()
            self._engine.abort_request(ids)
            logger.debug("aborted %d requests in the engine in %.4f s", len(ids), time.perf_counter() - start)

    # --- results ---------------------------------------------------------------------------------

    def results(self) -> list[GenerationResult]:
        """Per request, its samples in the order they finished and what the engine generated.

        The usage is ``generate``'s (prompt tokens, cached prompt tokens, the batch's sequences,
        wall time shared by generated tokens) with the cancelled samples' partial tokens added;
        a request cancelled before it was sent counts nothing. A stream not read yet is read to
        its end first.

        Raises:
            RuntimeError: The stream is being read (results come once reading ended).
        """
        if self._reading:
            raise RuntimeError("results() of a sample stream that is still being read: finish reading it or "
                               "cancel it first")
        if _PENDING in self._state:
            for _ in self:
                pass
        lengths = [[c.completion_tokens for c in self._done[i]] + list(self._partial[i])
                   for i in range(len(self.requests))]
        walls = split_wall_time(self._wall, [sum(x) for x in lengths])
        batch = sum(self._drawn)
        out = []
        for i in range(len(self.requests)):
            usage = request_usage(len(self._prompts[i]["prompt_token_ids"]) if self._sent[i] else 0, self._cached[i],
                                  lengths[i], walls[i], batch_sequences=batch,
                                  reasoning_tokens=count_reasoning_tokens(self._done[i]))
            out.append(GenerationResult(tuple(self._yielded[i]), usage, cancelled=self._partial[i]))
        return out
