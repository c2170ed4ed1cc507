"""REBASE: reward-balanced tree search (Wu et al. 2024).

Wu, Sun, Li, Welleck and Yang, "Inference Scaling Laws: An Empirical Analysis of Compute-Optimal
Inference for Problem-Solving with Language Models" (arXiv:2408.00724), §4: with a budget of N
solutions, expand the root N ways; then at every depth, score the unfinished nodes and give node
j a share of the remaining width W (N minus the solutions already finished) by a softmax over the
scores with balance temperature T_b:

    W_j = Round(W * exp(R_j / T_b) / sum_k exp(R_k / T_b))

so a high-scoring step gets many continuations and a low-scoring one few or none, without beam
search's hard cut to N/M survivors. Nodes of the depth that get no width are dropped. The search
ends when N solutions have finished or no unfinished node is left.

Choices of this implementation:

- ``Round`` is largest-remainder rounding by default, so the widths sum to W exactly
  (independent rounding can over- or under-spend the budget by up to half a child per node) and
  no node is favoured beyond its remainder. The authors' code (the REBASE baseline of the ETS
  repository, SqueezeAILab/ETS ``rebase.py``, ``select_softmax``) rounds differently: it serves
  the nodes best first, each taking the ceiling of its share of the width still left, so the best
  nodes round up and the last ones often get nothing (also W exactly). ``rounding="ceil"``
  (:func:`ceil_widths`) gives that rule; on [0.9, 0.8, 0.5] with W = 4 and T_b = 0.2 it gives
  3 / 1 / 0 where largest remainder gives 2 / 2 / 0. Pinned both ways in
  ``tests/parity/test_rebase_ets.py``.
- Nodes without a valid score (:data:`~tts.search.tree.tree_search.PENALTY`: an empty step, a failed
  or invalid verifier score) get no width while any sibling has a valid score; when none has,
  the width is split evenly.
- Default T_b = 0.2, the softmax temperature of the ETS authors' REBASE baseline (Hooper et al.
  2025, arXiv:2502.13575); lower concentrates the width on the best nodes.

Every depth of every problem is one expand call and one score call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from tts.config import StrategyConfigBase
from tts.search.tree.stepwise import StepScorer, StepState, StepwiseSpace
from tts.search.tree.tree_search import (MAX_STEPS, Expansion, SearchResult, SearchSpace, SearchTree, StateScorer,
                                         TreeNode, level_search, widened)
from tts.search.tree.tree_strategy import TreeSearchConfig, TreeSearchStrategy

BALANCE_TEMPERATURE = 0.2
"""T_b of the ETS authors' settings (``softmax_temperature: 0.2``, as their REBASE baseline)."""

BalanceTemperature = Annotated[float, Field(
    BALANCE_TEMPERATURE, gt=0.0, le=100.0,
    description="T_b of REBASE's softmax that turns node scores into shares of the width (in ETS: the shares "
                "the program weighs and the widths of the retained nodes): lower gives the best nodes more of "
                "the budget (near 0: greedy), higher spreads it evenly (large: like independent sampling).")]
"""The ``balance_temperature`` setting of REBASE and of ETS (built on it): one definition of its
default, bounds and description, which both configs declare in their own place (a config's field
order is the order of its label's settings, so a shared base class would reorder ETS's labels)."""

Rounding = Annotated[Literal["largest_remainder", "ceil"], Field(
    "largest_remainder",
    description="How each node's softmax share of the width becomes a whole number of children: "
                "``largest_remainder`` (floors, then the largest remainders get one more) or ``ceil``, the "
                "REBASE authors' rule (best node first, each the ceiling of its share of what is left: the best "
                "nodes round up, the last get nothing). Both spend the width exactly; ``ceil`` is the reference. "
                "In ETS, ``largest_remainder``: the program weighs each node's unrounded REBASE share, retains "
                "at most the width, and the width is split by largest remainder; ``ceil``: as the authors' "
                "code, the program weighs REBASE's rounded widths (a node that rounds to nothing weighs 0), the "
                "retained set is not capped, and the width is split by their sequential ceilings.")]
"""The ``rounding`` setting of REBASE and of ETS: one definition, as :data:`BalanceTemperature`."""


def _check_temperature(temperature: float) -> None:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def _softmax_weights(scores: Sequence[float], temperature: float) -> tuple[list[bool], list[float]]:
    """(which scores are valid, softmax(score / T) weights, unnormalised); a node without a valid
    score (negative: PENALTY, or not finite) weighs 0 while any node has one, else all weigh 1."""
    _check_temperature(temperature)
    valid = [s >= 0.0 and math.isfinite(s) for s in scores]
    if not any(valid):
        return valid, [1.0] * len(scores)
    top = max(s for s, ok in zip(scores, valid, strict=True) if ok)
    return valid, [math.exp((s - top) / temperature) if ok else 0.0 for s, ok in zip(scores, valid, strict=True)]


