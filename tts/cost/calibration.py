"""Check the cost model against a real engine: predicted versus measured decode seconds.

The engine side is a callable ``measure(n, gen_len) -> (measured_seconds, usage)`` that runs one
request of ``n`` samples with ``gen_len`` new tokens each (ignoring EOS) and returns its wall time
and :class:`~tts.types.Usage`; the prediction prices that same usage, so early stops are priced
as they happened. What matters for planning is the ordering and the scale: Spearman's rank
correlation says whether the model orders workloads correctly, the median ratio measured/predicted
says how far from the roofline the engine runs, and the median relative error says how far the raw
prediction is off.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tts.cost.cost_model import CostModel
from tts.types import Usage

logger = logging.getLogger(__name__)

Measure = Callable[[int, int], tuple[float, Usage]]


@dataclass(frozen=True, slots=True)
class CalibrationPoint:
    """One timed workload.

    Args:
        n: Samples sharing the prompt.
        gen_len: New tokens requested per sample.
        predicted_seconds: Roofline seconds of the measured usage.
        measured_seconds: Wall seconds reported by ``measure``.
        generated_tokens: Tokens actually generated.
    """

    n: int
    gen_len: int
    predicted_seconds: float
    measured_seconds: float
    generated_tokens: int

    @property
    def relative_error(self) -> float:
        """|predicted - measured| / measured."""
        return abs(self.predicted_seconds - self.measured_seconds) / self.measured_seconds


@dataclass(frozen=True, slots=True)
class CalibrationReport:
    """Predicted against measured seconds over a grid of (n, gen_len) points.

    Args:
        points: The timed workloads, in the order given.
        spearman: Rank correlation of predicted and measured seconds.
        median_relative_error: Median of |predicted - measured| / measured.
        median_ratio: Median of measured / predicted (how many times slower than the roofline).
        scaled_median_relative_error: Median relative error once predictions are multiplied by
            an efficiency factor, each point's factor being the median ratio of the OTHER points
            (leave-one-out, so the error is not measured on the points that fitted it).
    """

    points: tuple[CalibrationPoint, ...]
    spearman: float
    median_relative_error: float
    median_ratio: float
    scaled_median_relative_error: float = float("nan")


def default_points() -> list[tuple[int, int]]:
    """A 4 x 4 grid of (n, gen_len): 16 points spanning 16x in samples and 8x in length."""
    return [(n, g) for n in (1, 4, 8, 16) for g in (32, 64, 128, 256)]


def compare_predictions(points: Sequence[tuple[int, int]], measure: Measure,
                        cost_model: CostModel, concurrency: int | None = None,
                        ) -> CalibrationReport:
    """Time each (n, gen_len) point with ``measure`` and compare with the cost model's seconds.

    Args:
        points: Workloads to time, at least 3 (>= 12 recommended).
        measure: ``measure(n, gen_len) -> (measured_seconds, usage)``.
        cost_model: Prices each point's measured usage.
        concurrency: Passed to :meth:`CostModel.cost_usage`.

    Returns:
        Per-point results with Spearman's rho and the median relative error.

    Raises:
        ValueError: with fewer than 3 points or a non-positive measured time.
    """
    from scipy.stats import spearmanr

    if len(points) < 3:
        raise ValueError(f"need at least 3 (n, gen_len) points to rank, got {len(points)}")
    rows = []
    for n, gen_len in points:
        seconds, usage = measure(n, gen_len)
        if seconds <= 0:
            raise ValueError(f"measure({n}, {gen_len}) returned {seconds} s; must be positive")
        predicted = cost_model.cost_usage(usage, concurrency=concurrency)
        rows.append(CalibrationPoint(n, gen_len, predicted.seconds, float(seconds),
                                     predicted.generated_tokens))
        logger.info("n=%d gen=%d: predicted %.4g s, measured %.4g s", n, gen_len,
                    predicted.seconds, seconds)
    rho = spearmanr([r.predicted_seconds for r in rows], [r.measured_seconds for r in rows])
    ratios = [r.measured_seconds / r.predicted_seconds for r in rows if r.predicted_seconds > 0]
    scaled = []
    if len(ratios) == len(rows):
        for i, r in enumerate(rows):
            factor = statistics.median(ratios[:i] + ratios[i + 1:])
            scaled.append(abs(factor * r.predicted_seconds - r.measured_seconds) / r.measured_seconds)
    return CalibrationReport(
        points=tuple(rows),
        spearman=float(rho.statistic),
        median_relative_error=statistics.median(r.relative_error for r in rows),
        median_ratio=statistics.median(ratios) if ratios else float("nan"),
        scaled_median_relative_error=statistics.median(scaled) if scaled else float("nan"),
    )
