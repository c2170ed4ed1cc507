"""Parity: REBASE and ETS against the ETS authors' code (their REBASE baseline and node selection).

Reference: SqueezeAILab/ETS, ``rebase.py`` at commit ac937a72319fae68b2f4e9c439d3a07c85377f1f
(Hooper et al. 2025, "ETS: Efficient Tree Search for Inference-Time Scaling", arXiv:2502.13575),
whose ``select_softmax`` is the REBASE baseline (Wu et al. 2024, arXiv:2408.00724, §4:
W_j = Round(W * softmax(R_j / T_b))) and whose ``select_softmax_costmodel`` is ETS's node
selection program. Its loop (``Tree.select_and_expand``): every finished node of a depth lowers
the remaining width by one; the unfinished ones share the remaining width.

The rules below are transcribed in our own words and run on hand-made inputs (fixed score lists,
the toy digit space of ``tts.search.tree.toy`` with a fixed score table); tts must take the same
decisions: the same widths, the same retained nodes, the same candidates.

Documented departures pinned both ways: tts rounds REBASE's widths by largest remainder (the
reference: a ceiling per node in score order); tts's ETS weighs unrounded shares, caps the
retained set at the width, and clusters steps lexically by default. ``rounding="ceil"`` gives
the reference's rounding in both, and ``StepClusterer(0.05, embed=...)`` its clustering.
"""

from __future__ import annotations

import hashlib
import itertools
import math

import numpy as np
import pytest

from tts.search.tree.ets import ETS, ETSConfig, ets_search, rebase_shares, select_nodes
from tts.search.tree.rebase import RebaseConfig, balanced_widths, ceil_widths, rebase_search
from tts.search.tree.step_clusters import StepClusterer
from tts.search.tree.stepwise import StepState
from tts.search.tree.toy import DigitSpace
from tts.types import Problem
from tts.verifiers.function import FunctionVerifier

PINNED = {"strategy:rebase", "strategy:ets"}

# --- hand-made toy inputs -------------------------------------------------------------------------


def table_score(digits: str) -> float:
    """A fixed score per digit string (distinct values, so no rule ever breaks a tie)."""
    return int(hashlib.sha256(f"parity|{digits}".encode()).hexdigest()[:8], 16) / 2**32


def table_scorer() -> FunctionVerifier:
    """A verifier of toy states that scores each its :func:`table_score`."""
    return FunctionVerifier.of_items(lambda state: table_score(state.digits))


class EarlyEnd(DigitSpace):
    """The toy space, where a string whose last digit is 0 also finishes (some paths end early)."""

    def is_terminal(self, state):
        return super().is_terminal(state) or state.digits.endswith("0")


# --- the reference rules, transcribed ---------------------------------------------------------------


def exact_ceil(quota: float) -> int:
    """The ceiling of a quota computed exactly: float noise (2.0000000000000004 for 2) is not a
    fraction. The reference computes in float32 and can round such a quota up one more
    (``test_a_whole_quota_is_not_rounded_up_by_float_noise``)."""
    return math.ceil(quota - 1e-9)


def ref_softmax_widths(scores, width, temperature):
    """``select_softmax``: nodes by score, best first (an ascending sort reversed: of equal scores
    the later node comes first); each takes ceil(width_left * e_j / sum of the e's not yet
    served), e_j = exp(score_j / T_b), and the width left and the sum shrink by what it took."""
    order = sorted(range(len(scores)), key=lambda j: scores[j])[::-1]
    exps = {j: math.exp(scores[j] / temperature) for j in order}
    left, rest = width, sum(exps.values())
    out = [0] * len(scores)
    for j in order:
        num = exact_ceil(left * exps[j] / rest)
        out[j] = num
        left -= num
        rest -= exps[j]
    return out


def ref_outcome_shares(scores, width, temperature):
    """``select_softmax_costmodel``'s O_i: the same ceilings, but in a descending sort (equal scores
    keep their order), normalised to sum 1."""
    order = sorted(range(len(scores)), key=lambda j: scores[j], reverse=True)
    exps = {j: math.exp(scores[j] / temperature) for j in order}
    left, rest = width, sum(exps.values())
    nums = [0] * len(scores)
    for j in order:
        nums[j] = exact_ceil(left * exps[j] / rest) if rest > 0 else 0
        left -= nums[j]
        rest -= exps[j]
    return [k / sum(nums) for k in nums]


