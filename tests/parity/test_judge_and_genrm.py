"""The LLM judge's verdicts and generative verification (GenRM) against their references.

References:

* Singhi et al. 2025, "When To Solve, When To Verify" (arXiv:2504.01005), code
  github.com/nishadsinghi/sc-genrm-scaling at commit 1d310ee8883b6cb3eeee7d3d302bddd0c90e716c:
  ``llmonk/evaluate/eval_utils.py`` (``extract_final_verification``, ``get_solution_score``,
  ``compute_best_of_k``, ``compute_weighted_sc``), ``llmonk/verify/generate_verifications.py``
  (``extract_P_yes``) and ``llmonk/evaluate/plot_success_rate.py`` (the compute axis
  ``s * (1 + lambda_ * v)``).
* Zhang et al. 2024, "Generative Verifiers: Reward Modeling as Next-Token Prediction"
  (arXiv:2408.15240): GenRM-CoT samples several verification rationales that each END in the
  answer to "Is the answer correct (Yes/No)?", and scores a solution by averaging over them
  (the paper's majority voting).

The rules are transcribed below in our own code and compared with tts on hand-made inputs.
"""

from __future__ import annotations

import math
import re

import pytest

from tts.backends.base import Completion
from tts.backends.function import FunctionGenerator
from tts.prompts import MATH_PROMPT
from tts.search.sequential.generative_verification import (
    GenerativeVerification,
    GenerativeVerificationConfig,
    VerificationCost,
    matched_self_consistency_n,
)
from tts.types import Problem
from tts.verifiers.base import VerifyItem
from tts.verifiers.judge import JudgeConfig, LLMJudge, final_verdict

PINNED = {"verifier:judge", "strategy:generative_verification"}


# --- the references' rules, transcribed ---------------------------------------------------------


def singhi_text_verdict(text: str) -> bool | None:
    """Singhi et al.'s text reading of a verification (eval_utils.py, ``extract_final_verification``):
    the reply must end with the question "Is the answer (or solution) correct" (optionally "(Yes/No)",
    "?", bold markers) followed, on the same final line, by the answer; that answer is Yes when it
    contains "yes", else No when it contains "no"; anything else has no verdict. (Their fallback for
    a "[CORRECT]"-style judge output does not apply to tts's prompt.)"""
    last = text.strip().split("\n")[-1]
    at = [m.end() for m in re.finditer(r"is the (?:answer|solution) correct", last, re.IGNORECASE)]
    if not at:
        return None
    rest = last[at[-1]:]
    rest = re.sub(r"^\s*\(yes/no\)", "", rest, flags=re.IGNORECASE).lstrip("?* \t").lower()
    if not rest:
        return None
    return True if "yes" in rest else False if "no" in rest else None


def singhi_solution_score(verdicts: list[bool | None]) -> float:
    """``get_solution_score``: the mean of a solution's verdicts, those without a verdict left out;
    0 when none has one."""
    valid = [float(v) for v in verdicts if v is not None]
    return sum(valid) / len(valid) if valid else 0.0


def singhi_best_of_n(answers: list[str | None], scores: list[float]) -> str | None:
    """``compute_best_of_k``: solutions without an answer score 0; the best-scored solution's answer.
    (The reference averages accuracy over random orders of tied scores; these inputs have no ties.)"""
    zeroed = [0.0 if a is None else s for a, s in zip(answers, scores, strict=True)]
    return answers[max(range(len(answers)), key=lambda i: zeroed[i])]


def singhi_weighted_vote(answers: list[str | None], scores: list[float]) -> str | None:
    """``compute_weighted_sc``: each answer's weight is the sum of its solutions' scores; a missing
    answer can never win; the heaviest answer is chosen."""
    weight: dict[str, float] = {}
    for a, s in zip(answers, scores, strict=True):
        if a is not None:
            weight[a] = weight.get(a, 0.0) + s
    return max(weight, key=weight.__getitem__) if weight else None


def singhi_compute(s: int, v: int, lam: float) -> float:
    """plot_success_rate.py: S solutions with V verifications each cost S (1 + lambda V) solutions."""
    return s * (1 + lam * v)


# --- 1. reading one verdict ----------------------------------------------------------------------

