"""Parity: self-consistency's vote (Wang et al.), tool-call voting (its_hub), and the answers they vote on.

Each test transcribes the reference's rule as a small function (our words, our code) and checks that
tts makes the same decisions on fixed hand-made inputs.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from tts.answers import answer_keys, extract_answer
from tts.backends.base import Completion, GenerationResult, request_usage
from tts.search.self_consistency import SelfConsistency, SelfConsistencyConfig
from tts.search.tool_vote import ToolVote, ToolVoteConfig
from tts.types import Problem, Sample, Usage

PINNED = {"strategy:self_consistency", "strategy:tool_vote"}

ITS_HUB = "Red-Hat-AI-Innovation-Team/its_hub, its_hub/algorithms/self_consistency.py"


# --- self-consistency: Wang et al. 2022 --------------------------------------------------------


def wang_majority(answers: list[str | None]) -> tuple[set[str], dict[str, int]]:
    """Wang et al. (2022, arXiv:2203.11171), Sec. 2: the answer is arg max_a sum_i 1(a_i = a) over
    the sampled reasoning paths' parsed answers. A path whose answer cannot be parsed has no a_i and
    adds to no count. The paper does not say how ties are broken, so this returns every tied answer.
    """
    counts = Counter(a for a in answers if a is not None)
    top = max(counts.values(), default=0)
    return {a for a, c in counts.items() if c == top}, dict(counts)


def _self_consistency(answers: list[str | None]):
    strategy = SelfConsistency(SelfConsistencyConfig(n=len(answers)), generator=None, prompt=lambda p: ())
    samples = [Sample(f"sample {i}", a) for i, a in enumerate(answers)]
    return strategy.aggregate("p", samples, Usage())


CASES = [
    ["7", "7", "3", "7", "3"],                      # a clear majority
    ["5", None, None, None, "5", "2"],              # unparsed samples do not vote (None is not an answer)
    ["4", "9", "9", "4", "1"],                      # a tie: the paper leaves it open
    ["2", "1", "2", None, "1", "3", "1", None],      # plurality, not an absolute majority
    [None, None, None],                             # nobody answered
]


@pytest.mark.parametrize("answers", CASES)
def test_self_consistency_is_wangs_plurality_vote(answers):
    """Wang et al. 2022, Sec. 2 (majority vote over the final answers, eq. "arg max_a sum_i 1(a_i = a)").

    tts returns one of the reference's winners with the reference's counts; its tie-break (the
    answer whose first sample came earliest, documented in ``tts.search.base.vote``) picks a member of
    the tied set, which the paper leaves unspecified; a problem where no sample has an answer has no
    answer (None). The confidence is the winner's share of all n samples, answered or not (the
    paper's Fig. 5 "consistency": the share of decodes that agree with the final answer).
    """
    winners, counts = wang_majority(answers)
    sol = _self_consistency(answers)
    if not counts:
        assert sol.answer is None and sol.confidence == 0.0
        return
    assert sol.answer in winners
    assert sol.trace.votes == counts
    assert sol.confidence == pytest.approx(counts[sol.answer] / len(answers))
    first_of_tied = min(winners, key=answers.index)
    assert sol.answer == first_of_tied  # the documented tie-break


def test_equal_answers_written_differently_are_one_answer_in_the_vote():
    """Wang et al. vote on the *answer*, parsed from each path ("the answer is $18"): equal values
    written differently are one a. tts parses with math-verify, so 0.5, 1/2 and \\frac{1}{2} count once."""
    sol = _self_consistency(["0.5", "\\frac{1}{2}", "3", "1/2", "3"])
    assert sol.answer == "0.5" and sol.trace.votes == {"0.5": 3.0, "3": 2.0}


# --- finding 8: answers that voted apart -------------------------------------------------------

# Completions of the kind `tts.solve("What is 17 + 25?", n=16)` produced, each stating 42.
STATES_42 = [
    "17 + 25 = 42",
    "The answer is 17+25=42.",
    "So the final answer is $17 + 25 = 42$.",
    "**42**",
    "The sum is **42**.",
    "**Final Answer:** 17 + 25 = 42",
    "Final answer: 42**",
    "The answer is 42.**",
    "\\boxed{17 + 25 = 42}",
]


@pytest.mark.parametrize("text", STATES_42)
def test_an_equation_or_markup_states_its_value(text):
    """Finding 8: the right-hand side of a final ``a = b`` with a numeric left side is the stated
    answer, and Markdown bold (``**42**``) is markup, not part of the answer."""
    assert extract_answer(text) == "42"


def test_stated_values_and_marked_up_numbers_vote_with_the_plain_number():
    """Finding 8: vote keys such as ``17+25=36``, ``31**`` and ``32+27`` stood beside plain numbers.
    An answer that states a value (already extracted answers in a pool, or written by hand) votes
    under that value's key."""
    keys = answer_keys(["17+25=42", "42**", "**42**", "40+2", "42", "17 + 25 = 36", "36", "31**", "31"])
    assert keys == ["42", "42", "42", "42", "42", "36", "36", "31", "31"]
    sol = _self_consistency([extract_answer(t) for t in STATES_42] + ["36", "36"])
    assert sol.answer == "42" and sol.trace.votes == {"42": float(len(STATES_42)), "36": 2.0}