def ref_program(shares, paths, labels, kv_weight, coverage_weight):
    """``select_softmax_costmodel``'s program, solved by enumeration: maximise
    sum O_i x_i + lambda_c * (sum over branches y_j + sum x_i) / (M + N) + lambda_s / K * sum covered
    with lambda_c = -lambda_b (1e-4 when lambda_b is 0), y_j = 1 iff a kept candidate lies below
    branch j (every ancestor, the root included: M of them), cluster k covered iff a kept candidate
    is in it, the coverage term only when lambda_s > 0, N > 1 and the steps are not all alike;
    at least one candidate kept.

    Returns every optimal choice: the reference leaves ties to its solver (CBC), so any optimum
    is the reference's decision."""
    n = len(shares)
    branches = {a for p in paths for a in p} | {"root"}
    lam_c = 1e-4 if kv_weight == 0 else -kv_weight
    cost = 1 / (len(branches) + n)
    use_cov = coverage_weight > 0 and n > 1 and labels is not None and len(set(labels)) > 1
    values = {}
    for x in itertools.product((0, 1), repeat=n):
        if not any(x):
            continue
        kept = [i for i in range(n) if x[i]]
        held = {"root"} | {a for i in kept for a in paths[i]}
        value = sum(shares[i] for i in kept) + lam_c * cost * (len(held) + len(kept))
        if use_cov:
            k = len(set(labels))
            value += coverage_weight / k * len({labels[i] for i in kept})
        values[x] = value
    best = max(values.values())
    return [[bool(v) for v in x] for x, value in values.items() if value > best - 1e-9]


def ref_ets_widths(scores, paths, labels, width, temperature, kv_weight, coverage_weight, tie_break):
    """One depth of ETS in the authors' code: the program on the rounded shares, then REBASE's
    ceilings over the retained nodes (the others weigh exp(-inf) = 0). ``tie_break(shares,
    optima)`` picks among equal optima (the reference's solver picks one arbitrarily)."""
    shares = ref_outcome_shares(scores, width, temperature)
    optima = ref_program(shares, paths, labels, kv_weight, coverage_weight)
    keep = optima[0] if len(optima) == 1 else tie_break(shares, optima)
    kept = [j for j in range(len(scores)) if keep[j]]
    sub = ref_softmax_widths([scores[j] for j in kept], width, temperature)
    out = [0] * len(scores)
    for j, w in zip(kept, sub, strict=True):
        out[j] = w
    return keep, out


def ref_search(space, n, select):
    """``reward_guided_search`` / ``Tree.select_and_expand`` on one root: expand the root n ways;
    at every depth the finished nodes lower the remaining width, the unfinished ones share it by
    ``select(nodes, width) -> widths``; stop when no width or no unfinished node is left.

    Returns ({digits: children} of every continued node, digits of every finished node)."""
    root = space.initial_states()[0]
    level = space.expand([root], [n])[0]
    remaining, widths, finished = n, {}, []
    while True:
        candidates = []
        for state in level:
            if space.is_terminal(state):
                remaining -= 1
                finished.append(state.digits)
            else:
                candidates.append(state)
        if remaining <= 0 or not candidates:
            return widths, finished
        chosen = select(candidates, remaining)
        level = []
        for state, w in zip(candidates, chosen, strict=True):
            if w >= 1:
                widths[state.digits] = w
                level += space.expand([state], [w])[0]


def tts_decisions(result):
    """({digits: children} of every continued node, digits of every finished candidate) of a tts search."""
    children: dict[int, int] = {}
    for node in result.nodes:
        if node.parent is not None:
            children[node.parent] = children.get(node.parent, 0) + 1
    return ({result.nodes[i].state.digits: k for i, k in children.items()},
            [node.state.digits for node in result.leaf_nodes])


# --- REBASE -------------------------------------------------------------------------------------------


def test_rebase_ceil_rounding_gives_the_reference_widths():
    """SqueezeAILab/ETS ``rebase.py`` @ ac937a72319fae68b2f4e9c439d3a07c85377f1f:
    ``select_softmax``: sequential ceilings in score order (module docstring). tts's
    ``ceil_widths`` (``rounding="ceil"``) hands out the same widths on hand-made score lists."""
    cases = [([0.9, 0.8, 0.5], 4), ([0.9, 0.5, 0.1], 16), ([0.3, 0.7, 0.71, 0.2, 0.65], 11),
             ([0.5, 0.5, 0.5], 7), ([0.1, 0.95], 3), ([0.42], 5), ([0.8, 0.6, 0.4, 0.2], 2)]
    for scores, width in cases:
        for temperature in (0.2, 0.05, 1.0):
            assert ceil_widths(scores, width, temperature) == ref_softmax_widths(scores, width, temperature), (
                scores, width, temperature)
    # Equal scores: the reference serves the LATER node first (an ascending sort, reversed).
    assert ceil_widths([0.5, 0.5, 0.5], 7, 0.2) == ref_softmax_widths([0.5, 0.5, 0.5], 7, 0.2) == [2, 2, 3]


