"""Generative verification's rules worked out by hand on a model whose solutions and verdicts a
function writes: the requests as sent, the cost node and lambda, each solution's node, selection
and its fallbacks, refusals, closing the judge, and the cost hook."""

from __future__ import annotations

import logging
import re

import pytest

from tts.backends.base import Completion, derive_seed
from tts.backends.function import FunctionGenerator
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.base import StrategyInputError
from tts.search.sequential.generative_verification import (
    GenerativeVerification,
    GenerativeVerificationConfig,
    VerificationCost,
    matched_self_consistency_n,
    measured_lambda,
)
from tts.types import Budget, Problem, RequestShape

PROBLEM = Problem("p1", "What is 2 + 3?", "5")
_VERIFY = re.compile(r"yes\s+or\s+no", re.IGNORECASE)


def _model(solutions: list[str], believed: str | None = "5", verdict_tokens: int = 5, solve_tokens: int = 10,
           broken: bool = False) -> FunctionGenerator:
    """Solves with ``solutions`` (one text each, ``solve_tokens`` tokens); as the judge, ends with Yes
    exactly for a solution answering ``believed`` (``verdict_tokens`` tokens a reply)."""
    def reply(req):
        content = req.messages[-1].content
        if _VERIFY.search(content):
            if broken:
                raise RuntimeError("judge engine died")
            verdict = "Yes" if believed is not None and f"\\boxed{{{believed}}}" in content else "No"
            return Completion(f"Checked.\n{verdict}", verdict_tokens, finish_reason="stop")
        return [Completion(text, solve_tokens, finish_reason="stop") for text in solutions]
    return FunctionGenerator(reply)


def _strategy(gen, sampling=None, seed=0, **cfg) -> GenerativeVerification:
    return GenerativeVerification(GenerativeVerificationConfig(**cfg), gen, MATH_PROMPT.render, sampling=sampling,
                                  seed=seed)


THREE = ["First \\boxed{4}.", "Second \\boxed{4}.", "Third \\boxed{5}."]


def test_the_solve_request_carries_the_sampling_settings_and_the_seed_given_by_keyword():
    gen = _model(THREE)
    _strategy(gen, SamplingConfig(temperature=0.3, top_p=0.8, max_tokens=77), seed=9, n=3, verifications=2
              ).solve([PROBLEM])
    [solve], verify = gen.calls
    assert (solve.n, solve.temperature, solve.top_p, solve.max_tokens) == (3, 0.3, 0.8, 77)
    assert solve.seed == derive_seed(9, "p1", 0) and solve.key == "p1"
    assert len(verify) == 3 and all(r.n == 2 for r in verify)


def test_the_trace_has_the_cost_node_with_lambda_and_each_solution_under_it():
    gen = _model(THREE)
    [sol] = _strategy(gen, n=3, verifications=2).solve([PROBLEM])
    assert (sol.problem_id, sol.answer, sol.confidence) == ("p1", "5", 1.0)
    assert sol.trace.strategy == "generative_verification"
    assert sol.trace.scores == (0.0, 0.0, 1.0) and sol.trace.selected == 2 and sol.trace.votes == {}
    assert sol.trace.events == {}
    root, *nodes = sol.trace.tree
    # 3 solutions of 10 tokens; 3 x 2 verifications of 5: lambda = (30 / 6) / (30 / 3) = 0.5,
    # matched n = round(3 (1 + 0.5 x 2)) = 6
    verify_prompt = sum(res.usage.prompt_tokens for res in gen.results[1])  # the judge's prompts, as counted
    assert root == {"id": "cost", "parent": None, "depth": 0, "score": None, "kept": True,
                    "text": "lambda 0.50, matched SC n=6: verify 30 tok / 6, solve 30 tok / 3; "
                            "cost S(1+lambda V) = 6.0 solutions at S=3, V=2",
                    "solutions": 3, "solve_tokens": 30, "verifications": 6, "verify_tokens": 30,
                    "verify_prompt_tokens": verify_prompt, "lambda": 0.5}
    assert nodes == [{"id": i, "parent": "cost", "depth": 1, "score": score, "kept": i == 2, "answer": answer,
                      "text": f"answer {answer!r}: {text}", "solve_tokens": 10, "verify_tokens": 10}
                     for i, (text, answer, score) in enumerate(zip(THREE, ["4", "4", "5"], [0.0, 0.0, 1.0],
                                                                   strict=True))]


