"""Beam search over solution steps, guided by a verifier (Snell et al. 2024, §5).

Snell, Lee, Xu and Kumar, "Scaling LLM Test-Time Compute Optimally can be More Effective than
Scaling Model Parameters" (arXiv:2408.03314), search against a PRM with budget N and beam width M:

1. sample N first steps;
2. score them with the verifier;
3. keep the N/M best;
4. sample M next steps from each kept one (N/M x M = N candidates again); repeat from 2.

Finished candidates leave the beam and are collected, as in Hugging Face's search-and-learn
implementation (Beeching, Tunstall and Rush 2024; ``src/sal/search/beam_search.py``). By default
(``fill="within_n"``) this implementation keeps the total at N: once k candidates have finished,
a step expands at most N - k children, so a problem never gets more than N finished candidates,
and no step generates more than N steps for a problem (a budget that ``tts cost`` and the
allocators can count on). search-and-learn instead samples N steps at every step whatever has
finished: it repeats the kept beams in turn until there are N (so when fewer than N/M survive,
each gets more than M), collects every finished beam, and returns the first N to finish.
``fill="every_step"`` does that (the N/M kept are the best by score in the order generated, the
later of equal scores, as its ``np.argsort``; without early finishes the two fills coincide).
Both are pinned in ``tests/parity/test_tree_searches.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from tts.config import StrategyConfigBase
from tts.search.tree.stepwise import StepScorer, StepState, StepwiseSpace
from tts.search.tree.tree_search import (MAX_STEPS, Expansion, SearchResult, SearchSpace, SearchTree, StateScorer,
                                         TreeNode, grow, keep_best, level_search, never_ends)
from tts.search.tree.tree_strategy import TreeSearchStrategy, WidthSearchConfig


def sal_keep(live: Sequence[TreeNode], keep: int) -> list[TreeNode]:
    """search-and-learn's pruning: the ``keep`` best-scored nodes (the later of equal scores, as an
    ascending ``np.argsort`` cut from the end), in the order given; all of them when fewer than
    ``keep`` are live (the reference's ``ranks[-keep:]``)."""
    order = sorted(range(len(live)), key=lambda j: (live[j].score, j))
    top = set(order[max(len(order) - keep, 0):])
    return [node for j, node in enumerate(live) if j in top]


def every_step_frontier(tree: SearchTree, groups: Sequence[Sequence[TreeNode]], n: int,
                        keep: int) -> list[Expansion]:
    """One step of search-and-learn's beam search for one tree (``fill="every_step"``).

    Args:
        tree: The tree.
        groups: The scored children of each node expanded this step, in expansion order.
        n: N, the steps sampled at every step.
        keep: N/M, the unfinished children kept.

    Returns:
        The next step's expansions: N children dealt in turn over the kept nodes. Finished
        children are taken as candidates in the reference's order (its beams are the kept nodes
        repeated in turn: the first child of every kept node, then the second of every one, ...).
    """
    beams = [g[i] for i in range(max(map(len, groups), default=0)) for g in groups if i < len(g)]
    for node in beams:
        if node.terminal:
            tree.take(node)
    kept = sal_keep([node for node in beams if not node.terminal], keep)
    out = []
    for j, node in enumerate(kept):  # n // k each, one more to the first n % k
        node.kept = True
        out.append(Expansion(tree, node, n // len(kept) + (j < n % len(kept))))
    return out


def first_n(trees: Sequence[SearchTree], n: int) -> None:
    """``fill="every_step"``'s end: the first N to finish are each tree's candidates."""
    for tree in trees:
        for i in tree.leaves[n:]:
            tree.nodes[i].kept = False
        del tree.leaves[n:]


def _every_step(space: SearchSpace, scorer: StateScorer, n: int, beam_width: int,
                max_steps: int) -> list[SearchResult]:
    """Beam search as search-and-learn runs it (``fill="every_step"``; see the module docstring)."""
    trees = [SearchTree(root) for root in space.initial_states()]
    frontier: list[Expansion] = [Expansion(t, None, n) for t in trees]
    for _ in range(max_steps):
        if not frontier:
            first_n(trees, n)
            return [t.result() for t in trees]
        grown: dict[int, list[list[TreeNode]]] = {id(t): [] for t in trees}
        for e, kids in zip(frontier, grow(space, scorer, frontier), strict=True):
            grown[id(e.tree)].append(kids)
        frontier = []
        for tree in trees:
            frontier += every_step_frontier(tree, grown[id(tree)], n, n // beam_width)
    raise never_ends(max_steps)


def beam_search(space: SearchSpace, scorer: StateScorer, n: int, beam_width: int,
                max_steps: int = MAX_STEPS, fill: Literal["within_n", "every_step"] = "within_n") -> list[SearchResult]:
    """Beam search from every root of ``space`` in lockstep.

    Args:
        space: The search space (one root per problem).
        scorer: Scores states (higher is better).
        n: Candidates per root (N): the root is expanded n ways, and at most n finished
            candidates are returned.
        beam_width: M: the N/M best unfinished children are kept, each expanded M ways.
        max_steps: Safety cap on steps (a space must end its paths well before).
        fill: ``within_n``: a step expands at most N minus the finished count; ``every_step``:
            search-and-learn's N steps at every step, the first N to finish returned.

    Returns:
        One :class:`SearchResult` per root; its leaves are every finished child, in the order found.
    """
    if beam_width < 1 or n < beam_width or n % beam_width:
        raise ValueError(f"n ({n}) must be a positive multiple of beam_width ({beam_width})")
    if fill not in ("within_n", "every_step"):
        raise ValueError(f"fill must be 'within_n' or 'every_step', got {fill!r}")
    if fill == "every_step":
        return _every_step(space, scorer, n, beam_width, max_steps)
    keep = n // beam_width

    def choose(trees: list[SearchTree], live_by_tree: list[list[TreeNode]]) -> list[Expansion]:
        # Every level expands every kept node of every root and scores all children (one call
        # each); finished children are candidates. Keep the N/M best unfinished ones, each
        # expanded M ways, within N candidates in all.
        return [e for tree, live in zip(trees, live_by_tree, strict=True)
                for e in keep_best(tree, live, n, keep, beam_width)]

    return level_search(space, scorer, n, max_steps, choose)


class BeamConfig(WidthSearchConfig):
    """Step-wise beam search with a verifier: keep the n/M best partial solutions, expand each M ways."""

    kind: Literal["beam"] = "beam"
    fill: Literal["within_n", "every_step"] = "within_n"
    """``within_n``: once k candidates have finished, a step samples at most n - k steps, so a
    problem never costs more than n steps per depth nor gets more than n candidates;
    ``every_step``: search-and-learn's rule, n steps at every step from the kept nodes (repeated
    in turn), the first n to finish returned. The same search until a candidate finishes early."""


class BeamSearch(TreeSearchStrategy):
    """Beam search over solution steps (Snell et al. 2024); see :func:`beam_search`."""

    name = "beam"
    config_class: ClassVar[type[StrategyConfigBase]] = BeamConfig

    def search(self, space: StepwiseSpace, scorer: StepScorer) -> list[SearchResult[StepState]]:
        return beam_search(space, scorer, self.config.n, self.config.width, fill=self.config.fill)
