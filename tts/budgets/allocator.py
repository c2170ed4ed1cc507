"""Offline compute allocation: how many samples, with which strategy, for each problem.

Given a total budget, per-problem candidate configurations (strategy, n, max_tokens), a cost per
configuration and an expected accuracy per configuration (read from accuracy-vs-n curves fitted
per difficulty bin), :func:`allocate` maximises the expected number of solved problems.

Method: every problem starts at its cheapest configuration. Its other configurations are reduced
to the upper concave hull of its (cost, accuracy) points; the hull's segments have decreasing
accuracy gained per unit cost, so taking segments across all problems in order of that marginal
gain is the optimal solution of the continuous relaxation of this multiple-choice knapsack
(Sinha & Zoltners 1979, "The Multiple-Choice Knapsack Problem", Oper. Res. 27(3); the same
marginal-gain argument as Snell et al. 2024's compute-optimal scaling). The integer solution
differs from the optimum by at most the gain of the one segment that no longer fits; a final
pass spends what is left on any upgrade that still fits. The budget is never exceeded.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from tts.budgets.pricing import BudgetError  # the one budget error, raised here for budgets an allocation cannot use
from tts.registry import STRATEGIES

logger = logging.getLogger(__name__)

Unit = Literal["tokens", "eflops", "gpu_seconds"]
CostFn = Callable[[str, str, int], float]
"""``cost(problem_id, strategy, n) -> float`` in the budget's unit (expected cost of one config)."""

DEFAULT_LADDER = (1, 2, 4, 8, 16, 32, 64)


class AllocationError(ValueError):
    """An allocation that cannot run as asked; the message says what to change."""


class BudgetTooSmallError(BudgetError, AllocationError):
    """A positive budget below the least the allocation needs.

    Args:
        message: What to change.
        minimum: The smallest budget that would do, in the budget's unit.
    """

    def __init__(self, message: str, minimum: float) -> None:
        super().__init__(message)
        self.minimum = minimum


class CalibrationError(AllocationError):
    """Calibration data (a past run or a sample pool) that cannot give the accuracy curves."""


@dataclass(frozen=True, slots=True)
class StrategyCandidate:
    """One strategy configuration the allocator may choose for a problem.

    Args:
        strategy: A registered strategy name (e.g. "self_consistency", "best_of_n").
        n: Number of samples.
        max_tokens: Generation limit per sample, passed through to the plan (None = default).

    Raises:
        UnknownNameError: The strategy is not registered (the message lists those that are).
    """

    strategy: str
    n: int
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        STRATEGIES.check(self.strategy)
        if self.n < 1:
            raise ValueError(f"a candidate needs n >= 1 samples, got n={self.n}")


def candidate_ladder(
    strategies: Sequence[str] = ("self_consistency",),
    ladder: Sequence[int] = DEFAULT_LADDER,
    max_tokens: int | None = None,
) -> list[StrategyCandidate]:
    """Every (strategy, n) pair of a ladder, e.g. self_consistency with n = 1, 2, 4, ..., 64."""
    return [StrategyCandidate(s, int(n), max_tokens) for s in strategies for n in ladder]


@dataclass(frozen=True, slots=True)
class AccuracyCurve:
    """Expected accuracy of one strategy as a function of n, for one difficulty bin.

    Between measured n the accuracy is interpolated linearly in log2(n); beyond the ends it is
    held constant.
    """

    strategy: str
    ns: tuple[int, ...]
    accuracy: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.ns) != len(self.accuracy) or not self.ns:
            raise ValueError("an accuracy curve needs as many accuracies as n values (at least one)")
        if list(self.ns) != sorted(set(self.ns)):
            raise ValueError(f"curve n values must be strictly increasing, got {self.ns}")

    def at(self, n: int) -> float:
        """Expected accuracy with ``n`` samples."""
        return float(np.interp(np.log2(n), np.log2(self.ns), self.accuracy))


