"""Tree search over an abstract space: the protocol the algorithms see, and what they share.

A search algorithm (beam search, DVTS, ...) sees only a :class:`SearchSpace` (root states,
``expand``, ``is_terminal``) and a :class:`StateScorer` (a verifier of states). It never sees text,
tokens or a model, so the same code runs over the step-wise LLM space
(:class:`tts.search.tree.stepwise.StepwiseSpace`) and over a toy space of digit strings
(:class:`tts.search.tree.toy.DigitSpace`) on which its behaviour can be checked exactly.

Batch-first: an algorithm searches from many roots (one per problem) in lockstep, and each of its
steps makes ONE ``expand`` call for the live states of every root and ONE ``score`` call for all
of their children (:func:`grow`). A step of a 64-problem search is one engine call, not 64.

Robust scoring: a scorer that raises, returns the wrong number of scores, or returns a score that
is not a finite number in [0, 1] does not end the search. The affected children get
:data:`PENALTY` (below every valid score, so they rank last) and the event is counted in the
root's :attr:`SearchResult.events` (``verifier_error``: failed calls; ``invalid_score``: scores that
were not valid numbers, and step scores the verifier itself replaced), the keys the sampling
strategies use.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from tts.verifiers.base import VerifierScore

logger = logging.getLogger(__name__)

S = TypeVar("S")

PENALTY = -1.0
"""Score of a child that has no valid score (the verifier failed on it, returned NaN/inf or a
value outside [0, 1], or the space marked it as not worth scoring, e.g. an empty step): below
every valid score in [0, 1], so it ranks last."""


class SearchSpace(Protocol[S]):
    """What a search algorithm may ask of the task: roots, children, and whether a state is done.

    Implementations must make every path terminal within a finite number of expansions (the
    step-wise space forces an answer at its depth cap).
    """

    def initial_states(self) -> list[S]:
        """One root per search (per problem), in order."""
        ...

    def expand(self, states: Sequence[S], counts: Sequence[int]) -> list[list[S]]:
        """Up to ``counts[i]`` children of ``states[i]`` for every i, in ONE batched call.

        Returns:
            One list of children per state, in order (a list may be shorter than asked).
        """
        ...

    def is_terminal(self, state: S) -> bool:
        """Whether ``state`` is a finished candidate (it is never expanded)."""
        ...


class StateScorer(Protocol[S]):
    """A verifier of states: one score per state, in order, all in one call."""

    def score(self, states: Sequence[S]) -> list[VerifierScore | None]:
        """Scores in [0, 1] (higher is better); None marks a state to rank last without a call."""
        ...


@dataclass(slots=True)
class TreeNode(Generic[S]):
    """One node of a search tree (mutable while the search runs: it sets score and kept).

    Args:
        id: Index of the node in its tree.
        parent: Id of the parent node; None for children of the root.
        depth: Expansions from the root (children of the root have depth 1).
        state: The space's state.
        terminal: Whether the space says the state is finished.
        score: The scorer's score, or :data:`PENALTY`.
        kept: Whether the search kept it (expanded it further, or took it as a candidate).
    """

    id: int
    parent: int | None
    depth: int
    state: S
    terminal: bool
    score: float = PENALTY
    kept: bool = False


@dataclass(frozen=True, slots=True)
class SearchResult(Generic[S]):
    """What a search found from one root.

    Args:
        nodes: Every node generated, in generation order (``nodes[i].id == i``).
        leaves: Ids of the finished candidates the algorithm returns, in the order found.
        events: Counts of scoring failures (``verifier_error``, ``invalid_score``).
        notes: Records of the algorithm's decisions (see below).
    """

    nodes: tuple[TreeNode[S], ...]
    leaves: tuple[int, ...]
    events: dict[str, int] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    """What the algorithm put on record beyond the nodes, JSON-ready (particle filtering: the
    weights of each resampling), for the solution's ``Trace.notes``."""

    @property
    def leaf_nodes(self) -> list[TreeNode[S]]:
        """The candidate nodes, in the order found."""
        return [self.nodes[i] for i in self.leaves]


