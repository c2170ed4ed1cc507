"""A client reaches only what the operator allowed: strategy settings that name files, models,
templates or nested configs are refused unless the operator configured them (by name); client text
is never a format string; deeply nested JSON and stalled uploads get a 4xx, not a 500 or a held
connection. Each attack of issue 20 is reproduced and must touch no file and no network."""

from __future__ import annotations

import builtins
import json
import socket
import time
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from tts.backends.scripted import ScriptedGenerator
from tts.serve import ServeConfig, create_app
from tts.serve.server import ServerThread
from tts.session import Session

pytestmark = pytest.mark.timeout(60)


def _serve(**config: Any) -> tuple[Session, ServerThread]:
    gen = ScriptedGenerator(default={"42": 0.7, "41": 0.2}, seed=0, model_name="scripted")
    session = Session(generator=gen, price_as="smollm2-135m", max_tokens=64, batch_window=0.0)
    server = ServerThread(create_app(session, ServeConfig(prompt="math", model="scripted", max_budget_tokens=100_000, **config)))
    return session, server.start()


@pytest.fixture(scope="module")
def served():
    session, server = _serve(verifiers={"checker": {"kind": "arithmetic", "neutral": 0.25}},
                             calibrations={"demo": "/nonexistent/calibration.jsonl"}, body_timeout=1.0)
    yield server
    server.stop()
    session.close()


def _post(server: ServerThread, strategy: Any = None, timeout: float = 20, **body: Any) -> httpx.Response:
    payload: dict[str, Any] = {"model": "scripted", "messages": [{"role": "user", "content": "What is 6 * 7?"}]}
    if strategy is not None:
        payload["tts"] = {"strategy": strategy}
    payload.update(body)
    return httpx.post(f"{server.url}/chat/completions", json=payload, timeout=timeout)


