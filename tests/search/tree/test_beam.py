"""Beam search on the toy digit space (known optimum, no LLM) and the beam strategy's config."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from tts.config import SamplingConfig, parse_strategy_config
from tts.prompts import MATH_PROMPT
from tts.registry import STRATEGIES
from tts.search.tree.beam import BeamConfig, BeamSearch, beam_search, sal_keep
from tts.search.tree.toy import DigitSpace, PerfectScorer, RandomScorer
from tts.search.tree.tree_search import PENALTY, TreeNode
from tts.verifiers.base import VerifierScore
from tts.verifiers.function import FunctionVerifier

LENGTH, BASE = 5, 4  # the toy space of the `targets` fixture (tests/search/conftest.py)


def test_beam_with_a_perfect_verifier_finds_the_optimum_of_every_root(targets, chosen):
    space = DigitSpace(targets(50), base=BASE, seed=1)
    results = beam_search(space, PerfectScorer(space), n=16, beam_width=4)
    assert all(chosen(r).state.digits == t for r, t in zip(results, space.targets, strict=True))


def test_beam_with_a_random_verifier_does_no_better_than_chance(targets, chosen):
    # The search never sees the target, so with noise for scores the chosen string is independent of
    # it: E[matches] = LENGTH / BASE exactly. 400 roots: the mean's sd is 0.05, the tolerance 5 sd.
    space = DigitSpace(targets(400, seed=2), base=BASE, seed=3)
    results = beam_search(space, RandomScorer(seed=4), n=16, beam_width=4)
    mean = sum(space.value(chosen(r).state) for r in results) / len(results)
    assert abs(mean - LENGTH / BASE) < 0.25
    hits = sum(chosen(r).state.digits == t for r, t in zip(results, space.targets, strict=True))
    assert hits <= 5  # chance: 400 / 4**5 = 0.4 expected


def test_each_step_keeps_n_over_m_nodes_and_expands_each_m_ways():
    space = DigitSpace(["0123012"], base=BASE)
    [result] = beam_search(space, RandomScorer(seed=5), n=16, beam_width=4)
    by_depth: dict[int, list] = {}
    for node in result.nodes:
        by_depth.setdefault(node.depth, []).append(node)
    assert len(by_depth[1]) == 16  # the root is expanded n ways
    for depth in range(1, 7):
        kept = [n for n in by_depth[depth] if n.kept]
        assert len(kept) == 4  # n / M
        children = [n for n in by_depth[depth + 1] if n.parent in {k.id for k in kept}]
        assert len(children) == 16 and all(sum(c.parent == k.id for c in children) == 4 for k in kept)
        # the kept ones are the best-scored
        assert min(k.score for k in kept) >= max(n.score for n in by_depth[depth] if not n.kept)


def test_finished_children_are_candidates_and_never_more_than_n():
    space = DigitSpace(["012", "3"], base=BASE)
    results = beam_search(space, RandomScorer(seed=6), n=8, beam_width=2)
    for r, target in zip(results, space.targets, strict=True):
        assert len(r.leaves) == 8
        assert all(n.terminal and n.kept and len(n.state.digits) == len(target) for n in r.leaf_nodes)
        assert not any(n.terminal for n in r.nodes if n.id not in r.leaves)


def test_one_expand_and_one_score_call_per_step_for_all_roots(targets):
    space = DigitSpace(targets(64, seed=7), base=BASE)
    scorer = PerfectScorer(space)
    beam_search(space, scorer, n=8, beam_width=4)
    assert space.expand_calls == LENGTH and scorer.calls == LENGTH  # steps, not steps x roots


def _garbage(state) -> VerifierScore:
    """NaN for digit 0, inf for 1, out of range for 2, a non-number for 3, None (rank last) nowhere."""
    bad = {"0": math.nan, "1": math.inf, "2": 7.0, "3": "high"}
    return VerifierScore((), bad[state.digits[-1]], invalid=1 if state.digits[-1] == "0" else 0)


def test_a_verifier_that_raises_does_not_end_the_search_and_is_counted(flaky):
    space = DigitSpace(["0123", "3210"], base=BASE)
    results = beam_search(space, flaky(fail_on_call=2), n=8, beam_width=4)
    for r in results:
        assert len(r.leaves) == 8
        assert r.events == {"verifier_error": 1}  # one failed call; its 8 children rank last
        assert sum(n.score == PENALTY for n in r.nodes) == 8


def test_nan_inf_and_out_of_range_scores_rank_last_and_are_counted():
    space = DigitSpace(["01"], base=BASE)
    [r] = beam_search(space, FunctionVerifier.of_items(_garbage), n=4, beam_width=4)
    assert all(n.score == PENALTY for n in r.nodes) and len(r.leaves) == 4
    assert r.events["invalid_score"] == len(r.nodes) + sum(n.state.digits[-1] == "0" for n in r.nodes)


def test_a_space_that_never_ends_is_refused(endless):
    with pytest.raises(RuntimeError, match="terminal"):
        beam_search(endless(["0"]), RandomScorer(), n=2, beam_width=1, max_steps=20)


def test_bad_n_width_or_fill_are_refused_with_what_to_change():
    space = DigitSpace(["01"], base=BASE)
    with pytest.raises(ValueError, match=r"^n \(6\) must be a positive multiple of beam_width \(4\)$"):
        beam_search(space, RandomScorer(), n=6, beam_width=4)
    with pytest.raises(ValueError, match=r"^n \(4\) must be a positive multiple of beam_width \(0\)$"):
        beam_search(space, RandomScorer(), n=4, beam_width=0)
    with pytest.raises(ValueError, match=r"^fill must be 'within_n' or 'every_step', got 'sometimes'$"):
        beam_search(space, RandomScorer(), n=4, beam_width=2, fill="sometimes")


def test_every_step_fill_refuses_a_space_that_never_ends_and_says_after_how_many_steps(endless):
    with pytest.raises(RuntimeError, match="after 20 steps"):
        beam_search(endless(["0"]), RandomScorer(), n=2, beam_width=1, max_steps=20, fill="every_step")


def test_sal_keep_keeps_the_best_in_the_order_given_and_the_later_of_equal_scores():
    live = [TreeNode(i, None, 1, str(i), False, score) for i, score in enumerate([0.2, 0.5, 0.5, 0.1])]
    assert [node.id for node in sal_keep(live, 2)] == [1, 2]
    assert [node.id for node in sal_keep(live, 1)] == [2]  # of equal scores, the later
    assert [node.id for node in sal_keep(live, 3)] == [0, 1, 2]
    assert sal_keep(live, 0) == []
    assert [node.id for node in sal_keep(live, 6)] == [0, 1, 2, 3]  # fewer live than N/M: all of them


class Letters:
    """Roots of given depths; a state is (root, letters), its k children add "a", "b", ... in
    order; a state finishes at its root's depth or when it is one of ``finished``."""

    def __init__(self, depths, finished=()):
        self.depths, self.finished = depths, set(finished)

    def initial_states(self):
        return [(root, "") for root in range(len(self.depths))]

    def expand(self, states, counts):
        return [[(root, text + c) for c in "abcdefgh"[:k]] for (root, text), k in zip(states, counts, strict=True)]

    def is_terminal(self, state):
        root, text = state
        return len(text) >= self.depths[root] or text in self.finished


