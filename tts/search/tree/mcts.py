"""Monte Carlo tree search over solution steps, with the verifier as the value (UCT, batched).

UCT (Kocsis and Szepesvári, "Bandit based Monte-Carlo Planning", ECML 2006) grows a tree by
descending from the root to a leaf, at every node taking the child that maximises

    Q(child) + c * sqrt(ln N(node) / N(child))

(mean value plus an exploration bonus that shrinks as a child is visited), expanding that leaf
and backing the value of what it found up the path. For LLM reasoning the value of a partial
solution comes from a learned verifier instead of random rollouts, as in TS-LLM (Feng, Wan et al.,
"AlphaZero-like Tree-Search can Guide Large Language Model Decoding and Training",
arXiv:2309.17179) and ReST-MCTS* (Zhang et al., "ReST-MCTS*: LLM Self-Training via Process
Reward Guided Tree Search", arXiv:2406.03816), which both guide step-level search with a value
model / PRM.

This implementation is batch-first: a round is ONE ``expand`` call and ONE ``score`` call for
every problem at once (:func:`~tts.search.tree.tree_search.grow`), like a step of beam search. With
budget N (``n``), width M (``beam_width``) and a node budget B per problem:

1. round 0 expands every root N ways (the first step of beam search and DVTS);
2. every later round, each root that is not done selects up to N/M distinct leaves (unexpanded,
   unfinished nodes) by UCT descent. Each selection adds a virtual loss (a visit worth 0) to its
   path, so the next descent of the same round spreads to other branches (the virtual loss of
   parallel MCTS; Chaslot, Winands and van den Herik, "Parallel Monte-Carlo Tree Search", 2008).
   Until a root has its first finished candidate, its first descent of the round is a greedy
   dive instead (the child with the best verifier score at every level): it goes one level
   deeper every round, so a root finishes a path within as many rounds as that path has steps,
   and a node budget of N per step (beam search's) always leaves room for it. This
   first-finish rule is not UCT's (every descent by the UCT formula); ``greedy_dive=False``
   turns it off for plain UCT with virtual loss (pinned both ways in
   ``tests/parity/test_tree_searches.py``);
3. every selected leaf of every root is expanded M ways and all children are scored;
4. a child's value is its verifier score, backed up its path (visits N, mean value Q); finished
   children are candidates. A node whose children are all finished or exhausted is exhausted,
   and no descent enters it again.

A root is done when it has N candidates, has generated B nodes, or has nothing left to expand.
A round never generates more children for a root than it has room for (N minus its candidates,
B minus its nodes), so no problem gets more than N candidates or B nodes. A node without a valid
score (:data:`~tts.search.tree.tree_search.PENALTY`) is worth 0, the lowest valid value: it ranks
last, and one failed verifier call cannot drag a branch's mean below the range the exploration
constant is scaled for. The search is deterministic: ties go to the child generated first.

MCTS trades candidates for exploration: every expansion off the paths that finish is one
candidate fewer than beam search returns at the same node budget. Its mean values make an
expanded node (its children include the worse steps) look worse than a fresh sibling, so with
an exploration constant near UCB1's sqrt(2) the search widens every level before it deepens any
and spends a beam-sized budget (``n * max_depth``) before finishing more than the greedy dive.
Hence the small default ``exploration``; raise ``max_nodes`` to let the search explore.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from tts.config import StrategyConfigBase
from tts.search.base import StrategyInputError
from tts.search.tree.stepwise import StepScorer, StepState, StepwiseSpace
from tts.search.tree.tree_search import (MAX_STEPS, Expansion, SearchResult, SearchSpace, SearchTree, StateScorer,
                                         TreeNode, grow, never_ends)
from tts.search.tree.tree_strategy import (ANSWER_TOKENS, TreeSearchStrategy, WidthSearchConfig)
from tts.types import Budget

EXPLORATION = 0.05
"""Default UCT constant c, for verifier scores in [0, 1]. Measured on the toy space (n = 16,
M = 4, depth 5, a perfect verifier plus Gaussian noise of sd 0.1, 200 roots, a budget of twice
beam search's nodes): the optimum was chosen for 61% of roots with c = 0.05, 51% with c = 0.1,
and with c >= 0.3 only the greedy dive finished (44%); see the module docstring for why."""

ROOT = -1
"""Key of the root in a tree's statistics (nodes are keyed by their id)."""


@dataclass(slots=True)
class _Stats:
    """UCT statistics of one node: visits N (scored nodes in its subtree, itself included), the sum
    W of their values, its children's ids, whether it was expanded, and whether it is closed
    (finished, or nothing below it is left to expand)."""

    visits: int = 0
    total: float = 0.0
    children: list[int] = field(default_factory=list)
    expanded: bool = False
    closed: bool = False


class _Tree:
    """One root's search: its :class:`SearchTree` plus the UCT statistics of every node."""

    def __init__(self, root: Any) -> None:
        self.tree: SearchTree = SearchTree(root)
        self.stats: dict[int, _Stats] = {ROOT: _Stats()}
        self.done = False

    def parent(self, key: int) -> int | None:
        """Key of the parent (None above the root)."""
        if key == ROOT:
            return None
        parent = self.tree.nodes[key].parent
        return ROOT if parent is None else parent

    def record(self, parent: TreeNode | None, kids: Sequence[TreeNode]) -> None:
        """Add the scored children of one expansion, back their values up, settle what is closed."""
        p = ROOT if parent is None else parent.id
        self.stats[p].expanded = True
        for kid in kids:
            value = max(kid.score, 0.0)  # PENALTY (no valid score) is worth the lowest valid value
            self.stats[kid.id] = _Stats(1, value, closed=kid.terminal)
            self.stats[p].children.append(kid.id)
            key: int | None = p
            while key is not None:
                s = self.stats[key]
                s.visits += 1
                s.total += value
                key = self.parent(key)
        # An expanded node whose children are all closed is closed, and so on up the path (an
        # expansion that returned no children closes its node: it is never retried).
        key = p
        while key is not None and all(self.stats[c].closed for c in self.stats[key].children):
            self.stats[key].closed = True
            key = self.parent(key)

    def select(self, count: int, exploration: float, dive: bool = False) -> list[TreeNode]:
        """Up to ``count`` distinct leaves by UCT descent, with a virtual loss per selection.

        With ``dive``, the first descent follows the best verifier score at every level instead.
        """
        virtual: dict[int, int] = {}
        blocked: set[int] = set()  # selected this round, or everything below is closed or selected

        def open_children(key: int) -> list[int]:
            return [c for c in self.stats[key].children if not self.stats[c].closed and c not in blocked]

        def uct(key: int, parent_visits: int) -> float:
            s = self.stats[key]
            visits = s.visits + virtual.get(key, 0)  # a virtual loss is a visit worth 0
            return s.total / visits + exploration * math.sqrt(math.log(parent_visits) / visits)

        def greedy(key: int, parent_visits: int) -> float:
            return self.tree.nodes[key].score

        chosen: list[TreeNode] = []
        for i in range(count):
            if self.stats[ROOT].closed or ROOT in blocked:
                break
            rank: Callable[[int, int], float] = greedy if dive and i == 0 else uct
            key, path = ROOT, [ROOT]
            while self.stats[key].expanded:
                parent_visits = self.stats[key].visits + virtual.get(key, 0)
                # max() keeps the first of equal values: ties go to the child generated first.
                key = max(open_children(key), key=lambda c: rank(c, parent_visits))
                path.append(key)
            chosen.append(self.tree.nodes[key])
            for k in path:
                virtual[k] = virtual.get(k, 0) + 1
            blocked.add(key)
            for k in reversed(path[:-1]):  # a node with nothing open below it is blocked too
                if open_children(k):
                    break
                blocked.add(k)
        return chosen


def mcts_search(space: SearchSpace, scorer: StateScorer, n: int, beam_width: int, max_nodes: int | None = None,
                exploration: float = EXPLORATION, max_steps: int = MAX_STEPS,
                greedy_dive: bool = True) -> list[SearchResult]:
    """UCT with the verifier as value from every root of ``space`` in lockstep.

    Args:
        space: The search space (one root per problem).
        scorer: Scores states (higher is better); a state's score is its value.
        n: Candidates per root (N): the root is expanded n ways, every round selects up to
            n/beam_width leaves per root, and at most n finished candidates are returned.
        beam_width: M: children of each selected leaf.
        max_nodes: Node budget per root: nodes generated, the root's n children included (at
            least n). None: no budget; a root ends at n candidates or when nothing is left.
        exploration: The UCT constant c (0: always descend into the best mean value).
        max_steps: Safety cap on rounds (a space must end its paths well before).
        greedy_dive: Until a root has a finished candidate, make its first descent of every round
            a greedy dive by verifier score (the first-finish rule); False: every descent by UCT.

    Returns:
        One :class:`SearchResult` per root; its leaves are every finished child, in the order
        found; every expanded node is ``kept``. Events: ``node_budget_spent`` when the node budget
        ended a root before it had n candidates, ``no_children`` per expansion that returned none.

    Example:
        >>> from tts.search.tree.toy import DigitSpace, PerfectScorer
        >>> space = DigitSpace(["3102"], base=4)
        >>> [result] = mcts_search(space, PerfectScorer(space), n=16, beam_width=4)
        >>> max(result.leaf_nodes, key=lambda node: node.score).state.digits
        '3102'
    """
    if beam_width < 1 or n < beam_width or n % beam_width:
        raise ValueError(f"n ({n}) must be a positive multiple of beam_width ({beam_width})")
    if max_nodes is not None and max_nodes < n:
        raise ValueError(f"max_nodes ({max_nodes}) must be at least n ({n}): the root alone is expanded n ways; "
                         "raise max_nodes or lower n")
    if not (math.isfinite(exploration) and exploration >= 0):
        raise ValueError(f"exploration ({exploration}) must be a finite number >= 0 (0: no exploration bonus)")
    budget = math.inf if max_nodes is None else max_nodes
    roots = [_Tree(root) for root in space.initial_states()]
    of_tree = {id(r.tree): r for r in roots}
    # 1. Round 0: every root expanded n ways.
    frontier: list[Expansion] = [Expansion(r.tree, None, n) for r in roots]
    for _ in range(max_steps):
        if not frontier:
            return [r.tree.result() for r in roots]
        # 2. Every leaf of the frontier (round 0: the roots) expanded and its children scored:
        #    one expand and one score call for the whole round, all roots included.
        for e, kids in zip(frontier, grow(space, scorer, frontier), strict=True):
            # 3. Values backed up; finished children become candidates.
            if not kids:
                e.tree.events["no_children"] += 1
            of_tree[id(e.tree)].record(e.node, kids)
            for node in kids:
                if node.terminal:
                    e.tree.take(node)
        # 4. Each root that is not done selects its next leaves, within its room.
        frontier = []
        for r in roots:
            if r.done:
                continue
            tree = r.tree
            room = int(min(n - len(tree.leaves), budget - len(tree.nodes)))
            leaves = r.select(min(n // beam_width, -(-room // beam_width)), exploration,
                              dive=greedy_dive and not tree.leaves) if room > 0 else []
            if not leaves:  # n candidates, the budget spent, or nothing left to expand
                r.done = True
                if len(tree.leaves) < n and len(tree.nodes) >= budget:
                    tree.events["node_budget_spent"] += 1
                continue
            for i, node in enumerate(leaves):
                node.kept = True
                frontier.append(Expansion(tree, node, min(beam_width, room - i * beam_width)))
    raise never_ends(max_steps)


class MCTSConfig(WidthSearchConfig):
    """Monte Carlo tree search (UCT) with the verifier as value: n/M leaves per round, each expanded M ways."""

    kind: Literal["mcts"] = "mcts"
    exploration: float = Field(EXPLORATION, ge=0.0, le=100.0, allow_inf_nan=False)
    """The UCT constant c: what an unexplored branch is worth against one known to score well (0:
    always descend into the best mean verifier score). Verifier scores lie in [0, 1]."""
    max_nodes: int | None = Field(None, ge=1, le=1_000_000)
    """Node budget per problem: steps generated in all (forced answers not counted), at least n.
    Default: n * max_depth, what beam search generates at most."""
    greedy_dive: bool = True
    """Until a problem has its first finished candidate, the first descent of each round follows
    the best verifier score instead of UCT, so a path finishes within as many rounds as it has
    steps (the node budget always leaves room for it). False: every descent by UCT (Kocsis and
    Szepesvari 2006), with virtual loss between the descents of a round."""

    @model_validator(mode="after")
    def _budget_covers_the_root(self) -> MCTSConfig:
        if self.max_nodes is not None and self.max_nodes < self.n:
            raise ValueError(f"max_nodes ({self.max_nodes}) must be at least n ({self.n}): the root alone is "
                             f"expanded n ways. Raise max_nodes to {self.n} or more, or leave it unset for "
                             f"n * max_depth ({self.n * self.max_depth}).")
        return self

    @property
    def node_budget(self) -> int:
        """The node budget per problem, resolved (``max_nodes``, else ``n * max_depth``)."""
        return self.max_nodes if self.max_nodes is not None else self.n * self.max_depth


class MCTS(TreeSearchStrategy):
    """Monte Carlo tree search over solution steps (UCT, Kocsis and Szepesvári 2006); see :func:`mcts_search`."""

    name = "mcts"
    config_class: ClassVar[type[StrategyConfigBase]] = MCTSConfig

    def search(self, space: StepwiseSpace, scorer: StepScorer) -> list[SearchResult[StepState]]:
        c = self.config
        return mcts_search(space, scorer, c.n, c.width, max_nodes=c.node_budget, exploration=c.exploration,
                           greedy_dive=c.greedy_dive)

    def _check_budget(self, budget: Budget | None) -> None:
        """As the other tree searches, but the worst case in tokens is the node budget."""
        if budget is None:
            return
        super()._check_budget(Budget(samples=budget.samples))
        if budget.tokens is None:
            return
        c = self.config
        step = min(c.step_tokens, self.sampling.max_tokens)
        worst = c.node_budget * step + c.n * ANSWER_TOKENS  # only candidates have forced answers: n at most
        if budget.tokens < worst:
            raise StrategyInputError(f"{self.name}: a budget of {budget.tokens} tokens is below the search's worst "
                                     f"case of {worst} ({c.node_budget} nodes of up to {step} tokens, plus {c.n} "
                                     "forced answers); lower max_nodes, n or step_tokens, or raise the budget.")