class SearchTree(Generic[S]):
    """The growing tree of one root: nodes, candidate leaves and event counts."""

    def __init__(self, root: S) -> None:
        self.root = root
        self.nodes: list[TreeNode[S]] = []
        self.leaves: list[int] = []
        self.events: Counter[str] = Counter()
        self.notes: dict[str, Any] = {}

    def add(self, parent: TreeNode[S] | None, state: S, terminal: bool) -> TreeNode[S]:
        """Record a child of ``parent`` (None: of the root)."""
        node = TreeNode(len(self.nodes), None if parent is None else parent.id,
                        1 if parent is None else parent.depth + 1, state, terminal)
        self.nodes.append(node)
        return node

    def take(self, node: TreeNode[S]) -> None:
        """Keep a finished node as a candidate."""
        node.kept = True
        self.leaves.append(node.id)

    def result(self) -> SearchResult[S]:
        """The finished search of this root."""
        return SearchResult(tuple(self.nodes), tuple(self.leaves), dict(self.events), self.notes)


class Expansion(NamedTuple, Generic[S]):
    """One request of a search step: expand ``node`` (None: the root) into ``count`` children.

    Immutable, and a named tuple rather than a frozen dataclass: a search makes one per expanded
    node of every step, and a named tuple builds in a third of the time.
    """

    tree: SearchTree[S]
    node: TreeNode[S] | None
    count: int

    @property
    def state(self) -> S:
        """The state to expand."""
        return self.tree.root if self.node is None else self.node.state


def grow(space: SearchSpace[S], scorer: StateScorer[S], batch: Sequence[Expansion[S]]) -> list[list[TreeNode[S]]]:
    """One search step: expand every entry of ``batch`` and score all children, one call each.

    Returns:
        The recorded, scored children of each entry, in order.
    """
    if not batch:
        return []
    # 1. One expand call for the whole step (every live node of every root).
    children = space.expand([e.state for e in batch], [e.count for e in batch])
    if len(children) != len(batch):
        raise RuntimeError(f"{type(space).__name__}.expand returned {len(children)} child lists for "
                           f"{len(batch)} states; a space must return one list per state")
    # 2. Record the children (SearchTree.add, for a whole sibling group at once: this runs per child).
    is_terminal = space.is_terminal
    nodes: list[list[TreeNode[S]]] = []
    flat: list[TreeNode[S]] = []
    owners: list[SearchTree[S]] = []
    for e, kids in zip(batch, children, strict=True):
        tree, parent = e.tree, e.node
        pid, depth = (None, 1) if parent is None else (parent.id, parent.depth + 1)
        first = len(tree.nodes)
        made = [TreeNode(first + j, pid, depth, c, is_terminal(c)) for j, c in enumerate(kids)]
        tree.nodes.extend(made)
        nodes.append(made)
        flat.extend(made)
        owners.extend([tree] * len(made))
    # 3. One score call for all children (their states, flattened without a per-node read).
    _score(scorer, flat, owners, list(chain.from_iterable(children)))
    return nodes


def grow_level(space: SearchSpace[S], scorer: StateScorer[S], trees: Sequence[SearchTree[S]],
               frontier: Sequence[Expansion[S]]) -> list[list[TreeNode[S]]]:
    """One level of a level-by-level search (beam, REBASE, ETS): :func:`grow` every expansion,
    take the finished children of each tree as candidates, and return each tree's unfinished
    children (in ``trees`` order, in generation order)."""
    by_tree: dict[int, list[TreeNode[S]]] = {id(t): [] for t in trees}
    for e, kids in zip(frontier, grow(space, scorer, frontier), strict=True):
        by_tree[id(e.tree)].extend(kids)
    live = []
    for tree in trees:
        unfinished: list[TreeNode[S]] = []
        for node in by_tree[id(tree)]:
            if node.terminal:
                tree.take(node)
            else:
                unfinished.append(node)
        live.append(unfinished)
    return live


def level_search(space: SearchSpace[S], scorer: StateScorer[S], n: int, max_steps: int,
                 choose: Callable[[list[SearchTree[S]], list[list[TreeNode[S]]]], list[Expansion[S]]],
                 ) -> list[SearchResult[S]]:
    """A level-by-level search (beam, REBASE, ETS) from every root of ``space`` in lockstep.

    Each root is expanded ``n`` ways; then every level, :func:`grow_level` grows and scores all
    expansions of every tree at once (its finished children become candidates), and
    ``choose(trees, live_by_tree)`` returns the next level's expansions from each tree's unfinished
    children, until none is left. ``max_steps`` bounds the levels (:func:`never_ends`).
    """
    trees = [SearchTree(root) for root in space.initial_states()]
    frontier: list[Expansion[S]] = [Expansion(t, None, n) for t in trees]
    for _ in range(max_steps):
        if not frontier:
            return [t.result() for t in trees]
        frontier = choose(trees, grow_level(space, scorer, trees, frontier))
    if not frontier:  # the last level allowed finished every path: a search of exactly max_steps steps
        return [t.result() for t in trees]
    raise never_ends(max_steps)


