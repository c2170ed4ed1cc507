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

Storage: a :class:`SearchTree` keeps its nodes as columns (parent, depth, state, terminal, score,
kept: one list each, indexed by node id), not as an object per node, and a space may have its
states stored packed (:class:`CompactSpace`). A 64-problem search generates thousands of nodes;
kept as objects, they filled the old generation of Python's garbage collector and made about one
full collection per search. The algorithms work on node ids (:func:`grow_ids`, :func:`grow_level`)
or on :class:`TreeNode` views made on demand (:func:`grow`, ``tree.nodes``).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
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


class TreeNode(Generic[S]):
    """A view of one node of a :class:`SearchTree` (its tree and id): reads its tree's columns, and
    writes ``score`` and ``kept`` back to them.

    Not stored: a tree keeps its nodes as columns, and a view is made where a caller asks for a
    node (``tree.nodes[i]``, :func:`grow`). Two views of the same node are equal.

    Attributes:
        id: Index of the node in its tree.
        parent: Id of the parent node; None for children of the root.
        depth: Expansions from the root (children of the root have depth 1).
        state: The space's state (unpacked, for a space that packs its states).
        terminal: Whether the space says the state is finished.
        score: The scorer's score, or :data:`PENALTY`.
        kept: Whether the search kept it (expanded it further, or took it as a candidate).
    """

    __slots__ = ("tree", "id")

    def __init__(self, tree: SearchTree[S], id: int) -> None:  # noqa: A002 -- the node's id, as before
        self.tree = tree
        self.id = id

    @property
    def parent(self) -> int | None:
        return self.tree.parents[self.id]

    @property
    def depth(self) -> int:
        return self.tree.depths[self.id]

    @property
    def state(self) -> S:
        return self.tree.state(self.id)

    @property
    def terminal(self) -> bool:
        return self.tree.terminals[self.id]

    @property
    def score(self) -> float:
        return self.tree.scores[self.id]

    @score.setter
    def score(self, value: float) -> None:
        self.tree.scores[self.id] = value

    @property
    def kept(self) -> bool:
        return self.tree.kept[self.id]

    @kept.setter
    def kept(self, value: bool) -> None:
        self.tree.kept[self.id] = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TreeNode) and other.tree is self.tree and other.id == self.id

    def __hash__(self) -> int:
        return hash((id(self.tree), self.id))

    def __repr__(self) -> str:
        return (f"TreeNode(id={self.id}, parent={self.parent}, depth={self.depth}, state={self.state!r}, "
                f"terminal={self.terminal}, score={self.score}, kept={self.kept})")


class Nodes(Sequence[TreeNode[S]]):
    """The nodes of a tree, in generation order, as views (``nodes[i].id == i``)."""

    __slots__ = ("tree",)

    def __init__(self, tree: SearchTree[S]) -> None:
        self.tree = tree

    def __len__(self) -> int:
        return len(self.tree.parents)

    def __getitem__(self, index: Any) -> Any:
        ids = range(len(self.tree.parents))[index]  # IndexError and negative indices as a tuple's
        return self.tree.view(ids) if isinstance(ids, range) else TreeNode(self.tree, ids)

    def __iter__(self) -> Iterator[TreeNode[S]]:
        return iter(self.tree.view(range(len(self.tree.parents))))


class CompactSpace(SearchSpace[S], Protocol[S]):
    """A space whose states a tree may store packed (optional; :func:`plant` looks for it).

    A search keeps every node it generates; a packed state that holds only strings, numbers and
    tuples of them is untracked by Python's garbage collector after its first collection, so a
    large search does not fill the old generation with objects that make full collections (the
    step-wise space's states are named tuples, which the collector always tracks).
    """

    def pack_state(self, state: S) -> Any:
        """What the tree stores for ``state``."""
        ...

    def unpack_state(self, root: S, packed: Any) -> S:
        """The state a tree of root ``root`` stored as ``packed``."""
        ...


@dataclass(frozen=True, slots=True)
class SearchResult(Generic[S]):
    """What a search found from one root.

    Args:
        tree: The finished tree (its columns; :attr:`nodes` views them).
        leaves: Ids of the finished candidates the algorithm returns, in the order found.
        events: Counts of scoring failures (``verifier_error``, ``invalid_score``).
    """

    tree: SearchTree[S]
    leaves: tuple[int, ...]
    events: dict[str, int] = field(default_factory=dict)

    @property
    def nodes(self) -> Nodes[S]:
        """Every node generated, in generation order (``nodes[i].id == i``)."""
        return Nodes(self.tree)

    @property
    def leaf_nodes(self) -> list[TreeNode[S]]:
        """The candidate nodes, in the order found."""
        return self.tree.view(self.leaves)


