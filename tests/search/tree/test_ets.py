"""ETS: its integer program against brute force, its pruning on the toy digit space (known optimum,
no LLM) compared with REBASE, its robustness, its clusterer and config, and a step-wise run."""

from __future__ import annotations

import itertools
import math
import random
import re
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.tree.ets import (
    ETS,
    ETSConfig,
    ets_search,
    kv_nodes,
    rebase_shares,
    select_nodes,
)
from tts.search.tree.rebase import RebaseConfig, rebase_search
from tts.search.tree.step_clusters import StepClusterer
from tts.search.tree.stepwise import StepState
from tts.search.tree.toy import DigitSpace, PerfectScorer, RandomScorer
from tts.types import Problem
from tts.verifiers.function import FunctionVerifier

LENGTH, BASE = 5, 4  # the toy space of the `targets` fixture (tests/search/conftest.py)


def _last_digit(states):
    """The toy's clusters: a node's latest digit (its "step")."""
    return [s.digits[-1] for s in states]


def _shape(result):
    return [(n.parent, n.state, n.kept) for n in result.nodes], result.leaves


# --- the integer program --------------------------------------------------------------------------


def _objective(chosen, weights, paths, labels, kv_weight, coverage_weight):
    """ETS's objective, written out independently of the solver's formulation."""
    ancestors = {a for path in paths for a in path}
    cached = len(chosen) + len({a for i in chosen for a in paths[i]})
    value = sum(weights[i] for i in chosen) - kv_weight * cached / (len(paths) + len(ancestors) + 1)
    if labels is not None:
        value += coverage_weight * len({labels[i] for i in chosen}) / len(set(labels))
    return value


def _random_program(rng: random.Random):
    n = rng.randrange(2, 9)
    depth = rng.randrange(0, 4)
    fan = rng.choice([1, 2, 3])
    paths = []
    for _ in range(n):  # a path of `depth` ancestors, drawn from a small tree so that prefixes are shared
        path, name = [], "r"
        for _ in range(depth):
            name = f"{name}.{rng.randrange(fan)}"
            path.append(name)
        paths.append(tuple(path))
    weights = rebase_shares([rng.random() for _ in range(n)], rng.choice([0.05, 0.2, 1.0]))
    labels = [rng.randrange(rng.randrange(1, n + 1)) for _ in range(n)] if rng.random() < 0.7 else None
    return dict(weights=weights, paths=paths, labels=labels, kv_weight=rng.choice([0.0, 0.5, 1.0, 3.0, 10.0]),
                coverage_weight=rng.choice([0.0, 0.5, 1.5, 5.0]), limit=rng.choice([None, *range(1, n + 1)]))


def test_the_program_is_solved_exactly_against_brute_force_over_every_subset(monkeypatch):
    import scipy.optimize

    solver = scipy.optimize.milp
    branch_and_bound = []

    def counting(*args, **kwargs):
        branch_and_bound.append(bool(kwargs["integrality"].any()))
        return solver(*args, **kwargs)

    monkeypatch.setattr(scipy.optimize, "milp", counting)
    rng = random.Random(0)
    for _ in range(150):
        p = _random_program(rng)
        keep = select_nodes(**p)
        n, limit = len(p["weights"]), p["limit"] or len(p["weights"])
        chosen = [i for i in range(n) if keep[i]]
        assert 1 <= len(chosen) <= limit
        terms = (p["weights"], p["paths"], p["labels"], p["kv_weight"], p["coverage_weight"])
        best = max(_objective(s, *terms) for k in range(1, limit + 1) for s in itertools.combinations(range(n), k))
        assert _objective(chosen, *terms) == pytest.approx(best, abs=1e-9)
    # Both ways to the optimum were taken: an integral LP relaxation, and branch and bound.
    assert any(branch_and_bound) and not all(branch_and_bound)