def balanced_widths(scores: Sequence[float], width: int, temperature: float) -> list[int]:
    """Split ``width`` children over nodes by softmax(score / temperature), summing to ``width`` exactly.

    Args:
        scores: One score per node, in [0, 1]; a negative score (PENALTY) marks a node without a
            valid score, which gets nothing while any node has a valid score.
        width: Children to hand out (W).
        temperature: T_b > 0.

    Returns:
        One non-negative width per node; ties in rounding go to the earlier node.
    """
    if not scores or width <= 0:
        _check_temperature(temperature)
        return [0] * len(scores)
    valid, weights = _softmax_weights(scores, temperature)
    total = sum(weights)
    quotas = [width * w / total for w in weights]
    widths = [math.floor(q) for q in quotas]
    left = width - sum(widths)
    by_remainder = sorted(range(len(scores)), key=lambda j: (-(quotas[j] - widths[j]), j))
    for j in by_remainder[:left]:
        widths[j] += 1
    return widths


def ceil_widths(scores: Sequence[float], width: int, temperature: float, later_first: bool = True) -> list[int]:
    """Split ``width`` children by softmax(score / temperature) the way the REBASE authors' code does.

    The nodes are served best first; each takes the ceiling of its share of the width still left
    (width left x its weight / the weights not yet served), so the width is spent exactly and
    the best nodes round up. Reference: SqueezeAILab/ETS ``rebase.py``, ``select_softmax``.

    Args:
        scores: One score per node; a negative score (PENALTY) gets nothing while any node has a
            valid score (as :func:`balanced_widths`).
        width: Children to hand out (W).
        temperature: T_b > 0.
        later_first: Of equal scores, serve the later node first (the reference's ascending sort,
            reversed: ``select_softmax``); False keeps their order (its ``select_softmax_costmodel``
            computing ETS's outcome weights).

    Returns:
        One non-negative width per node, summing to ``width``.
    """
    if not scores or width <= 0:
        _check_temperature(temperature)
        return [0] * len(scores)
    valid, weights = _softmax_weights(scores, temperature)
    keys = list(scores) if any(valid) else [0.0] * len(scores)
    if later_first:
        order = sorted(range(len(scores)), key=lambda j: (keys[j] if valid[j] else -math.inf, j), reverse=True)
    else:
        order = sorted(range(len(scores)), key=lambda j: keys[j] if valid[j] else -math.inf, reverse=True)
    widths = [0] * len(scores)
    left, rest = width, sum(weights)
    for j in order:
        if left <= 0 or rest <= 0:
            break
        # The last weight served equals what is left of the sum: it takes all the width left
        # (the reference does too, up to its float rounding).
        quota = left if weights[j] >= rest else left * weights[j] / rest
        widths[j] = min(left, math.ceil(quota - 1e-9))
        left -= widths[j]
        rest -= weights[j]
    return widths


def rebase_search(space: SearchSpace, scorer: StateScorer, n: int, temperature: float = BALANCE_TEMPERATURE,
                  max_steps: int = MAX_STEPS,
                  rounding: Literal["largest_remainder", "ceil"] = "largest_remainder") -> list[SearchResult]:
    """REBASE from every root of ``space`` in lockstep.

    Args:
        space: The search space (one root per problem).
        scorer: Scores states (higher is better).
        n: Budget N: the root is expanded n ways, every depth expands at most n minus the
            finished count, and at most n finished candidates are returned.
        temperature: Balance temperature T_b of the softmax over node scores.
        max_steps: Safety cap on depths.
        rounding: How shares become whole widths: ``largest_remainder`` (:func:`balanced_widths`)
            or ``ceil``, the authors' rule (:func:`ceil_widths`).

    Returns:
        One :class:`SearchResult` per root; its leaves are every finished child, in the order found.
    """
    if rounding not in ("largest_remainder", "ceil"):
        raise ValueError(f"rounding must be 'largest_remainder' or 'ceil', got {rounding!r}")
    split = balanced_widths if rounding == "largest_remainder" else ceil_widths
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")

    def choose(trees: list[SearchTree], live_by_tree: list[list[TreeNode]]) -> list[Expansion]:
        # The remaining budget of each tree, shared among its unfinished children by their scores.
        return [e for tree, live in zip(trees, live_by_tree, strict=True)
                for e in widened(tree, live, split([k.score for k in live], n - len(tree.leaves), temperature))]

    return level_search(space, scorer, n, max_steps, choose)


class RebaseConfig(TreeSearchConfig):
    """REBASE: every depth shares the remaining budget among nodes by a softmax over their scores."""

    kind: Literal["rebase"] = "rebase"
    balance_temperature: BalanceTemperature
    rounding: Rounding


class Rebase(TreeSearchStrategy):
    """Reward-balanced search (Wu et al. 2024); see :func:`rebase_search`."""

    name = "rebase"
    config_class: ClassVar[type[StrategyConfigBase]] = RebaseConfig

    def search(self, space: StepwiseSpace, scorer: StepScorer) -> list[SearchResult[StepState]]:
        return rebase_search(space, scorer, self.config.n, self.config.balance_temperature,
                            rounding=self.config.rounding)
