"""MCTS on the toy digit space (known optimum, no LLM), its config, and the strategy end to end.

The end-to-end tests use two generators: the scripted backend (whole solutions, so most paths
finish in one step) and the ``step_model`` fixture (tests/search/conftest.py), a model that adds a
problem's numbers one step at a time and sometimes slips, checked by the arithmetic tool verifier,
so that search has something to repair.
"""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from tts.backends.scripted import ScriptedGenerator
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.base import StrategyInputError
from tts.search.tree.mcts import MCTS, MCTSConfig, mcts_search
from tts.search.tree.toy import DigitSpace, PerfectScorer, RandomScorer
from tts.search.tree.tree_search import PENALTY
from tts.types import Budget, Problem
from tts.verifiers.arithmetic import ArithmeticVerifier
from tts.verifiers.base import VerifierScore
from tts.verifiers.function import FunctionVerifier

LENGTH, BASE = 5, 4  # the toy space of the `targets` fixture (tests/search/conftest.py)


class _Recording(DigitSpace):
    """A digit space that records, per expand call, the root and child count of every request."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.requests: list[list[tuple[int, int]]] = []

    def expand(self, states, counts):
        self.requests.append([(s.root, k) for s, k in zip(states, counts, strict=True)])
        return super().expand(states, counts)


# --- the algorithm on the toy space -------------------------------------------------------------


def test_mcts_with_a_perfect_verifier_finds_the_optimum_of_every_root_within_beams_budget(targets, chosen):
    # n * LENGTH nodes is what beam search generates here: no more compute than beam gets.
    space = DigitSpace(targets(50), base=BASE, seed=1)
    results = mcts_search(space, PerfectScorer(space), n=16, beam_width=4, max_nodes=16 * LENGTH)
    assert all(chosen(r).state.digits == t for r, t in zip(results, space.targets, strict=True))
    assert all(len(r.nodes) <= 16 * LENGTH for r in results)


def test_with_room_to_explore_a_perfect_verifier_fills_all_n_candidates_with_the_optimum(targets, chosen):
    space = DigitSpace(targets(20, seed=8), base=BASE, seed=9)
    for r, target in zip(mcts_search(space, PerfectScorer(space), n=8, beam_width=4), space.targets, strict=True):
        assert len(r.leaves) == 8 and chosen(r).state.digits == target


def test_mcts_with_a_random_verifier_does_no_better_than_chance(targets, chosen):
    # The search never sees the target, so with noise for scores the chosen string is independent of
    # it: E[matches] = LENGTH / BASE exactly. 400 roots: the mean's sd is 0.05, the tolerance 5 sd.
    space = DigitSpace(targets(400, seed=2), base=BASE, seed=3)
    results = mcts_search(space, RandomScorer(seed=4), n=16, beam_width=4, max_nodes=32 * LENGTH)
    mean = sum(space.value(chosen(r).state) for r in results) / len(results)
    assert abs(mean - LENGTH / BASE) < 0.25
    hits = sum(chosen(r).state.digits == t for r, t in zip(results, space.targets, strict=True))
    assert hits <= 5  # chance: 400 / 4**5 = 0.4 expected


def test_every_round_is_one_expand_and_one_score_call_for_all_roots(targets):
    space = _Recording(targets(64, seed=7), base=BASE)
    scorer = RandomScorer(seed=1)
    results = mcts_search(space, scorer, n=8, beam_width=4, max_nodes=8 * 3 * LENGTH)
    assert space.expand_calls == scorer.calls == len(space.requests) > LENGTH  # rounds, not rounds x roots
    # Round 0: each root once, n ways. Later: a root is in every round until it is done, with at most
    # n/M leaves of at most M children each.
    assert space.requests[0] == [(i, 8) for i in range(64)]
    for root, r in enumerate(results):
        rounds = [i for i, call in enumerate(space.requests) if any(q == root for q, _ in call)]
        assert rounds == list(range(len(rounds)))
        for call in space.requests[1:]:
            counts = [k for q, k in call if q == root]
            assert len(counts) <= 2 and all(1 <= k <= 4 for k in counts)
        assert len(r.nodes) == sum(k for call in space.requests for q, k in call if q == root)


def test_virtual_loss_sends_the_next_leaf_of_a_round_to_another_good_branch():
    # Two first steps are right ("0"). After both are expanded they have equal mean values; without
    # the virtual loss the second descent of a round would follow the first into the same subtree
    # and take a wrong sibling ("01") of the leaf already chosen.
    space = _Recording(["0000"], base=BASE)
    [r] = mcts_search(space, PerfectScorer(space), n=8, beam_width=4, exploration=0.0)
    expanded = [[r.nodes[k].state.digits for k in ids] for ids in _expanded_per_round(r, space)]
    assert expanded == [["0", "0"], ["00", "00"], ["000", "000"]]
    assert len(r.leaves) == 8 and {n.state.digits for n in r.leaf_nodes} == {"0000", "0001", "0002", "0003"}


def test_the_leaves_of_a_round_are_distinct_and_unfinished():
    space = _Recording(["0123012"], base=BASE)
    [r] = mcts_search(space, RandomScorer(seed=5), n=16, beam_width=4, exploration=0.3, max_nodes=200)
    for ids in _expanded_per_round(r, space):
        assert len(set(ids)) == len(ids) and all(r.nodes[k].kept and not r.nodes[k].terminal for k in ids)


def _expanded_per_round(result, space: _Recording) -> list[list[int]]:
    """Ids of the nodes each round after round 0 expanded (the parents of the children it made)."""
    out, start = [], sum(k for _, k in space.requests[0])
    for call in space.requests[1:]:
        made = result.nodes[start:start + sum(k for _, k in call)]
        start += len(made)
        out.append(list(dict.fromkeys(n.parent for n in made)))
        assert len(out[-1]) == len(call)
    return out


def test_each_node_is_expanded_once_terminal_nodes_never_and_kept_marks_the_expanded(targets):
    space = DigitSpace(targets(30, seed=10), base=BASE, seed=11)
    for r in mcts_search(space, RandomScorer(seed=12), n=12, beam_width=3, max_nodes=150):
        children: dict[int, int] = {}
        for node in r.nodes:
            if node.parent is not None:
                children[node.parent] = children.get(node.parent, 0) + 1
        assert sum(n.depth == 1 for n in r.nodes) == 12  # the root is expanded n ways
        for node in r.nodes:
            if node.terminal:
                assert node.id not in children and node.id in r.leaves  # every finished child is a candidate
            else:
                assert node.kept == (node.id in children)
                assert children.get(node.id, 0) <= 3  # one expansion of at most M children
        assert [n for n in r.leaf_nodes] == [n for n in r.nodes if n.terminal]  # in the order found


def test_never_more_than_n_candidates_and_the_node_budget_is_honoured(targets):
    for budget in (16, 21, 40, 77, 500):
        space = DigitSpace(targets(40, seed=budget), base=BASE, seed=13)
        for r in mcts_search(space, RandomScorer(seed=14), n=16, beam_width=4, max_nodes=budget, exploration=0.5):
            assert len(r.leaves) <= 16 and len(r.nodes) <= budget
            if len(r.leaves) < 16:
                assert len(r.nodes) == budget and r.events == {"node_budget_spent": 1}
            else:
                assert r.events == {}


def test_a_budget_as_large_as_beams_finishes_every_root_even_when_exploring_hard(targets):
    # Exploration 2 widens every level first; the greedy dive still finishes a path per root in
    # LENGTH rounds, which a budget of n * LENGTH nodes always leaves room for.
    space = DigitSpace(targets(100, seed=15), base=BASE, seed=16)
    results = mcts_search(space, RandomScorer(seed=17), n=8, beam_width=2, max_nodes=8 * LENGTH, exploration=2.0)
    assert all(len(r.leaves) >= 2 for r in results)


def test_nothing_left_to_expand_ends_a_root_before_its_budget():
    class Distinct(DigitSpace):
        """Children are distinct digits: a state has at most ``base`` of them."""

        def expand(self, states, counts):
            return super().expand(states, [min(k, self.base) for k in counts])

    space = Distinct(["01"], base=2)
    [r] = mcts_search(space, PerfectScorer(space), n=8, beam_width=2, max_nodes=1000)
    # The root has 2 children, each 2 finished ones: the tree is exhausted after 4 of n = 8 candidates.
    assert len(r.nodes) == 6 and sorted(n.state.digits for n in r.leaf_nodes) == ["00", "01", "10", "11"]
    assert r.events == {}


def test_search_is_deterministic(targets):
    def run():
        space = DigitSpace(targets(20, seed=18), base=BASE, seed=19)
        return [[(n.parent, n.state.digits, n.kept) for n in r.nodes]
                for r in mcts_search(space, RandomScorer(seed=20), n=8, beam_width=4, max_nodes=100, exploration=0.3)]

    assert run() == run()


def test_a_verifier_that_raises_does_not_end_the_search_and_is_counted(flaky):
    space = DigitSpace(["0123", "3210"], base=BASE)
    results = mcts_search(space, flaky(fail_on_call=2), n=8, beam_width=4, max_nodes=200)
    for r in results:
        assert len(r.leaves) == 8
        assert r.events == {"verifier_error": 1}  # one failed call per root it touched
        assert sum(n.score == PENALTY for n in r.nodes) == 8  # that round's n/M x M children


def test_nan_and_out_of_range_scores_count_as_lowest_and_do_not_end_the_search():
    bad = {"0": math.nan, "1": math.inf, "2": 7.0, "3": 0.5}
    garbage = FunctionVerifier.of_items(lambda s: VerifierScore((), bad[s.digits[-1]]))
    [r] = mcts_search(DigitSpace(["0123"], base=BASE), garbage, n=8, beam_width=4, max_nodes=300)
    assert len(r.leaves) == 8
    invalid = [n for n in r.nodes if n.state.digits[-1] != "3"]
    assert all(n.score == PENALTY for n in invalid) and r.events == {"invalid_score": len(invalid)}


def test_a_space_that_never_ends_is_refused_unless_a_node_budget_bounds_it(endless):
    with pytest.raises(RuntimeError, match="terminal"):
        mcts_search(endless(["0"]), RandomScorer(), n=2, beam_width=1, max_steps=20)
    [r] = mcts_search(endless(["0"]), RandomScorer(), n=2, beam_width=1, max_nodes=30, max_steps=100)
    assert len(r.nodes) == 30 and not r.leaves and r.events == {"node_budget_spent": 1}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"n": 6, "beam_width": 4}, r"n \(6\) must be a positive multiple of beam_width \(4\)"),
    ({"n": 8, "beam_width": 4, "max_nodes": 5}, r"max_nodes \(5\) must be at least n \(8\).*raise max_nodes"),
    ({"n": 8, "beam_width": 4, "exploration": -1.0}, r"exploration \(-1.0\) must be a finite number >= 0"),
    ({"n": 8, "beam_width": 4, "exploration": math.nan}, r"exploration \(nan\) must be a finite number"),
])
def test_bad_arguments_are_refused_with_what_to_change(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mcts_search(DigitSpace(["0"]), RandomScorer(), **kwargs)


# --- config -------------------------------------------------------------------------------------


def test_config_validates_and_says_what_to_change():
    with pytest.raises(ValidationError, match=r"n \(6\) must be a multiple of beam_width \(4\).*1, 2, 3, 6"):
        MCTSConfig(n=6, beam_width=4)
    with pytest.raises(ValidationError, match=r"max_nodes \(10\) must be at least n \(16\).*n \* max_depth \(128\)"):
        MCTSConfig(n=16, max_nodes=10)
    with pytest.raises(ValidationError, match="exploration"):
        MCTSConfig(exploration=-0.1)
    with pytest.raises(ValidationError, match="exploration"):
        MCTSConfig(exploration=math.inf)


def test_config_defaults_label_and_json_round_trip():
    cfg = MCTSConfig(n=16)
    assert cfg.kind == "mcts" and cfg.beam_width == 4 and cfg.node_budget == 16 * cfg.max_depth
    assert cfg.label == "mcts@16"
    tuned = MCTSConfig(n=16, exploration=0.5, max_nodes=300, select="verifier")
    assert tuned.label == "mcts@16,select=verifier,exploration=0.5,max_nodes=300" and tuned.node_budget == 300
    assert MCTSConfig.model_validate(json.loads(tuned.model_dump_json())) == tuned


def test_cost_hook_prices_the_default_node_budget():
    shapes = MCTS.planned_requests(16, prompt_tokens=100, gen_tokens=800)
    assert sum(len(s.completion_tokens) for s in shapes) == MCTSConfig(n=16).node_budget
    assert shapes[0].completion_tokens == (100,) * 16  # round 0: the root expanded n ways


# --- the strategy end to end --------------------------------------------------------------------


def _counting() -> FunctionVerifier:
    """The arithmetic verifier, counting its calls (``calls``: the items of each)."""
    arithmetic = ArithmeticVerifier()
    return FunctionVerifier.of_items(lambda item: arithmetic.score([item])[0], name="counting")


def _mcts(model, n=8, verifier=None, **cfg) -> MCTS:
    return MCTS(MCTSConfig(n=n, verifier="arithmetic", **cfg), model, MATH_PROMPT.render,
                SamplingConfig(max_tokens=256), seed=1, verifier=verifier)


def test_mcts_repairs_slips_that_single_paths_keep_with_one_generate_and_score_call_per_round(
        step_model, addition_problems):
    problems = addition_problems(40, seed=4)
    model, verifier = step_model(slip=0.4, seed=5), _counting()
    sols = _mcts(model, n=8, verifier=verifier).solve(problems)
    single = _mcts(step_model(slip=0.4, seed=5), n=1, beam_width=1).solve(problems)

    def accuracy(solutions):
        return sum(s.answer == p.answer for s, p in zip(solutions, problems, strict=True)) / len(problems)

    # One path is right about a third of the time (no slip in three additions at 40%); the search
    # checks every addition.
    assert accuracy(single) < 0.5 and accuracy(sols) > 0.9
    # Every round: one generator call and one verifier call for all 40 problems (no forced answers:
    # the model answers after three additions, within max_depth).
    assert len(model.calls) == len(verifier.calls) >= 4
    assert sum(r.n for r in model.calls[0]) == 40 * 8 and len({r.key for r in model.calls[1]}) == 40
    assert all(sum(r.n for r in call) <= 40 * 8 for call in model.calls)


def test_solutions_carry_at_most_n_candidates_the_tree_and_all_usage(step_model, addition_problems):
    model = step_model(slip=0.3, seed=2, flat_prompt=True)  # 20 prompt tokens a request
    sols = _mcts(model, n=8, max_nodes=40).solve(addition_problems(5, seed=6))
    for sol in sols:
        t = sol.trace
        assert t.strategy == "mcts" and 1 <= len(t.samples) <= 8 and len(t.scores) == len(t.samples)
        assert all(s.answer is not None for s in t.samples)
        assert len(t.tree) <= 40 and {n["id"] for n in t.tree} == set(range(len(t.tree)))
        assert sum(n["kept"] and n["finished"] for n in t.tree) == len(t.samples)
        # usage = every request (one per expansion: the root, then every kept unfinished node),
        # every child generated (additions cost 10 tokens, answers 8) whether kept or not
        expansions = 1 + sum(n["kept"] and not n["finished"] for n in t.tree)
        assert sol.usage.calls == expansions and sol.usage.prompt_tokens == 20 * expansions
        assert sol.usage.completion_tokens == sum(10 if "=" in n["text"] else 8 for n in t.tree)
    assert sum(s.usage.calls for s in sols) == sum(len(call) for call in model.calls)


def test_mcts_runs_on_the_scripted_backend():
    problems = [Problem(f"p{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(12)]
    gen = ScriptedGenerator.for_problems(problems, accuracy=0.7, seed=3, mean_tokens=100)
    sols = _mcts(gen, n=8, max_depth=3).solve(problems)
    assert [s.problem_id for s in sols] == [p.id for p in problems]
    for sol in sols:
        t = sol.trace
        assert 1 <= len(t.samples) <= 8 and max(n["depth"] for n in t.tree) <= 3
        assert len(t.tree) <= 8 * 3 and sol.usage.completion_tokens > 0
    # Samples that ran out of step tokens before an answer were continued by later rounds.
    assert sum(max(n["depth"] for n in s.trace.tree) > 1 for s in sols) >= 6
    assert sum(s.answer == p.answer for s, p in zip(sols, problems, strict=True)) >= 10


def test_a_verifier_that_raises_or_returns_nan_does_not_end_the_run(step_model, addition_problems):
    def unreachable(item):
        raise ConnectionError("verifier unreachable")

    problems = addition_problems(3)
    for verifier, event in ((FunctionVerifier.of_items(unreachable), "verifier_error"),
                            (FunctionVerifier.of_items(lambda item: VerifierScore((), math.nan)), "invalid_score")):
        for s in _mcts(step_model(), n=4, verifier=verifier).solve(problems):
            assert s.answer is not None and 1 <= len(s.trace.samples) <= 4
            assert s.trace.events[event] > 0 and set(s.trace.scores) == {PENALTY}


def test_budgets_are_checked_against_the_node_budget(step_model, addition_problems):
    strategy = _mcts(step_model(), n=8, max_nodes=200)
    with pytest.raises(StrategyInputError, match="lower n to 4"):
        strategy.solve(addition_problems(1), [Budget(samples=4)])
    worst = 200 * 128 + 8 * 32  # max_nodes steps of step_tokens, plus a forced answer per candidate
    with pytest.raises(StrategyInputError, match=f"worst case of {worst} .*lower max_nodes"):
        strategy.solve(addition_problems(1), [Budget(tokens=worst - 1)])
    [sol] = strategy.solve(addition_problems(1), [Budget(samples=8, tokens=worst)])
    assert sol.trace.samples
