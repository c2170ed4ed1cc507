"""Parity: self-consistency's vote (Wang et al.), tool-call voting (its_hub), and the answers they vote on.

Each test transcribes the reference's rule as a small function (our words, our code) and checks that
tts makes the same decisions on fixed hand-made inputs.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tts.answers import answer_keys, extract_answer
from tts.backends.base import Completion
from tts.backends.function import FunctionGenerator
from tts.search.sampling.self_consistency import SelfConsistency, SelfConsistencyConfig
from tts.search.sampling.tool_vote import ToolVote, ToolVoteConfig
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
    paper's "consistency": the share of decodes that agree with the final answer).
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


# --- tool_vote: its_hub's hierarchical tool voting ---------------------------------------------

ITS_HUB_REF = ("its_hub: Red-Hat-AI-Innovation-Team/its_hub, its_hub/algorithms/self_consistency.py "
               "(_select_hierarchical_most_common_or_random, SelfConsistency._extract_tool_call_features), "
               "read at lukeinglis/its_hub_luke commit 06f9c91db4fda5bbdac4feeda3f498f79bfe521f")

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}},
]


def _frozen(value):
    """Arguments as a comparable value, the way the reference keys them: a dict as its sorted
    (key, value) pairs, a list as a tuple, anything else as it is (so 2.0 equals 2)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def its_hub_hierarchical(calls: list[dict | None]) -> list[int]:
    """its_hub's ``tool_hierarchical`` vote, transcribed: the replies holding a call vote (and only
    if at least ceil(n/2) replies hold one; else it votes on content); each vote is (name, frozen
    arguments of the first call). Level 1 keeps the replies whose name is among the most common;
    unless one reply is left, level 2 keeps, among those, the replies whose arguments are among the
    most common. Returns the replies left, in order; the reference draws one uniformly at random."""
    eligible = [i for i, c in enumerate(calls) if c is not None]
    assert 2 * len(eligible) >= len(calls), "the reference would vote on content here"
    features = {i: (calls[i]["name"], _frozen(calls[i]["arguments"])) for i in eligible}
    left = eligible
    for level in (0, 1):
        counts = Counter(features[i][level] for i in left)
        top = max(counts.values())
        left = [i for i in left if counts[features[i][level]] == top]
        if len(left) == 1:
            break
    return left


def FixedReplies(replies: list[str]) -> FunctionGenerator:  # noqa: N802 - reads as the fake model it builds
    """A generator that returns the given replies, in order, for every request."""
    return FunctionGenerator(lambda r: [Completion(t, 5, -0.1, "stop") for t in replies], model_name="fixed")


def _call(name, **arguments):
    return {"name": name, "arguments": arguments}


def _reply(call):
    return "I cannot tell." if call is None else f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def _tool_vote(calls, **config):
    problem = Problem("turn", "What is the weather?", None, {"tools": TOOLS})
    strategy = ToolVote(ToolVoteConfig(n=len(calls), **config), FixedReplies([_reply(c) for c in calls]),
                        lambda p: ())
    return strategy.solve([problem])[0]


# Fixed hand-made votes; each is a list of first calls (None: a reply without a call).
SCATTERED = [_call("get_weather", city="Paris"), _call("search", q="weather"), _call("get_weather", city="London"),
             _call("search", q="weather"), _call("get_weather", city="Rome"), _call("search", q="weather"),
             _call("get_weather", city="Paris"), _call("get_weather", city="London")]
NAMES_TIED = [_call("get_weather", city="Paris"), _call("search", q="rain"), _call("get_weather", city="Oslo"),
              _call("search", q="rain"), None]
SPELLINGS = [_call("get_weather", city="Paris"), _call("get_weather", city="London"),
             _call("get_weather", city=" paris "), _call("get_weather", city="London"),
             _call("get_weather", city="Paris"), _call("search", q="x")]
UNIQUE = [_call("search", q="a"), _call("get_weather", city="Oslo"), _call("get_weather", city="Oslo"),
          _call("get_weather", city="Lima"), None, None]