def test_every_step_fill_deals_n_steps_over_the_survivors_and_keeps_the_first_n_to_finish():
    # Root 0 (depth 2), n = 4, M = 1: the root's children a, b, c, d; "a" finishes, so the three
    # others are kept and the 4 steps are dealt in turn: b gets 2 (ba, bb), c and d one each. All
    # finish at depth 2, taken in the reference's order (first children first: ba, ca, da, then bb);
    # of the five finished, the first four are the candidates and bb is not kept. Root 1 (depth 1)
    # ends after its first step while root 0 goes on.
    space = Letters([2, 1], finished={"a"})
    first, second = beam_search(space, FunctionVerifier.of_items(lambda state: 0.5), n=4, beam_width=1,
                                fill="every_step")
    text = {node.id: node.state[1] for node in first.nodes}
    assert [text[i] for i in first.leaves] == ["a", "ba", "ca", "da"]
    children = {}
    for node in first.nodes:
        if node.parent is not None:
            children[text[node.parent]] = children.get(text[node.parent], 0) + 1
    assert children == {"b": 2, "c": 1, "d": 1}
    assert {text[node.id]: node.kept for node in first.nodes} == {
        "a": True, "b": True, "c": True, "d": True, "ba": True, "ca": True, "da": True, "bb": False}
    assert [second.nodes[i].state[1] for i in second.leaves] == ["a", "b", "c", "d"]


