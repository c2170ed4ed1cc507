"""Prometheus counters of the server, rendered in the text exposition format (version 0.0.4).

A few counters and one latency histogram need no client library; the engine's batching figures
come from the session's own statistics at scrape time.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Latency histogram bucket bounds in seconds."""


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                     for k, v in sorted(labels.items()))
    return "{" + inner + "}"


class Metrics:
    """Request counts by endpoint and status, latency, tokens, cost, rejections, in-flight."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.rejected: dict[str, int] = defaultdict(int)
        self.tokens: dict[str, int] = defaultdict(int)
        self.cost: dict[str, float] = defaultdict(float)
        self.disconnects = 0
        self.in_flight = 0
        self._hist: dict[str, list[int]] = {}
        self._sum: dict[str, float] = defaultdict(float)
        self._count: dict[str, int] = defaultdict(int)

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        """One finished request."""
        with self._lock:
            self.requests[(endpoint, status)] += 1
            counts = self._hist.setdefault(endpoint, [0] * len(BUCKETS))
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    counts[i] += 1
            self._sum[endpoint] += seconds
            self._count[endpoint] += 1

    def reject(self, reason: str) -> None:
        with self._lock:
            self.rejected[reason] += 1

    def spent(self, cost: dict[str, Any]) -> None:
        """Tokens and cost of one solve."""
        with self._lock:
            self.tokens["prompt"] += int(cost.get("prompt_tokens", 0))
            self.tokens["completion"] += int(cost.get("completion_tokens", 0))
            for unit in ("eflops", "gpu_seconds", "dollars"):
                if cost.get(unit) is not None:
                    self.cost[unit] += float(cost[unit])

    def render(self, session_stats: dict[str, int]) -> str:
        """The exposition text."""
        out: list[str] = []

        def metric(name: str, kind: str, help_: str, rows: list[tuple[dict[str, str], float]]) -> None:
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(f"{name}{_labels(lab)} {val:.17g}" for lab, val in rows)

        with self._lock:
            metric("tts_http_requests_total", "counter", "HTTP requests answered, by endpoint and status.",
                   [({"endpoint": e, "status": str(s)}, c) for (e, s), c in sorted(self.requests.items())])
            metric("tts_rejected_requests_total", "counter", "Requests refused before solving, by reason.",
                   [({"reason": r}, c) for r, c in sorted(self.rejected.items())])
            metric("tts_client_disconnects_total", "counter", "Requests whose client went away; their solves were cancelled.",
                   [({}, self.disconnects)])
            metric("tts_requests_in_flight", "gauge", "Requests being solved now.", [({}, self.in_flight)])
            metric("tts_tokens_total", "counter", "Tokens spent inside solves (all samples, steps and verifier calls).",
                   [({"kind": k}, v) for k, v in sorted(self.tokens.items())])
            for unit, help_ in (("eflops", "Kinetics eFLOPs"), ("gpu_seconds", "Roofline GPU-seconds"),
                                ("dollars", "US dollars at the configured GPU price")):
                metric(f"tts_{unit}_total", "counter", f"{help_} spent by solves (cost model).",
                       [({}, self.cost.get(unit, 0.0))])
            out.append("# HELP tts_request_seconds Latency of answered requests.")
            out.append("# TYPE tts_request_seconds histogram")
            for endpoint, counts in sorted(self._hist.items()):
                for bound, c in zip(BUCKETS, counts, strict=True):
                    out.append(f"tts_request_seconds_bucket{_labels({'endpoint': endpoint, 'le': f'{bound:g}'})} {c}")
                out.append(f"tts_request_seconds_bucket{_labels({'endpoint': endpoint, 'le': '+Inf'})} "
                           f"{self._count[endpoint]}")
                out.append(f"tts_request_seconds_sum{_labels({'endpoint': endpoint})} {self._sum[endpoint]:.17g}")
                out.append(f"tts_request_seconds_count{_labels({'endpoint': endpoint})} {self._count[endpoint]}")
        for key, help_ in (("solves", "Solves finished."), ("cancelled", "Solves cancelled."),
                           ("engine_calls", "Batched engine calls."),
                           ("generate_calls", "Strategy generate calls (each joined one engine call)."),
                           ("requests", "Generation requests sent to the engine."),
                           ("sequences", "Sequences (samples) sent to the engine."),
                           ("dropped_requests", "Queued requests dropped because their solve was cancelled.")):
            metric(f"tts_{key}_total", "counter", help_, [({}, session_stats.get(key, 0))])
        metric("tts_largest_batch_requests", "gauge", "Most requests in one engine call so far.",
               [({}, session_stats.get("largest_batch", 0))])
        return "\n".join(out) + "\n"