@pytest.mark.parametrize("calls", [SCATTERED, NAMES_TIED, SPELLINGS, UNIQUE])
def test_tool_vote_is_its_hubs_hierarchical_vote(calls):
    """its_hub (see ``ITS_HUB_REF``): vote on the tool name, then on the arguments among the calls of
    the winning name(s); a tie left after both goes to a uniformly random call. tts's default
    returns a call the reference can return, and with exact arguments (``normalize_arguments=False``)
    the reference's exact candidate set: its documented tie-break picks the first of them."""
    left = its_hub_hierarchical(calls)
    sol = _tool_vote(calls, normalize_arguments=False)
    assert sol.trace.selected == left[0]
    assert json.loads(sol.answer) == [calls[left[0]]]
    # SCATTERED: get_weather wins on its name (5 of 8) although search's 3 identical calls are
    # the most common single call; the flat vote (the earlier default) returns search.
    if calls is SCATTERED:
        assert calls[_tool_vote(calls).trace.selected]["name"] == "get_weather"
        flat = _tool_vote(calls, match="name_and_arguments")
        assert json.loads(flat.answer) == [_call("search", q="weather")]


def test_tool_vote_random_ties_draw_from_the_references_candidates():
    """its_hub draws the winner uniformly among the calls left after the vote: with
    ``ties="random"`` tts draws among the same calls (seeded, so a run repeats)."""
    calls = [_call("get_weather", city=c) for c in ("Paris", "London", "Rome", "Oslo")]
    left = its_hub_hierarchical(calls)
    assert left == [0, 1, 2, 3]
    picked = set()
    for seed in range(12):
        problem = Problem(f"turn-{seed}", "What is the weather?", None, {"tools": TOOLS})
        strategy = ToolVote(ToolVoteConfig(n=4, ties="random", normalize_arguments=False),
                            FixedReplies([_reply(c) for c in calls]), lambda p: ())
        picked.add(strategy.solve([problem])[0].trace.selected)
    assert picked <= set(left) and len(picked) > 1


def test_tool_vote_normalises_arguments_on_purpose():
    """Documented departure: tts normalises arguments before comparing them (" paris " is "Paris");
    the reference compares them exactly, so the two spellings split the vote and London ties Paris."""
    exact = its_hub_hierarchical(SPELLINGS)
    assert [SPELLINGS[i]["arguments"]["city"] for i in exact] == ["Paris", "London", "London", "Paris"]
    sol = _tool_vote(SPELLINGS)  # normalised: Paris 3, London 2
    assert json.loads(sol.answer) == [_call("get_weather", city="Paris")]
    assert sol.confidence == pytest.approx(3 / len(SPELLINGS))
    assert _tool_vote(SPELLINGS, normalize_arguments=False).trace.selected == exact[0]


def test_finding_8_through_tts_solve():
    """Finding 8 as a user met it: ``tts.solve("What is 17 + 25?", n=16)`` showed vote keys such as
    ``17+25=36`` and ``31**`` beside plain numbers. Every vote now shows the answer the sample
    stated, as its first sample wrote it (issue 53: "32+27", not the key "59")."""
    import tts

    texts = (STATES_42 + ["17 + 25 = 36", "**31**", "The answer is 32+27.", "I am not sure.", "36", "42", "**36**"])[:16]
    sol = tts.solve("What is 17 + 25?", strategy="self_consistency", n=16, generator=FixedReplies(texts))
    assert sol.answer == "42"
    assert set(sol.trace.votes) == {"42", "36", "31", "32+27"}
    assert sol.trace.votes["42"] == len(STATES_42) + 1 and sol.trace.votes["36"] == 3


def test_votes_show_answers_as_the_model_wrote_them():
    """Issue 53: ``trace.votes`` showed equivalence keys a model never wrote (spaces stripped,
    ``\\\\text`` dropped: "insideasquarebrackets,..."). A vote shows each answer as its first
    sample stated it, equal answers as one entry; an empty box is no answer and has no vote."""
    import tts

    texts = ["The answer is \\boxed{x + 1}.", "So \\boxed{1+x}", "The answer is \\boxed{}.",
             "The answer is inside a square bracket.", "The answer is inside a square bracket.", "so \\boxed{x+1}"]
    sol = tts.solve("What is x plus one?", strategy="self_consistency", n=6, generator=FixedReplies(texts))
    assert sol.answer == "x + 1"
    assert sol.trace.votes == {"x + 1": 3.0, "inside a square bracket": 2.0}