class SearchTree(Generic[S]):
    """The growing tree of one root: its nodes as columns (one list per field, indexed by node id),
    candidate leaves and event counts.

    Columns rather than an object per node: a search generates thousands of nodes, and an object
    per node (and a state object per node) is what Python's garbage collector walks again and
    again; lists of numbers, strings and packed states are not walked (see :class:`CompactSpace`).

    Args:
        root: The root state.
        pack: Packs a state for storage (None: states are stored as they are).
        unpack: ``unpack(root, packed)``, the state again (with ``pack``).
    """

    def __init__(self, root: S, pack: Callable[[S], Any] | None = None,
                 unpack: Callable[[S, Any], S] | None = None) -> None:
        self.root = root
        self.parents: list[int | None] = []
        self.depths: list[int] = []
        self.states: list[Any] = []  # packed where the tree packs
        self.terminals: list[bool] = []
        self.scores: list[float] = []
        self.kept: list[bool] = []
        self.leaves: list[int] = []
        self.events: Counter[str] = Counter()
        self.pack, self.unpack = pack, unpack

    @property
    def nodes(self) -> Nodes[S]:
        """Every node so far, as views."""
        return Nodes(self)

    def view(self, ids: Iterable[int]) -> list[TreeNode[S]]:
        """Views of the nodes ``ids``, in order."""
        return [TreeNode(self, i) for i in ids]

    def state(self, i: int) -> S:
        """The state of node ``i``."""
        return self.states[i] if self.unpack is None else self.unpack(self.root, self.states[i])

    def add(self, parent: TreeNode[S] | None, state: S, terminal: bool) -> TreeNode[S]:
        """Record a child of ``parent`` (None: of the root)."""
        [i] = self.add_children(None if parent is None else parent.id, [state], [terminal])
        return TreeNode(self, i)

    def add_children(self, parent: int | None, states: Sequence[S], terminals: Iterable[bool]) -> range:
        """Record the children ``states`` of node ``parent`` (None: of the root), unscored; their ids."""
        k, first = len(states), len(self.parents)
        self.parents += [parent] * k
        self.depths += [1 if parent is None else self.depths[parent] + 1] * k
        self.states += states if self.pack is None else map(self.pack, states)
        self.terminals += terminals
        self.scores += [PENALTY] * k
        self.kept += [False] * k
        return range(first, first + k)

    def take(self, node: TreeNode[S] | int) -> None:
        """Keep a finished node (a view or an id) as a candidate."""
        i = node if isinstance(node, int) else node.id
        self.kept[i] = True
        self.leaves.append(i)

    def result(self) -> SearchResult[S]:
        """The finished search of this root."""
        return SearchResult(self, tuple(self.leaves), dict(self.events))


def plant(space: SearchSpace[S]) -> list[SearchTree[S]]:
    """A tree per root of ``space``, storing its states packed if it is a :class:`CompactSpace`."""
    pack, unpack = getattr(space, "pack_state", None), getattr(space, "unpack_state", None)
    if pack is None or unpack is None:
        pack = unpack = None
    return [SearchTree(root, pack, unpack) for root in space.initial_states()]


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
        return self.tree.root if self.node is None else self.tree.state(self.node.id)


def grow_ids(space: SearchSpace[S], scorer: StateScorer[S], batch: Sequence[Expansion[S]]) -> list[range]:
    """One search step: expand every entry of ``batch`` and score all children, one call each.

    Returns:
        The ids of the recorded, scored children of each entry (in its tree), in order.
    """
    if not batch:
        return []
    # 1. One expand call for the whole step (every live node of every root).
    children = space.expand([e.state for e in batch], [e.count for e in batch])
    if len(children) != len(batch):
        raise RuntimeError(f"{type(space).__name__}.expand returned {len(children)} child lists for "
                           f"{len(batch)} states; a space must return one list per state")
    # 2. Record the children, a sibling group at a time (columns extended, no object per child).
    is_terminal = space.is_terminal
    spans: list[range] = []
    flat: list[S] = []
    owners: list[SearchTree[S]] = []
    for e, kids in zip(batch, children, strict=True):
        tree = e.tree
        spans.append(tree.add_children(None if e.node is None else e.node.id, kids, map(is_terminal, kids)))
        flat += kids
        owners += [tree] * len(kids)
    # 3. One score call for all children.
    values = score_states(scorer, flat, owners)
    start = 0
    for e, span in zip(batch, spans, strict=True):
        e.tree.scores[span.start:span.stop] = values[start:start + len(span)]
        start += len(span)
    return spans


