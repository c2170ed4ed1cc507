"""Samples as they finish, and cancelling the rest: how a per-request stop saves tokens.

A strategy that stops sampling once its vote is settled (``stop:`` on a voting strategy,
:mod:`tts.search.stopping`) wants each sample the moment it finishes, and wants the samples still
being generated aborted once it has decided: their remaining tokens are then never generated.
A backend's ``generate`` returns only once every sample is done, so a backend that can do both
offers ``stream_samples(requests) -> SampleStream``:

* iterating the stream yields a :class:`FinishedSample` (which request, which completion) as each
  sample of any of the requests finishes, in the order they finish;
* :meth:`SampleStream.cancel` aborts the samples of some (or all) requests still in flight: an
  OpenAI-compatible server's streams are closed (vLLM's server aborts a request whose client goes
  away), the in-process engine aborts them;
* :meth:`SampleStream.results` then gives, per request, the samples that finished (in the order
  they finished) and a usage that counts every generated token, those of cancelled partial
  samples included, with the partial lengths in :attr:`GenerationResult.cancelled`.

:func:`stream_samples` returns a backend's own stream, or :class:`BatchStream` for any other
generator: one ``generate`` call, every sample "finishes" together, nothing can be cancelled (a
stop then decides between waves only; the answers are the same, only fewer tokens are saved).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from tts.backends.base import Completion, GenerationRequest, GenerationResult, Generator, request_usage
from tts.backends.thinking import count_reasoning_tokens


@dataclass(frozen=True, slots=True)
class FinishedSample:
    """One sample that finished: the index of its request in the stream's requests, and the sample."""

    request: int
    completion: Completion


class SampleStream(ABC):
    """The samples of a batch of requests, yielded as each finishes; a context manager whose exit
    cancels whatever is still in flight (so a caller that stops reading leaves nothing running).

    Lifecycle: iterate (possibly calling :meth:`cancel` in between), then read :meth:`results`.
    """

    live: bool = True
    """Whether samples come as each finishes and a cancel aborts work in flight (False: the whole
    draw comes at once, so a caller should judge it whole: every sample is already paid for)."""

    def __init__(self, requests: Sequence[GenerationRequest]) -> None:
        self.requests = tuple(requests)

    @abstractmethod
    def __iter__(self) -> Iterator[FinishedSample]:
        """Each sample as it finishes; ends when every sample of every request finished or was cancelled."""

    @abstractmethod
    def cancel(self, requests: Iterable[int] | None = None) -> None:
        """Abort the samples still in flight of ``requests`` (indices; None: all). Idempotent; the
        samples already finished stay; iteration yields no sample of a cancelled request afterwards."""

    @abstractmethod
    def results(self) -> list[GenerationResult]:
        """Per request, once iteration has ended: its finished completions in the order they
        finished, a usage counting every generated token (cancelled partial samples included) and
        the partial lengths of the cancelled samples (:attr:`GenerationResult.cancelled`)."""

    def __enter__(self) -> SampleStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class BatchStream(SampleStream):
    """The stream of a generator that cannot stream: one ``generate`` call when first read, then
    every sample in request order; :meth:`cancel` only drops the samples not yet yielded (they were
    generated and are paid for: they stay in the usage, and count as finished in the results)."""

    live = False

    def __init__(self, generator: Generator, requests: Sequence[GenerationRequest]) -> None:
        super().__init__(requests)
        self._generator = generator
        self._results: list[GenerationResult] | None = None
        self._cancelled: set[int] = set()

    def _draw(self) -> list[GenerationResult]:
        if self._results is None:
            self._results = list(self._generator.generate(list(self.requests))) if self.requests else []
        return self._results

    def __iter__(self) -> Iterator[FinishedSample]:
        for i, result in enumerate(self._draw()):
            for c in result.completions:
                if i in self._cancelled:
                    break
                yield FinishedSample(i, c)

    def cancel(self, requests: Iterable[int] | None = None) -> None:
        self._cancelled.update(range(len(self.requests)) if requests is None else requests)

    def results(self) -> list[GenerationResult]:
        return self._draw()


def stream_samples(generator: Generator, requests: Sequence[GenerationRequest]) -> SampleStream:
    """The backend's own :class:`SampleStream` when it has one (``stream_samples``), else a
    :class:`BatchStream` over its ``generate``."""
    own = getattr(generator, "stream_samples", None)
    return own(requests) if callable(own) else BatchStream(generator, requests)


def cancelled_usage(result: GenerationResult, finished: Sequence[Completion], partial: Sequence[int]) -> GenerationResult:
    """``result`` (a request drawn whole) cut to the samples that finished before a cancel: the
    usage keeps the prompt, counts the finished samples' tokens plus the ``partial`` tokens the
    cancelled samples had generated, and shares the wall time in proportion (a backend that can
    only simulate cancellation, the scripted one, builds its results this way)."""
    old = result.usage
    lengths = [c.completion_tokens for c in finished] + [int(t) for t in partial]
    share = sum(lengths) / max(old.completion_tokens, 1)
    shape = old.shapes[0] if old.shapes else None
    usage = request_usage(old.prompt_tokens, old.cached_prompt_tokens, lengths, old.wall_seconds * share,
                          batch_sequences=shape.batch_sequences if shape is not None else 0,
                          model=shape.model if shape is not None else "",
                          reasoning_tokens=count_reasoning_tokens(finished))
    usage = dataclasses.replace(usage, calls=old.calls)
    return GenerationResult(tuple(finished), usage, cancelled=tuple(int(t) for t in partial))


class SimulatedStream(SampleStream):
    """A stream played from a whole draw, as an engine that decodes every sample at once would
    stream it: each sample generates one token per step from the same start, so samples finish in
    order of length (ties in request, then sample order), and a sample cancelled at step t had
    generated min(t, its length) tokens, t being the length of the last sample that finished.

    The scripted backend streams this way, so per-request stops and their cancellations are tested
    without an engine; the answers and lengths are those of the same draw through ``generate``.
    """

    def __init__(self, generator: Generator, requests: Sequence[GenerationRequest]) -> None:
        super().__init__(requests)
        self._generator = generator
        self._drawn: list[GenerationResult] | None = None
        self._finished: list[list[int]] = [[] for _ in self.requests]
        self._cancelled_at: dict[int, int] = {}
        self._step = 0

    def _draw(self) -> list[GenerationResult]:
        if self._drawn is None:
            self._drawn = list(self._generator.generate(list(self.requests))) if self.requests else []
        return self._drawn

    def __iter__(self) -> Iterator[FinishedSample]:
        order = sorted(((c.completion_tokens, i, j) for i, r in enumerate(self._draw())
                        for j, c in enumerate(r.completions)))
        for tokens, i, j in order:
            if i in self._cancelled_at:
                continue
            self._step = tokens
            self._finished[i].append(j)
            yield FinishedSample(i, self._draw()[i].completions[j])

    def cancel(self, requests: Iterable[int] | None = None) -> None:
        for i in range(len(self.requests)) if requests is None else requests:
            self._cancelled_at.setdefault(i, self._step)

    def results(self) -> list[GenerationResult]:
        out = []
        for i, result in enumerate(self._draw()):
            finished = [result.completions[j] for j in self._finished[i]]
            if len(finished) == len(result.completions):
                out.append(GenerationResult(tuple(finished), result.usage))
                continue
            step = self._cancelled_at.get(i, self._step)
            partial = [min(step, c.completion_tokens) for j, c in enumerate(result.completions)
                       if j not in self._finished[i]]
            out.append(cancelled_usage(result, finished, partial))
        return out
