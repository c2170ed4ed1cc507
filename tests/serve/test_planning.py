"""A request body to the solves that answer it (:func:`tts.serve.planning.plan_request`), called
directly on a server state over the scripted backend (no HTTP, no solve): each check's refusal,
field and code, the budget and reservation worked out by hand, the solve's settings, the jobs and
the tools shown. Milliseconds a test, so that the mutation run of tts/serve/planning.py
(benchmarks/mutation.py) can afford them per mutant; the same rules over HTTP are in
test_budgets_and_models.py and test_openai_params.py."""

from __future__ import annotations

from typing import Any

import pytest

from tts.backends.function import FunctionGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.budgets.pricing import ComputeBudget
from tts.serve import ServeConfig
from tts.serve.errors import APIError
from tts.serve.planning import must_call, plan_request, returns_tool_calls
from tts.serve.protocol import ChatRequest, CompletionRequest
from tts.serve.state import ServerState
from tts.session import Session

ASK = [{"role": "user", "content": "What is 6 * 7?"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}


class _Gen(ScriptedGenerator):
    """The scripted model with a vocabulary (for logit_bias) and, when asked, seeds it ignores."""

    vocab_size = 1000


class _SeedlessGen(_Gen):
    honours_seeds = False


class _ClosedGen(ScriptedGenerator):
    @property
    def vocab_size(self) -> int:
        raise RuntimeError("the engine is closed")


_sessions: list[Session] = []


def _state(gen_class: Any = _Gen, strategy_settings: dict[str, Any] | None = None, **config: Any) -> ServerState:
    session = Session(generator=gen_class(default={"42": 0.8}, seed=0, model_name="m"), price_as=None,
                      max_tokens=128, batch_window=0.0, strategy_settings=strategy_settings)
    _sessions.append(session)
    return ServerState.build(session, ServeConfig(model="m", **{"max_budget_tokens": 4096, **config}))


@pytest.fixture(scope="module", autouse=True)
def _close_sessions():
    yield
    for session in _sessions:
        session.close()


@pytest.fixture(scope="module")
def state() -> ServerState:
    return _state()


def _chat(state: ServerState, **body: Any):
    return plan_request(state, "chat", ChatRequest.model_validate({"model": "sc-4/m", "messages": ASK, **body}))


def _text(state: ServerState, **body: Any):
    return plan_request(state, "completions", CompletionRequest.model_validate({"model": "sc-4/m", "prompt": "q", **body}))


def _refused(call: Any, *args: Any, **kw: Any) -> APIError:
    with pytest.raises(APIError) as info:
        call(*args, **kw)
    return info.value


# --- n, max_tokens and the budget -------------------------------------------------------------------

def test_n_choices_between_one_and_the_servers_cap(state):
    for n in (0, 9):
        err = _refused(_chat, state, n=n)
        assert (err.status, err.param, err.code) == (400, "n", None)
        assert err.message == (f"n={n}: n (choices, each an independent solve) must be between 1 and 8 on this "
                               "server; for more samples per answer raise the strategy's n (sc-16/<model> or tts.n)")
    assert [j.index for j in _chat(state, n=8).jobs] == list(range(8))
    assert len(_chat(state, n=1).jobs) == 1


def test_without_a_budget_each_solve_gets_its_share_of_the_cap(state):
    # the cap is 4096 generated tokens a request; reasoning_effort's share, split over the solves
    high = _chat(state)
    assert high.jobs[0].kwargs["budget"] == ComputeBudget(4096, "tokens") and high.reserve_tokens == 4096
    low = _chat(state, n=2, reasoning_effort="low")  # 4096 * 0.25 // 2
    assert low.jobs[1].kwargs["budget"] == ComputeBudget(512, "tokens") and low.reserve_tokens == 1024
    texts = _text(state, prompt=["a", "b", "c"], n=2, reasoning_effort="medium")  # 6 solves: 2048 // 6 = 341
    assert texts.jobs[0].kwargs["budget"] == ComputeBudget(341, "tokens") and texts.reserve_tokens == 341 * 6


def test_one_prompt_is_one_solve_however_long_its_text(state):
    plan = _text(state, prompt="What is 6 * 7?")  # a string, not a list of 14 prompts
    assert plan.jobs[0].kwargs["budget"] == ComputeBudget(4096, "tokens") and plan.reserve_tokens == 4096


def test_an_empty_prompt_list_is_refused_as_such_not_as_a_budget_split(state):
    err = _refused(_text, state, prompt=[], max_tokens=4000)  # counted as one solve: 4096 holds 4000
    assert (err.param, err.message) == ("prompt", "give 1 to 16 prompts, got 0")


def test_prompts_past_the_servers_cap_count_as_the_cap_when_reserving():
    state = _state(max_prompts=2)
    assert [j.question for j in _text(state, prompt=["a", "b"]).jobs] == ["a", "b"]  # exactly the cap
    err = _refused(_text, state, prompt=["a", "b", "c"])
    assert (err.param, err.message) == ("prompt", "give 1 to 2 prompts, got 3")
    err = _refused(_text, state, prompt=[])
    assert (err.param, err.message) == ("prompt", "give 1 to 2 prompts, got 0")


def test_an_asked_budget_is_each_solves_and_the_reservation_counts_every_solve(state):
    plan = _chat(state, n=2, tts={"budget": 300})
    assert plan.jobs[0].kwargs["budget"] == ComputeBudget(300, "tokens") and plan.reserve_tokens == 600
    err = _refused(_chat, state, n=2, tts={"budget": 3000})
    assert (err.param, err.code) == ("tts.budget", "budget_too_large") and "x 2 solves" in err.message


def test_a_budget_that_cannot_be_read_or_hold_one_sample_names_the_budget(state):
    err = _refused(_chat, state, tts={"budget": "lots"})
    assert (err.status, err.param, err.code) == (400, "tts.budget", None)
    assert err.message == ("cannot read a budget from 'lots'; give a number of tokens, {'dollars': 0.01}, "
                           "{'eflops': 1e15}, {'gpu_seconds': 2}, {'tokens': 4000} or {'amount': 0.01, 'unit': 'dollars'}")
    err = _refused(_chat, state, tts={"budget": 100}, max_tokens=128)  # the pricer's refusal: no code
    assert (err.param, err.code) == ("tts.budget", None)
    assert err.message == "a budget of 100 tokens does not cover one sample of up to 128 tokens; raise the budget or lower max_tokens"
    err = _refused(_chat, state, n=8, reasoning_effort="minimal")  # 4096 * 0.125 // 8 = 64 < 128
    assert (err.param, err.code) == ("n", "budget_too_large") and "leaves 64 each" in err.message
    err = _refused(_chat, state, n=2, max_tokens=300, reasoning_effort="minimal")  # 512 // 2 = 256 < 300: lower n
    assert (err.param, err.code) == ("n", "budget_too_large") and "leaves 256 each" in err.message
    err = _refused(_chat, state, max_tokens=1000, reasoning_effort="minimal")  # 512 < 1000, one solve
    assert (err.param, err.code) == ("max_tokens", "budget_too_large")


def test_max_tokens_over_the_servers_limit_is_refused_and_max_completion_tokens_wins(state):
    err = _refused(_chat, state, max_tokens=5000)
    assert (err.param, err.message) == (
        "max_tokens", "max_tokens=5000 is over this server's limit of 4096 tokens per sample; lower it")
    err = _refused(_chat, state, max_tokens=10, max_completion_tokens=5000)
    assert err.param == "max_tokens" and "max_tokens=5000" in err.message
    assert _chat(state, max_tokens=5000, max_completion_tokens=20).jobs[0].kwargs["max_tokens"] == 20
    assert _chat(state, max_tokens=30).jobs[0].kwargs["max_tokens"] == 30
    assert _text(state, max_tokens=40).jobs[0].kwargs["max_tokens"] == 40


def test_a_sample_count_over_the_servers_cap_names_tts_n(state):
    err = _refused(_chat, state, model="sc-65/m")
    assert (err.param, err.message) == (
        "tts.n", "n=65 is over this server's limit of 64; lower n (in the model name or tts.n)")
    assert _chat(state, tts={"n": 3}).jobs[0].kwargs["strategy"].n == 3


# --- the strategy ----------------------------------------------------------------------------------

def test_the_plan_keeps_the_request(state):
    body = ChatRequest.model_validate({"model": "sc-4/m", "messages": ASK, "tts": {"answer_only": True}})
    plan = plan_request(state, "chat", body)
    assert plan.body is body and plan.model == "sc-4/m" and plan.answer_only is True and plan.rate_key is None


def test_auto_gets_the_budget_and_has_no_sample_count_to_note():
    state = _state(strategy_settings={"auto": {"calibration": "/data/cal.jsonl"}})
    plan = _chat(state, model="auto/m", temperature=0, seed=1)
    config = plan.jobs[0].kwargs["strategy"]
    assert (config.kind, config.budget, config.calibration) == ("auto", 4096.0, "/data/cal.jsonl")
    assert plan.notes == []


def test_the_strategy_comes_from_the_model_name_then_tts_strategy(state):
    assert _chat(state, model="m").jobs[0].kwargs["strategy"].n == 8  # the server's default, sc-8
    assert _chat(state, model="bon-2/m").jobs[0].kwargs["strategy"].kind == "best_of_n"
    by_name = _chat(state, model="m", tts={"strategy": "wv-3"}).jobs[0].kwargs["strategy"]
    assert (by_name.kind, by_name.n) == ("weighted_vote", 3)
    by_object = _chat(state, tts={"strategy": {"kind": "best_of_n", "n": 5}}).jobs[0].kwargs["strategy"]
    assert (by_object.kind, by_object.n) == ("best_of_n", 5)


def test_an_unknown_model_is_a_404_and_an_unknown_tts_strategy_a_400(state):
    err = _refused(_chat, state, model="other")
    assert (err.status, err.param, err.code) == (404, "model", "model_not_found")
    err = _refused(_chat, state, model="nope-4/m")
    assert (err.status, err.param, err.code) == (404, "model", "model_not_found")
    err = _refused(_chat, state, tts={"strategy": "nope-4"})
    assert (err.status, err.param, err.code) == (400, "tts.strategy", None)
    assert err.message.startswith("unknown strategy 'nope' in 'nope-4'")


def test_a_strategy_the_operator_did_not_offer():
    state = _state(strategies=("self_consistency",))
    err = _refused(_chat, state, model="bon-4/m")
    assert (err.status, err.param, err.code) == (404, "model", "model_not_found") and "best_of_n" in err.message
    err = _refused(_chat, state, tts={"strategy": "bon-4"})
    assert (err.status, err.param, err.code) == (400, "tts.strategy", "setting_not_allowed")
    err = _refused(_chat, state, tts={"strategy": {"kind": "self_consistency", "n": 2, "colour": 1}})
    assert (err.status, err.param, err.code) == (400, "tts.strategy.colour", "setting_not_allowed")


# --- the per-request stop --------------------------------------------------------------------------

def test_the_stop_a_request_sets_or_turns_off(state):
    assert _chat(state).jobs[0].kwargs["strategy"].stop is None
    horizon = _chat(state, tts={"stop": "horizon"}).jobs[0].kwargs["strategy"].stop
    assert horizon is not None and horizon.rule == "horizon"
    window = _chat(state, tts={"stop": {"rule": "window", "window": 3}}).jobs[0].kwargs["strategy"].stop
    assert (window.rule, window.window) == ("window", 3)
    assert _chat(state, tts={"stop": False}).jobs[0].kwargs["strategy"].stop is None


def test_a_stop_for_a_strategy_that_cannot_stop_or_a_bare_true_is_refused(state):
    err = _refused(_chat, state, model="beam-2x4/m", tts={"stop": "horizon"})
    assert (err.param, err.code) == ("tts.stop", None)
    assert err.message.startswith("strategy beam cannot stop a request early")
    err = _refused(_chat, state, tts={"stop": True})
    assert (err.param, err.message) == ("tts.stop", "tts.stop: give a rule (\"horizon\") or its settings, or false "
                                                    "to turn the server's default stop off")


def test_stop_false_on_a_strategy_that_never_stops_early_is_accepted(state):
    """A client that always turns the operator's default stop off (``"stop": false``) can still ask
    for a search: false asks for what the search does anyway (it was refused: 'beam' has no
    setting 'stop')."""
    plan = _chat(state, model="beam-2x4/m", tts={"stop": False})
    assert (plan.jobs[0].kwargs["strategy"].kind, plan.jobs[0].kwargs["strategy"].n) == ("beam", 4)


def test_the_operators_default_stop_applies_where_it_can():
    state = _state(stop={"rule": "horizon"})
    assert _chat(state).jobs[0].kwargs["strategy"].stop.rule == "horizon"
    assert _chat(state, tts={"stop": "window"}).jobs[0].kwargs["strategy"].stop.rule == "window"
    assert _chat(state, model="sc-4+window/m").jobs[0].kwargs["strategy"].stop.rule == "window"
    assert _chat(state, tts={"stop": False}).jobs[0].kwargs["strategy"].stop is None
    assert _chat(state, model="beam-2x4/m").jobs[0].kwargs["strategy"].kind == "beam"  # not a stopping strategy


# --- the solve's settings ----------------------------------------------------------------------------

def test_sampling_settings_reach_every_solve(state):
    plan = _chat(state, n=2, temperature=0.7, top_p=0.9, seed=5, stop=["\n\n"], presence_penalty=0.5,
                 frequency_penalty=-0.25, logit_bias={"7": 2.0}, logprobs=True, top_logprobs=3, max_tokens=64)
    for job in plan.jobs:
        kw = job.kwargs
        assert (kw["temperature"], kw["top_p"], kw["seed"], kw["max_tokens"]) == (0.7, 0.9, 5, 64)
        o = kw["options"]
        assert (o.stop, o.presence_penalty, o.frequency_penalty, o.logit_bias, o.json_schema, o.logprobs) == (
            ("\n\n",), 0.5, -0.25, ((7, 2.0),), None, 3)
    assert plan.notes == [] and plan.kind == "chat" and plan.tool_calls is False
    o = _chat(state).jobs[0].kwargs["options"]
    assert (o.presence_penalty, o.frequency_penalty, o.logprobs) == (0.0, 0.0, None)


def test_a_logit_bias_outside_the_vocabulary_is_refused_naming_the_range(state):
    err = _refused(_chat, state, logit_bias={"5": 1.0, "1000": 1.0})
    assert (err.param, err.message) == (
        "logit_bias", "logit_bias token id 1000 is outside this model's vocabulary of 1000 tokens; give ids 0..999")
    assert _chat(state, logit_bias={"999": 1.0}).jobs[0].kwargs["options"].logit_bias == ((999, 1.0),)
    closed = _state(_ClosedGen)  # the engine cannot say its vocabulary: the solve says what is wrong
    assert _chat(closed, logit_bias={"100000": 1.0}).jobs[0].kwargs["options"].logit_bias == ((100000, 1.0),)


def test_temperature_zero_with_several_samples_is_noted(state):
    assert _chat(state, temperature=0).notes == [
        "temperature 0 is greedy: the strategy's 4 samples are one greedy sample repeated (drawn once), so they all "
        "agree; raise the temperature for a vote that means something"]
    assert _chat(state, model="sc-2/m", temperature=0).notes[0].startswith("temperature 0 is greedy: the strategy's 2 ")
    assert _chat(state, model="sc-1/m", temperature=0).notes == []
    assert _chat(state, temperature=0.5).notes == []


def test_a_seed_the_engine_ignores_is_noted():
    note = ("seed 3 was not honoured: this engine ignores request seeds (vLLM on CPU does unless started in "
            "deterministic mode); only the server's run seed applies")
    assert _chat(_state(_SeedlessGen), seed=3).notes == [note]
    assert _chat(_state(_SeedlessGen)).notes == []
    assert _chat(_state(_Gen), seed=3).notes == []
    plain = _state(lambda **kw: FunctionGenerator(lambda r: "42", model_name="m"))  # says nothing of seeds
    assert _chat(plain, seed=3).notes == []


def test_the_prompt_is_the_conversation_unless_the_math_prompt_is_chosen():
    plain, math = _state(), _state(prompt="math")
    assert _chat(plain).plain is True and _chat(plain).jobs[0].kwargs["prompt"] is plain.plain
    chosen = _chat(math)
    assert chosen.plain is False and chosen.jobs[0].kwargs["prompt"] is math.session.template
    asked = _chat(math, tts={"prompt": "plain"})
    assert asked.plain is True and asked.jobs[0].kwargs["prompt"] is math.plain
    assert _chat(plain, tts={"prompt": "math"}).jobs[0].kwargs["prompt"] is plain.session.template
    schema = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}
    json_out = _chat(math, response_format=schema)  # JSON is asked for by the schema, not by \boxed{}
    assert json_out.plain is True and json_out.jobs[0].kwargs["options"].json_schema == '{"type": "object"}'