# (reply, finish reason, the trailing verdict)
CASES = [
    ("Yes, the solution is correct: there is no error.", "stop", True),  # finding 6
    ("Step 2 is fine, no issue with", "length", None),  # cut off at max_tokens: no verdict
    ("The sum is 16 and the solution says 17. No.", "stop", False),
    ("No wait, the sum is right. Yes.", "stop", True),
    ("Each step checks out.\n\nVerdict: Yes", "stop", True),
    ("3 + 4 is 7, not 8.\n\n**Verdict:** No", "stop", False),
    ("The final answer matches.\n\n\\boxed{Yes}", "stop", True),
    ("Let me verify.\nIs the answer correct (Yes/No)? Yes", "stop", True),
    ("Let me verify.\nIs the answer correct (Yes/No)? No, step 2 is wrong.", "stop", False),
    ("Let me verify.\nIs the answer correct (Yes/No)?", "stop", None),  # the question echoed, unanswered
    ("Yes.\n\nI checked each step and there is no error anywhere", "stop", None),  # not trailing
    ("Nothing to say.", "stop", None),  # "Nothing" is not "No"
    ("No error found", "stop", None),  # "No error" is not a verdict
    ("Verdict: Yes", "length", None),  # whatever it says, a reply cut off is not a verdict
    ("", "stop", None),
]


@pytest.mark.parametrize(("text", "finish", "expected"), CASES)
def test_only_a_trailing_verdict_of_a_finished_reply_counts(text, finish, expected):
    """GenRM's verifiers answer Yes/No at the END of the rationale (Zhang et al. 2024, GenRM-CoT), and
    Singhi et al. read the verdict there: the text after the final-line question
    (``extract_final_verification``) or the logprobs of the second-to-last / third-to-last token
    (``extract_P_yes``). tts reads the last non-empty line; a reply cut off at max_tokens has none."""
    assert final_verdict(text, finish) is expected


def test_no_used_as_an_ordinary_word_is_not_the_verdict():
    """Issue 19, finding 6: the last "no" anywhere in the reply used to be read as the verdict; the
    reference reads the answer after the final question (nishadsinghi/sc-genrm-scaling@1d310ee:
    llmonk/evaluate/eval_utils.py ``extract_final_verification``)."""
    assert final_verdict("Yes, the solution is correct: there is no error.") is True
    assert final_verdict("I checked it. Yes.\n\nThere is no other way to read the problem.") is None


@pytest.mark.parametrize(("text", "finish", "expected"), [c for c in CASES if singhi_text_verdict(c[0]) is not None])
def test_agrees_with_singhi_where_their_text_rule_finds_a_verdict(text, finish, expected):
    """Where the reference's text rule finds a verdict (nishadsinghi/sc-genrm-scaling@1d310ee:
    llmonk/evaluate/eval_utils.py ``extract_final_verification``), tts reads the same one."""
    assert final_verdict(text, finish) is singhi_text_verdict(text) is expected


# --- 1b. the first-token verdict (votes = 0) -----------------------------------------------------


def singhi_p_yes(top: dict[str, float]) -> float | None:
    """``extract_P_yes`` at the first position plus ``extract_final_verification_from_logprobs``
    (GenRM's direct verifier, Zhang et al. 2024): the probability of the token "Yes" (or " Yes");
    when Yes is not among the top tokens, 1 - P("No"); None when neither is."""
    yes = [math.exp(lp) for t, lp in top.items() if t in ("Yes", " Yes")]
    no = [math.exp(lp) for t, lp in top.items() if t in ("No", " No")]
    return yes[-1] if yes else 1 - no[-1] if no else None


FIRST_TOKENS = [
    {"Yes": math.log(0.6), "No": math.log(0.2), "The": math.log(0.2)},
    {" No": math.log(0.3), "Let": math.log(0.5), "I": math.log(0.2)},
    {"The": math.log(0.7), "Let": math.log(0.3)},
]


def _first_token(request):
    """Answers judged text i (the one of "What is i + 1?") with the first token FIRST_TOKENS[i]."""
    i = int(re.search(r"What is (\d+) \+ 1\?", request.messages[-1].content).group(1))
    return Completion("x", 1, finish_reason="length", first_token_top_logprobs=FIRST_TOKENS[i])


