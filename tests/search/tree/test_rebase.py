"""REBASE on the toy digit space (known optimum, no LLM), its width rule, and its config."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from tts.registry import STRATEGIES
from tts.search.tree.rebase import Rebase, RebaseConfig, balanced_widths, rebase_search
from tts.search.tree.toy import DigitSpace, PerfectScorer, RandomScorer
from tts.search.tree.tree_search import PENALTY

LENGTH, BASE = 5, 4  # the toy space of the `targets` fixture (tests/search/conftest.py)


def test_widths_follow_the_softmax_of_scores_and_spend_the_budget_exactly():
    assert balanced_widths([0.9, 0.5, 0.1], 16, temperature=0.2) == [14, 2, 0]  # 13.4 / 2.4 / 0.3 of 16
    assert balanced_widths([0.5, 0.5, 0.5], 7, temperature=0.2) == [3, 2, 2]  # equal shares; rounding ties go first
    assert balanced_widths([1.0, 0.0], 10, temperature=100.0) == [5, 5]  # a hot softmax spreads evenly
    assert balanced_widths([1.0, 0.99], 10, temperature=1e-4) == [10, 0]  # a cold one is greedy
    rng = random.Random(0)
    for _ in range(200):
        scores = [rng.random() for _ in range(rng.randrange(1, 12))]
        width = rng.randrange(0, 40)
        widths = balanced_widths(scores, width, temperature=rng.choice([0.05, 0.2, 1.0]))
        assert sum(widths) == width and min(widths) >= 0
        # a better score never gets fewer children
        order = sorted(range(len(scores)), key=lambda j: scores[j])
        assert all(widths[a] <= widths[b] + 1 for a, b in zip(order, order[1:]))


def test_nodes_without_a_valid_score_get_nothing_unless_none_has_one():
    assert balanced_widths([PENALTY, 0.1, PENALTY], 5, 0.2) == [0, 5, 0]
    assert balanced_widths([PENALTY, PENALTY], 5, 0.2) == [3, 2]
    assert balanced_widths([], 5, 0.2) == [] and balanced_widths([0.3], 0, 0.2) == [0]
    with pytest.raises(ValueError, match="temperature"):
        balanced_widths([0.5], 3, 0.0)


def test_rebase_with_a_perfect_verifier_and_a_cold_softmax_finds_the_optimum_of_every_root(targets, chosen):
    space = DigitSpace(targets(50), base=BASE, seed=1)
    results = rebase_search(space, PerfectScorer(space), n=16, temperature=0.05)
    assert all(chosen(r).state.digits == t for r, t in zip(results, space.targets, strict=True))


def test_a_hotter_softmax_spreads_the_budget_and_finds_the_optimum_less_often(targets, chosen):
    # One wrong digit costs 0.2 of score; at T_b = 0.2 an optimal node outweighs a worse one only
    # e-fold, so it may get too few children to draw the right next digit.
    found = []
    for temperature in (0.05, 0.2, 1.0):
        space = DigitSpace(targets(100, seed=8), base=BASE, seed=9)
        results = rebase_search(space, PerfectScorer(space), n=16, temperature=temperature)
        found.append(sum(chosen(r).state.digits == t for r, t in zip(results, space.targets, strict=True)))
    assert found[0] == 100 and found[0] > found[1] > found[2]


def test_rebase_with_a_random_verifier_does_no_better_than_chance(targets, chosen):
    # As for beam search: scores are noise, so the chosen string is independent of the target and
    # E[matching digits] = LENGTH / BASE; 400 roots, tolerance 5 sd of the mean.
    space = DigitSpace(targets(400, seed=2), base=BASE, seed=3)
    results = rebase_search(space, RandomScorer(seed=4), n=16)
    mean = sum(space.value(chosen(r).state) for r in results) / len(results)
    assert abs(mean - LENGTH / BASE) < 0.25


def test_every_depth_expands_at_most_the_remaining_budget_in_one_call_for_all_roots(targets):
    space = DigitSpace(targets(64, seed=7), base=BASE)
    scorer = PerfectScorer(space)
    results = rebase_search(space, scorer, n=16)
    assert space.expand_calls == LENGTH and scorer.calls == LENGTH
    for r in results:
        assert len(r.leaves) == 16  # all N solutions finish at the last depth
        for depth in range(1, LENGTH + 1):
            assert sum(n.depth == depth for n in r.nodes) == 16  # widths sum to the budget at every depth
        for node in r.nodes:  # a node is continued only if it got width
            assert node.kept == (node.terminal or any(c.parent == node.id for c in r.nodes))


def test_finished_solutions_shrink_the_budget_of_the_next_depth():
    class Early(DigitSpace):
        def is_terminal(self, state):  # strings ending in 3 are finished answers
            return state.digits.endswith("3") or super().is_terminal(state)

    space = Early(["000000"], base=BASE, seed=5)
    [r] = rebase_search(space, RandomScorer(seed=6), n=8)
    finished_by_depth = {}
    for node in r.leaf_nodes:
        finished_by_depth[node.depth] = finished_by_depth.get(node.depth, 0) + 1
    for depth in range(2, 7):
        done_before = sum(c for d, c in finished_by_depth.items() if d < depth)
        assert sum(n.depth == depth for n in r.nodes) <= 8 - done_before
    assert len(r.leaves) <= 8


def test_a_verifier_that_raises_or_returns_nan_does_not_end_the_search(flaky):
    [r] = rebase_search(DigitSpace(["0123"], base=BASE), flaky(nan_on_call=2), n=8)
    assert r.events == {"verifier_error": 1, "invalid_score": 8} and len(r.leaves) == 8


def test_config_label_and_registry():
    assert STRATEGIES.load("rebase") is Rebase and Rebase.pool_rule is None
    cfg = RebaseConfig(n=16)
    assert cfg.label == "rebase@16" and "beam_width" not in RebaseConfig.model_fields
    assert RebaseConfig(n=6, balance_temperature=0.5).label == "rebase@6,balance_temperature=0.5"
    with pytest.raises(ValidationError, match="balance_temperature"):
        RebaseConfig(balance_temperature=0)
