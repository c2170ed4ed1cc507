"""Summaries of a run's results: accuracy with a 95% interval, coverage, no-answer rate, cost."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from tts.eval.rows import ResultRow


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion (good at small n and near 0 or 1)."""
    if trials == 0:
        return (0.0, 0.0)
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    # Exact at the ends: no successes cannot have a lower bound above 0 (rounding gave 2.8e-17 at 0/11).
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return (low, high)


@dataclass(frozen=True)
class ConfigSummary:
    """Aggregate numbers for one strategy config over the problems of a run."""

    config: str
    strategy: str
    n: float
    problems: int
    accuracy: float
    accuracy_low: float
    accuracy_high: float
    coverage: float
    no_answer_rate: float
    ungraded: int
    """Answers whose grading could not finish (timed out, or the grader's worker died); counted
    as not correct in ``accuracy`` and shown so that a reader knows."""
    events: dict[str, int]
    """Things that went wrong inside a strategy without ending the run (verifier errors,
    invalid scores, empty steps, forced answers), summed over problems by kind."""
    tokens_per_problem: float
    completion_tokens_per_problem: float
    wall_seconds: float
    execution_seconds: float = 0.0
    """Seconds model-written programs ran in the sandbox (execution strategies' trace notes; not
    engine time, so not in ``wall_seconds`` or the token counts)."""


def _sum_events(rows: list[ResultRow]) -> dict[str, int]:
    total: dict[str, int] = {}
    for r in rows:
        for kind, count in (r.trace.get("events") or {}).items():
            total[kind] = total.get(kind, 0) + int(count)
    return {k: v for k, v in sorted(total.items()) if v}


def summarize(rows: Iterable[ResultRow]) -> list[ConfigSummary]:
    """One summary per strategy config, ordered by strategy then n (samples per problem)."""
    groups: dict[str, list[ResultRow]] = {}
    for r in rows:
        groups.setdefault(r.config, []).append(r)
    out = []
    for label, rs in groups.items():
        k = len(rs)
        correct = sum(1 for r in rs if r.correct)
        lo, hi = wilson_interval(correct, k)
        out.append(
            ConfigSummary(
                config=label,
                strategy=rs[0].strategy["kind"],
                # Samples drawn per problem (varies per problem under allocation and search).
                n=sum(len(r.trace.get("samples", ())) for r in rs) / k,
                problems=k,
                accuracy=correct / k,
                accuracy_low=lo,
                accuracy_high=hi,
                coverage=sum(1 for r in rs if r.coverage) / k,
                no_answer_rate=sum(1 for r in rs if r.outcome == "no_answer") / k,
                ungraded=sum(1 for r in rs if r.outcome == "ungraded"),
                events=_sum_events(rs),
                tokens_per_problem=sum(r.usage.total_tokens for r in rs) / k,
                completion_tokens_per_problem=sum(r.usage.completion_tokens for r in rs) / k,
                wall_seconds=sum(r.usage.wall_seconds for r in rs),
                execution_seconds=sum(float((r.trace.get("notes") or {}).get("execution_seconds", 0.0)) for r in rs),
            )
        )
    return sorted(out, key=lambda s: (s.strategy, s.n))
