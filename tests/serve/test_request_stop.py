"""tts serve with per-request stops: the model-name form (``sc-64+horizon``), the ``tts.stop``
extension, the operator's default (``ServeConfig.stop``) and the refusals, on the scripted backend."""

from __future__ import annotations

import openai
import pytest

from tests.fakes import WatchedScripted

pytestmark = pytest.mark.timeout(120)
QUESTION = [{"role": "user", "content": "What is 6 * 7?"}]


def settled() -> WatchedScripted:
    """A model that answers 42 every time: any vote settles early."""
    return WatchedScripted(default={"42": 1.0}, seed=0, mean_tokens=40, model_name="scripted")


def _tts(reply) -> dict:
    data = reply.model_dump()
    return data.get("tts") or data["choices"][0].get("tts")


def test_a_model_name_with_a_rule_stops_a_settled_vote_early(serve):
    client = serve(settled(), prompt="math")
    reply = client.chat.completions.create(model="sc-64+horizon/scripted", messages=QUESTION)
    stop = _tts(reply)["stop"]
    assert stop["rule"] == "horizon" and stop["n"] == 64
    assert stop["drawn"] < 16 and stop["reason"] != "n reached"
    assert reply.choices[0].message.content and "42" in reply.choices[0].message.content
    fixed = client.chat.completions.create(model="sc-64/scripted", messages=QUESTION)
    assert _tts(fixed)["stop"] is None
    assert reply.usage.completion_tokens < fixed.usage.completion_tokens / 4


def test_the_tts_stop_extension_and_the_operators_default(serve):
    client = serve(settled(), prompt="math", stop={"rule": "beta", "wave": 4})
    by_default = _tts(client.chat.completions.create(model="sc-32/scripted", messages=QUESTION))["stop"]
    assert (by_default["rule"], by_default["wave"], by_default["drawn"]) == ("beta", 4, 4)  # beta: 4 of 4 agree settles it, P = 0.969
    chosen = _tts(client.chat.completions.create(model="sc-32/scripted", messages=QUESTION,
                                                 extra_body={"tts": {"stop": {"rule": "exact", "wave": 1}}}))["stop"]
    assert (chosen["rule"], chosen["drawn"]) == ("exact", 17)  # a lead of 17 of 32 cannot be overtaken
    off = client.chat.completions.create(model="sc-32/scripted", messages=QUESTION, extra_body={"tts": {"stop": False}})
    assert _tts(off)["stop"] is None and len(_tts(off)["answers"]) == 32


@pytest.mark.parametrize("model, body, says", [
    ("beam+horizon/scripted", None, "cannot stop a request early"),
    ("sc-8+rate/scripted", None, "unknown stop rule"),
    ("beam/scripted", {"stop": "horizon"}, "cannot stop a request early"),
    ("sc-8/scripted", {"stop": {"rule": "horizon", "confidence": 3}}, "confidence"),
    ("sc-8/scripted", {"stop": {"rule": "horizon", "mystery": 1}}, "mystery"),
])
def test_a_stop_the_server_cannot_run_is_refused_in_one_line(serve, model, body, says):
    client = serve(settled(), prompt="math")
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model=model, messages=QUESTION, extra_body={"tts": body} if body else None)
    assert err.value.status_code in (400, 404)
    assert says in str(err.value)


def test_the_rate_limit_reserves_all_n_and_gives_back_what_a_stopped_request_did_not_generate(serve):
    """3,000 tokens a minute; max_tokens 100. sc-16+exact with waves of 1 on a model that always
    answers 42 stops at 9 samples (a lead of 9 cannot be overtaken by the 7 left): it reserved
    16 x 100 = 1,600 and gets back all it did not generate, so a request reserving 2,000 fits at
    once (without the refund at most 1,400 plus a few seconds' refill would be left: a 429)."""
    model = WatchedScripted(default={"42": 1.0}, seed=0, mean_tokens=40, model_name="scripted")
    client = serve(model, prompt="math", rate_limit_tokens=3000, max_budget_tokens=100_000, api_key="k")
    ask = {"messages": QUESTION, "max_tokens": 100}
    first = client.chat.completions.create(model="sc-16/scripted", **ask,
                                           extra_body={"tts": {"budget": 1600, "stop": {"rule": "exact", "wave": 1}}})
    assert _tts(first)["stop"]["drawn"] == 9 and first.usage.completion_tokens <= 900
    second = client.chat.completions.create(model="sc-16/scripted", **ask, extra_body={"tts": {"budget": 2000}})
    assert len(_tts(second)["answers"]) == 16