@pytest.fixture
def no_outside_access(monkeypatch):
    """Fail loudly (and record) if anything opens a file outside the venv, loads a verifier or
    calibration, or resolves a host name other than loopback."""
    touched: list[str] = []
    real_open, real_getaddrinfo = builtins.open, socket.getaddrinfo

    def guarded_open(file, *args, **kwargs):
        name = str(file)
        if name.startswith(("/etc", "/nonexistent")):
            touched.append(f"open {name}")
            raise AssertionError(f"the server opened {name}")
        return real_open(file, *args, **kwargs)

    def guarded_getaddrinfo(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost", "::1", None):
            touched.append(f"resolve {host}")
            raise AssertionError(f"the server tried to reach {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)

    from tts.budgets import calibration_source
    from tts.registry import VERIFIERS

    real_load = VERIFIERS.load

    def guarded_load(name):
        if name == "prm":
            touched.append("load prm verifier")
            raise AssertionError("the server built a PRM verifier")
        return real_load(name)

    def guarded_calibration(*args, **kwargs):
        touched.append(f"load calibration {args[:1]}")
        raise AssertionError("the server loaded a calibration")

    monkeypatch.setattr(VERIFIERS, "load", guarded_load)
    monkeypatch.setattr(calibration_source, "load_calibration", guarded_calibration)
    return touched


# --- item 1: the three attacks -------------------------------------------------------------------

def test_a_prm_verifier_naming_a_directory_is_refused_without_touching_it(served, no_outside_access):
    r = _post(served, {"kind": "best_of_n", "verifier": {"kind": "prm", "model": "/etc"}})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "'prm' is not a verifier this server offers" in message and "checker" in message, message
    assert "/etc" not in message and "\n" not in message
    assert r.json()["error"]["param"] == "tts.strategy.verifier"
    assert no_outside_access == []


def test_an_auto_calibration_path_is_refused_without_opening_it(served, no_outside_access):
    r = _post(served, {"kind": "auto", "calibration": "/etc/passwd"})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "calibration" in message and "'demo'" in message and "root" not in message, message
    assert no_outside_access == []


def test_a_prm_hub_id_is_refused_without_reaching_the_network(served, no_outside_access):
    t0 = time.monotonic()
    for verifier in ("prm", {"kind": "prm", "model": "Qwen/Qwen2.5-Math-PRM-7B"}):
        r = _post(served, {"kind": "weighted_vote", "n": 2, "verifier": verifier})
        assert r.status_code == 400 and "'prm' is not a verifier this server offers" in r.text, r.text
    assert time.monotonic() - t0 < 5 and no_outside_access == []


# --- item 1: what a client may still set ---------------------------------------------------------

def test_numbers_booleans_and_choices_stay_settable_within_their_ranges(served):
    ok = [
        {"kind": "best_of_n", "n": 3, "verifier": "arithmetic"},
        {"kind": "weighted_vote", "n": 2, "weighting": "borda", "borda_power": 2.0},
        {"kind": "beam", "n": 4, "beam_width": 2, "max_depth": 3, "select": "verifier"},
        {"kind": "best_of_n", "n": 2, "verifier": {"kind": "arithmetic", "skip_neutral": True, "neutral": 0.5}},
    ]
    for strategy in ok:
        r = _post(served, strategy)
        assert r.status_code == 200, (strategy, r.text)
    r = _post(served, {"kind": "weighted_vote", "borda_power": 99.0})  # the config's own range
    assert r.status_code == 400 and "borda_power" in r.json()["error"]["message"]
    r = _post(served, {"kind": "beam", "n": 4, "step_tokens": 10**6})  # the server's cap on tokens
    assert r.status_code == 400 and "step_tokens" in r.json()["error"]["message"], r.text


def test_an_operator_verifier_is_chosen_by_name_and_tuned_by_its_numbers(served):
    r = _post(served, {"kind": "best_of_n", "n": 2, "verifier": "checker"})
    assert r.status_code == 200, r.text
    assert "neutral=0.25" in r.json()["tts"]["strategy"]  # the operator's settings, not the defaults
    r = _post(served, {"kind": "best_of_n", "n": 2, "verifier": {"kind": "checker", "skip_neutral": True}})
    assert r.status_code == 200, r.text


def test_a_number_given_as_text_is_refused_so_no_validator_reads_it_as_a_path(served, no_outside_access):
    # auto's efficiency takes "a number or a JSON report file" from the operator; a client gives numbers
    r = _post(served, {"kind": "auto", "calibration": "demo", "efficiency": "/etc/passwd"})
    assert r.status_code == 400 and "efficiency must be a number" in r.json()["error"]["message"], r.text
    r = _post(served, {"kind": "beam", "n": "4"})
    assert r.status_code == 400 and "n must be a number" in r.json()["error"]["message"], r.text
    assert no_outside_access == []


def test_strategies_are_those_the_operator_allows():
    session, server = _serve(strategies=("self_consistency", "best_of_n"))
    try:
        assert _post(server, "sc-2").status_code == 200
        r = _post(server, "beam-2x4")
        assert r.status_code == 400 and "'beam' is not offered" in r.json()["error"]["message"], r.text
        assert "best_of_n, self_consistency" in r.json()["error"]["message"]
        r = httpx.post(f"{server.url}/chat/completions", json={
            "model": "beam-2x4/scripted", "messages": [{"role": "user", "content": "6*7?"}]}, timeout=20)
        assert r.status_code == 404 and "'beam' is not offered" in r.json()["error"]["message"], r.text
    finally:
        server.stop()
        session.close()


def test_by_default_strategies_that_need_operator_files_are_not_offered(served, no_outside_access):
    from tts.serve.policy import ServePolicy

    r = _post(served, {"kind": "graph", "graph": {"nodes": []}})
    assert r.status_code == 400 and "'graph' is not offered" in r.json()["error"]["message"], r.text
    policy = ServePolicy.build(ServeConfig(prompt="math", model="m"), Session(generator=ScriptedGenerator(default={"42": 1.0}),
                                                              price_as=None))
    assert not policy.allows("auto") and not policy.allows("graph") and policy.allows("beam")
    assert no_outside_access == []


def test_a_named_calibration_resolves_to_the_operator_path():
    from tts.serve.policy import ServePolicy

    with Session(generator=ScriptedGenerator(default={"42": 1.0}), price_as=None,
                 strategy_settings={"auto": {"calibration": "/data/cal.jsonl"}}) as session:
        policy = ServePolicy.build(ServeConfig(prompt="math", model="m", calibrations={"main": "/data/cal.jsonl",
                                                                        "other": "/data/other"}), session)
        assert policy.allows("auto")
        assert policy.resolve({"kind": "auto", "calibration": "other", "pilot": 2}) == {
            "kind": "auto", "calibration": "/data/other", "pilot": 2}
        assert policy.resolve({"kind": "auto", "calibration": "/data/cal.jsonl"})["calibration"] == "/data/cal.jsonl"


# --- item 3: client text is never a format string ------------------------------------------------

@pytest.mark.parametrize("strategy", [
    {"kind": "revision", "critique_template": "{score:>999999999}"},
    {"kind": "best_of_n", "verifier": {"kind": "judge", "solution_question": "{x}"}},
    {"kind": "budget_forcing", "wait": "{0}"},
])
def test_templates_from_a_client_are_refused_quickly(served, strategy):
    t0 = time.monotonic()
    r = _post(served, strategy)
    assert r.status_code == 400 and "this server does not let requests set" in r.json()["error"]["message"], r.text
    assert time.monotonic() - t0 < 2
    # the default text itself is harmless: sending it is allowed
    from tts.registry import STRATEGIES

    field = next(k for k in strategy if k != "kind")
    if not isinstance(strategy[field], dict):
        default = STRATEGIES.load(strategy["kind"]).config_class.model_fields[field].default
        r = _post(served, {"kind": strategy["kind"], field: default})
        assert r.status_code == 200, r.text


# --- item 5: deeply nested JSON ------------------------------------------------------------------

def test_deeply_nested_json_gets_a_400_and_the_connection_keeps_serving(served):
    deep = (b'{"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "x": '
            + b"[" * 1000 + b"]" * 1000 + b"}")
    assert len(deep) < 2100
    with httpx.Client(timeout=20) as client:
        r = client.post(f"{served.url}/chat/completions", content=deep, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, r.text
        assert "nested more than 64 levels deep" in r.json()["error"]["message"]
        r = client.post(f"{served.url}/chat/completions", json={
            "model": "sc-2/scripted", "messages": [{"role": "user", "content": "6*7?"}]})
        assert r.status_code == 200
    # strings full of brackets are not nesting
    r = httpx.post(f"{served.url}/chat/completions", timeout=20, json={
        "model": "sc-2/scripted", "messages": [{"role": "user", "content": "[{" * 500 + ' \\" ' + "]}" * 500}]})
    assert r.status_code == 200, r.text


def test_the_depth_bound_is_exact():
    from tts.serve.deps import check_depth
    from tts.serve.errors import APIError
    from tts.serve.protocol import ChatRequest

    def body(depth: int) -> bytes:
        return (b'{"model": "m", "messages": [{"role": "user", "content": "q"}], "tools": [' + b"[" * (depth - 2)
                + b"]" * (depth - 2) + b"]}")

    check_depth(body(64), 64)  # depth 64 passes the server's check; pydantic then judges the content
    with pytest.raises(ValidationError, match="tools"):
        ChatRequest.model_validate_json(body(64))
    with pytest.raises(APIError, match="nested more than 64 levels deep"):
        check_depth(body(65), 64)


# --- item 15: a stalled upload does not hold the connection --------------------------------------

def test_a_stalled_body_gets_408_within_the_deadline(served):
    host, port = served.host, served.port
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"model\": ")
        t0 = time.monotonic()
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        elapsed = time.monotonic() - t0
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), data[:300]
    assert 0.8 < elapsed < 5  # the deadline is 1 s; the server then closes the connection
    assert "within 1 s" in json.loads(rest)["error"]["message"]


def test_serve_flags_reach_the_config():
    from tts.cli.serve import named_settings

    assert named_settings(["checker=arithmetic", 'strict={"kind": "judge", "votes": 3}', "p=kind: prm\nmodel: /m"],
                          "--verifier", mapping=True) == {
        "checker": {"kind": "arithmetic"}, "strict": {"kind": "judge", "votes": 3}, "p": {"kind": "prm", "model": "/m"}}
    assert named_settings(["main=/runs/cal", "/runs/other"], "--calibration") == {"main": "/runs/cal",
                                                                                  "default": "/runs/other"}
    with pytest.raises(ValueError, match="--verifier"):
        named_settings(["=arithmetic"], "--verifier", mapping=True)


def test_the_serve_command_offers_the_operators_verifiers_and_strategies_only():
    import os
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "tts.cli", "serve", "--backend", "scripted", "--port", str(port),
                             "--verifier", 'strict={"kind": "arithmetic", "neutral": 0.1}',
                             "--allow-strategy", "self_consistency", "--allow-strategy", "best_of_n",
                             "--body-timeout", "0.5"],
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"

    def post(strategy: Any) -> httpx.Response:
        return httpx.post(url, timeout=10, json={"model": "scripted", "tts": {"strategy": strategy},
                                                 "messages": [{"role": "user", "content": "6*7?"}]})

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                r = post({"kind": "best_of_n", "n": 2, "verifier": "strict"})
                break
            except httpx.ConnectError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()[-2000:]
                time.sleep(0.2)
        assert r.status_code == 200 and "neutral=0.1" in r.json()["tts"]["strategy"], r.text
        r = post({"kind": "beam", "n": 2})
        assert r.status_code == 400 and "'beam' is not offered" in r.text
        r = post({"kind": "best_of_n", "verifier": {"kind": "prm", "model": "/etc"}})
        assert r.status_code == 400 and "use one of arithmetic, judge, logprob, self_certainty, strict" in r.text
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
            assert s.recv(65536).startswith(b"HTTP/1.1 408")
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_setting_the_strategy_does_not_have_is_refused_by_name(served):
    r = _post(served, {"kind": "beam", "colour": "red"})
    assert r.status_code == 400 and "has no setting 'colour'; its settings are n, max_depth" in r.text, r.text
    r = _post(served, {"kind": "best_of_n", "verifier": {"kind": "checker", "model": "/etc"}})
    assert r.status_code == 400 and "has no setting 'model'" in r.text and r.json()["error"]["param"] == \
        "tts.strategy.verifier.model", r.text


