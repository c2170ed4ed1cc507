"""The server's own work per request (issue 37): no request waits on FastAPI's thread pool, a body is
parsed once whatever its JSON Content-Type, and reply ids stay unique without a system call each."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from tts.backends.scripted import ScriptedGenerator
from tts.serve import ServeConfig, create_app
from tts.session import Session

pytestmark = pytest.mark.timeout(60)
KEY = "k-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
ASK = {"model": "sc-2/scripted", "messages": [{"role": "user", "content": "6*7?"}]}


@pytest.fixture(scope="module")
def client():
    gen = ScriptedGenerator(default={"42": 0.7, "41": 0.2}, seed=0, model_name="scripted")
    with Session(generator=gen, price_as="smollm2-135m", max_tokens=256) as s:
        yield TestClient(create_app(s, ServeConfig(model="scripted", prompt="math", api_key=KEY)))


def test_no_request_waits_on_fastapis_thread_pool(client, monkeypatch):
    """A plain-function dependency runs on a worker thread: two thread hops per request, each a
    wait for the GIL behind the solve threads. Every dependency of the server is async."""
    import fastapi.dependencies.utils
    import fastapi.routing

    def refuse(*args, **kwargs):
        raise AssertionError("a dependency or endpoint ran on the thread pool")

    monkeypatch.setattr(fastapi.dependencies.utils, "run_in_threadpool", refuse)
    monkeypatch.setattr(fastapi.routing, "run_in_threadpool", refuse)
    assert client.post("/v1/chat/completions", json=ASK, headers=AUTH).status_code == 200
    assert client.post("/v1/completions", json={"model": "sc-2/scripted", "prompt": "6*7?"},
                       headers=AUTH).status_code == 200
    assert client.get("/health").status_code == 200
    assert client.get("/v1/models/scripted", headers=AUTH).status_code == 200
    r = client.post("/v1/chat/completions", json={**ASK, "n": 99}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"
    assert client.post("/v1/chat/completions", json=ASK).status_code == 401


@pytest.mark.parametrize("content_type", [None, "application/json", "application/json; charset=utf-8",
                                          "Application/JSON", "application/vnd.tts+json"])
def test_a_json_body_is_served_whatever_its_json_content_type(client, content_type):
    import json

    headers = {**AUTH, **({"Content-Type": content_type} if content_type else {})}
    r = client.post("/v1/chat/completions", content=json.dumps(ASK).encode(), headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["role"] == "assistant"


def test_refusals_of_a_body_keep_their_words(client):
    """Bodies the request model refuses go through FastAPI's own reading, whose words the server
    has always answered with: invalid JSON, JSON FastAPI reads (NaN) but the fast reader does not."""
    cases = [(b'{"model": "sc-2/scripted", "messages": [', "not valid JSON"),
             (b'{"model": "sc-2/scripted", "messages": [], "n": 1}', "messages:"),
             (b'{"model": "sc-2/scripted", "messages": [{"role": "user", "content": "q"}], "temperature": NaN}',
              "temperature:"),
             (b'[1, 2]', "must be a JSON object"),
             (b'{"model": "sc-2/scripted", "messages": [{"role": "user", "content": "q"}], "bogus": 1}',
              "unknown field 'bogus'")]
    for raw, says in cases:
        r = client.post("/v1/chat/completions", content=raw, headers={**AUTH, "Content-Type": "application/json"})
        assert r.status_code == 400 and says in r.json()["error"]["message"], (raw, r.text)


def test_reply_ids_are_unique(client):
    ids = [client.post("/v1/chat/completions", json=ASK, headers=AUTH).json()["id"] for _ in range(50)]
    assert len(set(ids)) == 50 and all(re.fullmatch(r"chatcmpl-[0-9a-f]{24}", i) for i in ids)