@dataclass(frozen=True, slots=True)
class Plan:
    """The allocator's decision for one problem.

    Args:
        problem_id: The problem's id.
        strategy: Strategy registry name.
        n: Number of samples.
        max_tokens: Per-sample generation limit (None = the strategy's default).
        expected_cost: Predicted cost in the budget's unit.
        expected_accuracy: Predicted probability that the problem is solved.
    """

    problem_id: str
    strategy: str
    n: int
    max_tokens: int | None
    expected_cost: float
    expected_accuracy: float


def upper_concave_hull(costs: np.ndarray, accs: np.ndarray, start: int) -> list[int]:
    """Indices of the upper concave hull of (cost, accuracy) points, walking right from ``start``.

    Points cheaper than ``start`` or not improving accuracy are dropped; the returned chain has
    strictly increasing cost and accuracy and strictly decreasing slope.
    """
    c0, a0 = costs[start], accs[start]
    pts = [i for i in range(len(costs)) if costs[i] >= c0 and accs[i] > a0 and i != start]
    pts.sort(key=lambda i: (costs[i], -accs[i]))
    chain = [start]
    for i in pts:
        if costs[i] == costs[chain[-1]] or accs[i] <= accs[chain[-1]]:
            continue  # same cost with lower accuracy, or dominated
        while len(chain) >= 2:
            j, k = chain[-2], chain[-1]
            # Drop k when it lies on or below the line j -> i (not concave).
            if (accs[k] - accs[j]) * (costs[i] - costs[j]) <= (accs[i] - accs[j]) * (costs[k] - costs[j]):
                chain.pop()
            else:
                break
        chain.append(i)
    return chain


def greedy_allocate(costs: np.ndarray, accs: np.ndarray, budget: float) -> np.ndarray:
    """Choose one option per problem maximising total expected accuracy within ``budget``.

    Args:
        costs: ``(n_problems, n_options)`` expected cost of each option (finite, >= 0).
        accs: ``(n_problems, n_options)`` expected accuracy of each option.
        budget: Total budget, same unit as ``costs``.

    Returns:
        ``(n_problems,)`` index of the chosen option per problem.

    Raises:
        BudgetError: The budget is not a positive number (:class:`BudgetTooSmallError`: it
            cannot pay the cheapest option of every problem; the message gives the minimum).
        ValueError: Malformed cost or accuracy matrices.
    """
    costs = np.asarray(costs, dtype=float)
    accs = np.asarray(accs, dtype=float)
    if costs.shape != accs.shape or costs.ndim != 2 or costs.shape[1] == 0:
        raise ValueError(f"costs and accs must both be (n_problems, n_options), got {costs.shape}, {accs.shape}")
    if not np.all(np.isfinite(costs)) or np.any(costs < 0):
        raise ValueError("every option's cost must be a finite number >= 0; check the cost function")
    check_budget(budget, costs.min(axis=1))
    # 1. Start at the cheapest option (the most accurate among equally cheap ones).
    start = np.lexsort((-accs, costs), axis=1)[:, 0] if costs.size else np.zeros(0, dtype=int)
    choice = start.copy()
    spent = float(costs[np.arange(len(costs)), start].sum())
    # 2. Per problem, the hull segments; a heap holds each problem's next segment by marginal gain.
    hulls = [upper_concave_hull(costs[p], accs[p], int(start[p])) for p in range(len(costs))]
    pos = [0] * len(costs)
    heap: list[tuple[float, int]] = []

    def push(p: int) -> None:
        h = hulls[p]
        if pos[p] + 1 < len(h):
            a, b = h[pos[p]], h[pos[p] + 1]
            dc, da = costs[p, b] - costs[p, a], accs[p, b] - accs[p, a]
            heapq.heappush(heap, (-(da / dc) if dc > 0 else -math.inf, p))

    for p in range(len(costs)):
        push(p)
    # 3. Take segments by decreasing gain per unit cost; a problem whose next segment does not fit
    # stops climbing (its later segments are worse per unit cost anyway).
    slack = budget + 1e-12 * abs(budget)  # running-sum round-off; step 5 checks exactly
    blocked: list[int] = []
    undo: list[tuple[int, int]] = []  # (problem, previous option) of every upgrade, in order
    while heap:
        _, p = heapq.heappop(heap)
        nxt = hulls[p][pos[p] + 1]
        dc = costs[p, nxt] - costs[p, choice[p]]
        if spent + dc <= slack:
            spent += dc
            undo.append((p, int(choice[p])))
            choice[p] = nxt
            pos[p] += 1
            push(p)
        else:
            blocked.append(p)
    # 4. Spend the rest on the best remaining upgrade (any option, not only hull points) that fits.
    while blocked:
        rows = np.asarray(blocked)
        cur = choice[rows]
        dc = costs[rows] - costs[rows, cur][:, None]
        da = accs[rows] - accs[rows, cur][:, None]
        ok = (da > 0) & (spent + dc <= slack)
        if not ok.any():
            break
        gain = np.where(ok, da / np.maximum(dc, 1e-300), -np.inf)
        r, o = np.unravel_index(int(np.argmax(gain)), gain.shape)
        spent += dc[r, o]
        undo.append((int(rows[r]), int(choice[rows[r]])))
        choice[rows[r]] = o
    # 5. Guard against float round-off in the running sum: the exactly rounded sum must fit too;
    # undo the latest upgrades until it does.
    while undo and math.fsum(costs[np.arange(len(costs)), choice].tolist()) > budget:
        p, prev = undo.pop()
        choice[p] = prev
    return choice


