"""Reward models on a server: the PRM and outcome-RM verifiers against a fake vLLM pooling server.

The fake server (a real HTTP server on localhost, in a thread) answers ``POST /pooling`` the way
vLLM does (``{"data": [{"index": i, "data": ...}], "usage": ...}``) from scripted rules: rows of
class probabilities at every step-tag token of each prompt, or error statuses, or broken bodies.
The tokenizer is the tiny PRM's (conftest), so items are rendered and tokenised exactly as the
in-process path does; tests/verifiers/test_prm_remote_server.py runs the real vLLM server.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tts.backends.base import BackendError
from tts.backends.pooling import PoolingServerConfig, chunk_prompts
from tts.config import parse_verifier_config
from tts.types import Problem
from tts.verifiers.base import VerifyItem
from tts.verifiers.prm import PRMVerifier, PRMVerifierConfig
from tts.verifiers.prm_adapters import pooler_server_args, pooler_settings

QUESTION = "Tom has 3 apples and buys 4 more. How many apples does he have?"
STEPS = ("Tom starts with 3 apples.", "He buys 4 more apples.", "3 + 4 = 7.", "So he has \\boxed{7} apples.")
TAG_ID = 49152  # <extra_0> in the tiny PRM's tokenizer (the small model's vocabulary + 1 token)

Responder = Callable[[dict[str, Any]], tuple[int, Any, dict[str, str]]]


class FakePoolingServer:
    """A localhost HTTP server answering ``POST /pooling`` with ``respond(body)``; it records
    every request's path, headers and JSON body."""

    def __init__(self, respond: Responder) -> None:
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                status, payload, headers = (404, {"error": {"message": "Not Found"}}, {}) \
                    if self.path != "/pooling" else server.respond(body)
                raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def fake_probability(ids: list[int], position: int) -> float:
    """The fake PRM's P(good) at a tag: a function of where the tag is and what precedes it."""
    return ((position * 37 + sum(ids[:position]) % 11) % 97 + 1) / 100


