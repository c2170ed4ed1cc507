"""Tool-call voting with a scripted model that answers in tool calls (some malformed)."""

from __future__ import annotations

import json
import random

import pytest

import tts
import tts.answers.kinds
import tts.prompts
from tts.backends.base import Completion
from tts.backends.function import FunctionGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.backends.tool_calls import read_tool_calls
from tts.prompts import PLAIN_PROMPT, chat_prompt
from tts.search.sampling.tool_vote import ToolVote, ToolVoteConfig
from tts.types import Problem

CHAT = chat_prompt(PLAIN_PROMPT)

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object",
                                                                        "properties": {"q": {"type": "string"}}}}},
]


def ToolModel(replies, weights, seed=0) -> FunctionGenerator:  # noqa: N802 - reads as the fake model it builds
    """Replies drawn from ``replies`` with ``weights`` (shuffled, each reply ``weight`` times per
    ``sum(weights)`` replies); records the requests it was sent."""
    rng = random.Random(seed)
    pool = [r for r, w in zip(replies, weights, strict=True) for _ in range(w)]

    def draw(req):
        texts = []
        while len(texts) < req.n:
            texts += rng.sample(pool, len(pool))
        return [Completion(t, len(t.split()), -0.2, "stop") for t in texts[: req.n]]

    return FunctionGenerator(draw, model_name="tool-model")


def call(name, **args):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


REPLIES = [
    call("get_weather", city="Paris"),
    call("get_weather", city=" paris "),               # the same call, spelled differently
    call("get_weather", city="London"),
    call("search", q="weather Paris"),
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Par',   # cut off: malformed
    call("get_weather"),                                # required argument missing: malformed
    call("launch_rockets", n=3),                        # not an offered tool: malformed
    "I think it is sunny.",                             # no call at all
]


def _problem(**meta):
    return Problem("turn-1", "What's the weather in Paris?", None,
                   {"tools": TOOLS, "messages": [{"role": "user", "content": "What's the weather in Paris?"}], **meta})


def test_votes_over_normalised_calls_and_returns_the_canonical_call():
    model = ToolModel(REPLIES, [3, 3, 4, 2, 3, 2, 2, 1])
    sol = ToolVote(ToolVoteConfig(n=40), model, CHAT).solve([_problem()])[0]  # 12 Paris, 8 London
    assert json.loads(sol.answer) == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert list(json.loads(sol.answer)[0]) == ["name", "arguments"]
    paris = sum(1 for s in sol.trace.samples if s.answer is not None and "get_weather" in s.answer and "aris" in s.answer)
    assert paris == 12 and sol.confidence == pytest.approx(12 / 40)
    ev = sol.trace.events
    assert ev["malformed_tool_call"] + ev["no_tool_call"] == sum(not s.tool_calls for s in sol.trace.samples) > 0
    # the tools go to the backend with the request (its chat template shows them); the chat is as sent
    sent = model.requests[0]
    assert [t["function"]["name"] for t in json.loads(sent.tools)] == ["get_weather", "search"]
    assert [(m.role, m.content) for m in sent.messages] == [("user", "What's the weather in Paris?")]


def test_by_name_the_winning_tool_brings_its_most_common_arguments():
    model = ToolModel([call("get_weather", city="London"), call("get_weather", city="Paris"),
                       call("search", q="x")], [1, 2, 4], seed=1)
    by_call = ToolVote(ToolVoteConfig(n=40), model, lambda p: ()).solve([_problem()])[0]
    assert json.loads(by_call.answer)[0]["name"] == "search"
    model = ToolModel([call("get_weather", city="London"), call("get_weather", city="Paris"),
                       call("get_weather", city="Paris"), call("search", q="x"), call("search", q="y")],
                      [1, 1, 1, 1, 1], seed=2)
    by_name = ToolVote(ToolVoteConfig(n=40, match="name"), model, lambda p: ()).solve([_problem()])[0]
    assert json.loads(by_name.answer) == [{"name": "get_weather", "arguments": {"city": "Paris"}}]


def test_only_malformed_calls_give_no_answer_and_never_raise():
    model = ToolModel(["<tool_call>{oops</tool_call>", '{"name": 3}', "[]", "", "<tool_call>"], [1] * 5)
    sol = ToolVote(ToolVoteConfig(n=10, text_fallback=False), model, lambda p: ()).solve([_problem()])[0]
    assert sol.answer is None and sol.confidence == 0.0 and len(sol.trace.samples) == 10


