"""What an agent gets from tts's strategies, the same through ``tts serve`` as through ``tts.solve``
(issue 48, findings 8, 11 and 12): a strategy that cannot show the model tools is refused with one
rule everywhere; a reply that only repeats an answered call loses to any other reply in every
strategy that takes tools, and when all repeat the agent gets the call, never empty content; a
conversation sent to ``tts.solve`` is answered as the server answers it."""

from __future__ import annotations

import json
from functools import partial

import openai
import pytest

import tts
from tests.tool_chat import ASK, KEY, WEATHER
from tts.backends.base import Completion
from tts.backends.function import FunctionGenerator, RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.search.base import StrategyInputError
from tts.session import Session

pytestmark = pytest.mark.timeout(60)
AFTER_RESULT = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"}]
REPEAT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ANSWER = "It is 18C and sunny in Paris."


def _fixed(texts: list[str]) -> FunctionGenerator:
    """Replies the first n of ``texts`` to every request (calls more likely than prose)."""
    return FunctionGenerator(lambda r: [Completion(t, 12, -0.1 if t.startswith("<tool_call>") else -0.9, "stop")
                                        for t in texts[:r.n]], model_name="fixed")


@pytest.fixture
def serve(serve):
    """The server of tests/serve/conftest.py, with this module's API key."""
    return partial(serve, api_key=KEY)


# --- 8. tools and strategies that cannot show them -----------------------------------------------

NO_TOOLS = ["beam", "revision", "usc", "genselect"]


@pytest.mark.parametrize("strategy", NO_TOOLS)
def test_a_strategy_that_cannot_show_tools_is_refused_alike_by_the_library_and_the_server(serve, strategy):
    """On main, tts.solve ran these without the tools (a fake upstream got tools in 0 of 12
    requests) and returned a boxed number; the server refused. Now both refuse, in the same words,
    before any sample is drawn."""
    gen = RecordingGenerator(ScriptedGenerator(model_name="scripted"))
    with pytest.raises(StrategyInputError) as err:
        tts.solve("What is the weather in Paris?", strategy=strategy, n=2, backend="scripted", messages=ASK,
                  tools=WEATHER)
    library = str(err.value)
    with pytest.raises(StrategyInputError) as err:
        with Session(generator=gen, price_as=None) as session:
            session.solve("What is the weather in Paris?", strategy=strategy, messages=ASK, tools=WEATHER)
    assert str(err.value) == library and gen.requests == []
    client = serve(gen)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=f"{strategy}/scripted", messages=ASK, tools=WEATHER)
    served = err.value.body["message"]  # the error object, without the client's "Error code: 400 - "
    assert gen.requests == []
    said = f"strategy {strategy} cannot show the model tools, so it would answer without them; use one that can ("
    for message in (library, served):
        assert message.startswith(said), message
        assert "tool_vote" in message and "self_consistency" in message and "\n" not in message


# --- 11. replies that repeat an answered call ---------------------------------------------------


@pytest.mark.parametrize("model", ["sc-4/fixed", "bon-4/fixed", "wv-4/fixed", "tool_vote-4/fixed", "fixed"])
def test_the_answer_in_text_wins_over_repeats_whatever_the_model_name(serve, model):
    """3 of 4 samples (6 of 8 for the plain name, the server's default sc-8) call get_weather(Paris)
    again after its result; on main sc, bon, wv and the plain name returned that call."""
    client = serve(_fixed([REPEAT, ANSWER, REPEAT, REPEAT] * 2))
    r = client.chat.completions.create(model=model, messages=AFTER_RESULT, tools=WEATHER)
    choice = r.choices[0]
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert choice.message.content == ANSWER
    assert choice.model_extra["tts"]["events"]["repeated_tool_call"] >= 3


@pytest.mark.parametrize("model", ["sc-4/fixed", "tool_vote-4/fixed"])
def test_when_every_sample_repeats_the_agent_gets_the_call_never_empty_content(serve, model):
    """On main tool_vote answered 200 with empty content and confidence 0.0."""
    client = serve(_fixed([REPEAT] * 4))
    r = client.chat.completions.create(model=model, messages=AFTER_RESULT, tools=WEATHER)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    ext = choice.model_extra["tts"]
    assert ext["confidence"] == 1.0 and ext["events"]["only_repeated_tool_calls"] == 1


# --- 12. a conversation sent to the library -----------------------------------------------------

PLANS = ["Plan B is safer: it has 3 backups and was tested in 2019.",
         "Plan A is safer because it is simpler.",
         "Plan B is safer, since it keeps backups.",
         "Plan B is the safer one: it keeps backups."]
QUESTION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Which plan is safer and why?"}]


@pytest.mark.parametrize(("model", "strategy"), [("sc-4", "self_consistency"), ("bon-4", "best_of_n"),
                                                 ("usc-4", "usc")])
def test_a_conversation_gets_from_tts_solve_what_the_server_gives_it(serve, model, strategy):
    """On main tts.solve(messages=...) appended the math instruction and answered None (usc: a
    boxed number out of the conversation)."""
    served_gen = RecordingGenerator(_fixed(PLANS))
    client = serve(served_gen)
    served = client.chat.completions.create(model=f"{model}/fixed", messages=QUESTION)
    library_gen = RecordingGenerator(_fixed(PLANS))
    sol = tts.solve("Which plan is safer and why?", strategy=strategy, n=4, messages=QUESTION,
                    generator=library_gen)
    assert sol.answer == served.choices[0].message.content and sol.answer.startswith("Plan B")
    assert sol.confidence == pytest.approx(served.choices[0].model_extra["tts"]["confidence"])
    assert library_gen.requests[0].messages == served_gen.requests[0].messages
    assert [m.content for m in library_gen.requests[0].messages] == ["Be brief.", "Which plan is safer and why?"]
