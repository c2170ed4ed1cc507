"""FunctionVerifier: a plain function as a verifier, in its three forms, through the strategies."""

from __future__ import annotations

import math

import pytest

from tts.backends.function import FunctionGenerator
from tts.prompts import MATH_PROMPT
from tts.search.sampling.best_of_n import BestOfN, BestOfNConfig
from tts.types import Problem, Usage
from tts.verifiers.base import Verifier, VerifierScore, VerifyItem
from tts.verifiers.function import FunctionVerifier

PROBLEM = Problem("p", "What is 2 + 3?", "5")


def test_an_outcome_reward_reads_the_problem_and_the_text_of_every_item_in_one_call():
    seen = []

    def reward(problem, text):
        seen.append((problem.id, text))
        return 1.0 if f"\\boxed{{{problem.answer}}}" in text else 0.25

    verifier = FunctionVerifier(reward, name="boxed")
    items = [VerifyItem(PROBLEM, ("2 + 3 = 5.", "\\boxed{5}"), finished=True), VerifyItem(PROBLEM, ("\\boxed{6}",))]
    assert verifier.score(items) == [VerifierScore((), 1.0), VerifierScore((), 0.25)]
    assert seen == [("p", "2 + 3 = 5.\n\n\\boxed{5}"), ("p", "\\boxed{6}")]
    assert verifier.calls == [2] and verifier.name == "boxed" and not verifier.step_verifier
    assert isinstance(verifier, Verifier)


def test_a_per_step_reward_gives_step_scores_and_their_aggregate_and_declares_itself_a_step_verifier():
    def reward(problem, steps):
        return [0.0 if "= 6" in s else 0.9 for s in steps]

    item = VerifyItem(PROBLEM, ("2 + 3 = 6.", "So \\boxed{6}."))
    assert FunctionVerifier(reward, per_step=True, aggregation="min").score([item]) == [
        VerifierScore((0.0, 0.9), 0.0)]
    last = FunctionVerifier(reward, per_step=True)
    assert last.score([item]) == [VerifierScore((0.0, 0.9), 0.9)] and last.step_verifier


def test_scores_that_are_not_numbers_in_0_1_count_as_zero_and_invalid():
    values = iter([math.nan, 1.5, "high", None, 0.5])
    verifier = FunctionVerifier(lambda problem, text: next(values))
    scores = verifier.score([VerifyItem(PROBLEM, ("x",))] * 5)
    assert [(s.score, s.invalid) for s in scores] == [(0.0, 1), (0.0, 1), (0.0, 1), (0.0, 1), (0.5, 0)]
    stepwise = FunctionVerifier(lambda problem, steps: [math.inf, 0.8], per_step=True, aggregation="mean")
    assert stepwise.score([VerifyItem(PROBLEM, ("a", "b"))]) == [VerifierScore((0.0, 0.8), 0.4, invalid=1)]


def test_a_returned_verifier_score_is_passed_on_as_it_is():
    own = VerifierScore((0.5,), math.nan, Usage(prompt_tokens=7, calls=1), invalid=0)
    for verifier in (FunctionVerifier(lambda problem, text: own),
                     FunctionVerifier(lambda problem, steps: own, per_step=True),
                     FunctionVerifier.of_items(lambda item: own)):
        assert verifier.score([VerifyItem(PROBLEM, ("x",))])[0] is own


def test_an_item_reward_reads_the_item_itself():
    verifier = FunctionVerifier.of_items(lambda item: 1.0 if item.finished else 0.5, per_step=True)
    items = [VerifyItem(PROBLEM, ("a",), finished=True), VerifyItem(PROBLEM, ("a",))]
    assert [s.score for s in verifier.score(items)] == [1.0, 0.5] and verifier.step_verifier


def test_a_per_step_reward_with_the_wrong_number_of_scores_and_bad_settings_are_refused():
    with pytest.raises(ValueError, match="returned 1 scores for 2 steps"):
        FunctionVerifier(lambda problem, steps: [1.0], per_step=True).score([VerifyItem(PROBLEM, ("a", "b"))])
    with pytest.raises(ValueError, match="aggregation must be one of last, min, prod, mean; got 'max'"):
        FunctionVerifier(lambda problem, steps: [], per_step=True, aggregation="max")
    with pytest.raises(ValueError, match="pass per_step=True"):
        FunctionVerifier(lambda problem, text: 1.0, aggregation="min")
    with pytest.raises(TypeError, match="needs a function"):
        FunctionVerifier(0.5)


def test_best_of_n_picks_the_sample_the_function_prefers_and_a_raising_function_is_counted():
    replies = ["2 + 3 = 6, so \\boxed{6}", "2 + 3 = 5, so \\boxed{5}", "\\boxed{6}"]
    gen = FunctionGenerator(lambda request: replies)
    verifier = FunctionVerifier(lambda problem, text: 1.0 if "= 5" in text else 0.0)
    [sol] = BestOfN(BestOfNConfig(n=3), gen, MATH_PROMPT.render, verifier=verifier).solve([PROBLEM])
    assert sol.answer == "5" and sol.trace.scores == (0.0, 1.0, 0.0) and verifier.calls == [3]

    def down(problem, text):
        raise ConnectionError("scorer unreachable")

    [sol] = BestOfN(BestOfNConfig(n=3), gen, MATH_PROMPT.render, verifier=FunctionVerifier(down)).solve([PROBLEM])
    assert sol.trace.events == {"verifier_error": 1} and set(sol.trace.scores) == {0.0}