def grow(space: SearchSpace[S], scorer: StateScorer[S], batch: Sequence[Expansion[S]]) -> list[list[TreeNode[S]]]:
    """:func:`grow_ids`, the children as views."""
    return [e.tree.view(span) for e, span in zip(batch, grow_ids(space, scorer, batch), strict=True)]


def grow_level(space: SearchSpace[S], scorer: StateScorer[S], trees: Sequence[SearchTree[S]],
               frontier: Sequence[Expansion[S]]) -> list[list[int]]:
    """One level of a level-by-level search (beam, REBASE, ETS): :func:`grow_ids` every expansion,
    take the finished children of each tree as candidates, and return the ids of each tree's
    unfinished children (in ``trees`` order, in generation order)."""
    by_tree: dict[int, list[int]] = {id(t): [] for t in trees}
    for e, span in zip(frontier, grow_ids(space, scorer, frontier), strict=True):
        by_tree[id(e.tree)] += span
    live = []
    for tree in trees:
        kids, terminal = by_tree[id(tree)], tree.terminals
        for i in kids:
            if terminal[i]:
                tree.take(i)
        live.append([i for i in kids if not terminal[i]])
    return live


def score_states(scorer: StateScorer[S], states: Sequence[S], trees: Sequence[SearchTree[S]]) -> list[float]:
    """The scores of ``states`` from one scorer call (``trees[i]`` holds ``states[i]``): :data:`PENALTY`
    where there is no valid score, failures and invalid scores counted in their tree's events."""
    if not states:
        return []
    try:
        results = scorer.score(states)
        if len(results) != len(states):
            raise ValueError(f"returned {len(results)} scores for {len(states)} states")
    except Exception as exc:  # noqa: BLE001 -- a failed verifier call must not end the search
        logger.warning("verifier failed on %d candidates (%s: %s); they rank last", len(states),
                       type(exc).__name__, exc)
        for tree in {id(tree): tree for tree in trees}.values():
            tree.events["verifier_error"] += 1  # one failed call per root it touched
        return [PENALTY] * len(states)
    values = []
    for tree, result in zip(trees, results, strict=True):
        if result is None:
            values.append(PENALTY)
            continue
        invalid = getattr(result, "invalid", 0)
        if invalid and isinstance(invalid, int) and invalid > 0:
            tree.events["invalid_score"] += invalid  # step scores the verifier itself replaced
        value = getattr(result, "score", None)
        if value.__class__ is not float:  # the common case, a float, needs no conversion
            try:
                value = float(value)
            except (TypeError, ValueError):
                value = math.nan
        if 0.0 <= value <= 1.0:  # False for NaN and infinities too
            values.append(value)
        else:
            values.append(PENALTY)
            tree.events["invalid_score"] += 1
    return values


def keep_best(tree: SearchTree[S], live: Sequence[int], n: int, keep: int, beam_width: int) -> list[Expansion[S]]:
    """Beam pruning of one tree: the ``keep`` best of the live nodes ``live`` (ids, in generation
    order; ties keep that order), each expanded ``beam_width`` ways, within ``n`` candidates in all
    (finished leaves count); the kept nodes are marked."""
    room = n - len(tree.leaves)
    out: list[Expansion[S]] = []
    for i, node in enumerate(sorted(live, key=tree.scores.__getitem__, reverse=True)[:keep]):
        count = min(beam_width, room - i * beam_width)
        if count <= 0:
            break
        tree.kept[node] = True
        out.append(Expansion(tree, TreeNode(tree, node), count))
    return out


MAX_STEPS = 10_000
"""Safety cap on search steps: a space whose paths never end is refused, not looped over forever."""


def never_ends(max_steps: int) -> RuntimeError:
    """The error for a search that still has live states after ``max_steps`` steps."""
    return RuntimeError(f"the search still had live states after {max_steps} steps; the space must make every "
                        "path terminal within a finite depth (the step-wise space forces an answer at max_depth)")
