"""What every step-wise search strategy does around its algorithm (tts/search/tree/tree_strategy.py):
budgets refused before generating, a search's candidates turned into samples, the answer chosen
from them, the tree a trace keeps, and the cost hook. The algorithm is replaced by one that
returns hand-built trees, so every value is known."""

from __future__ import annotations

import pytest

from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.base import StrategyInputError
from tts.search.tree.beam import BeamConfig, BeamSearch
from tts.search.tree.stepwise import StepState
from tts.search.tree.tree_search import PENALTY, SearchResult, TreeNode
from tts.types import Budget, Problem, RequestShape
from tts.verifiers.function import FunctionVerifier

PROBLEM = Problem("q0", "What is 3 + 4?", "7")


def _state(answer, steps=("3 + 4 = 7",), logprobs=(-0.5,), tokens=10, finished=True, forced=None):
    return StepState(0, PROBLEM, tuple(steps), steps[-1] if steps else "", len(steps), "0", tokens, tuple(logprobs),
                     finished, answer, forced)


class Fixed(BeamSearch):
    """Beam search's strategy with the algorithm replaced: every problem gets ``LEAVES`` (state, score)."""

    LEAVES: list[tuple[StepState, float]] = []

    def search(self, space, scorer):
        nodes = tuple(TreeNode(i, None, 1, state, True, score, True) for i, (state, score) in enumerate(self.LEAVES))
        return [SearchResult(nodes, tuple(range(len(nodes)))) for _ in space.initial_states()]


def _strategy(leaves, **settings) -> Fixed:
    cls = type("FixedNow", (Fixed,), {"LEAVES": leaves})
    config = BeamConfig(**{"n": 4, "beam_width": 2, "verifier": {"kind": "toy_fixed"}, **settings})
    return cls(config, object(), MATH_PROMPT.render, SamplingConfig(max_tokens=100), seed=0,
               verifier=FunctionVerifier.of_items(lambda state: 0.5))


def _solve(leaves, **settings):
    return _strategy(leaves, **settings).solve([PROBLEM])[0]


def test_select_verifier_takes_the_best_scored_answered_candidate_the_first_of_equal_scores():
    sol = _solve([(_state("7"), 0.5), (_state(None), 0.9), (_state("8"), 0.5), (_state("9"), 0.25)], select="verifier")
    assert (sol.answer, sol.confidence, sol.trace.votes, sol.trace.selected) == ("7", 0.5, {}, 0)


def test_select_verifier_with_no_answer_answers_none_and_with_only_penalties_confidence_zero():
    sol = _solve([(_state(None), 0.9), (_state(None), 0.5)], select="verifier")
    assert (sol.answer, sol.confidence, sol.trace.votes, sol.trace.selected) == (None, 0.0, {}, None)
    sol = _solve([(_state("7"), PENALTY), (_state("8"), PENALTY)], select="verifier")
    assert (sol.answer, sol.confidence, sol.trace.selected) == ("7", 0.0, 0)


def test_weighted_vote_weighs_by_score_with_penalties_at_zero():
    sol = _solve([(_state("7"), PENALTY), (_state("8"), 0.5), (_state("7"), 0.25), (_state("7"), 0.125)])
    assert sol.answer == "8" and sol.trace.votes == {"8": 0.5, "7": 0.375}
    assert sol.confidence == pytest.approx(0.5 / 0.875) and "unweighted_vote" not in sol.trace.events


def test_weighted_vote_without_a_valid_score_is_a_plain_vote_and_counted():
    sol = _solve([(_state("8"), PENALTY), (_state("7"), PENALTY), (_state("7"), 0.0)])
    assert sol.answer == "7" and sol.trace.votes == {"8": 1.0, "7": 2.0}
    assert sol.trace.events["unweighted_vote"] == 1


def test_candidates_become_samples_with_their_text_tokens_logprob_and_why_they_ended():
    leaves = [(_state("7", steps=("3 + 4 = 7", "The answer is 7."), logprobs=(-0.5, -1.5), tokens=12), 0.5),
              (_state("7", logprobs=(None,), forced="depth"), 0.5),
              (_state(None, steps=("3 +",), logprobs=(), finished=False), 0.5)]
    samples = _solve(leaves).trace.samples
    assert [(s.text, s.answer, s.completion_tokens, s.mean_logprob, s.finish_reason) for s in samples] == [
        ("3 + 4 = 7\n\nThe answer is 7.", "7", 12, -1.0, "stop"),
        ("3 + 4 = 7", "7", 10, None, "forced"),
        ("3 +", None, 10, None, "unfinished")]