def test_a_whole_quota_is_not_rounded_up_by_float_noise():
    """A documented detail of ``ceil_widths``: the reference takes ``ceil`` of a float quota, and
    for three equal scores and W = 7 the second quota, exactly 4 * 1/2 = 2, comes out as
    2.0000000000000004 in float64, so the plain ceiling gives 3 and the widths sum to 8 > W.
    tts takes the ceiling of the exact quota (within 1e-9), spending W exactly."""
    e = math.exp(0.5 / 0.2)
    rest = e + e + e
    assert math.ceil(7 * e / rest) == 3
    rest -= e
    assert 4 * e / rest == 2.0000000000000004 and math.ceil(4 * e / rest) == 3  # plain ceil: 3 + 3 + 2 = 8
    assert ceil_widths([0.5, 0.5, 0.5], 7, 0.2) == [2, 2, 3]


def test_rebase_default_rounding_is_the_documented_largest_remainder_departure():
    """Against SqueezeAILab/ETS ``rebase.py`` @ ac937a72319fae68b2f4e9c439d3a07c85377f1f.
    The departure (``rebase.py`` module docstring): largest remainder, ties to the earlier node.
    On [0.9, 0.8, 0.5] with W = 4 and T_b = 0.2 the quotas are 2.30 / 1.39 / 0.31: the reference's
    ceilings give 3 / 1 / 0 (the best node rounds up first), largest remainder 2 / 2 / 0."""
    assert ref_softmax_widths([0.9, 0.8, 0.5], 4, 0.2) == [3, 1, 0]
    assert balanced_widths([0.9, 0.8, 0.5], 4, 0.2) == [2, 2, 0]
    assert RebaseConfig().rounding == "largest_remainder"
    # Both spend the width exactly.
    assert sum(balanced_widths([0.3, 0.7, 0.71, 0.2, 0.65], 11, 0.2)) == 11 == sum(
        ref_softmax_widths([0.3, 0.7, 0.71, 0.2, 0.65], 11, 0.2))


@pytest.mark.parametrize("space_class", [DigitSpace, EarlyEnd])
def test_rebase_search_with_ceil_rounding_takes_the_reference_decisions_on_the_toy_space(space_class):
    """SqueezeAILab/ETS ``rebase.py`` @ ac937a72319fae68b2f4e9c439d3a07c85377f1f:
    ``Tree.select_and_expand`` with ``select_softmax`` (T_b = 0.2, its settings): the
    same nodes continued with the same widths at every depth, and the same finished candidates,
    on the toy space with a fixed score table (and on one where paths end early, so that the
    finished nodes lower the width)."""
    for target in ("3102", "2213", "0031"):
        mine = rebase_search(space_class([target], seed=3), table_scorer(), n=8, temperature=0.2, rounding="ceil")[0]
        ref = ref_search(space_class([target], seed=3), 8,
                         lambda nodes, w: ref_softmax_widths([table_score(s.digits) for s in nodes], w, 0.2))
        widths, finished = tts_decisions(mine)
        assert widths == ref[0]
        assert sorted(finished) == sorted(ref[1])


# --- ETS ---------------------------------------------------------------------------------------------------


PROGRAMS = [
    # (scores, ancestor paths, cluster labels, width, lambda_b, lambda_s)
    ([0.9, 0.7, 0.6, 0.3], [("a",), ("a",), ("b",), ("c",)], [0, 0, 1, 2], 8, 1.0, 1.5),
    ([0.9, 0.7, 0.6, 0.3], [("a",), ("a",), ("b",), ("c",)], [0, 0, 1, 2], 8, 1.0, 0.0),
    ([0.8, 0.75, 0.5, 0.45, 0.2], [("a", "d"), ("a", "d"), ("a", "e"), ("b", "f"), ("b", "f")],
     [0, 1, 1, 2, 0], 6, 1.0, 1.5),
    ([0.8, 0.75, 0.5, 0.45, 0.2], [("a", "d"), ("a", "d"), ("a", "e"), ("b", "f"), ("b", "f")],
     [0, 1, 1, 2, 0], 6, 3.0, 1.4),
    ([0.55, 0.6, 0.35], [(), (), ()], [0, 1, 1], 5, 1.0, 1.45),
]


