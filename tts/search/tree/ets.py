"""ETS: efficient tree search, REBASE with KV-aware pruning (Hooper et al. 2025).

Hooper, Kim, Moon, Dilmen, Maheswaran, Lee, Mahoney, Shao, Keutzer and Gholami, "ETS: Efficient
Tree Search for Inference-Time Scaling" (arXiv:2502.13575). REBASE (:mod:`tts.search.tree.rebase`)
spreads the width over many diverging nodes, and every node kept alive pins its own KV cache (its
step, and every ancestor no other kept node shares). ETS keeps REBASE's softmax allocation but
first decides, by an integer linear program per tree and depth, which unfinished nodes to
*retain*: REBASE's preference for a node, against the KV cache the retained set pins, and for the
diversity of steps it keeps. With the C candidates i (the unfinished nodes of the depth), their A
distinct ancestors a (the root excluded) and the K clusters k of their latest steps:

    maximise   sum_i O_i x_i  -  lambda_b (sum_i x_i + sum_a y_a) / (C + A + 1)  +  lambda_s (sum_k c_k) / K
    subject to x_i <= y_parent(i),  y_a <= y_parent(a)     (a retained node pins its ancestors)
               y_a <= sum of a's children's variables       (an ancestor nobody needs is freed)
               c_k <= sum_{i in cluster k} x_i               (a cluster counts once it is covered)
               1 <= sum_i x_i <= W                          (keep something, and no more than the width)
               x, y, c binary

- ``O_i``, node i's REBASE share: softmax(score / T_b) over the candidates;
- the KV term: the distinct tree nodes that must stay cached, over the size of the candidates'
  tree (candidates, ancestors, and the root: the prompt, always cached);
- the coverage term: the clusters with a retained node, over the number of clusters.

Then the remaining width W (the budget N minus the solutions already finished) is split among the
retained nodes by REBASE's rule (:func:`~tts.search.tree.rebase.balanced_widths`); finished nodes are
candidates, as in REBASE. The program is solved exactly with :func:`scipy.optimize.milp` (HiGHS):
its LP relaxation first, whose optimum is integral at almost every depth (then it is the
program's optimum), else branch and bound. A few ms per tree and depth at C = 16 to 64.

This follows the paper's formulation as its authors released it (SqueezeAILab/ETS, ``rebase.py``,
``select_softmax_costmodel``), with their settings (``hype-parameters/ets_{16,64,256}_math500.yaml``):
T_b = 0.2, lambda_b = 1 (``lambdac``), lambda_s = 1.5 (``lambdas``; 1.5 / 1.4 / 1.45 at N = 16 /
64 / 256; 1.5 here). Where this implementation differs from that code:

- ``O_i`` is the unrounded softmax share; their code normalises REBASE's rounded widths, so that
  a node REBASE gives no child weighs 0. With the share, ``kv_weight=0`` and
  ``coverage_weight=0`` retain every node and reproduce REBASE exactly.
- Nodes without a valid score (:data:`~tts.search.tree.tree_search.PENALTY`) are never retained while
  a candidate of the depth has one (REBASE would give them nothing).
- At most W nodes are retained (their program has no upper bound; a node beyond the width could
  not be continued).
- The width is split by REBASE's largest-remainder rule, so a retained node whose share rounds to
  nothing (one kept for coverage, say) is not continued; their sequential ceil rounding gives most
  retained nodes at least one child.

``rounding="ceil"`` (:attr:`ETSConfig.rounding`) undoes the first, third and fourth of these and
follows their code: O_i are their rounded widths (:func:`~tts.search.tree.rebase.ceil_widths`, equal
scores in order) normalised, the retained set is not capped, and the width is split by their
sequential ceilings. Pinned both ways in ``tests/parity/test_rebase_ets.py``, with the program
checked against an enumeration of the authors' objective.

Clusters: the paper embeds each node's latest step with a sentence-embedding model (their code:
``math-similarity/Bert-MLM_arXiv-MP-class_zbMath``) and clusters each tree's embeddings by
average-linkage agglomerative clustering at a cosine distance of 0.05. No embedding model may be
downloaded here, so the default :class:`StepClusterer` **substitutes a lexical similarity**:
TF-IDF over character 2- to 4-grams of the step (whitespace ignored), clustered the same way at
a looser threshold (:attr:`ETSConfig.cluster_threshold`, 0.3). It groups steps that differ in
formatting or a few characters, not paraphrases: "3 + 5 = 8" and "3+5=8" are one cluster,
"3 + 5 = 9" another. To cluster by meaning, give it an embedding model:
``ETS(config, generator, prompt, cluster=StepClusterer(threshold=0.05, embed=model.encode))``
with a sentence-transformers ``model`` (from a config: ``embedding_model=<name>`` and
``cluster_threshold=0.05``); any ``states -> labels`` callable works too. Given the
same embeddings, ``StepClusterer(0.05, embed=...)`` makes the authors' partition (their
``linkage(E, "average", metric="cosine")`` cut at 0.05; pinned in ``tests/parity/test_rebase_ets.py``).

Robustness: a program the solver does not solve to proven optimality (or that raises) falls back
to REBASE's choice (every node retained), counted in the tree's events as ``ilp_fallback``; a
clusterer that raises or returns labels that do not fit costs the coverage term of that depth,
counted as ``cluster_error``. Neither ends the search.

Every depth of every problem is one expand call, one score call and (with coverage) one
clusterer call.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from tts.answers import extract_answer
from tts.backends.base import Generator
from tts.config import SamplingConfig, StrategyConfigBase
from tts.search.base import ExtractFn, PromptFn
from tts.search.tree.rebase import BALANCE_TEMPERATURE, BalanceTemperature, Rounding, balanced_widths, ceil_widths
from tts.search.tree.step_clusters import CLUSTER_THRESHOLD, StepClusterer
from tts.search.tree.stepwise import StepScorer, StepState, StepwiseSpace
from tts.search.tree.tree_search import (MAX_STEPS, Expansion, SearchResult, SearchSpace, SearchTree, StateScorer,
                                         TreeNode, level_search, widened)
from tts.search.tree.tree_strategy import TreeSearchConfig, TreeSearchStrategy
from tts.verifiers.base import Verifier

logger = logging.getLogger(__name__)

KV_WEIGHT = 1.0
"""lambda_b of the authors' settings (``lambdac: 1.0`` at every width)."""
COVERAGE_WEIGHT = 1.5
"""lambda_s of the authors' settings at N = 16 (``lambdas: 1.5``; 1.4 at 64, 1.45 at 256)."""
ILP_TIME_LIMIT = 10.0
"""Seconds one program may take before the depth falls back to REBASE (a few ms is typical)."""

