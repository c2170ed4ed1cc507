"""Revision's rules worked out by hand: each request as sent, the revision turn, what the verifier
is given, the events it counts, each way of selecting, the trace a user reads, and the cost hook."""

from __future__ import annotations

import logging
import math

import pytest

import tts.search.sequential.execution_feedback as execution_feedback_module
from tts.backends.base import Completion, derive_seed
from tts.backends.function import FunctionGenerator, RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.base import StrategyInputError
from tts.search.sequential.revision import Revision, RevisionConfig, plan_attempts
from tts.types import Budget, Problem, RequestShape
from tts.verifiers.base import VerifierScore
from tts.verifiers.function import FunctionVerifier

PROBLEM = Problem("p1", "What is 1 + 1?", "2")
INSTRUCTION = RevisionConfig().instruction


def _boxed(*answers: str):
    """A model whose first attempts answer ``answers`` in turn and whose revisions answer the last one."""
    def reply(req):
        if req.messages[-1].role == "user" and len(req.messages) > len(MATH_PROMPT.render(PROBLEM)):
            return f"Revised.\n\nSo \\boxed{{{answers[-1]}}}."
        return [f"Try.\n\nSo \\boxed{{{a}}}." for a in answers]
    return FunctionGenerator(reply)


def _by_answer(scores: dict[str, float | VerifierScore], default: float = 0.0) -> FunctionVerifier:
    """Scores a text by its boxed answer."""
    def reward(problem, text):
        return next((s for a, s in scores.items() if f"\\boxed{{{a}}}" in text), default)
    return FunctionVerifier(reward, name="answer")


def _revision(gen, ready=None, sampling=None, seed=0, **cfg) -> Revision:
    """A Revision; ``ready`` is a verifier object used in place of the config's (which must name one)."""
    return Revision(RevisionConfig(**cfg), gen, MATH_PROMPT.render, sampling, seed=seed, verifier=ready)


def _fake_execution(monkeypatch, result):
    """Execution feedback without a sandbox: every program gets ``result`` (score, feedback, seconds)."""
    def run(problems, programs):
        return [result for _ in programs]
    monkeypatch.setattr(execution_feedback_module, "execution_feedback", run)


# --- requests and the revision turn ---------------------------------------------------------------


def test_every_request_carries_the_sampling_settings_logprobs_for_the_verifier_and_a_seed_per_chain_and_round():
    gen = RecordingGenerator(ScriptedGenerator.for_problems([PROBLEM], accuracy=0.5, seed=1))
    rev = _revision(gen, _by_answer({}), SamplingConfig(temperature=0.3, top_p=0.8, max_tokens=77), seed=11,
                    n=4, rounds=1, verifier="arithmetic")
    rev.solve([PROBLEM])
    label = rev.config.label
    [first], revisions = gen.calls
    assert (first.n, first.temperature, first.top_p, first.max_tokens, first.logprobs) == (2, 0.3, 0.8, 77, True)
    assert first.seed == derive_seed(11, f"p1|{label}|start", 0)
    assert [(r.n, r.temperature, r.top_p, r.max_tokens, r.logprobs) for r in revisions] == [(1, 0.3, 0.8, 77, True)] * 2
    assert [r.seed for r in revisions] == [derive_seed(11, f"p1|{label}|chain{ch}", 1) for ch in (0, 1)]
    # Without a verifier nothing reads logprobs: none are asked for.
    gen = RecordingGenerator(ScriptedGenerator.for_problems([PROBLEM], accuracy=0.5, seed=1))
    _revision(gen, n=2, rounds=1).solve([PROBLEM])
    assert [r.logprobs for c in gen.calls for r in c] == [False, False]


def test_the_revision_turn_is_the_critique_or_the_execution_feedback_a_blank_line_then_the_instruction(monkeypatch):
    gen = _boxed("3")
    _revision(gen, _by_answer({"3": 0.25}), n=2, rounds=1, verifier="arithmetic", critique=True).solve([PROBLEM])
    assert gen.calls[1][0].messages[-1].content == (
        "A checker gave your solution a score of 0.25 on a scale from 0 (wrong) to 1 (right).\n\n" + INSTRUCTION)
    _fake_execution(monkeypatch, (0.5, "`f(0)` should return `0`.", 0.0))
    gen = _boxed("3")
    _revision(gen, n=2, rounds=1, feedback="execution").solve([PROBLEM])
    assert gen.calls[1][0].messages[-1].content == "`f(0)` should return `0`.\n\n" + INSTRUCTION