@pytest.mark.parametrize("case", PROGRAMS)
def test_ets_program_with_the_reference_shares_retains_the_reference_nodes(case):
    """SqueezeAILab/ETS ``rebase.py`` @ ac937a72319fae68b2f4e9c439d3a07c85377f1f:
    ``select_softmax_costmodel``: the program (transcribed and solved by enumeration in
    ``ref_program``) on the authors' O_i (rounded widths, normalised). tts's ``select_nodes`` given
    the same O_i and no cap retains the same nodes; with ``rounding="ceil"`` ETS computes those O_i."""
    scores, paths, labels, width, kv, cov = case
    shares = ref_outcome_shares(scores, width, 0.2)
    assert ceil_widths(scores, width, 0.2, later_first=False) == [
        round(s * width) for s in shares]  # tts's rounded shares are the reference's O_i
    assert select_nodes(shares, paths, labels, kv, cov, limit=None) in ref_program(shares, paths, labels, kv, cov)


def test_ets_default_weighs_unrounded_shares_the_documented_departure():
    """Against SqueezeAILab/ETS ``rebase.py`` @ ac937a72319fae68b2f4e9c439d3a07c85377f1f.
    The departure (``ets.py`` docstring): O_i is the unrounded softmax share, so a node that
    REBASE's rounding gives no child still weighs its share, and at most the width is retained.
    On [0.9, 0.8, 0.5] with W = 4 the reference weighs 0.75 / 0.25 / 0 and, at lambda_b = 1 with
    the three nodes on separate branches (each retained node pins itself and its branch: 2/7 of
    cache), retains only the first; tts's default weighs 0.57 / 0.35 / 0.08 and keeps two. At
    lambda_b = 0.1 the reference keeps two, tts all three."""
    scores, width, paths = [0.9, 0.8, 0.5], 4, [("a",), ("b",), ("c",)]
    assert ref_outcome_shares(scores, width, 0.2) == [0.75, 0.25, 0.0]
    assert rebase_shares(scores, 0.2) == pytest.approx([0.5741, 0.3482, 0.0777], abs=1e-4)
    assert ref_program(ref_outcome_shares(scores, width, 0.2), paths, None, 1.0, 0.0) == [[True, False, False]]
    assert select_nodes(rebase_shares(scores, 0.2), paths, None, 1.0, 0.0, limit=width) == [True, True, False]
    assert ref_program(ref_outcome_shares(scores, width, 0.2), paths, None, 0.1, 0.0) == [[True, True, False]]
    assert select_nodes(rebase_shares(scores, 0.2), paths, None, 0.1, 0.0, limit=width) == [True, True, True]
    # rounding="ceil" weighs the reference's shares, and so retains what it retains.
    reference_shares = [w / width for w in ceil_widths(scores, width, 0.2, later_first=False)]
    assert select_nodes(reference_shares, paths, None, 1.0, 0.0, limit=None) == [True, False, False]
    assert ETSConfig().rounding == "largest_remainder"


@pytest.mark.parametrize("space_class", [DigitSpace, EarlyEnd])
def test_ets_search_with_ceil_rounding_takes_the_reference_decisions_on_the_toy_space(space_class):
    """SqueezeAILab/ETS ``rebase.py`` @ ac937a72319fae68b2f4e9c439d3a07c85377f1f:
    ``Tree.select_and_expand`` with ``select_softmax_costmodel`` at the authors' settings
    (``hype-parameters/ets_16_math500.yaml``: T_b = 0.2, lambdac = 1, lambdas = 1.5) on the toy
    space, with the same cluster labels (a step's last digit, odd or even) fed to both: the same
    nodes continued with the same widths, the same finished candidates."""

    def labels_of(states):
        return [int(s.digits[-1]) % 2 for s in states]

    def ref_select(nodes, width):
        scores = [table_score(s.digits) for s in nodes]
        paths = [tuple(s.digits[:k] for k in range(1, len(s.digits))) for s in nodes]
        labels = labels_of(nodes)

        def as_tts(shares, optima):  # among the reference's equal optima, the one tts's solver takes
            mine = select_nodes(shares, paths, labels, 1.0, 1.5, limit=None)
            assert mine in optima
            return mine

        return ref_ets_widths(scores, paths, labels, width, 0.2, 1.0, 1.5, as_tts)[1]

    for target in ("3102", "2213", "0031"):
        mine = ets_search(space_class([target], seed=5), table_scorer(), n=8, temperature=0.2, kv_weight=1.0,
                          coverage_weight=1.5, cluster=labels_of, rounding="ceil")[0]
        ref = ref_search(space_class([target], seed=5), 8, ref_select)
        widths, finished = tts_decisions(mine)
        assert widths == ref[0]
        assert sorted(finished) == sorted(ref[1])


