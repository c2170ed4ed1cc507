"""The server on FastAPI's own tools (issue 23): FastAPI's validation answers in the server's error
shape (400, never 422, no echo of the body), the API key is checked before a stranger's body is read,
each app counts its own Prometheus metrics, the HTTP server and the MCP tool refuse over-cap inputs
with the same checks, and no function of the server or its commands runs past about 80 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tts.backends.scripted import ScriptedGenerator
from tts.serve import ServeConfig, create_app
from tts.serve.policy import PolicyError, ServePolicy
from tts.session import Session

pytestmark = pytest.mark.timeout(60)
KEY = "k-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
ASK = {"model": "sc-2/scripted", "messages": [{"role": "user", "content": "6*7?"}]}


@pytest.fixture
def session():
    gen = ScriptedGenerator(default={"42": 0.7, "41": 0.2}, seed=0, model_name="scripted")
    with Session(generator=gen, price_as="smollm2-135m", max_tokens=256) as s:
        yield s


def _client(session, **config) -> TestClient:
    settings = {"model": "scripted", "api_key": KEY, "max_budget_tokens": 100_000, **config}
    return TestClient(create_app(session, ServeConfig(**{"prompt": "math", **settings})))


def _samples(client: TestClient) -> dict[tuple[str, tuple], float]:
    text = client.get("/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_validation_errors_are_400s_in_the_servers_shape_without_the_body(session):
    client = _client(session)
    cases = [
        (b"", {"Content-Type": "application/json"}, "the request body is empty"),
        (b'{"model": "scripted"}', {"Content-Type": "text/plain"}, "Content-Type: application/json"),
        (b'{"model": 3, "messages": [{"role": "user", "content": "secret"}]}', {}, "model:"),
        (b'{"model": "scripted", "messages": [{"role": "user", "content": "secret"}], "seed": "x"}', {}, "seed:"),
        (b"\xff\xfe\x00", {"Content-Type": "application/json"}, "not valid JSON"),
    ]
    for raw, headers, says in cases:
        r = client.post("/v1/chat/completions", content=raw, headers={**AUTH, **headers})
        error = r.json()["error"]
        assert r.status_code == 400 and says in error["message"], (raw, r.text)
        assert set(error) == {"message", "type", "param", "code"} and "secret" not in r.text
    # no Content-Type at all is read as JSON, as before
    r = client.post("/v1/chat/completions", content=b'{"model": "sc-2/scripted", "messages": '
                    b'[{"role": "user", "content": "6*7?"}]}', headers=AUTH)
    assert r.status_code == 200, r.text


def test_the_key_is_checked_before_a_strangers_body_is_read(session):
    client = _client(session, max_body_bytes=1024)
    big = {**ASK, "messages": [{"role": "user", "content": "x" * 4096}]}
    r = client.post("/v1/chat/completions", json=big)  # no key: 401, not 413
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    r = client.post("/v1/chat/completions", json=big, headers=AUTH)
    assert r.status_code == 413
    deep = b'{"model": "scripted", "x": ' + b"[" * 100 + b"]" * 100 + b"}"
    r = client.post("/v1/chat/completions", content=deep, headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 400 and "nested more than 64 levels deep" in r.json()["error"]["message"]
    assert client.get("/v1/models").status_code == 401
    assert client.get("/health").status_code == 200 and client.get("/metrics").status_code == 200
    samples = _samples(client)
    assert samples[("tts_rejected_requests_total", (("reason", "auth"),))] == 2
    assert samples[("tts_rejected_requests_total", (("reason", "body_too_large"),))] == 1
    counted = ("tts_http_requests_total", (("endpoint", "/v1/chat/completions"), ("status", "401")))
    assert samples[counted] == 1  # the models endpoint's 401 is a rejection, not a completion request


def test_each_app_counts_its_own_metrics(session):
    first, second = _client(session), _client(session)
    for _ in range(2):
        assert first.post("/v1/chat/completions", json=ASK, headers=AUTH).status_code == 200
    assert second.post("/v1/chat/completions", json={**ASK, "n": 99}, headers=AUTH).status_code == 400
    ok = ("tts_http_requests_total", (("endpoint", "/v1/chat/completions"), ("status", "200")))
    refused = ("tts_http_requests_total", (("endpoint", "/v1/chat/completions"), ("status", "400")))
    one, two = _samples(first), _samples(second)
    assert one[ok] == 2 and refused not in one
    assert two[refused] == 1 and ok not in two
    assert one[("tts_tokens_total", (("kind", "completion"),))] > 0
    assert one[("tts_request_seconds_count", (("endpoint", "/v1/chat/completions"),))] == 2
    assert one[("tts_requests_in_flight", ())] == 0 and one[("tts_engine_calls_total", ())] >= 1


def test_the_http_server_and_the_mcp_tool_share_the_cap_checks(session):
    config = ServeConfig(prompt="math", model="scripted", max_tokens=512, max_budget_tokens=1000, max_samples=16)
    policy = ServePolicy.build(config, session)
    with pytest.raises(PolicyError, match="max_tokens=513 is over this server's limit of 512 tokens per sample"):
        policy.check_max_tokens(513)
    from tts.budgets.pricing import ComputeBudget

    with pytest.raises(PolicyError, match="allows 2000 generated tokens, over this server's limit of 1000 per call"):
        policy.solve_budget(session.pricer, ComputeBudget(2000, "tokens"), 256, per="call")
    budget, tokens = policy.solve_budget(session.pricer, None, 200, solves=2, share=0.5)
    assert tokens == 250 and budget.amount == 250
    with pytest.raises(PolicyError, match="n=32 is over this server's limit of 16"):
        policy.strategy_config(session, {"kind": "self_consistency", "n": 32}, None, budget)
    # the HTTP server words the same check the same way
    client = _client(session, max_tokens=512)
    r = client.post("/v1/chat/completions", json={**ASK, "max_tokens": 513}, headers=AUTH)
    assert r.status_code == 400 and "limit of 512 tokens per sample" in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == "max_tokens"


@pytest.mark.reads_source
def test_no_function_of_the_server_or_its_commands_is_over_80_lines():
    root = Path(__file__).resolve().parents[2]
    files = [*sorted((root / "tts" / "serve").glob("*.py")), root / "tts" / "cli" / "serve.py",
             root / "tts" / "cli" / "mcp.py"]
    long = [f"{path.relative_to(root)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in files for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > 80]
    assert not long, long
