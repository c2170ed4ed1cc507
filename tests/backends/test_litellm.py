"""The LiteLLM backend, offline: LiteLLM's canned replies (``mock_response``) for hosted providers,
and a fake OpenAI-compatible server on 127.0.0.1 reached through LiteLLM (``openai/<model>`` with
``api_base``). Nothing leaves this machine: LiteLLM reads its bundled model table."""

from __future__ import annotations

import re

import pytest

from tests.backends.litellm_upstream import ANSWER, CACHED_TOKENS, PROMPT_TOKENS, ChatUpstream
from tts.backends.base import BackendError, GenerationRequest, Message

litellm = pytest.importorskip("litellm", reason="LiteLLM is not installed (pip install 'tts-scaling[litellm]'; "
                                                "make test installs it)")

pytestmark = pytest.mark.timeout(120)

CLAUDE = "anthropic/claude-sonnet-4-5"
CANNED = "Two and three make five.\n\nThe answer is \\boxed{5}."
WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def _gen(**settings):
    from tts.backends.litellm import LiteLLMGenerator
    from tts.config import LiteLLMBackendConfig

    return LiteLLMGenerator(LiteLLMBackendConfig(**settings))


def _claude(**settings):
    """Claude through LiteLLM with a canned reply: LiteLLM builds Anthropic's request, sends nothing."""
    return _gen(model=CLAUDE, api_key="sk-test", litellm_params={"mock_response": CANNED}, **settings)


def _ask(n: int = 1, **kw) -> GenerationRequest:
    return GenerationRequest((Message("user", "What is 2 + 3?"),), n=n, max_tokens=32, **kw)


@pytest.fixture
def upstream(closing):
    return lambda plan=lambda i: "ok": closing(ChatUpstream(plan))


def _counting(gen, monkeypatch) -> list:
    """Count the requests the generator hands to LiteLLM's Router."""
    sent: list = []
    real = gen.router.completion
    monkeypatch.setattr(gen.router, "completion", lambda **kw: sent.append(kw) or real(**kw))
    return sent


def test_a_provider_without_n_gets_n_one_sample_requests_priced_at_the_table(monkeypatch):
    gen = _claude()
    sent = _counting(gen, monkeypatch)
    assert "n" not in gen.params and not gen.returns_logprobs  # what LiteLLM says of Anthropic
    (result,) = gen.generate([_ask(n=3)])
    assert [c.text for c in result.completions] == [CANNED] * 3
    assert len(sent) == 3 and all("n" not in kw for kw in sent)  # Anthropic refuses n: never sent
    # LiteLLM's canned usage: 10 prompt and 20 completion tokens a request; the prompt is billed 3 times
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.calls) == (30, 60, 3)
    table = litellm.model_cost["claude-sonnet-4-5"]
    assert gen.spent_usd == pytest.approx(30 * table["input_cost_per_token"] + 60 * table["output_cost_per_token"])


def test_greedy_samples_are_one_request_repeated(monkeypatch):
    gen = _claude()
    sent = _counting(gen, monkeypatch)
    (result,) = gen.generate([_ask(n=4, temperature=0.0)])
    assert len(result.completions) == 4 and len(sent) == 1


def test_a_fake_openai_server_through_litellm_gets_n_in_one_request_with_logprobs_and_cached_prompt_prices(upstream):
    server = upstream()
    gen = _gen(model="openai/gpt-4o-mini", api_base=server.url)  # a server on this machine: no key needed
    assert "n" in gen.params and gen.returns_logprobs
    (result,) = gen.generate([_ask(n=4, logprobs=True, top_logprobs=1)])
    (body,) = server.bodies
    assert body["n"] == 4 and body["logprobs"] is True and body["top_logprobs"] == 1
    assert [c.text for c in result.completions] == [ANSWER] * 4
    assert all(c.completion_tokens == 3 and c.mean_logprob == pytest.approx(-0.25) for c in result.completions)
    assert all(c.token_top_logprobs == ((-3.0,),) * 3 for c in result.completions)
    assert (result.usage.prompt_tokens, result.usage.cached_prompt_tokens, result.usage.calls) == (
        PROMPT_TOKENS, CACHED_TOKENS, 1)
    # gpt-4o-mini at LiteLLM's table price, the cached prompt tokens at its cache-read price
    table = litellm.model_cost["gpt-4o-mini"]
    expected = ((PROMPT_TOKENS - CACHED_TOKENS) * table["input_cost_per_token"]
                + CACHED_TOKENS * table["cache_read_input_token_cost"] + 12 * table["output_cost_per_token"])
    assert table["cache_read_input_token_cost"] < table["input_cost_per_token"]
    assert gen.spent_usd == pytest.approx(expected)