ClusterFn = Callable[[Sequence[Any]], Sequence[Hashable]]
"""States of one depth (all trees) -> one cluster label per state; labels are compared within a tree only."""


def rebase_shares(scores: Sequence[float], temperature: float) -> list[float]:
    """REBASE's share of the width for each node: softmax(score / T_b), summing to 1.

    Nodes without a valid score (negative, NaN) get 0 while any node has a valid one; when none
    has, the shares are equal (as :func:`~tts.search.tree.rebase.balanced_widths` splits the width).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not scores:
        return []
    valid = [math.isfinite(s) and s >= 0.0 for s in scores]
    if not any(valid):
        return [1.0 / len(scores)] * len(scores)
    top = max(s for s, ok in zip(scores, valid, strict=True) if ok)
    weights = [math.exp((s - top) / temperature) if ok else 0.0 for s, ok in zip(scores, valid, strict=True)]
    total = sum(weights)
    return [w / total for w in weights]


def select_nodes(weights: Sequence[float], paths: Sequence[Sequence[Hashable]],
                 labels: Sequence[Hashable] | None = None, kv_weight: float = KV_WEIGHT,
                 coverage_weight: float = COVERAGE_WEIGHT, limit: int | None = None) -> list[bool]:
    """Which candidates ETS retains: the exact optimum of its integer program (module docstring).

    Args:
        weights: O_i, one per candidate (REBASE's shares, :func:`rebase_shares`); finite, >= 0.
        paths: Per candidate, the ids of its ancestors from the root's child down to its parent
            (root excluded; empty for a child of the root). Candidates sharing an id share that
            node's KV cache.
        labels: Cluster label per candidate; None (or a single cluster) drops the coverage term.
        kv_weight: lambda_b, the weight of the KV cost (distinct cached nodes / tree size).
        coverage_weight: lambda_s, the weight of the covered fraction of clusters.
        limit: Most candidates to retain (the width W); None: no bound.

    Returns:
        One flag per candidate, at least one True.

    Raises:
        ValueError: Inputs of the wrong shape or range.
        RuntimeError: The solver did not prove an optimum.

    Example:
        >>> select_nodes([0.35, 0.35, 0.3], [("p",), ("p",), ("q",)], kv_weight=1.5)
        [True, True, False]
    """
    n = len(weights)
    _check_selection(weights, paths, labels, kv_weight, coverage_weight, limit)
    if n == 0:
        return []
    if n == 1:
        return [True]
    cost, rows, lower, upper = _selection_program(weights, paths, labels, kv_weight, coverage_weight)
    cap = float(min(limit, n) if limit is not None else n)
    return _solve_selection(cost, rows, lower, upper, n, cap)


def _check_selection(weights: Sequence[float], paths: Sequence[Sequence[Hashable]],
                     labels: Sequence[Hashable] | None, kv_weight: float, coverage_weight: float,
                     limit: int | None) -> None:
    """Refuse inputs of :func:`select_nodes` of the wrong shape or range (ValueError, saying which)."""
    n = len(weights)
    if len(paths) != n:
        raise ValueError(f"got {len(paths)} paths for {n} weights; give one path per candidate")
    if labels is not None and len(labels) != n:
        raise ValueError(f"got {len(labels)} cluster labels for {n} candidates; give one label per candidate")
    if any(not (math.isfinite(w) and w >= 0.0) for w in weights):
        raise ValueError(f"weights must be finite and >= 0, got {list(weights)}")
    if not (kv_weight >= 0.0 and coverage_weight >= 0.0):
        raise ValueError(f"kv_weight and coverage_weight must be >= 0, got {kv_weight} and {coverage_weight}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")


def _ancestor_parents(paths: Sequence[Sequence[Hashable]]) -> dict[Hashable, Hashable | None]:
    """Each distinct ancestor's parent (None for a child of the root), in first-seen order.

    Raises:
        ValueError: Two paths give one node different parents.
    """
    parent: dict[Hashable, Hashable | None] = {}
    for path in paths:
        for depth, node in enumerate(path):
            above = path[depth - 1] if depth else None
            if parent.setdefault(node, above) != above:
                raise ValueError(f"paths disagree on the parent of node {node!r}; each path must run from the "
                                 "root's child down to the candidate's parent")
    return parent


def _selection_program(weights: Sequence[float], paths: Sequence[Sequence[Hashable]],
                       labels: Sequence[Hashable] | None, kv_weight: float, coverage_weight: float
                       ) -> tuple[Any, list[dict[int, float]], list[float], list[float]]:
    """ETS's program for :func:`select_nodes` as milp takes it, less the row 1 <= sum x <= W: the
    cost vector (milp minimises) and the constraint rows (coefficients by variable index, with
    their lower and upper bounds). Variables: x_i per candidate, then y_a per distinct ancestor,
    then c_k per cluster (none when coverage is off or there is a single cluster)."""
    import numpy as np

    n = len(weights)
    # 1. Variables: x_i per candidate, y_a per distinct ancestor, c_k per cluster.
    parent = _ancestor_parents(paths)
    ancestors = {a: n + j for j, a in enumerate(parent)}
    clusters: dict[Hashable, int] = {}
    if labels is not None and coverage_weight > 0:
        for label in labels:
            clusters.setdefault(label, len(clusters))
        if len(clusters) < 2:
            clusters = {}  # one cluster is always covered: a constant
    size = n + len(ancestors) + len(clusters)
    cached = kv_weight / (n + len(ancestors) + 1)  # the root (prompt) counts in the tree, always cached

    # 2. Objective (milp minimises): -O_i + cost for candidates, +cost for ancestors, -lambda_s/K per cluster.
    cost = np.zeros(size)
    cost[:n] = [cached - w for w in weights]
    cost[n:n + len(ancestors)] = cached
    if clusters:
        cost[n + len(ancestors):] = -coverage_weight / len(clusters)

    # 3. Constraints, one row each: coefficients by variable index, and bounds.
    rows: list[dict[int, float]] = []
    children: dict[int, list[int]] = {v: [] for v in ancestors.values()}
    for i, path in enumerate(paths):
        if path:
            rows.append({i: 1.0, ancestors[path[-1]]: -1.0})  # x_i <= y_parent
            children[ancestors[path[-1]]].append(i)
    for a, above in parent.items():
        if above is not None:
            rows.append({ancestors[a]: 1.0, ancestors[above]: -1.0})  # y_a <= y_parent
            children[ancestors[above]].append(ancestors[a])
    for v, kids in children.items():
        rows.append({v: 1.0, **{k: -1.0 for k in kids}})  # y_a <= sum of its children
    if clusters:
        members: dict[int, list[int]] = {}
        for i, label in enumerate(labels or ()):
            members.setdefault(n + len(ancestors) + clusters[label], []).append(i)
        for v, idx in members.items():
            rows.append({v: 1.0, **{i: -1.0 for i in idx}})  # c_k <= sum of its members
    return cost, rows, [-math.inf] * len(rows), [0.0] * len(rows)


def _milp(cost: Any, rows: list[dict[int, float]], lo: list[float], hi: list[float], integral: bool) -> Any:
    """Solve min cost.x over x in [0, 1] subject to lo <= rows.x <= hi, integral or relaxed; x.

    Raises:
        RuntimeError: The solver did not prove an optimum within :data:`ILP_TIME_LIMIT`.
    """
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_array

    size = len(cost)
    data = [c for r in rows for c in r.values()]
    cols = [k for r in rows for k in r]
    indptr = np.cumsum([0] + [len(r) for r in rows])
    matrix = csr_array((np.asarray(data, dtype=float), np.asarray(cols, dtype=np.int64), indptr),
                       shape=(len(rows), size))
    result = milp(cost, integrality=np.full(size, 1 if integral else 0), bounds=Bounds(0.0, 1.0),
                  constraints=LinearConstraint(matrix, lo, hi),
                  options={"mip_rel_gap": 0.0, "time_limit": ILP_TIME_LIMIT} if integral else
                  {"time_limit": ILP_TIME_LIMIT})
    if result.status != 0 or result.x is None:
        raise RuntimeError(f"milp did not solve the ETS program: {result.message}")
    return result.x


def _solve_selection(cost: Any, rows: list[dict[int, float]], lower: list[float], upper: list[float],
                     n: int, cap: float) -> list[bool]:
    """The retained flags of the first ``n`` variables at the program's exact optimum, with
    1 <= retained <= ``cap``.

    These programs' LP relaxations are mostly integral already, and HiGHS's branch and bound costs
    a fixed ~10 ms at the root even then; so first the LP relaxation without the dense row
    1 <= sum x <= W: an integral optimum that satisfies the row is optimal for the whole program.
    Otherwise the whole program, by branch and bound (gap 0).
    """
    import numpy as np

    count = dict.fromkeys(range(n), 1.0)
    relaxed = _milp(cost, rows, lower, upper, integral=False)
    if np.all(np.minimum(relaxed, 1.0 - relaxed) < 1e-9) and 1 <= int(np.sum(relaxed[:n] > 0.5)) <= cap:
        return [bool(v > 0.5) for v in relaxed[:n]]
    keep = [bool(v > 0.5) for v in _milp(cost, [*rows, count], [*lower, 1.0], [*upper, cap], integral=True)[:n]]
    if not 1 <= sum(keep) <= cap:
        raise RuntimeError(f"milp returned {sum(keep)} retained nodes, outside 1..{cap:g}")
    return keep


def _path(tree: SearchTree, node: TreeNode) -> tuple[int, ...]:
    """Ids of ``node``'s ancestors, from the root's child down to its parent."""
    path = []
    up = node.parent
    while up is not None:
        path.append(up)
        up = tree.nodes[up].parent
    return tuple(reversed(path))


def _valid(score: float) -> bool:
    return math.isfinite(score) and score >= 0.0


def _cluster_depth(cluster: ClusterFn, trees: Sequence[SearchTree],
                   pools: dict[int, list[TreeNode]]) -> dict[int, list[Hashable]]:
    """One clusterer call for the candidates of every tree; per tree, its candidates' labels (none on failure)."""
    entries = [(tree, node) for tree in trees for node in pools.get(id(tree), [])]
    try:
        labels = list(cluster([node.state for _, node in entries]))
        if len(labels) != len(entries):
            raise ValueError(f"returned {len(labels)} labels for {len(entries)} states")
        for label in labels:
            hash(label)
    except Exception as exc:  # noqa: BLE001 -- a failed clusterer costs the coverage term, not the search
        logger.warning("clusterer failed on %d states (%s: %s); this depth runs without coverage",
                       len(entries), type(exc).__name__, exc)
        for tree in {id(tree): tree for tree, _ in entries}.values():
            tree.events["cluster_error"] += 1
        return {}
    out: dict[int, list[Hashable]] = {}
    for (tree, _), label in zip(entries, labels, strict=True):
        out.setdefault(id(tree), []).append(label)
    return out


def ets_search(space: SearchSpace, scorer: StateScorer, n: int, temperature: float = BALANCE_TEMPERATURE,
               kv_weight: float = KV_WEIGHT, coverage_weight: float = COVERAGE_WEIGHT,
               cluster: ClusterFn | None = None, max_steps: int = MAX_STEPS,
               rounding: Literal["largest_remainder", "ceil"] = "largest_remainder") -> list[SearchResult]:
    """ETS from every root of ``space`` in lockstep.

    Args:
        space, scorer, n, max_steps: As :func:`~tts.search.tree.rebase.rebase_search` (n is the
            budget N, shared among nodes depth by depth).
        temperature: Balance temperature T_b of REBASE's softmax (the shares O_i and the widths).
        kv_weight: lambda_b, the weight of the KV-cache cost of the retained nodes.
        coverage_weight: lambda_s, the weight of the fraction of step clusters kept.
        cluster: States -> cluster labels, called once per depth with the candidates of every
            tree (labels are compared within a tree); None drops the coverage term.
        rounding: ``largest_remainder``: O_i are the unrounded shares, at most the width is
            retained, and the width is split by largest remainder; ``ceil``: the authors' code
            (O_i their rounded widths, normalised; no cap; their sequential ceilings).

    Returns:
        One :class:`SearchResult` per root; its leaves are every finished child, in the order found.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if rounding not in ("largest_remainder", "ceil"):
        raise ValueError(f"rounding must be 'largest_remainder' or 'ceil', got {rounding!r}")
    reference = rounding == "ceil"
    if not (kv_weight >= 0 and coverage_weight >= 0):
        raise ValueError(f"kv_weight and coverage_weight must be >= 0, got {kv_weight} and {coverage_weight}")

    def choose(trees: list[SearchTree], live_by_tree: list[list[TreeNode]]) -> list[Expansion]:
        frontier: list[Expansion] = []
        # 1. Finished children are candidates; the rest compete for the width. Nodes without a
        #    valid score would get no width from REBASE while a sibling has one: never retained.
        pools: dict[int, list[TreeNode]] = {}
        for tree, live in zip(trees, live_by_tree, strict=True):
            if live and len(tree.leaves) < n:
                pools[id(tree)] = [node for node in live if _valid(node.score)] or live
        # 2. One clusterer call for the depth, when coverage can matter somewhere.
        labels: dict[int, list[Hashable]] = {}
        if cluster is not None and coverage_weight > 0 and any(len(p) > 1 for p in pools.values()):
            labels = _cluster_depth(cluster, trees, pools)
        # 3. Per tree: the program chooses the retained nodes; REBASE's rule splits the width among them.
        for tree in trees:
            pool = pools.get(id(tree))
            if not pool:
                continue
            room = n - len(tree.leaves)
            scores = [node.score for node in pool]
            if reference:
                rounded = ceil_widths(scores, room, temperature, later_first=False)
                shares = [w / sum(rounded) for w in rounded]
            else:
                shares = rebase_shares(scores, temperature)
            try:
                keep = select_nodes(shares, [_path(tree, node) for node in pool],
                                    labels.get(id(tree)), kv_weight, coverage_weight,
                                    limit=None if reference else room)
            except Exception as exc:  # noqa: BLE001 -- a failed program falls back to REBASE, never ends the search
                logger.warning("ETS program failed on %d nodes (%s: %s); REBASE's choice is kept",
                               len(pool), type(exc).__name__, exc)
                tree.events["ilp_fallback"] += 1
                keep = [True] * len(pool)
            chosen = [node for node, k in zip(pool, keep, strict=True) if k]
            widths = (ceil_widths if reference else balanced_widths)([node.score for node in chosen], room, temperature)
            frontier += widened(tree, chosen, widths)
        return frontier

    return level_search(space, scorer, n, max_steps, choose)


def kv_nodes(result: SearchResult) -> int:
    """The KV footprint of a search in nodes, the quantity ETS lowers.

    At every depth, the distinct nodes whose KV cache must be held to continue the search: the
    nodes continued from that depth and all their ancestors (the root, shared by all, not
    counted); summed over depths. Comparable across algorithms on the same space.
    """
    continued = {node.parent for node in result.nodes if node.parent is not None}
    held: dict[int, set[int]] = {}
    for node in result.nodes:
        if node.id not in continued:
            continue
        depth = held.setdefault(node.depth, set())
        up: int | None = node.id
        while up is not None and up not in depth:
            depth.add(up)
            up = result.nodes[up].parent
    return sum(len(ids) for ids in held.values())


def sentence_embedder(name: str) -> Callable[[list[str]], Any]:
    """The ``encode`` of a sentence-transformers model (loaded here, at the edge: a heavy import)."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ImportError(f"ETS's embedding_model={name!r} needs the sentence-transformers package: "
                          "pip install sentence-transformers, or leave embedding_model unset for the "
                          "lexical clusters") from exc
    return SentenceTransformer(name).encode