def _first_token_scores(**knobs):
    items = [VerifyItem(Problem(f"p{i}", f"What is {i} + 1?", str(i + 1)), (f"It is {i + 1}.",), finished=True)
             for i in range(len(FIRST_TOKENS))]
    judge = FunctionGenerator(_first_token, model_name="fixed")
    scores = LLMJudge(JudgeConfig(**knobs), judge).score(items)
    assert [len(call) for call in judge.calls] == [len(FIRST_TOKENS)]  # one call, one request per text
    return scores


def test_first_token_raw_p_yes_is_the_reference_setting():
    """``yes_probability="raw"`` reads the first token as GenRM / Singhi et al. do: P(Yes), else 1 - P(No)
    (nishadsinghi/sc-genrm-scaling@1d310ee: llmonk/verify/generate_verifications.py ``extract_P_yes``;
    llmonk/evaluate/eval_utils.py ``extract_final_verification_from_logprobs``)."""
    scores = _first_token_scores(yes_probability="raw")
    assert [s.score for s in scores[:2]] == pytest.approx([singhi_p_yes(t) for t in FIRST_TOKENS[:2]])
    assert singhi_p_yes(FIRST_TOKENS[2]) is None and (scores[2].score, scores[2].invalid) == (0.5, 1)


def test_first_token_default_normalises_yes_against_no_a_documented_departure():
    """Default: P(Yes) / (P(Yes) + P(No)) (see the judge's module docstring for why), where the
    reference takes the raw P(Yes) (nishadsinghi/sc-genrm-scaling@1d310ee:
    llmonk/verify/generate_verifications.py ``extract_P_yes``)."""
    scores = _first_token_scores()
    assert [s.score for s in scores] == pytest.approx([0.75, 0.0, 0.5])
    assert [s.invalid for s in scores] == [0, 0, 1]


# --- 2. a solution's verification score: the mean of its verdicts --------------------------------


def FixedJudge(replies):  # noqa: N802 - reads as the fake model it builds
    """Answers every verification request with the same fixed replies (text, finish reason)."""
    return FunctionGenerator(lambda r: [Completion(t, 7, finish_reason=f) for t, f in replies], model_name="fixed")


def test_the_judge_scores_the_mean_of_valid_verdicts_and_counts_the_invalid_ones():
    """Singhi et al. ``get_solution_score`` (nishadsinghi/sc-genrm-scaling@1d310ee:
    llmonk/evaluate/eval_utils.py): the mean over verdicts, leaving out those without one.
    Each reply without a trailing verdict (or cut off) is counted in ``invalid``."""
    replies = [("I checked it. Yes.", "stop"), ("It is wrong. No.", "stop"),
               ("Step 2 is fine, no issue with", "length"),
               ("Yes, the solution is correct: there is no error.", "stop")]
    item = VerifyItem(Problem("p", "What is 2 + 2?", "4"), ("2 + 2 = 4, so \\boxed{4}.",), finished=True)
    (score,) = LLMJudge(JudgeConfig(votes=4), FixedJudge(replies)).score([item])
    verdicts = [final_verdict(t, f) for t, f in replies]
    assert verdicts == [True, False, None, True]
    assert score.score == pytest.approx(singhi_solution_score(verdicts)) == pytest.approx(2 / 3)
    assert score.invalid == 1


# --- 3. generative verification: scores, the final answer, and compute ---------------------------

# Solution i's answer and its V = 3 verification replies.
SOLUTIONS = [
    ("4", [("Yes.", "stop"), ("No.", "stop"), ("Step 2 is fine, no issue with", "length")]),
    ("5", [("Yes.", "stop"), ("Verdict: Yes", "stop"), ("It is off by one. No.", "stop")]),
    ("4", [("Verdict: Yes", "stop"), ("Yes, the solution is correct: there is no error.", "stop"),
           ("I think so.", "stop")]),
    (None, [("Yes.", "stop")] * 3),
    ("5", [("Hmm.", "stop"), ("Hard to say", "stop"), ("Verdict: No wait", "length")]),
]
PROBLEM = Problem("p", "What is 2 + 2?", "4")
NAMES = ["alpha", "beta", "gamma", "delta", "epsilon"]  # no digits: the unanswered one must stay unanswered
SOLVE_TOKENS, VERIFY_TOKENS = 100, 30