def test_without_kv_or_coverage_weight_every_node_is_retained_as_rebase_would(targets):
    weights = rebase_shares([0.9, 0.1, 0.5, 0.5], 0.2)
    assert select_nodes(weights, [("a",), ("b",), ("a",), ("c",)], [0, 0, 1, 1], kv_weight=0.0,
                        coverage_weight=0.0) == [True] * 4
    # ... so the whole search is REBASE, node for node.
    for scorer in (PerfectScorer, lambda space: RandomScorer(seed=5)):
        space_a, space_b = (DigitSpace(targets(20, seed=3), base=BASE, seed=4) for _ in range(2))
        ets = ets_search(space_a, scorer(space_a), n=16, kv_weight=0.0, coverage_weight=0.0, cluster=_last_digit)
        rebase = rebase_search(space_b, scorer(space_b), n=16)
        assert [_shape(r) for r in ets] == [_shape(r) for r in rebase]


def test_a_heavy_kv_weight_keeps_the_nodes_that_share_ancestors():
    # Five equally good nodes: three children of p, one of q, one of r. A sibling of a kept node
    # adds one cached node, a node on a new branch two; at lambda_b = 1.35 (1.35 / 9 = 0.15 a node)
    # only siblings are worth their cache.
    paths = [("p",), ("p",), ("p",), ("q",), ("r",)]
    weights = [0.2] * 5
    assert select_nodes(weights, paths, kv_weight=0.0) == [True] * 5
    assert select_nodes(weights, paths, kv_weight=1.35) == [True, True, True, False, False]
    # Deeper (ten nodes in all): a stronger node alone on its branch loses to two siblings that
    # share two ancestors (0.5 - 4 x 0.15 > 0.3 - 3 x 0.15), and their cousin is not worth a branch.
    paths = [("a", "a1"), ("a", "a1"), ("a", "a2"), ("b", "b1")]
    weights = [0.25, 0.25, 0.25, 0.3]
    assert select_nodes(weights, paths, kv_weight=1.5) == [True, True, False, False]
    assert select_nodes(weights, paths, kv_weight=0.3) == [True] * 4


def test_a_heavy_coverage_weight_keeps_one_node_of_every_cluster():
    weights = [0.4, 0.3, 0.2, 0.05, 0.05]
    paths = [()] * 5
    labels = ["A", "A", "A", "B", "C"]
    assert select_nodes(weights, paths, labels, kv_weight=1.0, coverage_weight=0.0) == [True, True, True, False, False]
    keep = select_nodes(weights, paths, labels, kv_weight=1.0, coverage_weight=3.0)
    assert keep == [True, True, True, True, True]
    # With few nodes allowed, coverage picks the best node of each cluster.
    assert select_nodes(weights, paths, labels, kv_weight=1.0, coverage_weight=3.0, limit=3) == [
        True, False, False, True, True]
    # One cluster is no coverage at all.
    assert select_nodes(weights, paths, ["A"] * 5, kv_weight=1.0, coverage_weight=3.0) == [True, True, True, False,
                                                                                          False]