def test_the_lenient_reader_accepts_openai_shapes_string_arguments_and_fenced_json():
    text = '{"type": "function", "function": {"name": "search", "arguments": "{\\"q\\": \\"a\\"}"}}'
    calls, why = read_tool_calls(text)
    assert why == "ok" and [(c.name, c.args()) for c in calls] == [("search", {"q": "a"})]
    calls, why = read_tool_calls("```json\n" + json.dumps({"name": "search", "arguments": {}}) + "\n```")
    assert why == "ok" and calls[0].name == "search"


def test_through_tts_solve():
    model = ToolModel(REPLIES[:3], [1, 1, 1])
    sol = tts.solve(_problem(), strategy="tool_vote", n=16, generator=model)
    assert json.loads(sol.answer)[0]["name"] == "get_weather" and sol.trace.strategy == "tool_vote"


def test_name_is_the_hierarchical_vote_and_the_flat_vote_stays_available():
    # get_weather holds most replies with scattered cities; search's calls all agree.
    replies = [call("get_weather", city="Paris"), call("search", q="x"), call("get_weather", city="Rome"),
               call("search", q="x"), call("get_weather", city="Oslo")]
    model = ToolModel(replies, [1] * 5)
    default = ToolVote(ToolVoteConfig(n=5), model, lambda p: ()).solve([_problem()])[0]
    by_name = ToolVote(ToolVoteConfig(n=5, match="name"), model, lambda p: ()).solve([_problem()])[0]
    flat = ToolVote(ToolVoteConfig(n=5, match="name_and_arguments"), model, lambda p: ()).solve([_problem()])[0]
    assert json.loads(default.answer)[0]["name"] == json.loads(by_name.answer)[0]["name"] == "get_weather"
    assert json.loads(flat.answer) == [{"name": "search", "arguments": {"q": "x"}}]
    assert flat.confidence == pytest.approx(2 / 5) and default.confidence == pytest.approx(1 / 5)
    with pytest.raises(ValueError, match="ties"):
        ToolVoteConfig(ties="last")


def test_when_no_reply_calls_a_tool_the_answer_is_the_text_they_agree_on():
    """After the tool result came back, replies are prose: the answer is the reply most like the
    others (minimum Bayes risk), not "no answer" (found by an agent whose loop never finished)."""
    prose = ["It is 18C and sunny in Paris right now.", "It is 18C and sunny in Paris right now.",
             "Paris: 18C, sunny.", "I like turtles."]
    model = ToolModel(prose, [1, 1, 1, 1])
    sol = ToolVote(ToolVoteConfig(n=4), model, CHAT, extract=tts.answers.kinds.TEXT).solve([_problem()])[0]
    assert sol.answer == "It is 18C and sunny in Paris right now."
    assert sol.trace.samples[sol.trace.selected].text == sol.answer and sol.trace.events["answered_in_text"] == 1
    required = ToolVote(ToolVoteConfig(n=4, text_fallback=False), model, CHAT).solve([_problem()])[0]
    assert required.answer is None


def test_a_parallel_reply_is_returned_whole_and_all_calls_can_vote():
    both = call("get_weather", city="Paris") + "\n" + call("get_weather", city="Rome")
    other = call("get_weather", city="Paris") + "\n" + call("get_weather", city="Oslo")
    model = ToolModel([both, other, other], [1, 1, 1], seed=3)
    first = ToolVote(ToolVoteConfig(n=3), model, CHAT).solve([_problem()])[0]
    assert len(json.loads(first.answer)) == 2  # its_hub: the first calls agree; the reply comes whole
    whole = ToolVote(ToolVoteConfig(n=3, votes_on="all_calls"), model, CHAT).solve([_problem()])[0]
    assert [c["arguments"]["city"] for c in json.loads(whole.answer)] == ["Paris", "Oslo"]
    assert whole.confidence == pytest.approx(2 / 3)