class ETSConfig(TreeSearchConfig):
    """ETS: REBASE that first prunes, per depth, to the nodes worth their KV cache and their diversity."""

    kind: Literal["ets"] = "ets"
    balance_temperature: BalanceTemperature
    kv_weight: float = Field(KV_WEIGHT, ge=0.0, le=1000.0)
    """lambda_b, the weight of the KV cost (distinct nodes the retained set keeps cached, as a
    fraction of the tree): higher prunes harder towards nodes that share ancestors; 0 with
    ``coverage_weight=0`` is REBASE."""
    coverage_weight: float = Field(COVERAGE_WEIGHT, ge=0.0, le=1000.0)
    """lambda_s, the weight of the fraction of step clusters with a retained node: higher keeps
    one node of more clusters; 0 drops the clustering."""
    cluster_threshold: float = Field(CLUSTER_THRESHOLD, ge=0.0, le=1.0)
    """Cosine distance (of TF-IDF character n-gram vectors of the latest step) below which steps
    count as one cluster: higher merges more. The lexical stand-in for the paper's embedding model;
    with ``embedding_model``, the distance of its embeddings (the paper cuts at 0.05)."""
    embedding_model: str | None = Field(None, min_length=1)
    """A sentence-transformers model (hub name or local path) whose embeddings of the latest step
    cluster the nodes, as in the paper (the authors use
    ``math-similarity/Bert-MLM_arXiv-MP-class_zbMath``; set ``cluster_threshold=0.05`` for their
    cut). Needs the ``sentence-transformers`` package. None: the lexical TF-IDF stand-in."""
    rounding: Rounding