def test_a_broken_judge_leaves_lambda_unknown_says_so_and_is_logged(caplog):
    with caplog.at_level(logging.WARNING, logger="tts.verifiers.base"):
        [sol] = _strategy(_model(THREE, broken=True), n=3, verifications=2).solve([PROBLEM])
    assert sol.trace.tree[0]["text"] == "lambda unknown (nothing verified): verify 0 tok / 0, solve 30 tok / 3"
    assert sol.trace.tree[0]["lambda"] is None and sol.trace.events == {"verifier_error": 1}
    assert "failed on 3 solutions (judge engine died); each scores 0.5" in caplog.text


def test_no_answered_solution_has_no_answer_and_no_confidence():
    [sol] = _strategy(_model(["No idea.", "Still none."]), n=2, verifications=1).solve([PROBLEM])
    assert (sol.answer, sol.confidence, sol.trace.selected) == (None, 0.0, None)


def test_weighted_vote_falls_back_to_a_plain_count_when_the_judge_rejects_every_answer():
    [sol] = _strategy(_model(THREE, believed=None), n=3, verifications=2, select="weighted_vote").solve([PROBLEM])
    assert (sol.answer, sol.confidence, sol.trace.selected) == ("4", pytest.approx(2 / 3), 0)
    assert sol.trace.votes == {"4": 2.0, "5": 1.0} and sol.trace.events == {"unweighted_vote": 1}
    assert [n["kept"] for n in sol.trace.tree[1:]] == [True, False, False]


def test_a_per_step_judge_is_shown_each_step_of_a_solution():
    two_steps = ["Add 2 and 3.\n\nSo \\boxed{5}."]
    gen = _model(two_steps)
    [sol] = _strategy(gen, n=1, verifications=1, verifier={"kind": "judge", "per_step": True}).solve([PROBLEM])
    assert len(gen.calls[1]) == 2  # the first step alone, then both
    assert "Add 2 and 3.\nSo \\boxed{5}." in gen.calls[1][1].messages[-1].content
    assert sol.trace.scores == (1.0,)


def test_a_budget_of_one_solution_is_enough_and_a_smaller_one_says_what_to_lower():
    strategy = _strategy(_model(THREE), n=3, verifications=2)
    [sol] = strategy.solve([PROBLEM], [Budget(samples=1)])
    assert len(sol.trace.samples) == 1
    worst = 256 + 2 * 256
    with pytest.raises(StrategyInputError, match=re.escape(
            f"generative_verification: a budget of {Budget(tokens=300)} does not cover one solution with 2 "
            f"verifications (up to {worst} tokens); raise the budget, or lower max_tokens, verifications or "
            "verifier.max_tokens.")):
        strategy.solve([PROBLEM], [Budget(tokens=300)])
    with pytest.raises(StrategyInputError, match=r"^got 1 budgets for 2 problems; give one per problem$"):
        strategy.solve([PROBLEM, PROBLEM], [None])


def test_closing_closes_the_judge_and_a_later_solve_builds_a_new_one(monkeypatch):
    strategy = _strategy(_model(THREE), n=3, verifications=2)
    judge = strategy.verifier
    closed = []
    monkeypatch.setattr(judge, "close", lambda: closed.append(True))
    strategy.close()
    assert closed == [True]
    [sol] = strategy.solve([PROBLEM])
    assert strategy.verifier is not judge and sol.trace.events == {} and sol.answer == "5"


def test_costs_add_field_by_field_and_other_strategies_traces_have_none():
    total = VerificationCost(1, 2, 3, 4, 5) + VerificationCost(10, 20, 30, 40, 50)
    assert total == VerificationCost(11, 22, 33, 44, 55)
    assert VerificationCost.from_trace({"tree": [{"id": 0}]}) is None and VerificationCost.from_trace({}) is None
    assert measured_lambda([{"tree": [{"id": "0.0"}]}]) is None


def test_matched_n_refuses_a_negative_lambda_or_v_alone():
    with pytest.raises(ValueError, match="lambda=-0.5"):
        matched_self_consistency_n(4, 2, -0.5)
    with pytest.raises(ValueError, match="V=-1"):
        matched_self_consistency_n(4, -1, 0.5)


def test_the_cost_hook_shapes_exactly():
    # default V = 4: one solve request of n, then n verification requests of V replies each
    assert GenerativeVerification.planned_requests(2, 100, 50) == (
        [RequestShape(100, 0, (50, 50))] + [RequestShape(180, 0, (50,) * 4)] * 2)
    assert GenerativeVerification.planned_requests(1, 100, 50, cached_tokens=20) == [
        RequestShape(100, 20, (50,)), RequestShape(180, 0, (50,) * 4)]