def test_a_parallel_reply_votes_with_its_first_call_not_its_last():
    """4 replies call search first (then get_weather), 3 call get_weather alone: every reply's LAST
    call is get_weather(Paris), but the first calls decide (its_hub), so search wins 4 to 3 and its
    reply comes back whole."""
    pair = call("search", q="weather Paris") + "\n" + call("get_weather", city="Paris")
    alone = call("get_weather", city="Paris")
    texts = [alone] * 3 + [pair] * 4  # in this order: a tie or a unanimous last-call vote would pick reply 0
    model = FunctionGenerator(lambda r: [Completion(t, len(t.split()), -0.2, "stop") for t in texts[: r.n]])
    sol = ToolVote(ToolVoteConfig(n=7), model, CHAT).solve([_problem()])[0]
    assert [c["name"] for c in json.loads(sol.answer)] == ["search", "get_weather"]
    assert sol.trace.selected == 3 and sol.confidence == pytest.approx(4 / 7)
    assert sorted(sol.trace.votes.values()) == [3.0, 4.0]
    flat = ToolVote(ToolVoteConfig(n=7, match="name_and_arguments"), model, CHAT).solve([_problem()])[0]
    assert flat.answer == sol.answer and flat.confidence == pytest.approx(4 / 7)


def test_calls_the_backend_read_are_used_and_the_loop_finishes_on_the_scripted_backend():
    """Turn 1: the scripted model calls get_weather; turn 2 (the tool's result in the chat): it
    answers in prose, and tool_vote returns that text instead of "no answer"."""
    gen = ScriptedGenerator()
    chat = [{"role": "user", "content": "What is the weather in Paris?"}]
    turn1 = ToolVote(ToolVoteConfig(n=4), gen, CHAT, extract=tts.answers.kinds.TEXT).solve(
        [Problem("t1", chat[0]["content"], None, {"tools": TOOLS, "messages": chat})])[0]
    (called,) = json.loads(turn1.answer)
    assert called == {"name": "get_weather", "arguments": {"city": "Paris"}}
    call_id = turn1.trace.samples[turn1.trace.selected].tool_calls[0]["id"]
    chat += [{"role": "assistant", "content": None, "tool_calls": [turn1.trace.samples[turn1.trace.selected].tool_calls[0]]},
             {"role": "tool", "tool_call_id": call_id, "content": "18C and sunny"}]
    turn2 = ToolVote(ToolVoteConfig(n=4), gen, CHAT, extract=tts.answers.kinds.TEXT).solve(
        [Problem("t2", chat[0]["content"], None, {"tools": TOOLS, "messages": chat})])[0]
    assert turn2.answer is not None and "18C and sunny" in turn2.answer and not turn2.trace.samples[0].tool_calls


def test_replies_that_only_attempt_broken_calls_are_no_answer_not_a_text_answer():
    """Found with the 1.5B model behind an agent framework: when every sample wrote a broken call,
    the broken call came back as the free-text answer (finish_reason "stop")."""
    broken = ['<tool_call>{"name": "get_weather", "arguments": {"city": "Par', call("launch_rockets", n=3)]
    model = ToolModel(broken, [1, 1])
    sol = ToolVote(ToolVoteConfig(n=4), model, CHAT, extract=tts.answers.kinds.TEXT).solve([_problem()])[0]
    assert sol.answer is None and sol.trace.events["malformed_tool_call"] == 4
    sc = tts.solve(_problem(), strategy="self_consistency", n=4, generator=ToolModel(broken, [1, 1]),
                   prompt=tts.prompts.PLAIN_PROMPT)
    assert sc.answer is None


def test_a_call_copied_with_the_templates_doubled_braces_is_read():
    """Qwen2.5's template shows its example call as {{"name": ...}}; the 1.5B model copies it."""
    calls, why = read_tool_calls('<tool_call>\n{{"name": "get_weather", "arguments": {"city": "Oslo"}}}\n</tool_call>')
    assert why == "ok" and [(c.name, c.args()) for c in calls] == [("get_weather", {"city": "Oslo"})]


def test_a_calling_minority_does_not_answer_a_question_that_needs_no_tool():
    """Found on BFCL irrelevance: with one calling reply the calls alone voted (0.85 at n = 1 fell
    to 0.60 at n = 8). As in its_hub, calls vote only when at least half of the replies call."""
    prose = "No tool can answer that; the capital of France is Paris."
    replies = [call("get_weather", city="Paris")] * 3 + [prose] * 5
    for strategy in ("tool_vote", "self_consistency"):
        sol = tts.solve(_problem(), strategy=strategy, n=8, generator=ToolModel(replies, [1] * 8),
                        prompt=tts.prompts.PLAIN_PROMPT)
        assert sol.answer == prose, strategy
        calls_win = tts.solve(_problem(), strategy=strategy, n=8, generator=ToolModel(replies[:1] * 4 + [prose] * 4, [1] * 8),
                              prompt=tts.prompts.PLAIN_PROMPT)
        assert json.loads(calls_win.answer)[0]["name"] == "get_weather", strategy  # half call: the calls vote