def test_ets_strategy_passes_its_rounding_setting(monkeypatch):
    seen = {}

    def spy(space, scorer, n, temperature, kv_weight, coverage_weight, cluster, rounding="largest_remainder"):
        seen.update(rounding=rounding)
        return []

    monkeypatch.setattr("tts.search.tree.ets.ets_search", spy)
    strategy = object.__new__(ETS)
    strategy.config = ETSConfig(n=4, rounding="ceil")
    strategy._cluster = lambda states: [0] * len(states)
    strategy.search(None, None)
    assert seen == {"rounding": "ceil"}


def _state(step: str) -> StepState:
    return StepState(0, Problem("q", "?", "1"), step=step)


def test_ets_clusters_with_an_embedding_function_as_the_reference_does():
    """SqueezeAILab/ETS ``rebase.py`` @ ac937a72319fae68b2f4e9c439d3a07c85377f1f:
    ``select_softmax_costmodel``: embed each node's latest step, then
    ``fcluster(linkage(E, method="average", metric="cosine"), 0.05, criterion="distance")``. Given
    the same embeddings, ``StepClusterer(0.05, embed=...)`` makes the same partition."""
    from scipy.cluster.hierarchy import fcluster, linkage

    table = {  # hand-made 3-d "embeddings": two near-parallel pairs, one loner, one near-miss
        "a": [1.0, 0.0, 0.0], "a'": [0.99, 0.05, 0.0], "b": [0.0, 1.0, 0.2], "b'": [0.0, 0.98, 0.25],
        "c": [0.3, 0.3, 1.0], "d": [0.75, 0.6, 0.0],
    }
    steps = list(table)

    def embed(texts):
        return np.array([table[t] for t in texts])

    ref = fcluster(linkage(embed(steps), method="average", metric="cosine"), 0.05, criterion="distance")
    mine = StepClusterer(0.05, embed=embed)([_state(s) for s in steps])
    partition = lambda labels: sorted(sorted(i for i in range(len(steps)) if labels[i] == k)  # noqa: E731
                                      for k in set(labels))
    assert partition(list(ref)) == partition(mine) == [[0, 1], [2, 3], [4], [5]]


def test_ets_default_clusters_are_lexical_the_documented_departure():
    """Against SqueezeAILab/ETS ``rebase.py`` @ ac937a72319fae68b2f4e9c439d3a07c85377f1f.
    The departure (``ets.py`` and ``step_clusters.py`` docstrings): without an embedding model the
    default groups steps worded alike, not paraphrases. A sentence embedding would put the two
    phrasings of one step in one cluster; the lexical default keeps them apart, and merges
    reformatted copies."""
    steps = ["3 + 5 = 8", "3+5=8.", "Adding three and five gives eight.", "Factor the quadratic first."]
    assert StepClusterer()([_state(s) for s in steps]) == [0, 0, 1, 2]
    assert ETSConfig().cluster_threshold == 0.3


def test_ets_embedding_model_setting_clusters_by_that_models_embeddings(monkeypatch):
    """The setting for the reference's clustering from a config (the CLI cannot pass a function):
    ``embedding_model`` builds ``StepClusterer(cluster_threshold, embed=<the model's encode>)``."""
    loaded = []

    def fake_loader(name):
        loaded.append(name)
        return lambda texts: np.array([[1.0, 0.0] if "5" in t else [0.0, 1.0] for t in texts])

    monkeypatch.setattr("tts.search.tree.ets.sentence_embedder", fake_loader)
    strategy = object.__new__(ETS)
    strategy.config = ETSConfig(embedding_model="math-similarity/Bert-MLM_arXiv-MP-class_zbMath",
                                cluster_threshold=0.05)
    strategy._cluster = None
    clusterer = strategy.clusterer()
    assert loaded == ["math-similarity/Bert-MLM_arXiv-MP-class_zbMath"]
    assert isinstance(clusterer, StepClusterer) and clusterer.threshold == 0.05
    assert clusterer([_state(s) for s in ["3 + 5 = 8", "five", "8 - 5 = 3"]]) == [0, 1, 0]
    strategy.config = ETSConfig()
    assert strategy.clusterer().embed.__name__ == "tfidf_vectors"