def prm_like(body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
    """vLLM's answer for task token_classify with step pooling: (bad, good) rows at each tag."""
    data = [{"index": i, "object": "pooling",
             "data": [[1 - fake_probability(ids, j), fake_probability(ids, j)]
                      for j, t in enumerate(ids) if t == TAG_ID]}
            for i, ids in enumerate(body["input"])]
    tokens = sum(len(ids) for ids in body["input"])
    return 200, {"id": "pool-1", "object": "list", "model": body["model"], "data": data,
                 "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}, {}


@pytest.fixture
def server():
    servers: list[FakePoolingServer] = []

    def start(respond: Responder = prm_like) -> FakePoolingServer:
        servers.append(FakePoolingServer(respond))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _item(steps: tuple[str, ...], pid: str = "p") -> VerifyItem:
    return VerifyItem(Problem(pid, QUESTION), tuple(steps))


def _prm(tiny_prm, url: str, **backend: Any) -> PRMVerifier:
    backend = {"kind": "openai", "base_url": url, "tokenizer": str(tiny_prm), "backoff": 0.0, **backend}
    return PRMVerifier(PRMVerifierConfig(model="tiny-prm", adapter="qwen2.5-math-prm", backend=backend))


def test_one_request_scores_every_step_at_its_own_tag_and_prices_the_prefill_on_the_prm(
        tiny_prm, server, monkeypatch):
    from tts.cost.ledger import cost_model_for, price_usages

    srv = server()
    monkeypatch.setenv("PRM_KEY", "sekret")
    items = [_item(STEPS[:1], "one"), _item(STEPS, "four"), _item((), "empty"),
             _item(("I write <extra_0> myself.", "So \\boxed{7}."), "tag-in-text")]
    with _prm(tiny_prm, srv.base_url, api_key_env="PRM_KEY") as prm:
        scores = prm.score(items)
        assert len(srv.requests) == 1  # the whole batch in one HTTP call
        req = srv.requests[0]
        assert req["path"] == "/pooling" and req["headers"]["Authorization"] == "Bearer sekret"
        assert req["body"]["model"] == "tiny-prm" and req["body"]["task"] == "token_classify"
        sent = [prm.encode(items[i]) for i in (0, 1, 3)]
        assert req["body"]["input"] == [ids for ids, _ in sent]  # token ids, rendered by the adapter here
        for i, (ids, rows) in zip((0, 1, 3), sent, strict=True):
            tags = [j for j, t in enumerate(ids) if t == TAG_ID]
            want = tuple(fake_probability(ids, tags[r]) for r in rows)
            assert scores[i].step_scores == pytest.approx(want) and scores[i].score == pytest.approx(want[-1])
            assert len(want) == len(items[i].steps)
            u = scores[i].usage
            assert u.prompt_tokens == len(ids) and u.completion_tokens == 0 and u.calls == 1
            assert u.shapes[0].model == str(tiny_prm)  # priced on the PRM's own architecture
        # the step tag written inside a step's text is not that step's score: its own tag is
        assert len(sent[2][1]) == 2 and sent[2][1] == [1, 2]
        assert scores[2].step_scores == () and scores[2].score == 0.5 and scores[2].usage.calls == 0
    assert prm.closed
    # The ledger prices the prefill on the tiny PRM (2 layers), not on the policy model it is given.
    usage = scores[1].usage
    on_prm = cost_model_for(str(tiny_prm), "h100-sxm").cost_usage(usage)
    priced = price_usages([("best_of_n", usage)], cost_model_for("qwen2.5-7b", "h100-sxm"))["best_of_n"].cost
    assert priced.flops == pytest.approx(on_prm.flops) and 0 < on_prm.flops


def test_a_large_batch_is_cut_by_items_and_by_tokens_and_comes_back_in_order(tiny_prm, server):
    assert [list(r) for r in chunk_prompts([5, 5, 5, 5, 5], 2, 100)] == [[0, 1], [2, 3], [4]]
    assert [list(r) for r in chunk_prompts([4, 4, 9, 1], 10, 8)] == [[0, 1], [2], [3]]
    srv = server()
    items = [_item(STEPS[: 1 + i % 4], str(i)) for i in range(5)]
    with _prm(tiny_prm, srv.base_url, max_batch_items=2) as prm:
        chunked = prm.score(items)
        assert [len(r["body"]["input"]) for r in srv.requests] == [2, 2, 1]
    srv.requests.clear()
    with _prm(tiny_prm, srv.base_url) as prm:
        whole = prm.score(items)
        assert len(srv.requests) == 1
        longest = max(len(prm.encode(i)[0]) for i in items)
    assert [s.step_scores for s in chunked] == [s.step_scores for s in whole]
    srv.requests.clear()
    with _prm(tiny_prm, srv.base_url, max_batch_tokens=longest) as prm:
        assert [s.step_scores for s in prm.score(items)] == [s.step_scores for s in whole]
    assert len(srv.requests) == 5  # no two of these prompts fit in `longest` tokens


def _script(*answers: tuple[int, Any, dict[str, str]] | None) -> Responder:
    """Answer the first requests as scripted (None: as the fake PRM), then as the fake PRM."""
    queue = list(answers)

    def respond(body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        answer = queue.pop(0) if queue else None
        return prm_like(body) if answer is None else answer

    return respond


def test_overload_and_server_errors_are_retried_then_scored(tiny_prm, server):
    srv = server(_script((503, {"error": {"message": "overloaded"}}, {}),
                         (429, {"error": {"message": "slow down"}}, {"Retry-After": "0"}), None))
    with _prm(tiny_prm, srv.base_url, max_retries=3) as prm:
        scores = prm.score([_item(STEPS[:2])])
        assert len(srv.requests) == 3 and prm._client.retries == 2
        assert len(scores[0].step_scores) == 2


def test_a_refusal_fails_at_once_with_the_servers_words(tiny_prm, server):
    srv = server(lambda body: (400, {"error": {"message": "Try switching the model's pooling_task via "
                                               "--pooler-config.task token_classify."}}, {}))
    with _prm(tiny_prm, srv.base_url, max_retries=3) as prm, pytest.raises(
            BackendError, match=r"HTTP 400: Try switching.*--pooler-config task token_classify"):
        prm.score([_item(STEPS[:2])])
    assert len(srv.requests) == 1  # a 400 is not retried


def test_a_wrong_route_or_model_says_to_start_a_pooling_server(tiny_prm, server):
    srv = server()
    with _prm(tiny_prm, srv.base_url.replace("/v1", "/elsewhere/v1")) as prm, pytest.raises(
            BackendError, match=r"404.*serves no pooling model named 'tiny-prm'.*--runner pooling"):
        prm.score([_item(STEPS[:1])])


@pytest.mark.parametrize("body", [
    b"<html>bad gateway</html>",
    {"data": []},
    {"data": [{"index": 0, "data": "AAAA"}]},
    {"data": [{"index": 0, "data": [0.1, 0.9]}]},
])
def test_a_malformed_answer_is_retried_then_a_clear_error(tiny_prm, server, body):
    srv = server(lambda _: (200, body, {}))
    with _prm(tiny_prm, srv.base_url, max_retries=2) as prm, pytest.raises(
            BackendError, match=r"sent answers tts cannot read after 3 attempts: .*pooling model"):
        prm.score([_item(STEPS[:1])])
    assert len(srv.requests) == 3


def test_rows_that_do_not_match_the_tags_name_the_adapter_and_the_servers_flags(tiny_prm, server):
    def one_row_short(body):
        status, payload, headers = prm_like(body)
        payload["data"][0]["data"] = payload["data"][0]["data"][:-1]
        return status, payload, headers

    srv = server(one_row_short)
    with _prm(tiny_prm, srv.base_url) as prm, pytest.raises(
            BackendError, match=r"returned 1 score rows.*2 step tags.*'qwen2.5-math-prm'.*pooler flags"):
        prm.score([_item(STEPS[:2])])


def test_an_unreachable_server_fails_fast_and_says_how_to_start_one(tiny_prm):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with _prm(tiny_prm, f"http://127.0.0.1:{port}/v1", max_retries=1) as prm, pytest.raises(
            BackendError, match=r"Cannot reach a pooling server at http://127.0.0.1:\d+/pooling after 2 attempts"):
        prm.score([_item(STEPS[:1])])
    assert time.monotonic() - start < 10


def test_the_config_a_user_writes_and_what_it_refuses(tiny_prm, monkeypatch):
    cfg = parse_verifier_config({"kind": "prm", "model": "Qwen/Qwen2.5-Math-PRM-7B", "backend": {
        "kind": "openai", "base_url": "http://gpu-box:8001/v1", "api_key_env": "PRM_KEY"}})
    assert isinstance(cfg.backend, PoolingServerConfig) and cfg.backend.pooling_url == "http://gpu-box:8001/pooling"
    assert parse_verifier_config({"kind": "prm"}).backend.kind == "vllm"  # the default stays in process
    with pytest.raises(ValueError, match="kv_cache_gib, max_model_len set up the in-process engine"):
        parse_verifier_config({"kind": "prm", "max_model_len": 2048, "kv_cache_gib": 2,
                               "backend": {"kind": "openai"}})
    with pytest.raises(ValueError, match="dtype sets up the in-process engine"):
        parse_verifier_config({"kind": "rm", "model": "m", "dtype": "float32", "backend": {"kind": "openai"}})
    monkeypatch.delenv("PRM_KEY", raising=False)
    with pytest.raises(BackendError, match="api_key_env is 'PRM_KEY', but that environment variable is not set"):
        _prm(tiny_prm, "http://127.0.0.1:9/v1", api_key_env="PRM_KEY")


def test_the_servers_pooler_flags_come_from_the_same_adapter(tiny_prm):
    from transformers import AutoTokenizer

    from tts.verifiers.prm_adapters import get_adapter, resolve_adapter

    tok = AutoTokenizer.from_pretrained(tiny_prm)
    resolved = resolve_adapter(get_adapter("qwen2.5-math-prm"), tok)
    args = pooler_server_args(pooler_settings(resolved, tok))
    assert args[:2] == ["--runner", "pooling"] and args[2] == "--pooler-config"
    assert json.loads(args[3]) == {"task": "token_classify", "tok_pooling_type": "STEP", "step_tag_id": TAG_ID}