def test_a_ladder_of_n_shares_one_draw_and_each_n_votes_on_its_first_replies():
    """``tts eval -s tool_vote -n 1 -n 4 -n 8``: one request of 8 replies per problem (not 13), and
    each config's answer and usage are those of its first n replies, as if drawn alone."""
    from tts.eval.runner import solve_all

    model = ToolModel(REPLIES, [3, 3, 4, 2, 3, 2, 2, 1], seed=3)
    voters = [ToolVote(ToolVoteConfig(n=n), model, CHAT) for n in (1, 4, 8)]
    problems = [_problem(), Problem("turn-2", "Weather in Paris?", None, _problem().metadata)]
    together = solve_all(voters, problems)
    assert [r.n for r in model.requests] == [8, 8]
    draw = {p.id: [s.text for s in together[2][i].trace.samples] for i, p in enumerate(problems)}
    for voter, sols in zip(voters, together, strict=True):
        n = voter.config.n
        for p, sol in zip(problems, sols, strict=True):
            assert [s.text for s in sol.trace.samples] == draw[p.id][:n]
            assert sol.usage.completion_tokens == sum(len(t.split()) for t in draw[p.id][:n])
            alone = FunctionGenerator(lambda r, texts=draw[p.id][:n]: [Completion(t, len(t.split()), -0.2, "stop")
                                                                         for t in texts])
            assert ToolVote(ToolVoteConfig(n=n), alone, CHAT).solve([p])[0].answer == sol.answer


def _after_a_result(**meta):
    """Turn 2 of a loop: the model called get_weather(Paris) and the tool answered."""
    messages = [{"role": "user", "content": "What's the weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"}]
    return Problem("turn-2", "What's the weather in Paris?", None, {"tools": TOOLS, "messages": messages, **meta})


def test_replies_that_only_repeat_an_answered_call_abstain_so_the_answer_in_text_wins():
    """Measured on Qwen2.5-Coder-1.5B after a tool result: half the samples call the same tool
    again, half answer. its_hub's half rule alone returns the repeat (an agent loops until its turn
    limit); the repeats abstain, so the answer in text is the reply."""
    answer = "It is 18C and sunny in Paris."
    replies = [call("get_weather", city="Paris"), answer, call("get_weather", city=" paris "), answer]
    sol = ToolVote(ToolVoteConfig(n=4), ToolModel(replies, [1, 1, 1, 1]), CHAT,
                   extract=tts.answers.kinds.TEXT).solve([_after_a_result()])[0]
    assert sol.answer == answer and sol.trace.events["repeated_tool_call"] == 2
    its_hub = ToolVote(ToolVoteConfig(n=4, repeated_calls="vote"), ToolModel(replies, [1, 1, 1, 1]), CHAT,
                       extract=tts.answers.kinds.TEXT)
    assert json.loads(its_hub.solve([_after_a_result()])[0].answer) == [{"name": "get_weather",
                                                                       "arguments": {"city": "Paris"}}]


def test_a_new_call_after_a_result_still_votes_and_a_call_without_a_result_is_not_a_repeat():
    london = call("get_weather", city="London")
    replies = [london, london, call("get_weather", city="Paris"), "It is sunny."]
    sol = ToolVote(ToolVoteConfig(n=4), ToolModel(replies, [1, 1, 1, 1]), CHAT).solve([_after_a_result()])[0]
    assert json.loads(sol.answer) == [{"name": "get_weather", "arguments": {"city": "London"}}]
    unanswered = _after_a_result()
    unanswered.metadata["messages"] = unanswered.metadata["messages"][:2]  # the call has no result yet
    paris = [call("get_weather", city="Paris")] * 3 + ["It is sunny."]
    sol = ToolVote(ToolVoteConfig(n=4), ToolModel(paris, [1, 1, 1, 1]), CHAT).solve([unanswered])[0]
    assert json.loads(sol.answer) == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert "repeated_tool_call" not in sol.trace.events