# --- budgets ------------------------------------------------------------------------------------------


def test_a_budget_of_one_attempt_runs_one_attempt_and_a_larger_allowance_keeps_the_configured_chains():
    gen = _boxed("3")
    [sol] = _revision(gen, n=4, rounds=1).solve([PROBLEM], [Budget(samples=1)])
    assert [(n["chain"], n["round"]) for n in sol.trace.tree] == [(0, 0)] and len(gen.calls) == 1
    assert plan_attempts(4, 1, 10) == (4, 1)  # more allowed than S x (R + 1): never more chains


def test_no_problems_solve_to_nothing_and_budgets_must_match_the_problems():
    assert _revision(_boxed("3"), n=2, rounds=1).solve([]) == []
    with pytest.raises(StrategyInputError, match=r"^got 1 budgets for 2 problems; give one per problem$"):
        _revision(_boxed("3"), n=2, rounds=1).solve([PROBLEM, PROBLEM], [None])


# --- what the verifier is given and what it counts --------------------------------------------------------


def test_a_step_verifier_gets_the_attempt_cut_into_steps_and_a_whole_verifier_its_mean_logprob():
    gen = FunctionGenerator(lambda req: Completion("One.\n\nTwo.\n\nSo \\boxed{2}.", 6, mean_logprob=-0.5))
    steps = FunctionVerifier.of_items(lambda item: len(item.steps) / 10, per_step=True)
    [sol] = _revision(gen, steps, n=1, rounds=0, verifier="arithmetic").solve([PROBLEM])
    assert sol.trace.scores == (0.3,)
    whole = FunctionVerifier.of_items(lambda item: -item.logprobs[0] / 2)
    [sol] = _revision(gen, whole, n=1, rounds=0, verifier="arithmetic").solve([PROBLEM])
    assert sol.trace.scores == (0.25,) and sol.trace.events == {}


def test_scores_out_of_range_and_replies_without_a_verdict_are_counted_per_problem_across_rounds():
    # A verifier's own score out of [0, 1] (not cleaned by it), then its two replies without a verdict.
    verifier = _by_answer({"1": VerifierScore((), math.nan), "2": VerifierScore((), 0.5, invalid=2)})
    [sol] = _revision(_boxed("1", "2"), verifier, n=2, rounds=1, verifier="arithmetic").solve([PROBLEM])
    # round 0: NaN is counted once and scores 0; round 1: the verifier's own two invalid replies
    assert sol.trace.scores == (0.0, 0.5) and sol.trace.events == {"invalid_score": 3}


def test_a_broken_verifier_is_logged_with_what_it_failed_on(caplog):
    def down(problem, text):
        raise RuntimeError("judge down")

    with caplog.at_level(logging.WARNING, logger="tts.verifiers.base"):
        _revision(_boxed("3", "4"), FunctionVerifier(down, name="answer"), n=2, rounds=0,
                  verifier="arithmetic").solve([PROBLEM])
    assert "verifier answer failed on 2 attempts (judge down); each scores 0" in caplog.text


# --- selection and the trace ---------------------------------------------------------------------------


def test_without_a_verifier_the_trace_has_no_scores_and_each_attempt_is_a_node_of_its_chain():
    [sol] = _revision(_boxed("3", "4"), n=2, rounds=0).solve([PROBLEM])
    assert (sol.problem_id, sol.answer, sol.confidence) == ("p1", "3", 0.5)  # a tie goes to the earlier answer
    assert sol.trace.strategy == "revision" and sol.trace.scores == () and sol.trace.events == {}
    assert sol.trace.votes == {"3": 1.0, "4": 1.0} and sol.trace.selected == 0
    [sol] = _revision(_boxed("3"), n=2, rounds=1).solve([PROBLEM])
    assert sol.trace.tree == (
        {"id": "0.0", "parent": None, "depth": 0, "chain": 0, "round": 0, "text": "Try.\n\nSo \\boxed{3}.",
         "score": None, "answer": "3", "kept": True, "finished": True},
        {"id": "0.1", "parent": "0.0", "depth": 1, "chain": 0, "round": 1, "text": "Revised.\n\nSo \\boxed{3}.",
         "score": None, "answer": "3", "kept": True, "finished": True})


