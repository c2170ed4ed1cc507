"""The server's replies built from solutions, called directly (no HTTP): each part a client reads
(text, reasoning, tool calls, finish reason, logprobs, usage, the ``tts`` extension, stream
chunks) worked out by hand for a solution built here. Milliseconds a test, so that the mutation
run of tts/serve/replies.py (benchmarks/mutation.py) can afford them per mutant."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tts.serve import replies
from tts.serve.planning import ChoiceJob, RequestPlan
from tts.serve.protocol import ChatRequest, CompletionRequest
from tts.session.session import SessionSolution
from tts.types import Sample, Trace, Usage

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
CALL_ANSWER = '[{"arguments":{"city":"Paris"},"name":"get_weather"}]'


def _sol(samples: tuple[Sample, ...] = (), selected: int | None = None, answer: str | None = "42",
         usage: Usage | None = None, **kw: Any) -> SessionSolution:
    trace = Trace("self_consistency", samples=samples, selected=selected, votes=kw.pop("votes", {}),
                  events=kw.pop("events", {}), notes=kw.pop("notes", {}))
    return SessionSolution("p", answer, kw.pop("confidence", 0.75), usage or Usage(calls=3), trace,
                           cost=kw.pop("cost", {"tokens": 10}), strategy=kw.pop("strategy", "self_consistency@4"),
                           **kw)


def _plan(kind: str = "chat", n: int = 1, tools: bool = False, plain: bool = False, notes: list[str] | None = None,
          **body: Any) -> RequestPlan:
    if kind == "chat":
        req: Any = ChatRequest.model_validate({"model": "sc-4/m", "messages": [{"role": "user", "content": "q"}],
                                               "n": n, **body})
    else:
        req = CompletionRequest.model_validate({"model": "sc-4/m", "prompt": "q", "n": n, **body})
    jobs = [ChoiceJob("q", {}, i) for i in range(n)]
    return RequestPlan(kind, req, jobs, tools, 100, list(notes or []), plain=plain)


THOUGHT = "<think>six sevens</think>The answer is \\boxed{42}."


# --- ids, usage and the extension -----------------------------------------------------------------

def test_ids_are_the_prefix_and_24_hex_digits_and_differ():
    ids = {replies.new_id("chatcmpl") for _ in range(50)}
    assert len(ids) == 50 and all(re.fullmatch(r"chatcmpl-[0-9a-f]{24}", i) for i in ids)
    assert replies.response_id(_plan("chat")).startswith("chatcmpl-")
    assert re.fullmatch(r"cmpl-[0-9a-f]{24}", replies.response_id(_plan("completions")))


def test_usage_adds_every_solution_and_names_reasoning_only_when_counted():
    a = _sol(usage=Usage(prompt_tokens=10, cached_prompt_tokens=4, completion_tokens=30, reasoning_tokens=5))
    b = _sol(usage=Usage(prompt_tokens=7, cached_prompt_tokens=1, completion_tokens=3, reasoning_tokens=2))
    assert replies.usage_block([a, b]) == {
        "prompt_tokens": 17, "completion_tokens": 33, "total_tokens": 50,
        "prompt_tokens_details": {"cached_tokens": 5}, "completion_tokens_details": {"reasoning_tokens": 7}}
    plain = replies.usage([_sol(usage=Usage(prompt_tokens=2, completion_tokens=1))])
    assert plain.total_tokens == 3 and plain.completion_tokens_details is None


def test_the_choice_extension_says_what_the_solve_did():
    sol = _sol((Sample("a", "41"), Sample("b", "42")), votes={"42": 1.0, "41": 1.0}, events={"empty": 1},
               notes={"stop": {"rule": "horizon"}}, budget={"amount": 5}, usage=Usage(calls=7))
    assert replies.tts_block(sol) == {
        "strategy": "self_consistency@4", "answer": "42", "confidence": 0.75, "cost": {"tokens": 10},
        "budget": {"amount": 5}, "stop": {"rule": "horizon"}, "answers": ["41", "42"],
        "votes": {"42": 1.0, "41": 1.0}, "events": {"empty": 1}, "engine_requests": 7}


# --- the chosen sample ----------------------------------------------------------------------------

@pytest.mark.parametrize(("selected", "text"), [(None, None), (-1, None), (2, None), (0, "first"), (1, "second")])
def test_the_chosen_sample_is_the_selected_index_inside_the_samples(selected, text):
    sol = _sol((Sample("first", "1"), Sample("second", "2")), selected=selected)
    assert replies._chosen_text(sol) == text


def test_finish_reason_of_each_case():
    cut, whole = Sample("x", "42", finish_reason="length"), Sample("y", "42", finish_reason="stop")
    assert replies.finish_reason(_sol((cut,), 0), answer_only=False, calls=True) == "tool_calls"
    assert replies.finish_reason(_sol((cut,), 0), answer_only=False) == "length"
    assert replies.finish_reason(_sol((cut,), 0), answer_only=True) == "stop"  # the answer alone is whole
    assert replies.finish_reason(_sol((whole,), 0), answer_only=False) == "stop"
    # no sample chosen: "length" only when no answer came and every sample was cut
    assert replies.finish_reason(_sol((cut, cut), None, answer=None), answer_only=False) == "length"
    assert replies.finish_reason(_sol((cut, cut), None, answer=None), answer_only=True) == "length"
    assert replies.finish_reason(_sol((cut, whole), None, answer=None), answer_only=False) == "stop"
    assert replies.finish_reason(_sol((cut, cut), None, answer="42"), answer_only=False) == "stop"
    assert replies.finish_reason(_sol((), None, answer=None), answer_only=False) == "stop"


def test_the_message_text_of_each_case():
    chosen = _sol((Sample(THOUGHT, "42"),), 0)
    assert replies.message_text(chosen, answer_only=False) == THOUGHT
    assert replies.message_text(chosen, answer_only=False, without_reasoning=True) == "The answer is \\boxed{42}."
    assert replies.message_text(chosen, answer_only=True) == "42"
    unchosen = _sol((Sample("a", "42"),), None)
    assert replies.message_text(unchosen, answer_only=False) == "The answer is \\boxed{42}."
    none = _sol((Sample("a"),), None, answer=None)
    assert replies.message_text(none, answer_only=False) == "No answer was found."
    assert replies.message_text(none, answer_only=True) == ""
    assert replies.message_text(none, answer_only=False, plain=True) == ""


def test_the_reasoning_text_is_the_chosen_samples_thought():
    chosen = _sol((Sample(THOUGHT, "42"),), 0)
    assert replies.reasoning_text(chosen, answer_only=False) == "six sevens"
    assert replies.reasoning_text(chosen, answer_only=True) is None
    assert replies.reasoning_text(_sol((Sample(THOUGHT, "42"),), None), answer_only=False) is None
    assert replies.reasoning_text(_sol((Sample("no thought", "42"),), 0), answer_only=False) is None


# --- logprobs -------------------------------------------------------------------------------------

TOKENS = (("ab", -0.5, (("ab", -0.5), ("x", float("-inf")))), ("c", float("-inf"), ()), ("de", -1.0, (("de", -1.0),)))


def test_chat_logprobs_are_openais_content_entries_with_bytes():
    block = replies.logprobs_block(_sol(logprobs=TOKENS), "chat", answer_only=False)
    assert block == {"refusal": None, "content": [
        {"token": "ab", "logprob": -0.5, "bytes": [97, 98],
         "top_logprobs": [{"token": "ab", "logprob": -0.5, "bytes": [97, 98]},
                          {"token": "x", "logprob": -9999.0, "bytes": [120]}]},
        {"token": "c", "logprob": -9999.0, "bytes": [99], "top_logprobs": []},
        {"token": "de", "logprob": -1.0, "bytes": [100, 101],
         "top_logprobs": [{"token": "de", "logprob": -1.0, "bytes": [100, 101]}]}]}


def test_completion_logprobs_have_tokens_offsets_and_top_maps():
    block = replies.logprobs_block(_sol(logprobs=TOKENS), "completions", answer_only=False)
    assert block == {"tokens": ["ab", "c", "de"], "token_logprobs": [-0.5, -9999.0, -1.0],
                     "top_logprobs": [{"ab": -0.5, "x": -9999.0}, {}, {"de": -1.0}], "text_offset": [0, 2, 3]}


def test_no_logprobs_when_not_asked_or_for_the_answer_alone():
    assert replies.logprobs_block(_sol(), "chat", answer_only=False) is None
    assert replies.logprobs_block(_sol(logprobs=TOKENS), "chat", answer_only=True) is None


# --- tool calls -----------------------------------------------------------------------------------

def test_the_chosen_samples_calls_keep_their_ids_and_get_one_when_missing():
    sol = _sol((Sample("c", CALL_ANSWER, tool_calls=(CALL,)),), 0, answer=CALL_ANSWER)
    assert replies.tool_calls(sol) == [CALL]
    no_id = {k: v for k, v in CALL.items() if k != "id"}
    [call] = replies.tool_calls(_sol((Sample("c", CALL_ANSWER, tool_calls=(no_id,)),), 0, answer=CALL_ANSWER))
    assert re.fullmatch(r"call_[0-9a-f]{24}", call["id"]) and call["function"] == CALL["function"]


def test_calls_are_built_from_the_answer_when_the_chosen_sample_says_another():
    other = '[{"arguments":{"city":"Rome"},"name":"get_weather"}]'
    sol = _sol((Sample("c", other, tool_calls=({**CALL, "id": "call_rome"},)),), 0, answer=CALL_ANSWER)
    [call] = replies.tool_calls(sol)
    assert call["id"] != "call_rome" and call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    [unicode] = replies.tool_calls(_sol(answer='[{"arguments":{"city":"Zürich"},"name":"w"}]'))
    assert unicode["function"]["arguments"] == '{"city": "Zürich"}'  # sent as written, not \u-escaped


def test_no_calls_for_text_no_answer_or_a_cut_sample():
    assert replies.tool_calls(_sol(answer="42")) is None
    assert replies.tool_calls(_sol(answer=None)) is None
    cut = Sample("c", CALL_ANSWER, finish_reason="length", tool_calls=(CALL,))
    assert replies.tool_calls(_sol((cut,), 0, answer=CALL_ANSWER)) is None


# --- choices and the whole reply --------------------------------------------------------------------

def test_a_chat_choice_of_text_with_reasoning_logprobs_and_the_plans_notes():
    sol = _sol((Sample(THOUGHT, "42", finish_reason="stop"),), 0, logprobs=TOKENS)
    choice = replies.choice(_plan(notes=["served"]), ChoiceJob("q", {}, 3), sol)
    assert choice.index == 3 and choice.finish_reason == "stop"
    assert choice.message.content == "The answer is \\boxed{42}." and choice.message.reasoning_content == "six sevens"
    assert choice.message.tool_calls is None and choice.logprobs.content[0].token == "ab"
    assert choice.tts.notes == ["served"] and choice.tts.answer == "42"
    assert replies.choice(_plan(), ChoiceJob("q", {}, 0), sol).tts.notes is None


def test_an_answer_only_choice_is_the_answer_whole_without_reasoning_or_logprobs():
    """``tts.answer_only``: the answer alone, read from a cut sample all the same, is whole ("stop")."""
    sol = _sol((Sample(THOUGHT, "42", finish_reason="length"),), 0, logprobs=TOKENS)
    only = {"tts": {"answer_only": True}}
    chat = replies.choice(_plan(**only), ChoiceJob("q", {}, 0), sol)
    assert (chat.message.content, chat.message.reasoning_content, chat.logprobs, chat.finish_reason) == (
        "42", None, None, "stop")
    assert chat.tts.notes is None
    text = replies.choice(_plan("completions", **only), ChoiceJob("q", {}, 0), sol)
    assert (text.text, text.logprobs, text.finish_reason, text.tts.notes) == ("42", None, "stop", None)
    whole = replies.choice(_plan(), ChoiceJob("q", {}, 0), sol)  # the same solution's text: cut
    assert whole.finish_reason == "length" and whole.message.reasoning_content == "six sevens"


def test_a_chat_choice_of_calls_has_no_content_or_logprobs():
    sol = _sol((Sample("c", CALL_ANSWER, tool_calls=(CALL,)),), 0, answer=CALL_ANSWER, logprobs=TOKENS)
    choice = replies.choice(_plan(tools=True), ChoiceJob("q", {}, 0), sol)
    assert choice.finish_reason == "tool_calls" and choice.message.content is None and choice.logprobs is None
    assert [c.model_dump() for c in choice.message.tool_calls] == [CALL]
    text = replies.choice(_plan(tools=False), ChoiceJob("q", {}, 0), sol)  # no tools offered: the text
    assert text.finish_reason == "stop" and text.message.content == "c" and text.message.tool_calls is None


def test_a_plain_chat_choice_without_an_answer_is_empty_and_says_why():
    sol = _sol((Sample("a"), Sample("b")), None, answer=None, events={"verifier_error": 2, "empty": 1})
    choice = replies.choice(_plan(plain=True, notes=["served"]), ChoiceJob("q", {}, 0), sol)
    assert choice.message.content == ""
    assert choice.tts.notes == ["served", "no sample gave an answer (empty: 1, verifier_error: 2); the reply is empty"]
    quiet = replies.choice(_plan(plain=True), ChoiceJob("q", {}, 0), _sol((Sample("a"),), None, answer=None))
    assert quiet.tts.notes == ["no sample gave an answer (none answered); the reply is empty"]
    math = replies.choice(_plan(plain=False), ChoiceJob("q", {}, 0), _sol((Sample("a"),), None, answer=None))
    assert math.message.content == "No answer was found." and math.tts.notes is None


def test_a_cut_choice_says_length_and_what_to_change():
    cut = _sol((Sample("Once upon", None, finish_reason="length"),), 0, answer=None)
    chat = replies.choice(_plan(notes=["served"]), ChoiceJob("q", {}, 0), cut)
    assert chat.finish_reason == "length" and chat.message.content == "Once upon"
    assert chat.tts.notes == ["served", "max_tokens cut the reply short; raise max_tokens for a whole one"]
    text = replies.choice(_plan("completions"), ChoiceJob("q", {}, 2), cut)
    assert (text.index, text.text, text.finish_reason) == (2, "Once upon", "length")
    assert text.tts.notes == ["max_tokens cut the reply short; raise max_tokens for a whole one"]


def test_a_completion_choice_has_the_text_and_completions_logprobs():
    sol = _sol((Sample(THOUGHT, "42"),), 0, logprobs=TOKENS)
    choice = replies.choice(_plan("completions"), ChoiceJob("q", {}, 1), sol)
    assert choice.text == THOUGHT and choice.finish_reason == "stop" and choice.logprobs.text_offset == [0, 2, 3]
    empty = replies.choice(_plan("completions", plain=True), ChoiceJob("q", {}, 0), _sol(answer=None))
    assert empty.text == ""


def test_costs_add_numbers_and_keep_the_first_label():
    assert replies.sum_costs([{"tokens": 10, "dollars": 0.5, "gpu": "h100", "flag": True, "eflops": None},
                              {"tokens": 5, "dollars": 0.25, "gpu": "a100", "flag": False, "eflops": 2.0,
                               "calls": 3}]) == {"tokens": 15, "dollars": 0.75, "gpu": "h100", "flag": True,
                                                 "eflops": None, "calls": 3}
    assert replies.sum_costs([]) == {}


def test_the_replys_extension_is_the_first_choices_with_all_costs():
    first = _sol((Sample("a", "41"), Sample("b", "42")), notes={"stop": {"rule": "vote"}}, budget={"amount": 9},
                 cost={"tokens": 10}, confidence=0.5)
    second = _sol(answer="7", cost={"tokens": 4}, strategy="other")
    ext = replies.summary([first, second], ["served"])
    assert ext.model_dump() == {"strategy": "self_consistency@4", "answer": "42", "confidence": 0.5,
                                "cost": {"tokens": 14}, "answers": ["41", "42"], "budget": {"amount": 9},
                                "stop": {"rule": "vote"}, "notes": ["served"]}
    assert replies.summary([first], []).notes is None


def test_the_whole_response():
    p = _plan(n=2, notes=["served"])
    sols = [_sol(answer="42", usage=Usage(prompt_tokens=3, completion_tokens=4)),
            _sol(answer="41", usage=Usage(prompt_tokens=1, completion_tokens=1))]
    reply = replies.response(p, sols)
    assert reply.model == "sc-4/m" and reply.id.startswith("chatcmpl-") and abs(reply.created - replies.now()) <= 1
    assert [c.message.content for c in reply.choices] == ["The answer is \\boxed{42}.", "The answer is \\boxed{41}."]
    assert [c.index for c in reply.choices] == [0, 1] and reply.usage.total_tokens == 9
    assert reply.tts.notes == ["served"] and reply.tts.cost == {"tokens": 20}
    text = replies.response(_plan("completions"), [_sol(answer="42")])
    assert text.id.startswith("cmpl-") and text.choices[0].text == "The answer is \\boxed{42}."


# --- tool_choice demands ----------------------------------------------------------------------------

def test_an_unmet_tool_choice_says_how_many_samples_held_no_call():
    text = _sol((Sample("a", "42"), Sample("b", "42"), Sample("c", "41")), answer="42")
    call = _sol((Sample("c", CALL_ANSWER, tool_calls=(CALL,)),), 0, answer=CALL_ANSWER)
    required = _plan(tools=True, tool_choice="required")
    assert replies.unmet_tool_choice(required, [call, text]) == (
        "tool_choice demands a tool call, but none of the 3 samples held a valid call to an offered tool; raise the "
        "strategy's n, check the tools' descriptions, or use tool_choice auto")
    assert replies.unmet_tool_choice(required, [call]) is None
    assert replies.unmet_tool_choice(_plan(tools=True, tool_choice="auto"), [text]) is None
    assert replies.unmet_tool_choice(_plan(tools=False, tool_choice="required"), [text]) is None
    named = _plan(tools=True, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert replies.unmet_tool_choice(named, [text]).startswith("tool_choice demands a tool call, but none of the 3")


def test_a_completions_plan_never_demands_a_call():
    p = _plan("completions", tools=True)
    p.body = _plan(tool_choice="required").body  # a body that demands one, in a completions plan
    assert replies.unmet_tool_choice(p, [_sol(answer="42")]) is None


# --- streaming --------------------------------------------------------------------------------------

def _events(raw: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for event in raw:
        assert event.startswith(b"data: ") and event.endswith(b"\n\n")
        out.append(json.loads(event[len(b"data: "):-2]))
    return out


def test_a_chat_stream_sends_each_answer_its_finish_and_the_usage():
    p = _plan(n=2, notes=["served"], stream=True, stream_options={"include_usage": True})
    chunks = replies.Chunks(p)
    sols = [_sol((Sample("x", "42", finish_reason="stop"),), 0, usage=Usage(prompt_tokens=2, completion_tokens=3)),
            _sol(answer="41", usage=Usage(prompt_tokens=1, completion_tokens=1))]
    events = _events(chunks.answers(sols))
    assert len(events) == 5 and {e["id"] for e in events} == {chunks.id} and chunks.id.startswith("chatcmpl-")
    assert {e["object"] for e in events} == {"chat.completion.chunk"} and {e["model"] for e in events} == {"sc-4/m"}
    assert {e["created"] for e in events} == {chunks.created}
    assert [(c["index"], c["delta"].get("content"), c["finish_reason"]) for e in events[:4] for c in e["choices"]] == [
        (0, "x", None), (0, None, "stop"), (1, "The answer is \\boxed{41}.", None), (1, None, "stop")]
    assert events[1]["choices"][0]["delta"] == {} and events[1]["tts"]["event"] == "answer"
    assert events[1]["tts"]["answer"] == "42" and events[1]["tts"]["notes"] == ["served"]
    assert events[3]["tts"]["answer"] == "41"
    last = events[4]
    assert last["choices"] == [] and last["usage"]["total_tokens"] == 7
    assert last["tts"]["answer"] == "42" and "notes" not in last["tts"]
    assert len(_events(replies.Chunks(_plan(n=2, notes=["served"], stream=True)).answers(sols))) == 4  # no usage asked


def test_a_stream_of_calls_sends_them_with_their_index():
    sol = _sol((Sample("c", CALL_ANSWER, tool_calls=(CALL, {**CALL, "id": "call_2"})),), 0, answer=CALL_ANSWER)
    events = _events(replies.Chunks(_plan(tools=True)).answers([sol]))
    delta = events[0]["choices"][0]["delta"]
    assert [(c["index"], c["id"]) for c in delta["tool_calls"]] == [(0, "call_1"), (1, "call_2")]
    assert events[1]["choices"][0]["finish_reason"] == "tool_calls"


def test_a_completions_stream_sends_text_chunks():
    p = _plan("completions", stream=True, stream_options={"include_usage": True})
    chunks = replies.Chunks(p)
    assert chunks.object == "text_completion" and chunks.id.startswith("cmpl-")
    events = _events(chunks.answers([_sol(answer="42")]))
    assert [(c["index"], c["text"], c["finish_reason"]) for e in events[:2] for c in e["choices"]] == [
        (0, "The answer is \\boxed{42}.", None), (0, "", "stop")]
    assert events[2]["choices"] == [] and events[2]["usage"]["total_tokens"] == 0
    assert {e["object"] for e in events} == {"text_completion"}