CODE_RUNNERS = ("program_vote", "tir", "exec_vote", "public_tests", "codet")


def test_strategies_that_run_model_written_code_are_off_unless_the_operator_allows_them(served):
    """A client would choose the code this host runs: by default no request runs any, whatever the
    strategy or setting (revision's execution feedback included), and the refusal says how to allow it."""
    for kind in CODE_RUNNERS:
        r = _post(served, {"kind": kind, "n": 2})
        assert r.status_code == 400 and "--allow-code-execution" in r.json()["error"]["message"], (kind, r.text)
    r = _post(served, {"kind": "revision", "feedback": "execution"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "code_execution_disabled", r.text
    assert _post(served, {"kind": "revision", "n": 2}).status_code == 200  # revision without execution is fine
    with pytest.raises(ValueError, match="allow-code-execution"):
        _serve(strategies=("self_consistency", "program_vote"))


def test_with_code_execution_allowed_programs_run_but_never_outside_the_sandbox():
    session, server = _serve(allow_code_execution=True)
    try:
        r = _post(server, {"kind": "program_vote", "n": 2})
        assert r.status_code == 200 and r.json()["choices"][0]["tts"]["answer"] == "42", r.text
        for kind in CODE_RUNNERS:
            r = _post(server, {"kind": kind, "n": 2, "unsafe_no_sandbox": True})
            assert r.status_code == 400 and r.json()["error"]["param"] == "tts.strategy.unsafe_no_sandbox", (kind, r.text)
        assert _post(server, {"kind": "program_vote", "unsafe_no_sandbox": False}).status_code == 200
    finally:
        server.stop()
        session.close()
