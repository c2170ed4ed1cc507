"""Generative verification (S solutions x V verifications) on the scripted backend: its cost split
and lambda come from the real token counts, one solve and one verify call per batch, selection
follows the verdicts, and a verifier that fails or says nothing is counted, not fatal."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

from tests.fakes import Rewriting
from tts.backends.base import Completion, GenerationResult, request_usage
from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.config import EvalConfig, parse_strategy_config
from tts.eval.runner import run_eval
from tts.prompts import MATH_PROMPT
from tts.registry import STRATEGIES
from tts.search.base import StrategyInputError
from tts.search.sequential.generative_verification import (
    GenerativeVerification,
    GenerativeVerificationConfig,
    VerificationCost,
    matched_self_consistency_n,
    measured_lambda,
)
from tts.types import Budget, Problem

PROBLEMS = [Problem(f"p{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(12)]
_VERDICT = re.compile(r"yes\s+or\s+no", re.IGNORECASE)


def _is_verification(request) -> bool:
    return bool(_VERDICT.search(request.messages[-1].content))


def BelievesAnswer(inner, believed: str) -> Rewriting:  # noqa: N802 -- reads as the model it builds
    """Solves with a scripted model; as a verifier, says Yes exactly to solutions answering ``believed``."""

    def verdicts(r, result):
        if not _is_verification(r):
            return None
        verdict = "Yes" if f"\\boxed{{{believed}}}" in r.messages[-1].content else "No"
        texts = [f"I checked it. {verdict}."] * r.n
        return GenerationResult(tuple(Completion(t, 5) for t in texts), request_usage(50, 0, [5] * r.n, 0.0))

    return Rewriting(inner, after=verdicts)


def BrokenJudge(inner, believed: str) -> Rewriting:  # noqa: N802 -- reads as the model it builds
    """A verifier whose calls raise (an engine that died, a server that went away)."""

    def died(r, result):
        if _is_verification(r):
            raise RuntimeError("judge engine died")

    return Rewriting(inner, after=died)


def _strategy(gen, **knobs) -> GenerativeVerification:
    return GenerativeVerification(GenerativeVerificationConfig(**knobs), gen, MATH_PROMPT.render)


def test_cost_split_and_lambda_are_the_tokens_the_solver_and_the_scripted_judge_produced():
    gen = RecordingGenerator(ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=5))
    sols = _strategy(gen, n=3, verifications=2).solve(PROBLEMS[:4])
    (solve_reqs, verify_reqs), (solve_res, verify_res) = gen.calls, gen.results  # exactly one call each
    assert [r.n for r in solve_reqs] == [3] * 4 and not any(map(_is_verification, solve_reqs))
    assert len(verify_reqs) == 4 * 3 and all(r.n == 2 and _is_verification(r) for r in verify_reqs)
    for sol, result in zip(sols, solve_res, strict=True):
        mine = [res for req, res in zip(verify_reqs, verify_res, strict=True) if req.key == sol.problem_id]
        judged = [c.completion_tokens for res in mine for c in res.completions]
        cost = VerificationCost.from_trace(sol.trace)
        assert cost.solutions == 3 and cost.verifications == 6 == len(judged)
        assert cost.solve_tokens == sum(c.completion_tokens for c in result.completions)
        assert cost.verify_tokens == sum(judged)  # what the scripted judge generated, counted once
        assert cost.verify_prompt_tokens == sum(res.usage.prompt_tokens for res in mine)
        assert sol.usage.completion_tokens == cost.solve_tokens + cost.verify_tokens
        assert sol.usage.calls == 1 + 3
        assert cost.lam == pytest.approx((sum(judged) / 6) / (cost.solve_tokens / 3))
        root = sol.trace.tree[0]
        assert root["lambda"] == pytest.approx(cost.lam)
        assert root["text"].startswith(f"lambda {cost.lam:.2f}, matched SC n={matched_self_consistency_n(3, 2, cost.lam)}")
        assert [node["verify_tokens"] for node in sol.trace.tree[1:]] == [
            sum(c.completion_tokens for c in res.completions) for res in mine]
    # over the run: the ratio of mean lengths, from the counts of both calls
    solve_tokens = sum(c.completion_tokens for res in solve_res for c in res.completions)
    verify_tokens = sum(c.completion_tokens for res in verify_res for c in res.completions)
    lam = measured_lambda(s.trace for s in sols)
    assert lam == pytest.approx((verify_tokens / 24) / (solve_tokens / 12))
    assert matched_self_consistency_n(3, 2, lam) == round(3 * (1 + 2 * lam))


def test_matched_n_follows_singhi_et_al_and_refuses_nonsense():
    assert matched_self_consistency_n(4, 2, 0.5) == 8
    assert matched_self_consistency_n(1, 0, 3.0) == 1
    assert matched_self_consistency_n(8, 4, 0.0) == 8
    with pytest.raises(ValueError, match="S >= 1"):
        matched_self_consistency_n(0, 2, 0.5)


def test_one_solve_call_and_one_verify_call_per_batch_through_the_runner(tmp_path):
    gen = RecordingGenerator(ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=2))
    cfg = EvalConfig.model_validate({
        "data": {"benchmark": "jsonl"}, "backend": {"kind": "scripted"}, "batch_size": 4, "seed": 2,
        "strategies": [{"kind": "generative_verification", "n": 2, "verifications": 3}],
        "sampling": {"max_tokens": 64}})
    result = run_eval(cfg, tmp_path, generator=gen, problems=PROBLEMS[:8])
    kinds = [all(map(_is_verification, reqs)) for reqs in gen.calls]
    assert kinds == [False, True, False, True]  # two batches of 4: solve, verify, solve, verify
    assert [len(reqs) for reqs in gen.calls] == [4, 8, 4, 8]
    assert result.summaries[0].config == "generative_verification@2,verifications=3"
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(VerificationCost.from_trace(r["trace"]).verifications == 6 for r in rows)
    assert measured_lambda(r["trace"] for r in rows) > 0


def test_selection_follows_the_verdicts_not_the_majority():
    # The model answers 4 most often (0.6) and 5 less (0.3); the verifier believes only 5.
    solver = ScriptedGenerator({"p2": {"4": 0.6, "5": 0.3}}, seed=1)
    gen = BelievesAnswer(solver, believed="5")
    sol = _strategy(gen, n=8, verifications=2).solve([PROBLEMS[2]])[0]
    answers = [s.answer for s in sol.trace.samples]
    assert answers.count("4") > answers.count("5") > 0  # self-consistency would answer 4
    assert sol.answer == "5" and sol.confidence == 1.0
    assert sol.trace.selected == answers.index("5")  # the earliest of the best-scored
    assert sol.trace.scores == tuple(1.0 if a == "5" else 0.0 for a in answers)


def test_the_best_verification_score_wins_with_the_scripted_judge():
    gen = ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.35, seed=4)
    for sol in _strategy(gen, n=6, verifications=3).solve(PROBLEMS):
        scores = sol.trace.scores
        answered = [i for i, s in enumerate(sol.trace.samples) if s.answer is not None]
        best = max(scores[i] for i in answered)
        assert sol.trace.selected == next(i for i in answered if scores[i] == best)
        assert sol.answer == sol.trace.samples[sol.trace.selected].answer and sol.confidence == best
        # a score is the share of Yes among the V verdicts: a multiple of 1/3, or 1/2 when one lacked a verdict
        assert all(any(abs(s * k - round(s * k)) < 1e-9 for k in (2, 3)) for s in scores)


def test_weighted_vote_adds_verification_scores_per_answer():
    solver = ScriptedGenerator({"p2": {"4": 0.6, "5": 0.3}}, seed=1)
    sol = _strategy(BelievesAnswer(solver, "5"), n=8, verifications=2, select="weighted_vote").solve([PROBLEMS[2]])[0]
    n5 = sum(s.answer == "5" for s in sol.trace.samples)
    assert sol.answer == "5" and sol.trace.votes == {"4": 0.0, "5": float(n5)} and sol.confidence == 1.0


def test_a_verifier_that_fails_is_an_event_and_the_run_goes_on():
    solver = ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=3)
    sols = _strategy(BrokenJudge(solver, "0"), n=4, verifications=2).solve(PROBLEMS[:3])
    assert len(sols) == 3
    for sol in sols:
        assert sol.trace.events == {"verifier_error": 1}
        assert sol.trace.scores == (0.5,) * 4
        answered = [i for i, s in enumerate(sol.trace.samples) if s.answer is not None]
        assert sol.trace.selected == (answered[0] if answered else None)
        assert VerificationCost.from_trace(sol.trace).verify_tokens == 0  # nothing was generated, nothing charged


def test_a_judge_that_gives_no_verdict_is_counted_per_solution():
    gen = ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=3, verdict_mass=0.0)
    sols = _strategy(gen, n=4, verifications=2).solve(PROBLEMS[:3])
    for sol in sols:
        # 4 solutions x 2 replies without a verdict; no valid verdict scores 0 (Singhi et al.)
        assert sol.trace.events == {"no_verdict": 4, "invalid_verdict": 8} and sol.trace.scores == (0.0,) * 4
        assert VerificationCost.from_trace(sol.trace).verify_tokens > 0  # the rambling was still paid for


def test_budgets_cap_the_solutions_and_a_budget_too_small_says_what_to_change():
    gen = RecordingGenerator(ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.4, seed=3))
    strategy = _strategy(gen, n=6, verifications=2)
    sols = strategy.solve(PROBLEMS[:2], [Budget(samples=2), Budget(tokens=(256 + 2 * 256) * 3)])
    assert [len(s.trace.samples) for s in sols] == [2, 3]
    with pytest.raises(StrategyInputError, match="verifier.max_tokens"):
        strategy.solve(PROBLEMS[:1], [Budget(tokens=300)])


def test_config_refuses_a_non_generative_verifier_and_conflicting_votes():
    assert STRATEGIES.load("generative_verification") is GenerativeVerification
    cfg = parse_strategy_config({"kind": "generative_verification", "n": 4, "verifications": 2,
                                 "verifier": {"kind": "judge", "max_tokens": 64}})
    assert cfg.verifier.max_tokens == 64 and cfg.verifier.votes == 0
    assert cfg.label == "generative_verification@4,verifications=2,verifier=judge(max_tokens=64)"
    with pytest.raises(ValidationError, match="best_of_n or weighted_vote with verifier prm"):
        GenerativeVerificationConfig(verifier="prm")
    with pytest.raises(ValidationError, match="set V with verifications"):
        GenerativeVerificationConfig(verifications=2, verifier={"kind": "judge", "votes": 3})
    with pytest.raises(ValidationError):
        GenerativeVerificationConfig(verifications=0)
