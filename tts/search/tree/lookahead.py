"""Lookahead search: beam search whose steps are scored by a greedy rollout (Snell et al. 2024, §5).

Snell, Lee, Xu and Kumar, "Scaling LLM Test-Time Compute Optimally can be More Effective than
Scaling Model Parameters" (arXiv:2408.03314): lookahead search modifies beam search in how a
candidate step is scored. Instead of the verifier's score of the partial solution ending at the
step, the step is rolled out k more steps with temperature 0 and the verifier scores the end of
that rollout; a rollout that reaches a final answer stops there. The rollouts only score: the
beam keeps the candidate steps themselves, and the next step is sampled afresh (the rollout
steps are not reused, as in the paper and in search-and-learn). With budget N, width M and
lookahead k:

1. sample N candidate steps (N/M kept nodes x M; the root N ways), one expand call;
2. roll every unfinished candidate out k steps greedily: ONE generator call per rollout level
   for every candidate of every problem (a rollout ends early when it finishes);
3. score the rollout ends in ONE verifier call; each candidate takes its rollout's score
   (a finished candidate is scored itself);
4. finished candidates are collected; keep the N/M best unfinished ones, expand each M ways,
   within N candidates in all (as :func:`~tts.search.tree.beam.beam_search`); repeat from 1.

As in beam search, ``fill="every_step"`` gives search-and-learn's rule instead of step 4's
"within N": N steps sampled at every step, dealt in turn over the kept nodes, the first N to
finish returned (see :mod:`tts.search.tree.beam`). Pinned both ways in
``tests/parity/test_tree_searches.py``.

k = 0 is beam search. A step costs about (k + 1) times beam search's generated tokens, which
Snell et al. count when they compare it at equal compute. Events: ``lookahead_steps`` (rollout
steps generated) and ``lookahead_calls`` (rollout levels, each one generator call).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import Field

from tts.config import StrategyConfigBase
from tts.search.tree.beam import every_step_frontier, first_n
from tts.search.tree.stepwise import StepScorer, StepState, StepwiseSpace
from tts.search.tree.tree_search import (MAX_STEPS, Expansion, SearchResult, SearchSpace, SearchTree, StateScorer,
                                         TreeNode, keep_best, never_ends, score_nodes)
from tts.search.tree.tree_strategy import TreeSearchStrategy, WidthSearchConfig
from tts.types import RequestShape

S = TypeVar("S")


class RolloutSpace(SearchSpace[S], Protocol[S]):
    """A search space that can also continue states greedily (the model's most likely next step)."""

    def rollout_step(self, states: Sequence[S]) -> list[S | None]:
        """One greedy next state per state (None where there is none), in ONE batched call."""
        ...


def _expand(space: SearchSpace, batch: Sequence[Expansion]) -> list[list[TreeNode]]:
    """Expand every entry in one call and record the children, unscored (step 1)."""
    children = space.expand([e.state for e in batch], [e.count for e in batch])
    if len(children) != len(batch):
        raise RuntimeError(f"{type(space).__name__}.expand returned {len(children)} child lists for "
                           f"{len(batch)} states; a space must return one list per state")
    out = []
    for e, kids in zip(batch, children, strict=True):
        made = [e.tree.add(e.node, c, space.is_terminal(c)) for c in kids]
        if not made:
            e.tree.events["no_children"] += 1
        out.append(made)
    return out


def _usable(state: Any) -> bool:
    """Whether a rollout state is worth scoring (an empty step of the step-wise space is not)."""
    step = getattr(state, "step", None)
    return not isinstance(step, str) or bool(step.strip())


def rollout(space: RolloutSpace, entries: Sequence[tuple[SearchTree, TreeNode]], k: int) -> list[tuple[Any, int]]:
    """Roll every unfinished node out ``k`` steps greedily: one ``rollout_step`` call per level.

    Returns:
        For each entry, (the state to score, rollout steps taken): a finished node, or one with
        nothing to roll out, is its own end.
    """
    ends: list[Any] = [node.state for _, node in entries]
    taken = [0] * len(entries)
    live = [i for i, (_, node) in enumerate(entries) if not node.terminal and _usable(node.state)]
    for _ in range(k):
        if not live:
            break
        nxt = space.rollout_step([ends[i] for i in live])
        if len(nxt) != len(live):
            raise RuntimeError(f"{type(space).__name__}.rollout_step returned {len(nxt)} states for {len(live)}")
        trees = {id(entries[i][0]): entries[i][0] for i in live}
        for tree in trees.values():
            tree.events["lookahead_calls"] += 1
        still = []
        for i, state in zip(live, nxt, strict=True):
            if state is None:
                continue
            entries[i][0].events["lookahead_steps"] += 1
            taken[i] += 1
            if _usable(state) or space.is_terminal(state):
                ends[i] = state
            if not space.is_terminal(state):
                still.append(i)
        live = still
    return list(zip(ends, taken, strict=True))


def lookahead_search(space: RolloutSpace, scorer: StateScorer, n: int, beam_width: int, lookahead: int,
                     max_steps: int = MAX_STEPS,
                     fill: Literal["within_n", "every_step"] = "within_n") -> list[SearchResult]:
    """Lookahead search from every root of ``space`` in lockstep (see the module docstring).

    Args:
        space: A space with greedy rollouts (one root per problem).
        scorer: Scores states in [0, 1] (higher is better).
        n: Candidates per root (N).
        beam_width: M: the N/M best unfinished candidates are kept, each expanded M ways.
        lookahead: k, greedy rollout steps behind every candidate (0: beam search).
        max_steps: Safety cap on steps.
        fill: ``within_n`` (at most N minus the finished count per step) or ``every_step``
            (search-and-learn's N per step, the first N to finish returned), as in beam search.

    Returns:
        One :class:`SearchResult` per root; its leaves are every finished candidate, in the order
        found. A candidate's score is its rollout's.
    """
    if beam_width < 1 or n < beam_width or n % beam_width:
        raise ValueError(f"n ({n}) must be a positive multiple of beam_width ({beam_width})")
    if fill not in ("within_n", "every_step"):
        raise ValueError(f"fill must be 'within_n' or 'every_step', got {fill!r}")
    if lookahead < 0:
        raise ValueError(f"lookahead must be >= 0, got {lookahead}")
    keep = n // beam_width
    trees = [SearchTree(root) for root in space.initial_states()]
    frontier: list[Expansion] = [Expansion(t, None, n) for t in trees]
    for _ in range(max_steps):
        if not frontier:
            if fill == "every_step":
                first_n(trees, n)
            return [t.result() for t in trees]
        # 1. Candidate steps of every kept node of every root: one expand call.
        groups = list(zip(frontier, _expand(space, frontier), strict=True))
        entries = [(e.tree, node) for e, kids in groups for node in kids]
        # 2. Greedy rollouts, one call per level (empty steps are not rolled out, nor scored: they
        #    keep PENALTY and rank last, as in beam search); 3. one score call for the rollout ends.
        ends = rollout(space, entries, lookahead)
        scored = [(tree, node, TreeNode(-1, None, 0, end, True))
                  for (tree, node), (end, _) in zip(entries, ends, strict=True) if node.terminal or _usable(node.state)]
        score_nodes(scorer, [(tree, proxy) for tree, _, proxy in scored])
        for _, node, proxy in scored:
            node.score = proxy.score
        # 4. Finished candidates are collected; the N/M best unfinished ones are kept.
        frontier = []
        if fill == "every_step":
            for tree in trees:
                frontier += every_step_frontier(tree, [kids for e, kids in groups if e.tree is tree], n, keep)
            continue
        for tree in trees:
            mine = [node for t, node in entries if t is tree]
            for node in mine:
                if node.terminal:
                    tree.take(node)
            frontier += keep_best(tree, [m for m in mine if not m.terminal], n, keep, beam_width)
    raise never_ends(max_steps)


class LookaheadConfig(WidthSearchConfig):
    """Lookahead search: beam search whose candidate steps are scored by a k-step greedy rollout."""

    kind: Literal["lookahead"] = "lookahead"
    lookahead: int = Field(1, ge=0, le=64)
    """k: greedy (temperature 0) steps rolled out behind every candidate step before the verifier
    scores it; each costs about one more beam step of tokens. 0 is beam search."""
    fill: Literal["within_n", "every_step"] = "within_n"
    """As beam search's: ``within_n`` samples at most n minus the finished count per step;
    ``every_step`` is search-and-learn's rule (n every step, the first n to finish returned)."""


class Lookahead(TreeSearchStrategy):
    """Lookahead search (Snell et al. 2024); see :func:`lookahead_search`."""

    name = "lookahead"
    config_class: ClassVar[type[StrategyConfigBase]] = LookaheadConfig

    def search(self, space: StepwiseSpace, scorer: StepScorer) -> list[SearchResult[StepState]]:
        return lookahead_search(space, scorer, self.config.n, self.config.width, self.config.lookahead,
                                fill=self.config.fill)

    @classmethod
    def planned_requests(cls, n: int, prompt_tokens: int, gen_tokens: int,
                         cached_tokens: int = 0) -> list[RequestShape]:
        """Cost hook (``tts cost``): beam search's worst case plus the default k-step rollouts.

        Behind every step of the beam's worst case (``max_depth`` steps, no early finish), each of
        the n candidate steps is rolled out ``lookahead`` greedy steps of the same length: one
        request per candidate and rollout level, its prompt (question and steps so far) in the
        prefix cache. Rollouts past ``max_depth`` are not cut short here, so this errs high.
        """
        shapes = super().planned_requests(n, prompt_tokens, gen_tokens, cached_tokens)
        depth = cls.config_class.model_fields["max_depth"].default
        k = cls.config_class.model_fields["lookahead"].default
        g = math.ceil(gen_tokens / depth)
        for t in range(1, depth + 1):
            for j in range(k):
                p = prompt_tokens + (t + j) * g
                shapes += [RequestShape(p, p, (g,)) for _ in range(n)]
        return shapes