def test_the_strategy_searches_the_step_space_with_its_verifier(step_model, addition_problems, addition_checker):
    # Steps slip half the time; the addition checker scores 1 only where every stated sum holds, and
    # the beam keeps those: every problem's answer is its sum, and exactly the candidates that reach
    # it score 1. Three additions and the answer: 4 levels of n = 4 nodes.
    problems = addition_problems(3, seed=1)
    strategy = BeamSearch(BeamConfig(n=4, beam_width=2, verifier="toy_perfect", select="verifier"),
                          step_model(slip=0.5, seed=2), MATH_PROMPT.render, SamplingConfig(max_tokens=200), seed=0,
                          verifier=addition_checker())
    solutions = strategy.solve(problems)
    assert [s.answer for s in solutions] == [p.answer for p in problems]
    for problem, solution in zip(problems, solutions, strict=True):
        assert len(solution.trace.samples) == 4 and len(solution.trace.tree) == 16
        assert solution.trace.scores == tuple(float(x.answer == problem.answer) for x in solution.trace.samples)
    assert solutions[0].trace.scores == (1.0, 1.0, 1.0, 1.0) and solutions[1].trace.scores == (1.0, 1.0, 0.0, 0.0)


# --- config -------------------------------------------------------------------------------------


def test_n_must_be_a_multiple_of_the_beam_width_and_the_message_says_what_to_change():
    with pytest.raises(ValidationError, match=r"n \(6\) must be a multiple of beam_width \(4\).*1, 2, 3, 6"):
        BeamConfig(n=6, beam_width=4, verifier={"kind": "toy_perfect"})


def test_default_width_keeps_any_n_ladder_valid():
    widths = {n: BeamConfig(n=n, verifier={"kind": "toy_perfect"}).beam_width for n in (1, 2, 4, 6, 8, 9, 16, 64)}
    assert widths == {1: 1, 2: 2, 4: 4, 6: 3, 8: 4, 9: 3, 16: 4, 64: 4}


def test_labels_name_n_and_every_setting_that_differs_from_its_default():
    assert BeamConfig(n=16, verifier={"kind": "toy_perfect"}).label == "beam@16,verifier=toy_perfect"
    cfg = BeamConfig(n=16, beam_width=2, select="verifier", verifier={"kind": "toy_perfect", "aggregation": "prod"})
    assert cfg.label == "beam@16,beam_width=2,select=verifier,verifier=toy_perfect(aggregation=prod)"
    assert BeamConfig(n=16, fill="every_step").label == "beam@16,fill=every_step"


def test_config_round_trips_through_json_and_the_registry():
    cfg = BeamConfig(n=8, max_depth=5, verifier="toy_perfect")
    again = parse_strategy_config(json.loads(json.dumps(cfg.model_dump(mode="json"))))
    assert again == cfg and type(again) is BeamConfig
    assert STRATEGIES.load("beam") is BeamSearch and BeamSearch.pool_rule is None


def test_cost_hook_prices_n_samples_per_step_with_cached_prefixes():
    shapes = BeamSearch.planned_requests(16, prompt_tokens=100, gen_tokens=800)
    depth = BeamConfig.model_fields["max_depth"].default
    assert sum(len(s.completion_tokens) for s in shapes) == 16 * depth
    assert shapes[0].cached_prompt_tokens == 0 and all(s.cached_prompt_tokens == s.prompt_tokens for s in shapes[1:])
    assert len(shapes) == 1 + (depth - 1) * 4  # n/M requests of M samples after the first step


@pytest.fixture(autouse=True)
def _toy_verifier(toy_verifier):
    """A registered verifier config so that configs validate without the real verifiers."""
    toy_verifier("toy_perfect")


def test_a_search_that_ends_in_exactly_max_steps_steps_is_not_refused(endless):
    # The toy strings finish in LENGTH steps: beam (a level search, as REBASE and ETS) needs LENGTH
    # levels, and one fewer is refused; it refused LENGTH too, though every beam had finished.
    [r] = beam_search(DigitSpace(["01230"], base=BASE), RandomScorer(), n=2, beam_width=1, max_steps=LENGTH)
    assert r.leaves and all(len(r.nodes[i].state.digits) == LENGTH for i in r.leaves)
    with pytest.raises(RuntimeError, match=f"after {LENGTH - 1} steps"):
        beam_search(DigitSpace(["01230"], base=BASE), RandomScorer(), n=2, beam_width=1, max_steps=LENGTH - 1)