def _genrm_script(r):
    """Solves with SOLUTIONS (each 100 tokens) and verifies with their fixed replies (30 tokens each)."""
    if "Yes or No" in r.messages[-1].content:
        i = NAMES.index(re.search(r"Solution (\w+)\.", r.messages[-1].content).group(1))
        return [Completion(t, VERIFY_TOKENS, finish_reason=f) for t, f in SOLUTIONS[i][1]]
    return [Completion(f"Solution {name}. " + (f"\\boxed{{{a}}}" if a else "no idea"), SOLVE_TOKENS,
                       finish_reason="stop") for name, (a, _) in zip(NAMES, SOLUTIONS, strict=True)]


def _solve(**knobs):
    config = GenerativeVerificationConfig(n=len(SOLUTIONS), verifications=3, **knobs)
    script = FunctionGenerator(_genrm_script, model_name="script")
    return GenerativeVerification(config, script, MATH_PROMPT.render).solve([PROBLEM])[0]


def _reference_scores() -> list[float]:
    return [singhi_solution_score([final_verdict(t, f) for t, f in replies]) for _, replies in SOLUTIONS]


def test_solution_scores_are_the_mean_of_their_verdicts_zero_without_any():
    """Singhi et al. ``get_solution_score`` (mean of the valid verdicts; 0 when none is valid;
    nishadsinghi/sc-genrm-scaling@1d310ee: llmonk/evaluate/eval_utils.py)."""
    sol = _solve()
    expected = _reference_scores()
    assert expected == pytest.approx([0.5, 2 / 3, 1.0, 1.0, 0.0])
    assert list(sol.trace.scores) == pytest.approx(expected)
    assert sol.trace.events == {"invalid_verdict": 5, "no_verdict": 1}


def test_no_verdict_score_half_is_the_documented_setting_for_no_evidence():
    """tts's earlier rule (a solution without any verdict scores 0.5, no evidence either way) stays
    reachable as ``no_verdict_score=0.5``; the default follows the reference (0; nishadsinghi/sc-genrm-scaling@1d310ee:
    llmonk/evaluate/eval_utils.py ``get_solution_score``)."""
    assert _solve(no_verdict_score=0.5).trace.scores[4] == 0.5


def test_the_answer_is_the_best_scored_solutions_or_the_heaviest_weighted_answer():
    """``select=score`` follows ``compute_best_of_k`` and ``select=weighted_vote`` follows
    ``compute_weighted_sc`` (the verifier-weighted vote), solutions without an answer never chosen
    (nishadsinghi/sc-genrm-scaling@1d310ee: llmonk/evaluate/eval_utils.py)."""
    answers = [a for a, _ in SOLUTIONS]
    scores = _reference_scores()
    best = _solve()
    assert best.answer == singhi_best_of_n(answers, scores) == "4" and best.trace.selected == 2
    weighted = _solve(select="weighted_vote")
    assert weighted.answer == singhi_weighted_vote(answers, scores) == "4"
    assert weighted.trace.votes == pytest.approx({"4": 1.5, "5": 2 / 3})


def test_compute_is_counted_as_singhi_et_al_count_it():
    """Singhi et al. (nishadsinghi/sc-genrm-scaling@1d310ee: llmonk/evaluate/plot_success_rate.py,
    the compute axis of its plots): with lambda = (tokens of a verification) /
    (tokens of a solution), S solutions with V verifications cost S (1 + lambda V) solutions'
    worth of generated tokens; self-consistency at matched compute draws that many samples."""
    cost = VerificationCost.from_trace(_solve().trace)
    s, v = len(SOLUTIONS), 3
    assert (cost.solutions, cost.verifications) == (s, s * v)
    assert (cost.solve_tokens, cost.verify_tokens) == (s * SOLVE_TOKENS, s * v * VERIFY_TOKENS)
    assert cost.lam == pytest.approx(VERIFY_TOKENS / SOLVE_TOKENS)
    assert matched_self_consistency_n(s, v, cost.lam) == round(singhi_compute(s, v, cost.lam)) == 10
    for s, v, lam in [(4, 2, 0.5), (16, 8, 0.87), (1, 32, 1.0), (8, 0, 0.7)]:
        assert matched_self_consistency_n(s, v, lam) == round(singhi_compute(s, v, lam))