def check_budget(budget: float, cheapest: np.ndarray, unit: str = "") -> None:
    """Raise unless ``budget`` is a positive number covering the cheapest options.

    Raises:
        BudgetError: Not a number, NaN, 0 or negative.
        BudgetTooSmallError: Below the sum of ``cheapest`` (its ``minimum``).
    """
    unit_s = f" {unit}" if unit else ""
    try:
        b = float(budget)
    except (TypeError, ValueError):
        raise BudgetError(f"the budget must be a number, got {budget!r}") from None
    need = math.fsum(np.asarray(cheapest, dtype=float).tolist())
    if math.isnan(b) or b <= 0:
        raise BudgetError(
            f"the budget must be a positive number, got {budget!r}; pass at least {need:.6g}{unit_s} "
            "(the cheapest configuration of every problem)"
        )
    if b < need * (1 - 1e-12):  # equal up to float round-off is accepted
        raise BudgetTooSmallError(
            f"a budget of {b:.6g}{unit_s} cannot pay even the cheapest configuration of every problem; "
            f"raise it to at least {need:.6g}{unit_s} or give fewer problems", need)


def option_matrices(
    problem_ids: Sequence[str],
    bins: Sequence[int],
    candidates: Sequence[StrategyCandidate],
    cost: CostFn,
    curves: Mapping[int, Sequence[AccuracyCurve]],
) -> tuple[np.ndarray, np.ndarray]:
    """The ``(n_problems, n_candidates)`` cost and expected-accuracy matrices for :func:`greedy_allocate`."""
    if len(problem_ids) != len(bins):
        raise ValueError(f"{len(problem_ids)} problems but {len(bins)} difficulty bins; give one bin each")
    by_bin = {int(b): {c.strategy: c for c in cs} for b, cs in curves.items()}
    costs = np.empty((len(problem_ids), len(candidates)))
    accs = np.empty_like(costs)
    for i, (pid, b) in enumerate(zip(problem_ids, bins)):
        if int(b) not in by_bin:
            raise ValueError(f"no accuracy curves for difficulty bin {b} (problem {pid!r}); fit curves "
                             f"for every bin, have {sorted(by_bin)}")
        for j, cand in enumerate(candidates):
            curve = by_bin[int(b)].get(cand.strategy)
            if curve is None:
                raise ValueError(f"bin {b} has no curve for strategy {cand.strategy!r}; fit one or drop "
                                 "that strategy from the candidates")
            costs[i, j] = float(cost(pid, cand.strategy, cand.n))
            accs[i, j] = curve.at(cand.n)
    return costs, accs


