"""REBASE on the toy digit space (known optimum, no LLM), its width rule, and its config."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.registry import STRATEGIES
from tts.search.tree.rebase import Rebase, RebaseConfig, balanced_widths, ceil_widths, rebase_search
from tts.search.tree.toy import DigitSpace, PerfectScorer, RandomScorer
from tts.search.tree.tree_search import PENALTY
from tts.verifiers.function import FunctionVerifier

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


def test_bad_rounding_n_or_temperature_are_refused_with_what_to_change():
    space = DigitSpace(["01"], base=BASE)
    with pytest.raises(ValueError, match=r"^rounding must be 'largest_remainder' or 'ceil', got 'floor'$"):
        rebase_search(space, RandomScorer(), n=4, rounding="floor")
    with pytest.raises(ValueError, match=r"^n must be >= 1, got 0$"):
        rebase_search(space, RandomScorer(), n=0)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match=rf"^temperature must be > 0, got {bad}$"):
            rebase_search(space, RandomScorer(), n=4, temperature=bad)
    assert space.expand_calls == 0  # refused before anything is generated
    [r] = rebase_search(space, RandomScorer(), n=1)  # n = 1: one path
    assert len(r.leaves) == 1 and len(r.nodes) == 2
    for split in (balanced_widths, ceil_widths):
        with pytest.raises(ValueError, match=r"^temperature must be > 0, got 0$"):
            split([], 3, 0)
        with pytest.raises(ValueError, match=r"^temperature must be > 0, got -0.5$"):
            split([0.5], 3, -0.5)


def test_ceil_widths_serve_the_best_first_each_the_ceiling_of_its_share_of_what_is_left():
    # [0.9, 0.8, 0.5] at T = 0.2: weights 1, e^-0.5, e^-2 (sum 1.742); the best takes ceil(4 x 1 / 1.742)
    # = 3, the next ceil(1 x 0.607 / 0.742) = 1, the last nothing (the module docstring's example).
    assert ceil_widths([0.9, 0.8, 0.5], 4, 0.2) == [3, 1, 0]
    assert balanced_widths([0.9, 0.8, 0.5], 4, 0.2) == [2, 2, 0]
    # Equal scores: the later first (3 x 1/2 rounds up to 2), or in order with later_first=False; an
    # exact share is not rounded up.
    assert ceil_widths([0.5, 0.5], 3, 0.2) == [1, 2] and ceil_widths([0.5, 0.5], 3, 0.2, later_first=False) == [2, 1]
    assert ceil_widths([0.5, 0.5], 4, 0.2) == [2, 2] and ceil_widths([0.5, 0.5, 0.5, 0.5], 4, 0.2) == [1, 1, 1, 1]
    # Unscored nodes get nothing while one is scored; when none is, the width is split evenly (later first).
    assert ceil_widths([PENALTY, 0.1, PENALTY], 5, 0.2) == [0, 5, 0]
    assert ceil_widths([PENALTY, PENALTY, PENALTY], 4, 0.2) == [1, 1, 2]
    assert ceil_widths([], 4, 0.2) == [] and ceil_widths([0.3, 0.2], 0, 0.2) == [0, 0]
    assert ceil_widths([0.3, 0.5], 1, 0.2) == [0, 1] and balanced_widths([0.3, 0.5], 1, 0.2) == [0, 1]


class Letters:
    """One root; a state's k children add "a", "b", ... in order; finished at depth 2."""

    def initial_states(self):
        return [""]

    def expand(self, states, counts):
        return [[s + c for c in "abcdefgh"[:k]] for s, k in zip(states, counts, strict=True)]

    def is_terminal(self, state):
        return len(state) >= 2


def test_the_rounding_setting_chooses_how_the_search_splits_each_depth():
    # Children a, b, c, d scored 0.9, 0.8, 0.5, 0.1: at T = 0.2 the width of 4 splits 2 / 2 / 0 / 0 by
    # largest remainder (the default; quotas 2.27, 1.38, 0.31, 0.04), 3 / 1 / 0 / 0 by the authors'
    # ceilings (a takes ceil(2.27), b ceil(1 x 0.61 / 0.76) of the 1 left).
    scores = {"a": 0.9, "b": 0.8, "c": 0.5, "d": 0.1}
    scorer = FunctionVerifier.of_items(lambda s: scores.get(s, 0.5))

    def children(result):
        out = {}
        for node in result.nodes:
            if node.parent is not None:
                parent = result.nodes[node.parent].state
                out[parent] = out.get(parent, 0) + 1
        return out

    assert children(rebase_search(Letters(), scorer, n=4)[0]) == {"a": 2, "b": 2}
    assert children(rebase_search(Letters(), scorer, n=4, rounding="ceil")[0]) == {"a": 3, "b": 1}


def test_the_strategy_searches_the_step_space_with_its_verifier(step_model, addition_problems, addition_checker):
    problems = addition_problems(3, seed=1)
    strategy = Rebase(RebaseConfig(n=4, verifier={"kind": "toy_rebase"}, select="verifier", rounding="ceil"),
                      step_model(slip=0.5, seed=2), MATH_PROMPT.render, SamplingConfig(max_tokens=200), seed=0,
                      verifier=addition_checker())
    solutions = strategy.solve(problems)
    # Steps slip half the time; the checker scores 1 only where every stated sum holds. The first
    # problem's 4 candidates all slipped somewhere (the one that ends on 12 too): the first wins at
    # score 0. In the others every candidate held: 4 nodes at each of the 4 depths.
    assert [s.answer for s in solutions] == ["11", "31", "15"] and [p.answer for p in problems] == ["12", "31", "15"]
    assert [s.trace.scores for s in solutions] == [(0.0,) * 4, (1.0,) * 4, (1.0,) * 4]
    assert [x.answer for x in solutions[0].trace.samples] == ["11", "9", "14", "12"]
    assert all(len(s.trace.tree) == 16 for s in solutions)


@pytest.fixture(autouse=True)
def _toy_verifier(toy_verifier):
    toy_verifier("toy_rebase")


def test_config_label_and_registry():
    assert STRATEGIES.load("rebase") is Rebase and Rebase.pool_rule is None
    cfg = RebaseConfig(n=16)
    assert cfg.label == "rebase@16" and "beam_width" not in RebaseConfig.model_fields
    assert RebaseConfig(n=6, balance_temperature=0.5).label == "rebase@6,balance_temperature=0.5"
    with pytest.raises(ValidationError, match="balance_temperature"):
        RebaseConfig(balance_temperature=0)