def test_a_server_that_drops_n_gets_one_sample_requests_from_then_on(upstream, caplog):
    server = upstream(lambda i: "single")
    gen = _gen(model="openai/m", api_base=server.url)
    with caplog.at_level("WARNING", logger="tts.backends.litellm"):
        (result,) = gen.generate([_ask(n=4)])
    assert [c.text for c in result.completions] == [ANSWER] * 4 and result.usage.calls == 4
    assert [b.get("n") for b in server.bodies] == [4, None, None, None, None] and gen.single_choice
    gen.generate([_ask(n=3)])  # later requests go one sample at a time at once
    assert len(server.bodies) == 5 + 3
    assert sum("one-sample requests" in m for m in caplog.messages) == 1


def test_router_retries_then_falls_back_to_the_next_model(upstream):
    server = upstream(lambda i: "503")
    gen = _gen(model="openai/m", api_base=server.url, max_retries=1, unlisted_model=True,
               fallbacks=[{"model": CLAUDE, "api_key": "sk-test", "mock_response": CANNED}])
    (result,) = gen.generate([_ask(n=2)])
    assert [c.text for c in result.completions] == [CANNED] * 2
    assert len(server.bodies) == 2 * 2  # each of the two samples: the request and its retry, then the fallback
    assert gen.fallback_replies == 2


def test_a_retry_that_succeeds_needs_no_fallback(upstream):
    server = upstream(lambda i: "503" if i == 0 else "ok")
    gen = _gen(model="openai/m", api_base=server.url, max_retries=2,
               fallbacks=[{"model": CLAUDE, "api_key": "sk-test", "mock_response": "wrong"}])
    (result,) = gen.generate([_ask()])
    assert result.completions[0].text == ANSWER and len(server.bodies) == 2 and gen.fallback_replies == 0


