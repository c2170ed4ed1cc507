"""The server's replies are declared models (issue 34): /openapi.json describes every endpoint's
reply and refusals, what the server sends validates against what it declares, the schema sits
behind the API key (its browsable page only on a server without one) and names nothing of the
operator's setup, and the server's modules import each other without a cycle."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tts.backends.scripted import ScriptedGenerator
from tts.serve import ServeConfig, create_app
from tts.serve.responses import ChatCompletion, ErrorResponse, Health, ModelList, StreamChunk, TextCompletion
from tts.session import Session

pytestmark = pytest.mark.timeout(60)
KEY = "k-secret-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
ASK = {"model": "sc-2/scripted", "messages": [{"role": "user", "content": "6*7?"}]}


@pytest.fixture(scope="module")
def session():
    gen = ScriptedGenerator(default={"42": 0.7, "41": 0.2}, seed=0, model_name="scripted")
    with Session(generator=gen, price_as="smollm2-135m", max_tokens=256) as s:
        yield s


def _client(session, **config) -> TestClient:
    settings = {"model": "scripted", "prompt": "math", "max_budget_tokens": 100_000, **config}
    return TestClient(create_app(session, ServeConfig(**settings)))


def _ref(content: dict) -> str:
    return content["schema"]["$ref"].rsplit("/", 1)[1]


def test_the_schema_describes_each_reply_and_refusal(session):
    schema = _client(session).get("/openapi.json").json()
    chat = schema["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert _ref(chat["200"]["content"]["application/json"]) == "ChatCompletion"
    assert _ref(chat["200"]["content"]["text/event-stream"]) == "StreamChunk"
    for status in ("400", "401", "404", "413", "422", "429"):
        assert _ref(chat[status]["content"]["application/json"]) == "ErrorResponse", status
    assert "422" in chat and "Validation" not in json.dumps(chat)  # FastAPI's own 422 shape is never sent
    text = schema["paths"]["/v1/completions"]["post"]["responses"]
    assert _ref(text["200"]["content"]["application/json"]) == "TextCompletion"
    models = schema["paths"]["/v1/models"]["get"]["responses"]
    assert _ref(models["200"]["content"]["application/json"]) == "ModelList"
    components = schema["components"]["schemas"]
    assert {"ChatCompletion", "ChoiceExtension", "CompletionUsage", "ErrorDetail", "StreamChunk", "Health"} <= set(components)
    assert "/docs" not in schema["paths"] and "/openapi.json" not in schema["paths"]


def test_what_the_server_sends_is_what_it_declares(session):
    client = _client(session)
    r = client.post("/v1/chat/completions", json=ASK)
    reply = ChatCompletion.model_validate_json(r.content)
    assert reply.choices[0].tts.answer in ("42", "41", None) and reply.usage.total_tokens > 0
    assert "completion_tokens_details" not in r.json()["usage"]  # left out when None, as OpenAI does
    r = client.post("/v1/completions", json={"model": "sc-2/scripted", "prompt": ["1+1?", "2+2?"]})
    assert len(TextCompletion.model_validate_json(r.content).choices) == 2
    r = client.post("/v1/chat/completions", json={**ASK, "stream": True, "stream_options": {"include_usage": True}})
    events = [line.removeprefix("data: ") for line in r.text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [StreamChunk.model_validate_json(e) for e in events[:-1]]
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    assert ModelList.model_validate_json(client.get("/v1/models").content).data[0].id == "scripted"
    assert Health.model_validate_json(client.get("/health").content).status == "ok"
    for r in (client.post("/v1/chat/completions", json={**ASK, "n": 99}),
              client.post("/v1/chat/completions", json={**ASK, "model": "sc-2/other"}),
              client.get("/v1/models/nope")):
        assert r.status_code in (400, 404)
        assert ErrorResponse.model_validate_json(r.content).error.message


def test_with_a_key_the_schema_needs_it_and_there_is_no_page(session):
    client = _client(session, api_key=KEY)
    r = client.get("/openapi.json")
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert client.get("/openapi.json", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/openapi.json", headers=AUTH).status_code == 200
    for headers in ({}, AUTH):
        r = client.get("/docs", headers=headers)
        assert r.status_code == 404 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    page = _client(session).get("/docs")  # without a key: the browsable page of the open schema
    assert page.status_code == 200 and "/openapi.json" in page.text


def test_docs_off_serves_neither(session):
    client = _client(session, docs=False)
    assert client.get("/openapi.json").status_code == 404 and client.get("/docs").status_code == 404
    assert client.post("/v1/chat/completions", json=ASK).status_code == 200


def test_the_schema_names_nothing_of_the_operators_setup(session):
    client = _client(session, api_key=KEY, strategies=("self_consistency",),
                     verifiers={"checker": {"kind": "arithmetic", "neutral": 0.25}},
                     calibrations={"demo": "/srv/private/calibration.jsonl"})
    text = client.get("/openapi.json", headers=AUTH).text
    for secret in (KEY, "/srv/private", "calibration.jsonl", "checker", "arithmetic"):
        assert secret not in text, secret


@pytest.mark.reads_source
def test_the_servers_modules_import_each_other_without_a_cycle():
    """Every import counts, in functions and under TYPE_CHECKING too: a cycle means a piece is in
    the wrong module (listing, planning and state once formed one)."""
    root = Path(__file__).resolve().parents[2] / "tts" / "serve"
    graph: dict[str, set[str]] = {}
    for path in root.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tts.serve."):
                found.add(node.module.split(".")[2])
            elif isinstance(node, ast.ImportFrom) and node.module == "tts.serve":
                found |= {a.name for a in node.names if (root / f"{a.name}.py").exists()}
        graph[path.stem] = found - {path.stem}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(m == goal or (m not in seen and reaches(m, goal, seen | {m})) for m in graph.get(start, ()))

    assert [m for m in graph if reaches(m, m, {m})] == []