def test_the_program_rejects_inputs_of_the_wrong_shape():
    with pytest.raises(ValueError, match="one path per candidate"):
        select_nodes([0.5, 0.5], [()])
    with pytest.raises(ValueError, match="one label per candidate"):
        select_nodes([0.5, 0.5], [(), ()], labels=[0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        select_nodes([0.5, math.nan], [(), ()])
    with pytest.raises(ValueError, match="finite and >= 0"):
        select_nodes([0.5, -0.1], [(), ()])
    with pytest.raises(ValueError, match="disagree on the parent"):
        select_nodes([0.5, 0.5], [("a", "b"), ("c", "b")])
    with pytest.raises(ValueError, match="limit"):
        select_nodes([0.5, 0.5], [(), ()], limit=0)
    with pytest.raises(ValueError, match="kv_weight"):
        select_nodes([0.5, 0.5], [(), ()], kv_weight=-1.0)
    assert select_nodes([], []) == [] and select_nodes([0.0], [("a",)], kv_weight=100.0) == [True]


def test_shares_are_rebase_softmax_and_invalid_scores_get_none():
    shares = rebase_shares([0.9, 0.5, 0.1], 0.2)
    assert sum(shares) == pytest.approx(1.0) and shares[0] > shares[1] > shares[2]
    assert shares[0] / shares[1] == pytest.approx(math.exp(0.4 / 0.2))
    assert rebase_shares([-1.0, 0.3, math.nan], 0.2) == [0.0, 1.0, 0.0]
    assert rebase_shares([-1.0, -1.0], 0.2) == [0.5, 0.5]


# --- the search on the toy space ------------------------------------------------------------------


def test_ets_with_a_perfect_verifier_and_a_cold_softmax_finds_the_optimum_of_every_root(targets, chosen):
    space = DigitSpace(targets(50), base=BASE, seed=1)
    results = ets_search(space, PerfectScorer(space), n=16, temperature=0.05, cluster=_last_digit)
    assert all(chosen(r).state.digits == t for r, t in zip(results, space.targets, strict=True))


def test_ets_with_a_random_verifier_does_no_better_than_chance(targets, chosen):
    # Scores are noise, so the chosen string is independent of the target: E[matching digits] =
    # LENGTH / BASE. 200 roots, tolerance 5 sd of the mean (sd of one root's value 0.97).
    space = DigitSpace(targets(200, seed=2), base=BASE, seed=3)
    results = ets_search(space, RandomScorer(seed=4), n=16, cluster=_last_digit)
    mean = sum(space.value(chosen(r).state) for r in results) / len(results)
    assert abs(mean - LENGTH / BASE) < 0.34


def test_every_depth_is_one_expand_one_score_and_one_cluster_call_for_all_roots(targets):
    space = DigitSpace(targets(64, seed=7), base=BASE)
    scorer = PerfectScorer(space)
    calls = []

    def cluster(states):
        calls.append(len(states))
        return _last_digit(states)

    results = ets_search(space, scorer, n=16, cluster=cluster)
    assert space.expand_calls == LENGTH and scorer.calls == LENGTH
    assert len(calls) == LENGTH - 1  # the last depth has only finished nodes: nothing to cluster
    for r in results:
        assert len(r.leaves) == 16 and not r.events
        for depth in range(1, LENGTH + 1):
            assert sum(n.depth == depth for n in r.nodes) == 16  # the retained nodes get the whole width
        for node in r.nodes:
            assert node.kept == (node.terminal or any(c.parent == node.id for c in r.nodes))


def test_ets_holds_far_less_kv_cache_than_rebase_and_finds_the_optimum_at_least_as_often(targets, chosen):
    # REBASE at T_b = 0.2 spreads the width over most of the 16 nodes of a depth (a wrong digit
    # costs only e-fold weight); ETS prunes the nodes not worth the cache they pin. Measured here:
    # ETS holds 0.57x REBASE's node-depths of KV cache, and finds the target for 97 roots to 74.
    targets = targets(100, seed=8)
    rebase_space, ets_space = DigitSpace(targets, base=BASE, seed=9), DigitSpace(targets, base=BASE, seed=9)
    rebase = rebase_search(rebase_space, PerfectScorer(rebase_space), n=16, temperature=0.2)
    ets = ets_search(ets_space, PerfectScorer(ets_space), n=16, temperature=0.2, cluster=_last_digit)
    ratio = sum(map(kv_nodes, ets)) / sum(map(kv_nodes, rebase))
    assert ratio < 0.7
    found_ets = sum(chosen(r).state.digits == t for r, t in zip(ets, targets, strict=True))
    found_rebase = sum(chosen(r).state.digits == t for r, t in zip(rebase, targets, strict=True))
    assert found_ets >= found_rebase
    # Per root as well: ETS never holds more than REBASE in total.
    assert sum(kv_nodes(e) <= kv_nodes(r) for e, r in zip(ets, rebase, strict=True)) >= 95


def test_kv_nodes_counts_continued_nodes_and_their_ancestors_per_depth():
    space = DigitSpace(["0000"], base=BASE, seed=1)
    [r] = ets_search(space, PerfectScorer(space), n=4, temperature=0.05, kv_weight=50.0)
    # A huge KV weight keeps one node a depth (a chain): depth d holds d nodes -> 1 + 2 + 3.
    assert kv_nodes(r) == 1 + 2 + 3
    assert sum(n.kept and not n.terminal for n in r.nodes) == 3


def test_a_verifier_that_raises_or_returns_nan_does_not_end_the_search(flaky):
    [r] = ets_search(DigitSpace(["0123"], base=BASE), flaky(nan_on_call=2), n=8, cluster=_last_digit)
    assert r.events == {"verifier_error": 1, "invalid_score": 8} and len(r.leaves) == 8


def test_a_failing_solver_falls_back_to_rebase_and_is_counted(monkeypatch, targets):
    import scipy.optimize

    def broken(*args, **kwargs):
        raise MemoryError("HiGHS out of memory")

    def infeasible(*args, **kwargs):
        return SimpleNamespace(status=2, x=None, message="infeasible")

    for fake in (broken, infeasible):
        monkeypatch.setattr(scipy.optimize, "milp", fake)
        space_a, space_b = (DigitSpace(targets(10, seed=6), base=BASE, seed=2) for _ in range(2))
        ets = ets_search(space_a, PerfectScorer(space_a), n=16, cluster=_last_digit)
        rebase = rebase_search(space_b, PerfectScorer(space_b), n=16)
        assert [_shape(r) for r in ets] == [_shape(r) for r in rebase]
        assert all(r.events == {"ilp_fallback": LENGTH - 1} for r in ets)  # every depth with nodes to choose from


def test_a_failing_clusterer_costs_the_coverage_term_not_the_search(targets):
    def raising(states):
        raise RuntimeError("embedding model out of memory")

    def short(states):
        return _last_digit(states)[1:]

    def unhashable(states):
        return [[d] for d in _last_digit(states)]

    for cluster in (raising, short, unhashable):
        space = DigitSpace(targets(3, seed=1), base=BASE, seed=1)
        results = ets_search(space, PerfectScorer(space), n=8, cluster=cluster)
        assert all(r.events == {"cluster_error": LENGTH - 1} and len(r.leaves) == 8 for r in results)


def test_search_arguments_are_checked():
    space = DigitSpace(["01"], base=BASE)
    for bad in ({"n": 0}, {"n": 4, "temperature": 0.0}, {"n": 4, "kv_weight": -1.0}, {"n": 4, "coverage_weight": -1}):
        with pytest.raises(ValueError):
            ets_search(space, PerfectScorer(space), **bad)


# --- the lexical clusterer ------------------------------------------------------------------------


def test_the_lexical_clusterer_groups_steps_worded_alike_within_each_tree():
    p = Problem("q", "?", "1")
    steps = [(0, "3 + 5 = 8"), (0, "3+5=8"), (0, "3 + 5 = 9"), (0, "Factor the quadratic: (x-2)(x-3) = 0."),
             (1, "3 + 5 = 8"), (0, ""), (1, "3 + 5 = 8."), (0, "")]
    clusterer = StepClusterer()
    labels = clusterer([StepState(root, p, step=s) for root, s in steps])
    assert labels[0] == labels[1]  # formatting only
    assert len({labels[0], labels[2], labels[3], labels[5]}) == 4  # another result, another step, empty
    assert labels[5] == labels[7]  # empty steps together
    assert labels[4] == labels[6] and labels[4] not in labels[:4]  # trees never share a cluster
    assert clusterer.calls == 1
    # A looser threshold merges more; an embedding model plugs in through `embed`.
    assert len(set(StepClusterer(threshold=1.0)([StepState(0, p, step=s) for _, s in steps[:4]]))) == 1
    by_length = StepClusterer(threshold=0.01, embed=lambda texts: [[1.0, float(len(t) > 5)] for t in texts])
    assert by_length([StepState(0, p, step=s) for _, s in steps[:4]]) == [0, 1, 0, 0]
    with pytest.raises(ValueError, match="threshold"):
        StepClusterer(threshold=-0.1)


# --- config and strategy --------------------------------------------------------------------------


def test_the_settings_ets_shares_with_rebase_are_rebases_and_keep_ets_label_order():
    """balance_temperature and rounding have one definition (default, bounds, description) for both
    configs; ETS declares them in its own place because a config's field order is its label's order."""
    for field in ("balance_temperature", "rounding"):
        assert repr(ETSConfig.model_fields[field]) == repr(RebaseConfig.model_fields[field])
        assert ETSConfig.model_fields[field].description
    assert ETSConfig(n=4, rounding="ceil", kv_weight=2.0, balance_temperature=0.3).label == (
        "ets@4,balance_temperature=0.3,kv_weight=2.0,rounding=ceil")
    with pytest.raises(ValidationError, match="rounding"):
        ETSConfig(rounding="floor")


def test_config_defaults_label_and_validation(step_model):
    cfg = ETSConfig(n=16)
    assert (cfg.balance_temperature, cfg.kv_weight, cfg.coverage_weight) == (0.2, 1.0, 1.5)  # the authors' settings
    assert cfg.label == "ets@16" and "beam_width" not in ETSConfig.model_fields
    assert ETSConfig(n=8, kv_weight=2.0).label == "ets@8,kv_weight=2.0"
    for field, value in (("kv_weight", -1.0), ("coverage_weight", -0.5), ("cluster_threshold", 1.5),
                         ("balance_temperature", 0.0)):
        with pytest.raises(ValidationError, match=field):
            ETSConfig(**{field: value})
    assert ETS.name == "ets" and ETS.config_class is ETSConfig and ETS.pool_rule is None
    with pytest.raises(TypeError, match="ETSConfig"):
        ETS(RebaseConfig(), step_model(), MATH_PROMPT.render)


# --- end to end on the step-wise space ------------------------------------------------------------

def SumCheck() -> FunctionVerifier:  # noqa: N802 -- reads as the verifier it builds
    """Scores 1 when every "a + b = c" a solution states holds, else 0."""
    return FunctionVerifier(lambda problem, text: float(all(
        int(a) + int(b) == int(c) for a, b, c in re.findall(r"(\d+) \+ (\d+) = (-?\d+)", text))), name="sum_check")


def test_ets_on_the_stepwise_space_repairs_slips_with_one_call_per_step_for_all_problems(
        step_model, addition_problems):
    problems = addition_problems(40, seed=4)
    model, verifier, clusterer = step_model(slip=0.4, seed=5), SumCheck(), StepClusterer()
    sols = ETS(ETSConfig(n=8), model, MATH_PROMPT.render, SamplingConfig(max_tokens=256), seed=1, verifier=verifier,
               cluster=clusterer).solve(problems)
    # Four steps (three additions, then the answer): one generator, verifier and clusterer call
    # each for all 40 problems (the answer step leaves nothing to cluster).
    assert len(model.calls) == 4 and len(verifier.calls) == 4 and clusterer.calls == 3
    accuracy = sum(s.answer == p.answer for s, p in zip(sols, problems, strict=True)) / len(problems)
    assert accuracy > 0.9  # a single path is right about 30% of the time at slip 0.4
    for s in sols:
        assert s.trace.strategy == "ets" and s.trace.samples and not s.trace.events
        assert sum(n["kept"] and n["finished"] for n in s.trace.tree) == len(s.trace.samples) <= 8
    # The strategy's default clusterer is the lexical one, at the configured threshold.
    default = ETS(ETSConfig(cluster_threshold=0.5), model, MATH_PROMPT.render).clusterer()
    assert isinstance(default, StepClusterer) and default.threshold == 0.5