# --- chat jobs and tools ------------------------------------------------------------------------------

def test_chat_jobs_keep_the_conversation_and_ask_its_last_user_question(state):
    messages = [{"role": "user", "content": "First?"}, {"role": "assistant", "content": "A."},
                {"role": "user", "content": "Second?"}, {"role": "user", "content": "  "}]
    plan = _chat(state, n=3, messages=messages)
    assert [(j.question, j.index) for j in plan.jobs] == [("Second?", 0), ("Second?", 1), ("Second?", 2)]
    assert plan.jobs[2].kwargs["messages"] == messages and plan.jobs[0].kwargs["tools"] is None


def test_a_conversation_without_a_question_is_refused_unless_it_ends_with_a_reply(state):
    err = _refused(_chat, state, messages=[{"role": "system", "content": "Be brief."}])
    assert (err.param, err.message) == ("messages", "the conversation has no user message with text; put the "
                                                    "question in one")
    ended = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " "},
             {"role": "assistant", "content": "Hello there."}]
    assert _chat(state, messages=ended).jobs[0].question == "Hello there."
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    answered = [{"role": "system", "content": "Be brief."}, {"role": "assistant", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "Sunny."}]
    assert _chat(state, messages=answered).jobs[0].question == "Sunny."


def test_a_malformed_message_or_tool_names_its_field(state):
    err = _refused(_chat, state, messages=[{"role": "tool", "content": "3", "tool_call_id": "x"}])
    assert err.status == 400 and err.param.startswith("messages")
    err = _refused(_chat, state, messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    assert (err.param, err.message) == ("messages[0].content", "messages[0] has a content part of type 'image_url'; "
                                        "this model reads text only: send the content as text parts or a string")
    err = _refused(_chat, state, tools=[{"type": "function", "function": {"name": "f", "parameters": "oops"}}])
    assert (err.status, err.param) == (400, "tools[0].function.parameters")


def test_tools_are_shown_with_the_choice_as_json(state):
    plan = _chat(state, tools=[WEATHER, TIME], n=2)
    assert plan.tool_calls is True and plan.jobs[1].kwargs["tools"] == [WEATHER, TIME]
    assert plan.jobs[0].kwargs["tool_choice"] is None
    assert _chat(state, tools=[WEATHER], tool_choice="required").jobs[0].kwargs["tool_choice"] == "required"
    named = _chat(state, tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert named.jobs[0].kwargs["tools"] == [TIME]
    assert named.jobs[0].kwargs["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}
    none = _chat(state, tools=[WEATHER], tool_choice="none")
    assert none.tool_calls is False and none.jobs[0].kwargs["tools"] is None and none.jobs[0].kwargs["tool_choice"] is None


def test_tool_choices_that_cannot_be_honoured_say_why(state):
    err = _refused(_chat, state, tool_choice="auto")
    assert (err.param, err.message) == ("tool_choice", "tool_choice needs tools; send the tools or leave tool_choice out")
    err = _refused(_chat, state, tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "f"}})
    assert (err.param, err.message) == ("tool_choice", "tool_choice names 'f', which is not one of the tools "
                                                       "('get_weather', 'get_time'); name one of them")
    err = _refused(_chat, state, model="beam-2x4/m", tools=[WEATHER])
    assert err.param == "tools" and err.message.startswith("strategy beam cannot show the model tools")
    assert err.message.endswith(" (e.g. model tool_vote-8/m)")
    assert _chat(state, model="beam-2x4/m", tools=[WEATHER], tool_choice="none").tool_calls is False
    few = _state(strategies=("beam", "self_consistency"))  # only the strategies offered here are named
    err = _refused(_chat, few, model="beam-2x4/m", tools=[WEATHER])
    assert err.message == ("strategy beam cannot show the model tools, so it would answer without them; use one that "
                           "can (self_consistency) or leave the tools out (e.g. model tool_vote-8/m)")


def test_which_requests_must_call_and_which_strategies_answer_with_calls(state):
    def body(choice: Any) -> ChatRequest:
        return ChatRequest.model_validate({"model": "m", "messages": ASK, "tools": [WEATHER], "tool_choice": choice})

    assert must_call(body("required")) and must_call(body({"type": "function", "function": {"name": "get_weather"}}))
    assert not must_call(body("auto")) and not must_call(body(None)) and not must_call(object())
    assert returns_tool_calls(_chat(state).jobs[0].kwargs["strategy"])
    assert not returns_tool_calls(_chat(state, model="beam-2x4/m").jobs[0].kwargs["strategy"])


# --- completions jobs --------------------------------------------------------------------------------

def test_completion_jobs_are_one_per_prompt_and_choice(state):
    plan = _text(state, prompt=["a", "b"], n=2)
    assert [(j.question, j.index) for j in plan.jobs] == [("a", 0), ("a", 1), ("b", 2), ("b", 3)]
    assert plan.kind == "completions" and plan.tool_calls is False and "messages" not in plan.jobs[0].kwargs
    plan.jobs[0].kwargs["seed"] = 9  # each job its own settings
    assert plan.jobs[1].kwargs["seed"] is None
    assert [j.question for j in _text(state, prompt="one").jobs] == ["one"]
    err = _refused(_text, state, prompt=["a", " "])
    assert (err.param, err.message) == ("prompt", "a prompt is empty; put the question in it")
