"""OpenTelemetry spans for what tts does: each solve, engine call, verifier call and sandbox run.

Optional (``pip install 'tts[otel]'``). Spans are recorded only when the process has a tracer
provider (an application's own ``trace.set_tracer_provider(...)``, or ``opentelemetry-instrument``
with the standard ``OTEL_*`` variables); without one, or without the package, every hook here
returns at once and the generators and verifiers strategies see are the plain objects, so tracing
that is off costs nothing measurable (``benchmarks/tracing_overhead.py``).

The spans, nested as the calls are:

- ``tts.solve`` (one per strategy run: a Session/``tts.solve``/``tts serve`` solve, or one batch of
  problems of ``tts eval``): the strategy, n, problems, tokens, cost, and what the strategy decided
  (the answer, its confidence, the vote's shares, the per-request stop, a tree's kept and pruned nodes);
- ``tts.generate`` (each call a strategy makes to its generator) and ``tts.generate.stream`` (a
  per-request stop's streams): requests, tokens, finish reasons; ``gen_ai.*`` names where
  OpenTelemetry's generative-AI conventions have one;
- ``tts.verify`` (each verifier call): the verifier, items scored;
- ``tts.sandbox`` (each program run): status, reason, seconds.

``tts serve`` continues the caller's trace: a request's W3C ``traceparent`` header becomes the
parent of its ``tts.serve.request`` span (:func:`extract_context`). Work handed to another thread
(a Session's worker pool, the sandbox's) carries the current context along (:func:`carry`).

This module sits at the bottom of the layers: it imports nothing from tts, and the layers above
call it.
"""

from __future__ import annotations

import contextvars
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

TRACER_NAME = "tts"


def _trace_api() -> Any:
    """OpenTelemetry's trace API when this process has imported it, else None.

    A tracer provider can only have been set by code that imported ``opentelemetry.trace`` (an
    application, ``opentelemetry-instrument``), so while nothing has, tracing is off and tts does
    not import it either (about 60 ms a process: the CLI, each test subprocess)."""
    return sys.modules.get("opentelemetry.trace")


def enabled() -> bool:
    """Whether spans are recorded: OpenTelemetry is installed and a tracer provider is set."""
    otel_trace = _trace_api()
    if otel_trace is None:
        return False
    return not isinstance(otel_trace.get_tracer_provider(), (otel_trace.ProxyTracerProvider,
                                                             otel_trace.NoOpTracerProvider))


class _Off:
    """The span of a hook while tracing is off: takes attributes and drops them."""

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        pass

    def is_recording(self) -> bool:
        return False


OFF = _Off()


@contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None, kind: str | None = None,
         parent: Any = None) -> Iterator[Any]:
    """A span named ``name`` around the block, child of the current one (or of ``parent``, a context
    from :func:`extract_context`); yields it (:data:`OFF` while tracing is off). An exception that
    leaves the block is recorded on the span and raised on."""
    if not enabled():
        yield OFF
        return
    otel_trace = _trace_api()
    tracer = otel_trace.get_tracer(TRACER_NAME)
    span_kind = getattr(otel_trace.SpanKind, kind.upper()) if kind else otel_trace.SpanKind.INTERNAL
    with tracer.start_as_current_span(name, context=parent, kind=span_kind,
                                      attributes=_clean(attributes or {})) as current:
        yield current


def extract_context(headers: Mapping[str, str]) -> Any:
    """The trace context a request's headers carry (W3C ``traceparent``), or None without one."""
    if not enabled() or not any(k.lower() == "traceparent" for k in headers):
        return None
    from opentelemetry.propagate import extract

    return extract(dict(headers))