def test_a_server_that_stays_down_ends_in_one_line_naming_it(upstream):
    server = upstream(lambda i: "500")
    gen = _gen(model="openai/m", api_base=server.url, max_retries=0)
    with pytest.raises(BackendError) as err:
        gen.generate([_ask()])
    assert "openai/m at http://127.0.0.1:" in str(err.value) and "(HTTP 500): injected 500" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("settings", "says"), [
    ({"model": "nosuch/model-x", "api_key": "k"}, "LiteLLM knows no provider in model 'nosuch/model-x'"),
    ({"model": "anthropic/claude-sonet-4-5", "api_key": "k"},
     "lists no anthropic model 'claude-sonet-4-5' (close: anthropic/claude-sonnet-4-5"),
    ({"model": CLAUDE, "api_key": "k", "fallbacks": ["gemini/gemini-9-ultra"]}, "lists no gemini model 'gemini-9-ultra'"),
    ({"model": CLAUDE}, "anthropic/claude-sonnet-4-5 needs an API key, and the environment has none of what LiteLLM "
                        "looks for (ANTHROPIC_API_KEY)"),
    ({"model": CLAUDE, "api_key": "k", "fallbacks": ["gemini/gemini-2.5-flash"]},
     "gemini/gemini-2.5-flash needs an API key"),
])
def test_bad_models_and_missing_keys_are_one_line_before_any_request(settings, says, monkeypatch):
    for var in ("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(BackendError) as err:
        _gen(**settings)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_model_newer_than_the_table_passes_when_said_so_and_a_key_from_the_environment_counts(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env")
    gen = _gen(model="anthropic/claude-future-9", unlisted_model=True)
    assert gen.prices[gen.model_name] is None  # not in the table: unpriced, and said so by None


@pytest.mark.parametrize(("field", "value", "param"), [
    ("logit_bias", ((5, 1.0),), "logit_bias"), ("presence_penalty", 0.5, "presence_penalty"),
    ("thinking_budget", 64, "thinking budget"),
])
def test_a_request_for_what_the_provider_lacks_is_refused_before_it_is_sent(field, value, param, monkeypatch):
    gen = _claude()
    sent = _counting(gen, monkeypatch)
    with pytest.raises(BackendError, match=re.escape(param)) as err:
        gen.generate([_ask(), _ask(**{field: value})])
    assert sent == [] and "\n" not in str(err.value)


@pytest.mark.parametrize(("strategy", "says"), [
    ({"kind": "deepconf"}, "deepconf weighs traces by token confidence"),
    ({"kind": "best_of_n"}, "best_of_n ranks samples by their token log-probabilities"),
    ({"kind": "weighted_vote"}, "weighted_vote ranks samples"),
    ({"kind": "best_of_n", "verifier": "self_certainty"}, "with the self_certainty verifier"),
])
def test_strategies_that_need_logprobs_are_refused_on_a_provider_without_them(strategy, says, monkeypatch):
    import tts
    from tts.search.base import MissingLogprobsError

    gen = _claude()
    sent = _counting(gen, monkeypatch)
    with pytest.raises(MissingLogprobsError) as err:
        tts.solve("What is 2 + 3?", strategy=strategy, n=4, generator=gen)
    assert says in str(err.value) and f"but {CLAUDE} through LiteLLM returns none" in str(err.value)
    assert "\n" not in str(err.value)
    assert sent == []  # refused when built: nothing was paid for


def test_strategies_that_do_not_need_logprobs_run_on_claude():
    import tts

    gen = _claude()
    for strategy in ("self_consistency", {"kind": "best_of_n", "verifier": "arithmetic"}):
        sol = tts.solve("What is 2 + 3?", strategy=strategy, n=3, max_tokens=64, generator=gen)
        assert sol.answer == "5" and sol.usage.calls == 3


@pytest.mark.parametrize("strategy", ["self_consistency", "best_of_n", "weighted_vote"])
def test_strategies_end_to_end_through_litellm_to_an_openai_server(strategy, upstream):
    import tts

    server = upstream()
    backend = {"kind": "litellm", "model": "openai/m", "api_base": server.url}
    sol = tts.solve("What is 2 + 3?", strategy=strategy, n=4, max_tokens=64, backend=backend)
    assert sol.answer == "5" and sol.usage.calls == 1
    assert len(server.bodies) == 1 and server.bodies[0]["n"] == 4  # one request of 4 samples
    assert server.bodies[0].get("logprobs") is (True if strategy != "self_consistency" else None)


def test_a_tool_call_votes_through_litellm(upstream):
    import tts

    server = upstream()
    sol = tts.solve("", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=WEATHER,
                    strategy="tool_vote", n=3, max_tokens=64,
                    backend={"kind": "litellm", "model": "openai/m", "api_base": server.url})
    assert server.bodies[0]["tools"] == WEATHER and server.bodies[0]["n"] == 3
    assert sol.answer is not None and "get_weather" in sol.answer and "Paris" in sol.answer  # the voted call
    assert sol.confidence == pytest.approx(1.0)


def test_tts_serve_and_eval_build_the_litellm_backend_from_their_flags(upstream):
    from tts.backends.litellm import LiteLLMGenerator
    from tts.cli.serve import build_generator

    server = upstream()
    gen = build_generator("litellm", "openai/m", server.url, 0.4, 0, 2048, None,
                          upstream={"timeout": 7.0, "max_retries": 1, "deadline": None, "concurrency": None})
    assert isinstance(gen, LiteLLMGenerator)
    assert (gen.config.api_base, gen.config.timeout, gen.config.max_retries) == (server.url, 7.0, 1)
    (result,) = gen.generate([_ask()])
    assert result.completions[0].text == ANSWER


def test_tts_eval_runs_through_litellm_from_the_command_line(upstream, tmp_path):
    import json

    from typer.testing import CliRunner

    from tts.cli.app import app

    server = upstream()
    out = tmp_path / "run"
    r = CliRunner(env={"COLUMNS": "220"}).invoke(app, [
        "eval", "--backend", "litellm", "--model", "openai/gpt-4o-mini", "--base-url", server.url, "-b", "demo", "--limit", "2",
        "-s", "self_consistency", "-n", "3", "--max-tokens", "32", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(row["answer"] == "5" for row in rows)
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["config"]["backend"]["kind"] == "litellm"
    assert manifest["config"]["backend"]["api_base"] == server.url
    assert len(server.bodies) == 2 and all(b["n"] == 3 for b in server.bodies)
    # The summary prices the run per token (a hosted model has no GPU cost columns): 2 problems, each
    # one request of 40 prompt tokens (32 cached) and 3 samples of 3 tokens, at gpt-4o-mini's prices.
    table = litellm.model_cost["gpt-4o-mini"]
    usd = 2 * ((PROMPT_TOKENS - CACHED_TOKENS) * table["input_cost_per_token"]
               + CACHED_TOKENS * table["cache_read_input_token_cost"] + 9 * table["output_cost_per_token"])
    assert "dollars at openai/gpt-4o-mini's per-token prices" in r.output
    assert f"self_consistency@3 ${usd:.4g}" in r.output


def test_the_providers_section_of_the_docs_holds_a_config_that_builds(monkeypatch):
    """docs/serving.md#providers: its YAML is a valid run config whose backend builds (keys from the
    environment, nothing sent), and its commands name flags that exist."""
    from pathlib import Path

    import yaml

    from tts.backends.factory import create_generator
    from tts.config import EvalConfig

    text = (Path(__file__).resolve().parents[2] / "docs" / "serving.md").read_text()
    section = text[text.index("\n## Providers\n"):]
    section = section[:section.index("\n## ", 1)]
    (config_text,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    config = EvalConfig.model_validate(yaml.safe_load(config_text))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.setenv("GEMINI_API_KEY", "test")
    gen = create_generator(config.backend)
    assert gen.model_name == "anthropic/claude-sonnet-4-5" and gen.config.fallback_models == ["gemini/gemini-2.5-flash"]
    assert not gen.returns_logprobs and "n" not in gen.params  # what the section says of Anthropic
    assert gen.prices["gemini/gemini-2.5-flash"] is not None  # both priced from LiteLLM's table
    monkeypatch.delenv("GEMINI_API_KEY")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(BackendError, match="gemini/gemini-2.5-flash needs an API key"):
        create_generator(config.backend)  # the fallback's key is checked too, before any request
    (commands,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    for line in commands.strip().splitlines():
        assert line.startswith(("tts eval --backend litellm --model ", "tts serve --backend litellm --model "))


def test_a_session_on_a_hosted_model_reports_dollars_and_takes_a_dollar_budget():
    import tts

    gen = _claude()
    table = litellm.model_cost["claude-sonnet-4-5"]
    with tts.Session(generator=gen, max_tokens=64) as session:
        sol = session.solve("What is 2 + 3?", strategy="self_consistency", n=3)
        # 3 one-sample requests of LiteLLM's canned usage: 10 prompt and 20 completion tokens each
        assert sol.cost["dollars"] == pytest.approx(30 * table["input_cost_per_token"] + 60 * table["output_cost_per_token"])
        assert "claude-sonnet-4-5 per token (LiteLLM's model table" in sol.cost["priced_as"]
        # A sample's worst case, its prompt (under 200 tokens) and 64 generated, at the table's prices:
        # the budget pays for 2 of them at least, and the solve spends no more than it.
        one_max = 200 * table["input_cost_per_token"] + 64 * table["output_cost_per_token"]
        budget = 2.5 * one_max
        capped = session.solve("What is 2 + 3?", strategy="self_consistency", n=8, budget={"dollars": budget})
        assert 2 <= capped.budget["n_drawn"] < 8 and capped.budget["n_asked"] == 8
        assert capped.cost["dollars"] <= budget
        with pytest.raises(Exception, match="does not cover one sample"):
            session.solve("What is 2 + 3?", n=8, budget={"dollars": one_max / 1000})



def test_keys_reach_the_provider_but_never_the_run_manifest():
    from tts.backends.litellm import deployments
    from tts.config import EvalConfig

    config = EvalConfig.model_validate({"backend": {
        "kind": "litellm", "model": CLAUDE, "api_key": "sk-ant-secret",
        "litellm_params": {"aws_secret_access_key": "aws-secret", "max_tokens": 64},
        "fallbacks": [{"model": "azure/gpt-4o", "api_key": "az-secret", "api_version": "2024-10-21"}]}})
    written = str(config.model_dump(mode="json"))
    assert not any(s in written for s in ("sk-ant-secret", "aws-secret", "az-secret"))
    assert "2024-10-21" in written and "'max_tokens': 64" in written  # settings that are no secrets stay readable
    main, fallback = deployments(config.backend)
    assert (main["api_key"], main["aws_secret_access_key"], fallback["api_key"]) == ("sk-ant-secret", "aws-secret",
                                                                                    "az-secret")
