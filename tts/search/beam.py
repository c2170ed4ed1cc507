"""Beam search over solution steps, guided by a verifier (Snell et al. 2024, §5).

Snell, Lee, Xu and Kumar, "Scaling LLM Test-Time Compute Optimally can be More Effective than
Scaling Model Parameters" (arXiv:2408.03314), search against a PRM with budget N and beam width M:

1. sample N first steps;
2. score them with the verifier;
3. keep the N/M best;
4. sample M next steps from each kept one (N/M x M = N candidates again); repeat from 2.

Finished candidates leave the beam and are collected, as in Hugging Face's search-and-learn
implementation (Beeching, Tunstall and Rush 2024). This implementation keeps the total at N:
once k candidates have finished, a step expands at most N - k children, so a problem never gets
more than N finished candidates, and no step generates more than N steps for a problem.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from tts.config import StrategyConfigBase
from tts.search.stepwise import StepScorer, StepState, StepwiseSpace
from tts.search.tree_search import (
    MAX_STEPS,
    Expansion,
    SearchResult,
    SearchSpace,
    SearchTree,
    StateScorer,
    grow_level,
    keep_best,
    never_ends,
)
from tts.search.tree_strategy import TreeSearchStrategy, WidthSearchConfig


def beam_search(space: SearchSpace, scorer: StateScorer, n: int, beam_width: int,
                max_steps: int = MAX_STEPS) -> list[SearchResult]:
    """Beam search from every root of ``space`` in lockstep.

    Args:
        space: The search space (one root per problem).
        scorer: Scores states (higher is better).
        n: Candidates per root (N): the root is expanded n ways, and at most n finished
            candidates are returned.
        beam_width: M: the N/M best unfinished children are kept, each expanded M ways.
        max_steps: Safety cap on steps (a space must end its paths well before).

    Returns:
        One :class:`SearchResult` per root; its leaves are every finished child, in the order found.
    """
    if beam_width < 1 or n < beam_width or n % beam_width:
        raise ValueError(f"n ({n}) must be a positive multiple of beam_width ({beam_width})")
    keep = n // beam_width
    trees = [SearchTree(root) for root in space.initial_states()]
    frontier: list[Expansion] = [Expansion(t, None, n) for t in trees]
    for _ in range(max_steps):
        if not frontier:
            return [t.result() for t in trees]
        # 1. Expand every kept node of every root and score all children (one call each);
        # 2. finished children become candidates.
        live_by_tree = grow_level(space, scorer, trees, frontier)
        frontier = []
        for tree, live in zip(trees, live_by_tree, strict=True):
            # 3. Keep the N/M best unfinished ones, each expanded M ways, within N candidates in all.
            frontier += keep_best(tree, live, n, keep, beam_width)
    raise never_ends(max_steps)


class BeamConfig(WidthSearchConfig):
    """Step-wise beam search with a verifier: keep the n/M best partial solutions, expand each M ways."""

    kind: Literal["beam"] = "beam"


class BeamSearch(TreeSearchStrategy):
    """Beam search over solution steps (Snell et al. 2024); see :func:`beam_search`."""

    name = "beam"
    config_class: ClassVar[type[StrategyConfigBase]] = BeamConfig

    def search(self, space: StepwiseSpace, scorer: StepScorer) -> list[SearchResult[StepState]]:
        return beam_search(space, scorer, self.config.n, self.config.width)
