"""Prometheus metrics of the server (``GET /metrics``), kept with ``prometheus_client``.

Each app has its own :class:`~prometheus_client.CollectorRegistry`, so several servers in one
process (tests, notebooks) count apart. Request counts, latency, tokens, cost, rejections and
disconnects are counted as they happen; the engine's batching figures are read from the session's
own statistics at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Latency histogram bucket bounds in seconds."""

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The text exposition format that :func:`prometheus_client.generate_latest` writes."""

_SESSION_COUNTERS = (("solves", "Solves finished."), ("cancelled", "Solves cancelled."),
                     ("engine_calls", "Batched engine calls."),
                     ("generate_calls", "Strategy generate calls (each joined one engine call)."),
                     ("requests", "Generation requests sent to the engine."),
                     ("sequences", "Sequences (samples) sent to the engine."),
                     ("dropped_requests", "Queued requests dropped because their solve was cancelled."))

_COST_UNITS = (("eflops", "Kinetics eFLOPs"), ("gpu_seconds", "Roofline GPU-seconds"),
               ("dollars", "US dollars at the configured GPU price"))


class _SessionStats:
    """A collector of the session's batching statistics, read when scraped."""

    def __init__(self, stats: Callable[[], dict[str, int]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        for key, help_ in _SESSION_COUNTERS:
            yield CounterMetricFamily(f"tts_{key}", help_, value=stats.get(key, 0))
        yield GaugeMetricFamily("tts_largest_batch_requests", "Most requests in one engine call so far.",
                                value=stats.get("largest_batch", 0))


class Metrics:
    """Request counts by endpoint and status, latency, tokens, cost, rejections, in-flight.

    Args:
        session_stats: Returns the session's statistics (``Session.stats``) at scrape time.
    """

    def __init__(self, session_stats: Callable[[], dict[str, int]] = dict) -> None:
        self.registry = registry = CollectorRegistry()
        self.requests = Counter("tts_http_requests", "HTTP requests answered, by endpoint and status.",
                                ["endpoint", "status"], registry=registry)
        self.rejected = Counter("tts_rejected_requests", "Requests refused before solving, by reason.", ["reason"],
                                registry=registry)
        self.disconnects = Counter("tts_client_disconnects",
                                   "Requests whose client went away; their solves were cancelled.", registry=registry)
        self.in_flight = Gauge("tts_requests_in_flight", "Requests being solved now.", registry=registry)
        self.tokens = Counter("tts_tokens", "Tokens spent inside solves (all samples, steps and verifier calls).",
                              ["kind"], registry=registry)
        self.cost = {unit: Counter(f"tts_{unit}", f"{help_} spent by solves (cost model).", registry=registry)
                     for unit, help_ in _COST_UNITS}
        self.latency = Histogram("tts_request_seconds", "Latency of answered requests.", ["endpoint"],
                                 buckets=BUCKETS, registry=registry)
        registry.register(_SessionStats(session_stats))
        # labelled series looked up once (``labels`` takes a lock and builds a key on every call)
        self._prompt_tokens = self.tokens.labels(kind="prompt")
        self._completion_tokens = self.tokens.labels(kind="completion")
        self._series: dict[tuple[str, int], tuple[Any, Any]] = {}

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        """One finished request."""
        series = self._series.get((endpoint, status))
        if series is None:  # endpoints are the routes' and statuses few: a small, bounded dict
            series = self._series[endpoint, status] = (self.requests.labels(endpoint=endpoint, status=str(status)),
                                                       self.latency.labels(endpoint=endpoint))
        series[0].inc()
        series[1].observe(seconds)

    def reject(self, reason: str) -> None:
        """One request refused before solving (``auth``, ``bad_request``, ``rate_limited``, ...)."""
        self.rejected.labels(reason=reason).inc()

    def disconnected(self) -> None:
        """One request whose client went away."""
        self.disconnects.inc()

    def spent(self, cost: dict[str, Any]) -> None:
        """Tokens and cost of one solve."""
        self._prompt_tokens.inc(int(cost.get("prompt_tokens", 0)))
        self._completion_tokens.inc(int(cost.get("completion_tokens", 0)))
        for unit, counter in self.cost.items():
            if cost.get(unit) is not None:
                counter.inc(float(cost[unit]))

    def render(self) -> bytes:
        """The exposition text (:data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)
