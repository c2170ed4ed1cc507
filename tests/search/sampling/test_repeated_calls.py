"""Replies that only repeat a tool call the conversation already answered (issue 48, finding 11):
one rule for every strategy that takes tools (:mod:`tts.search.repeats`). On main only
``tool_vote`` set repeats aside: ``sc``, ``bon`` and ``wv`` returned the repeated call, and when
every sample repeated, ``tool_vote`` answered nothing (empty content, confidence 0)."""

from __future__ import annotations

import json

import pytest

from tts.answers.kinds import TEXT
from tts.backends.base import Completion
from tts.backends.function import FunctionGenerator
from tts.prompts import PLAIN_PROMPT, chat_prompt
from tts.search.sampling.best_of_n import BestOfN, BestOfNConfig
from tts.search.sampling.self_consistency import SelfConsistency, SelfConsistencyConfig
from tts.search.sampling.tool_vote import ToolVote, ToolVoteConfig
from tts.search.sampling.weighted_vote import WeightedVote, WeightedVoteConfig
from tts.types import Problem

CHAT = chat_prompt(PLAIN_PROMPT)
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                          "required": ["city"]}}}]


def call(**args: str) -> str:
    return f'<tool_call>\n{json.dumps({"name": "get_weather", "arguments": args})}\n</tool_call>'


REPEAT = call(city="Paris")                     # the call whose result is in the conversation
REPEAT_SPELLED = call(city=" paris ")           # the same call, spelled differently
NEW = call(city="London")
MALFORMED = '<tool_call>{"name": "get_weather", "arguments": {"city": "Lon'
ANSWER = "It is 18C and sunny in Paris."


def fixed(texts: list[str]) -> FunctionGenerator:
    """Replies ``texts`` in order; the calls are the most likely replies (mean logprob -0.1, the
    rest -0.9), so a best-of-N or weighted vote that counts repeats picks one."""
    def draw(req):
        return [Completion(t, 10, -0.1 if t.startswith("<tool_call>") else -0.9, "stop") for t in texts[:req.n]]

    return FunctionGenerator(draw, model_name="fixed")


def after_a_result() -> Problem:
    """Turn 2 of an agent's loop: get_weather(Paris) was called and its result came back."""
    messages = [{"role": "user", "content": "What's the weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"}]
    return Problem("turn-2", "What's the weather in Paris?", None, {"tools": TOOLS, "messages": messages})


STRATEGIES = {
    "self_consistency": lambda gen: SelfConsistency(SelfConsistencyConfig(n=4), gen, CHAT, extract=TEXT),
    "best_of_n": lambda gen: BestOfN(BestOfNConfig(n=4), gen, CHAT, extract=TEXT),
    "weighted_vote": lambda gen: WeightedVote(WeightedVoteConfig(n=4), gen, CHAT, extract=TEXT),
    "tool_vote": lambda gen: ToolVote(ToolVoteConfig(n=4), gen, CHAT, extract=TEXT),
}


def solve(strategy: str, texts: list[str]):
    return STRATEGIES[strategy](fixed(texts)).solve([after_a_result()])[0]


def calls_of(answer: str | None) -> list[dict] | None:
    try:
        return json.loads(answer) if answer is not None else None
    except json.JSONDecodeError:
        return None


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_an_answer_in_text_wins_over_a_majority_that_repeats_the_answered_call(strategy):
    """3 of 4 samples call get_weather(Paris) again; one answers from its result."""
    sol = solve(strategy, [REPEAT, ANSWER, REPEAT_SPELLED, REPEAT])
    assert sol.answer == ANSWER
    assert sol.trace.events["repeated_tool_call"] == 3
    assert sol.trace.samples[sol.trace.selected].text == ANSWER
    assert sol.trace.samples[0].tool_calls  # the trace keeps the repeats as the model wrote them


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_new_call_wins_over_repeats_even_from_a_minority(strategy):
    """Two repeats, one new call, one malformed call: the new call is the only reply an agent can
    use (on main: the repeat for sc/bon/wv; nothing at all for tool_vote)."""
    sol = solve(strategy, [REPEAT, NEW, MALFORMED, REPEAT_SPELLED])
    assert calls_of(sol.answer) == [{"name": "get_weather", "arguments": {"city": "London"}}]
    assert sol.trace.events["repeated_tool_call"] == 2


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_when_every_sample_repeats_the_repeat_is_returned_never_nothing(strategy):
    """All four samples repeat: no reply holds anything else, so the repeat the samples agree on is
    the answer (an agent can act on it), said by an event; never no answer (on main, tool_vote
    answered None with confidence 0.0, an empty reply with a 200)."""
    sol = solve(strategy, [REPEAT, REPEAT_SPELLED, REPEAT, MALFORMED])
    assert calls_of(sol.answer) == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert sol.confidence > 0
    assert sol.trace.events["repeated_tool_call"] == 3 and sol.trace.events["only_repeated_tool_calls"] == 1


def test_a_call_without_a_result_is_not_a_repeat():
    """The conversation made the call but no tool turn answered it yet: calling it is not a repeat."""
    problem = after_a_result()
    problem.metadata["messages"] = problem.metadata["messages"][:2]
    sol = SelfConsistency(SelfConsistencyConfig(n=4), fixed([REPEAT, REPEAT, ANSWER, REPEAT]), CHAT,
                          extract=TEXT).solve([problem])[0]
    assert calls_of(sol.answer) == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert "repeated_tool_call" not in sol.trace.events


def test_tool_vote_can_still_count_repeats_for_tools_whose_result_changes():
    sol = ToolVote(ToolVoteConfig(n=4, repeated_calls="vote"), fixed([REPEAT, ANSWER, REPEAT, REPEAT]), CHAT,
                   extract=TEXT).solve([after_a_result()])[0]
    assert calls_of(sol.answer) == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert "repeated_tool_call" not in sol.trace.events