def allocate(
    problem_ids: Sequence[str],
    bins: Sequence[int],
    total_budget: float,
    candidates: Sequence[StrategyCandidate],
    cost: CostFn,
    curves: Mapping[int, Sequence[AccuracyCurve]],
    unit: Unit = "tokens",
) -> list[Plan]:
    """Allocate a total budget over problems by greedy marginal gain on concave accuracy curves.

    Args:
        problem_ids: The problems, in order.
        bins: Difficulty bin of each problem (e.g. :attr:`DifficultyEstimate.bin`).
        total_budget: Total budget in ``unit``.
        candidates: Configurations to choose from (see :func:`candidate_ladder`).
        cost: ``cost(problem_id, strategy, n)`` -> expected cost in ``unit``.
        curves: Difficulty bin -> accuracy curves (one per strategy), fitted on a calibration run.
        unit: The budget's unit, for messages.

    Returns:
        One :class:`Plan` per problem, in input order; their expected costs sum to at most
        ``total_budget``.

    Raises:
        BudgetError: A budget that is 0, negative, NaN or below the cheapest configuration of
            every problem (:class:`BudgetTooSmallError`; the message gives the minimum).
        ValueError: Curves missing for a bin, or no candidates.
    """
    if not candidates:
        raise ValueError("give at least one candidate configuration, e.g. candidate_ladder()")
    costs, accs = option_matrices(problem_ids, bins, candidates, cost, curves)
    check_budget(total_budget, costs.min(axis=1), unit)  # first, so that messages carry the unit
    choice = greedy_allocate(costs, accs, total_budget)
    plans = [
        Plan(pid, candidates[j].strategy, candidates[j].n, candidates[j].max_tokens,
             float(costs[i, j]), float(accs[i, j]))
        for i, (pid, j) in enumerate(zip(problem_ids, choice.tolist()))
    ]
    logger.debug("allocated %.6g of %.6g %s over %d problems", sum(p.expected_cost for p in plans),
                 total_budget, unit, len(plans))
    return plans


def greedy_path(costs: np.ndarray, accs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The whole sequence of greedy upgrades, for sweeping the budget in one pass.

    Every problem starts at its cheapest option; the hull segments of all problems are then taken
    in order of decreasing accuracy gained per unit cost. With budget B the first
    ``searchsorted(cum_cost, B, "right")`` steps fit (the continuous-relaxation optimum, rounded
    down); :func:`greedy_allocate` may add a few more upgrades after that.

    Returns:
        ``(start, problem, option, cum_cost)``: the starting option per problem, then per step
        the problem upgraded, its new option and the total expected cost after the step.
    """
    costs = np.asarray(costs, dtype=float)
    accs = np.asarray(accs, dtype=float)
    start = np.lexsort((-accs, costs), axis=1)[:, 0]
    base = float(costs[np.arange(len(costs)), start].sum())
    probs, opts, slopes, dcs = [], [], [], []
    for p in range(len(costs)):
        h = upper_concave_hull(costs[p], accs[p], int(start[p]))
        for a, b in zip(h[:-1], h[1:]):
            dc, da = costs[p, b] - costs[p, a], accs[p, b] - accs[p, a]
            probs.append(p)
            opts.append(b)
            slopes.append(da / dc if dc > 0 else math.inf)
            dcs.append(dc)
    if not probs:
        empty = np.zeros(0, dtype=np.int64)
        return start, empty, empty, np.zeros(0)
    # Within a problem slopes strictly decrease, so a stable sort keeps each problem's order.
    order = np.argsort(-np.asarray(slopes), kind="stable")
    cum = base + np.cumsum(np.asarray(dcs)[order])
    return start, np.asarray(probs)[order], np.asarray(opts)[order], cum