def widened(tree: SearchTree[S], nodes: Sequence[TreeNode[S]], widths: Sequence[int]) -> list[Expansion[S]]:
    """The expansions of ``nodes`` (of ``tree``), ``widths[i]`` children for node i; a node given
    a width is marked kept, one given none is not expanded."""
    out = []
    for node, width in zip(nodes, widths, strict=True):
        if width > 0:
            node.kept = True
            out.append(Expansion(tree, node, width))
    return out


def score_nodes(scorer: StateScorer[S], entries: Sequence[tuple[SearchTree[S], TreeNode[S]]]) -> None:
    """Score nodes in one call; failures give :data:`PENALTY` and are counted in their tree's events."""
    _score(scorer, [node for _, node in entries], [tree for tree, _ in entries])


def _score(scorer: StateScorer[S], nodes: Sequence[TreeNode[S]], trees: Sequence[SearchTree[S]],
           states: Sequence[S] | None = None) -> None:
    """:func:`score_nodes` on parallel lists (``trees[i]`` holds ``nodes[i]``; ``states``, when
    given, are the nodes' states)."""
    if not nodes:
        return
    try:
        results = scorer.score([node.state for node in nodes] if states is None else states)
        if len(results) != len(nodes):
            raise ValueError(f"returned {len(results)} scores for {len(nodes)} states")
    except Exception as exc:  # noqa: BLE001 -- a failed verifier call must not end the search
        logger.warning("verifier failed on %d candidates (%s: %s); they rank last", len(nodes),
                       type(exc).__name__, exc)
        for node in nodes:
            node.score = PENALTY
        for tree in {id(tree): tree for tree in trees}.values():
            tree.events["verifier_error"] += 1  # one failed call per root it touched
        return
    for i, (node, result) in enumerate(zip(nodes, results, strict=True)):
        if result.__class__ is VerifierScore:  # the common case: its slots, read directly
            invalid, value = result.invalid, result.score
            if not invalid and value.__class__ is float and 0.0 <= value <= 1.0:  # a valid score: nothing to count
                node.score = value
                continue
        elif result is None:
            node.score = PENALTY
            continue
        else:  # any object with these attributes
            invalid, value = getattr(result, "invalid", 0), getattr(result, "score", None)
        tree = trees[i]
        if invalid and isinstance(invalid, int) and invalid > 0:
            tree.events["invalid_score"] += invalid  # step scores the verifier itself replaced
        if value.__class__ is not float:  # the common case, a float, needs no conversion
            try:
                value = float(value)
            except (TypeError, ValueError):
                value = math.nan
        if 0.0 <= value <= 1.0:  # False for NaN and infinities too
            node.score = value
        else:
            node.score = PENALTY
            tree.events["invalid_score"] += 1


_SCORE = attrgetter("score")


def ranked(nodes: Sequence[TreeNode[S]]) -> list[TreeNode[S]]:
    """Nodes by score, best first; ties keep generation order (deterministic: a reversed sort is
    stable too)."""
    return sorted(nodes, key=_SCORE, reverse=True)


def best(nodes: Sequence[TreeNode[S]]) -> TreeNode[S]:
    """``ranked(nodes)[0]`` without sorting: the best-scored node, the first of equal scores."""
    return max(nodes, key=_SCORE)


def keep_best(tree: SearchTree[S], live: Sequence[TreeNode[S]], n: int, keep: int,
              beam_width: int) -> list[Expansion[S]]:
    """Beam pruning of one tree: the ``keep`` best live nodes, each expanded ``beam_width`` ways,
    within ``n`` candidates in all (finished leaves count); the kept nodes are marked."""
    room = n - len(tree.leaves)
    out: list[Expansion[S]] = []
    for i, node in enumerate(ranked(live)[:keep]):
        count = min(beam_width, room - i * beam_width)
        if count <= 0:
            break
        node.kept = True
        out.append(Expansion(tree, node, count))
    return out


MAX_STEPS = 10_000
"""Safety cap on search steps: a space whose paths never end is refused, not looped over forever."""


def never_ends(max_steps: int) -> RuntimeError:
    """The error for a search that still has live states after ``max_steps`` steps."""
    return RuntimeError(f"the search still had live states after {max_steps} steps; the space must make every "
                        "path terminal within a finite depth (the step-wise space forces an answer at max_depth)")