class ETS(TreeSearchStrategy):
    """Efficient tree search (Hooper et al. 2025); see :func:`ets_search`.

    Args:
        cluster: States -> cluster labels, instead of the lexical :class:`StepClusterer` built
            from ``config.cluster_threshold`` (e.g. ``StepClusterer(0.05, embed=model.encode)``).
        (the rest as :class:`~tts.search.tree.tree_strategy.TreeSearchStrategy`)
    """

    name = "ets"
    config_class: ClassVar[type[StrategyConfigBase]] = ETSConfig

    def __init__(self, config: Any, generator: Generator, prompt: PromptFn, sampling: SamplingConfig | None = None,
                 extract: ExtractFn = extract_answer, seed: int = 0, verifier: Verifier | None = None,
                 cluster: ClusterFn | None = None) -> None:
        super().__init__(config, generator, prompt, sampling, extract, seed, verifier)
        self._cluster = cluster

    def clusterer(self) -> ClusterFn:
        """The clusterer of the coverage term: the one given, else ``embedding_model``'s embeddings,
        else the lexical default."""
        if self._cluster is not None:
            return self._cluster
        c = self.config
        if c.embedding_model is not None:
            return StepClusterer(c.cluster_threshold, embed=sentence_embedder(c.embedding_model))
        return StepClusterer(c.cluster_threshold)

    def search(self, space: StepwiseSpace, scorer: StepScorer) -> list[SearchResult[StepState]]:
        c = self.config
        return ets_search(space, scorer, c.n, c.balance_temperature, c.kv_weight, c.coverage_weight,
                          self.clusterer(), rounding=c.rounding)