def carry(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` bound to the caller's context (the current span), for running in another thread
    (threads start with an empty context; ``loop.run_in_executor`` and thread pools do not copy it)."""
    if not enabled():
        return fn
    ctx = contextvars.copy_context()
    return lambda *args, **kwargs: ctx.run(fn, *args, **kwargs)


def set_attributes(current: Any, attributes: Mapping[str, Any]) -> None:
    """Set ``attributes`` on a span, leaving out None and turning what OpenTelemetry cannot hold into JSON."""
    if current.is_recording():
        current.set_attributes(_clean(attributes))


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, (bool, int, float, str)):
            out[key] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value) \
                and len({type(v) for v in value}) <= 1:
            out[key] = list(value)
        else:
            out[key] = json.dumps(value, default=str, sort_keys=True)
    return out


def usage_attributes(usage: Any) -> dict[str, Any]:
    """A :class:`~tts.types.Usage` as ``gen_ai.usage.*`` and ``tts.usage.*`` attributes."""
    return {"gen_ai.usage.input_tokens": usage.prompt_tokens, "gen_ai.usage.output_tokens": usage.completion_tokens,
            "tts.usage.cached_prompt_tokens": usage.cached_prompt_tokens or None,
            "tts.usage.reasoning_tokens": usage.reasoning_tokens or None, "tts.usage.calls": usage.calls}


def solution_attributes(solution: Any, prefix: str = "tts") -> dict[str, Any]:
    """What a strategy decided for one problem (a :class:`~tts.types.Solution`), as span attributes:
    the answer and confidence, the vote's five largest shares, the per-request stop, a tree's nodes
    kept and pruned, the trace's events, the usage, and a Session's cost."""
    trace = solution.trace
    out: dict[str, Any] = {f"{prefix}.problem_id": solution.problem_id, f"{prefix}.answer": solution.answer,
                           f"{prefix}.confidence": solution.confidence, f"{prefix}.samples": len(trace.samples)}
    if trace.votes:
        total = sum(trace.votes.values()) or 1.0
        top = sorted(trace.votes.items(), key=lambda kv: -kv[1])[:5]
        out[f"{prefix}.votes"] = {answer: round(v / total, 4) for answer, v in top}
        out[f"{prefix}.distinct_answers"] = len(trace.votes)
    if trace.selected is not None:
        out[f"{prefix}.selected"] = trace.selected
    stop = trace.notes.get("stop")
    if isinstance(stop, Mapping):
        for key in ("rule", "drawn", "cancelled", "reason", "waves"):
            out[f"{prefix}.stop.{key}"] = stop.get(key)
    if len(trace.tree):
        kept = [node.get("kept") for node in trace.tree]
        out[f"{prefix}.tree.nodes"] = len(kept)
        out[f"{prefix}.tree.kept"] = sum(1 for k in kept if k is True)
        out[f"{prefix}.tree.pruned"] = sum(1 for k in kept if k is False)
    if trace.events:
        out[f"{prefix}.events"] = dict(trace.events)
    out.update(usage_attributes(solution.usage))
    for key, value in (getattr(solution, "cost", None) or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"tts.cost.{key}"] = value
    return out


def record_solutions(current: Any, solutions: Sequence[Any]) -> None:
    """A solve span's decisions: one problem's as attributes, several problems' as an event each."""
    if not current.is_recording():
        return
    if len(solutions) == 1:
        set_attributes(current, solution_attributes(solutions[0]))
        return
    for solution in solutions:
        current.add_event("tts.problem", _clean(solution_attributes(solution, prefix="tts")))


def results_attributes(results: Sequence[Any]) -> dict[str, Any]:
    """A generate call's results (:class:`~tts.backends.base.GenerationResult`): tokens, samples,
    cancelled samples and finish reasons."""
    reasons: dict[str, int] = {}
    for result in results:
        for completion in result.completions:
            reason = getattr(completion, "finish_reason", None) or "unknown"
            reasons[reason] = reasons.get(reason, 0) + 1
    return {"gen_ai.usage.input_tokens": sum(r.usage.prompt_tokens for r in results),
            "gen_ai.usage.output_tokens": sum(r.usage.completion_tokens for r in results),
            "tts.samples": sum(len(r.completions) for r in results),
            "tts.cancelled": sum(len(r.cancelled) for r in results) or None,
            "gen_ai.response.finish_reasons": sorted(reasons), "tts.finish_reasons": reasons}


class TracedGenerator:
    """A generator whose ``generate`` calls are ``tts.generate`` spans; everything else is the inner's."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generate(self, requests: Sequence[Any]) -> list[Any]:
        model = getattr(self.inner, "model_name", None)
        first = requests[0] if requests else None
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model if isinstance(model, str) else None,
                 "tts.requests": len(requests),
                 "gen_ai.request.max_tokens": getattr(first, "max_tokens", None),
                 "gen_ai.request.temperature": getattr(first, "temperature", None)}
        with span("tts.generate", attrs) as current:
            results = self.inner.generate(requests)
            set_attributes(current, results_attributes(results))
        return results


def traced_generator(generator: Any) -> Any:
    """``generator`` with its calls traced while tracing is on, else ``generator`` itself."""
    if not enabled() or generator is None or isinstance(generator, TracedGenerator):
        return generator
    return TracedGenerator(generator)


class TracedVerifier:
    """A verifier whose ``score`` calls are ``tts.verify`` spans; everything else is the inner's."""

    def __init__(self, inner: Any, kind: str) -> None:
        self.inner, self.kind = inner, kind

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def score(self, items: Sequence[Any]) -> list[Any]:
        with span("tts.verify", {"tts.verifier": self.kind, "tts.items": len(items)}) as current:
            scores = self.inner.score(items)
            values = [getattr(s, "score", None) for s in scores]
            numbers = [v for v in values if isinstance(v, (int, float))]
            set_attributes(current, {"tts.scores.mean": sum(numbers) / len(numbers) if numbers else None})
        return scores


def traced_verifier(verifier: Any, kind: str) -> Any:
    """``verifier`` with its calls traced while tracing is on, else ``verifier`` itself."""
    if not enabled() or isinstance(verifier, TracedVerifier):
        return verifier
    return TracedVerifier(verifier, kind)