# --- through tts serve to a streaming upstream that counts its open streams ----------------------

def _answers(*answers_and_lengths):
    """Choice i of the request with seed s: the (answer, length) at (s + i) of the list, cycling."""
    from tests.backends.stream_upstream import Trace

    def traces(body: dict) -> list:
        seed, out = int(body.get("seed") or 0), []
        for i in range(int(body.get("n") or 1)):
            answer, length = answers_and_lengths[(seed + i) % len(answers_and_lengths)]
            tokens = tuple(f" w{j}" for j in range(length - 1)) + (f" \\boxed{{{answer}}}",)
            out.append(Trace(tokens, (-0.1,) * length, tuple(((t, -0.1),) for t in tokens)))
        return out
    return traces


def _served_upstream(serve, closing, traces, **settings):
    from tests.backends.stream_upstream import StreamingUpstream
    from tts.backends.openai import OpenAIGenerator
    from tts.config import OpenAIBackendConfig

    up = closing(StreamingUpstream(traces, **settings))
    gen = closing(OpenAIGenerator(OpenAIBackendConfig(base_url=up.url, model="up", timeout=10, backoff=0.01,
                                                      request_seeds="always")))
    return up, serve(gen, max_tokens=512, prompt="math")


def _wait(condition, seconds: float) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s"
        time.sleep(0.01)


def test_a_settled_request_closes_its_upstream_streams(serve, closing):
    """All 8 samples in one wave: the three short ones agree (42) and settle the horizon rule at 3
    of 8 (risk 0.040, tests/search/test_request_stop.py), so tts closes the stream of the other 5
    long ones; the upstream sees its stream closed early and sent far fewer tokens than they hold."""
    up, client = _served_upstream(serve, closing, _answers(("42", 5), ("42", 6), ("42", 7), *[("7", 400)] * 5),
                                  delay=0.002)
    reply = client.chat.completions.create(model="sc-8+horizon/up", messages=QUESTION,
                                           extra_body={"tts": {"stop": {"rule": "horizon", "wave": 8}}})
    stop = _tts(reply)["stop"]
    assert (stop["drawn"], stop["cancelled"], stop["streamed"]) == (3, 5, True)
    assert "42" in reply.choices[0].message.content
    _wait(lambda: up.open_streams == 0, 5.0)
    assert up.closed_by_client >= 1 and up.sent < 5 * 400
    assert reply.usage.completion_tokens == 5 + 6 + 7 + stop["cancelled_tokens"]


def test_a_client_that_leaves_mid_request_leaves_no_upstream_stream_open(serve, closing):
    """The client gives up after 0.5 s of a request whose samples take 4 s: tts cancels the solve,
    which closes its upstream streams."""
    import httpx

    up, client = _served_upstream(serve, closing, _answers(("42", 2000), ("7", 2000)), delay=0.002)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{client.base_url}chat/completions", timeout=0.5,
                   json={"model": "sc-8+horizon/up", "messages": QUESTION, "tts": {"stop": {"rule": "horizon", "wave": 8}}})
    _wait(lambda: up.open_streams > 0 or up.closed_by_client > 0, 5.0)
    _wait(lambda: up.open_streams == 0, 10.0)
    assert up.closed_by_client >= 1 and up.sent < 8 * 2000


def test_a_stop_on_free_text_answers_is_refused_before_sampling(serve):
    """The plain prompt answers in free text, chosen by similarity, never counted: a stop could never
    settle, so the request is refused (400, saying to ask for the math prompt) and nothing is drawn."""
    model = settled()
    client = serve(model, prompt="plain")
    with pytest.raises(openai.BadRequestError, match="free text"):
        client.chat.completions.create(model="sc-8+horizon/scripted", messages=QUESTION)
    assert model.generated == 0