def test_the_trace_tree_lists_every_node_as_tts_show_prints_it():
    sol = _solve([(_state("7", forced="tokens"), 0.75)])
    assert sol.trace.tree == ({"id": 0, "parent": None, "depth": 1, "text": "3 + 4 = 7", "score": 0.75, "kept": True,
                               "finished": True, "answer": "7", "forced": "tokens", "tokens": 10},)  # its step's own


def test_budgets_are_checked_at_their_exact_worst_case_before_anything_is_generated():
    # n = 4 candidates, max_depth 3, steps of min(step_tokens 128, max_tokens 100) = 100 tokens, plus
    # a forced answer of 32 tokens each: 4 x (3 x 100 + 32) = 1328.
    strategy = _strategy([(_state("7"), 0.5)], max_depth=3)
    assert strategy.solve([PROBLEM], [Budget(samples=4, tokens=1328)])[0].answer == "7"
    assert strategy.n_within(Budget(samples=2)) == 4
    with pytest.raises(StrategyInputError) as info:
        strategy.solve([PROBLEM], [Budget(tokens=1327)])
    assert str(info.value) == ("beam: a budget of 1327 tokens is below the search's worst case of 1328 (n=4 x "
                               "max_depth=3 steps of up to 100 tokens, plus forced answers); lower n, max_depth or "
                               "step_tokens, or raise the budget.")
    with pytest.raises(StrategyInputError) as info:
        strategy.solve([PROBLEM], [Budget(samples=3)])
    assert str(info.value) == "beam: a budget of 3 samples is below n=4 candidates; lower n to 3 or raise the budget."
    unforced = _strategy([(_state("7"), 0.5)], max_depth=3, force_answer=False, step_tokens=50)
    assert unforced.solve([PROBLEM], [Budget(tokens=600)])[0].answer == "7"  # 4 x 3 x 50
    with pytest.raises(StrategyInputError) as info:
        unforced.solve([PROBLEM], [Budget(tokens=599)])
    assert "worst case of 600 (n=4 x max_depth=3 steps of up to 50 tokens); lower n" in str(info.value)


def test_one_budget_per_problem_and_no_problems_no_solutions():
    strategy = _strategy([(_state("7"), 0.5)])
    with pytest.raises(StrategyInputError) as info:
        strategy.solve([PROBLEM], [Budget(samples=8), Budget(samples=8)])
    assert str(info.value) == "got 2 budgets for 1 problems; give one per problem"
    with pytest.raises(StrategyInputError, match="below n=4"):
        strategy.solve([PROBLEM, PROBLEM], [None, Budget(samples=1)])  # every budget is checked
    assert strategy.solve([]) == [] and strategy.solve([], []) == []


def test_the_cost_hook_prices_the_worst_case_of_the_default_settings():
    # max_depth 8, M = 4 for n = 8, 100 tokens a step: n steps from the prompt, then n/M requests
    # of M samples a step whose prompt (question and steps so far) is cached.
    shapes = BeamSearch.planned_requests(8, prompt_tokens=50, gen_tokens=790, cached_tokens=20)
    assert shapes == [RequestShape(50, 20, (99,) * 8)] + [
        RequestShape(50 + t * 99, 50 + t * 99, (99,) * 4) for t in range(1, 8) for _ in range(2)]


@pytest.fixture(autouse=True)
def _toy_verifier(toy_verifier):
    toy_verifier("toy_fixed")


def test_the_configured_step_settings_and_extraction_reach_the_step_space(step_model, addition_problems):
    # A two-character separator written whole (healing would hold back its ";"), steps of at most 40 tokens, no forced
    # answers: at max_depth 2 the paths stop as they are and their answer is what `extract` reads.
    model = step_model(slip=0.0)
    config = BeamConfig(n=2, beam_width=1, max_depth=2, step_separator="\n;", step_tokens=40, heal_separator=False,
                        force_answer=False, verifier={"kind": "toy_fixed"})
    strategy = BeamSearch(config, model, MATH_PROMPT.render, SamplingConfig(max_tokens=100), seed=0,
                          extract=lambda text: f"read {len(text)}", verifier=FunctionVerifier.of_items(lambda s: 0.5))
    [sol] = strategy.solve(addition_problems(1))
    requests = [r for call in model.calls for r in call]
    assert [(r.stop, r.max_tokens, r.continuation) for r in requests] == [
        (("\n;",), 40, ""), (("\n;",), 40, "7 + 7 = 14\n;"), (("\n;",), 40, "7 + 7 = 14\n;")]
    assert [(s.answer, s.text, s.finish_reason) for s in sol.trace.samples] == [
        ("read 23", "7 + 7 = 14\n;14 + 1 = 15", "stop")] * 2