def test_select_verifier_breaks_equal_scores_by_support_then_by_the_earliest_attempt():
    [sol] = _revision(_boxed("5", "4", "4"), _by_answer({}, default=0.5), n=3, rounds=0, verifier="arithmetic",
                      select="verifier").solve([PROBLEM])
    assert (sol.answer, sol.confidence, sol.trace.selected, sol.trace.votes) == ("4", 0.5, 1, {})
    [sol] = _revision(_boxed("6", "5", "5", "6"), _by_answer({}, default=0.5), n=4, rounds=0, verifier="arithmetic",
                      select="verifier").solve([PROBLEM])
    assert (sol.answer, sol.trace.selected) == ("6", 0)


def test_select_verifier_with_no_answered_attempt_has_no_answer():
    gen = FunctionGenerator(lambda req: "I do not know.")
    [sol] = _revision(gen, _by_answer({}, default=0.75), n=2, rounds=0, verifier="arithmetic",
                      select="verifier").solve([PROBLEM])
    assert (sol.answer, sol.confidence, sol.trace.selected) == (None, 0.0, None)


def test_weighted_vote_weighs_each_attempt_by_its_score_and_falls_back_to_a_plain_vote_when_none_scores():
    gen = _boxed("4", "4", "4", "5")
    [sol] = _revision(gen, _by_answer({"4": 0.125, "5": 0.875}), n=4, rounds=0, verifier="arithmetic",
                      select="weighted_vote").solve([PROBLEM])
    # 4: 3 x 0.125 = 0.375 against 5: 0.875, of 1.25 in all
    assert sol.answer == "5" and sol.confidence == pytest.approx(0.7)
    assert sol.trace.votes == {"4": 0.375, "5": 0.875} and sol.trace.events == {}
    [sol] = _revision(gen, _by_answer({}, default=0.0), n=4, rounds=0, verifier="arithmetic",
                      select="weighted_vote").solve([PROBLEM])
    assert (sol.answer, sol.confidence) == ("4", 0.75) and sol.trace.events == {"unweighted_vote": 1}


# --- execution feedback -------------------------------------------------------------------------------


def test_execution_seconds_add_up_over_the_rounds_rounded_to_milliseconds(monkeypatch):
    _fake_execution(monkeypatch, (0.5, "wrong", 0.12345))
    [sol] = _revision(_boxed("3"), n=2, rounds=1, feedback="execution").solve([PROBLEM])
    assert sol.trace.notes == {"execution_seconds": 0.247} and sol.trace.scores == (0.5, 0.5)


def test_a_problem_without_stated_examples_scores_nothing_and_select_verifier_is_not_confident(monkeypatch):
    _fake_execution(monkeypatch, (None, "", 0.0))
    [sol] = _revision(_boxed("3", "3"), n=2, rounds=0, feedback="execution", select="verifier").solve([PROBLEM])
    assert (sol.answer, sol.confidence, sol.trace.scores) == ("3", 0.0, ())


# --- the cost hook ----------------------------------------------------------------------------------


def test_the_cost_hook_shapes_exactly():
    assert Revision.planned_requests(8, prompt_tokens=100, gen_tokens=50) == (
        [RequestShape(100, 0, (50,) * 4)] + [RequestShape(180, 100, (50,))] * 4)
    assert Revision.planned_requests(2, 100, 50, cached_tokens=20) == [RequestShape(100, 20, (50,)),
                                                                        RequestShape(180, 100, (50,))]
    assert Revision.planned_requests(1, 100, 50) == [RequestShape(100, 0, (50,))]
