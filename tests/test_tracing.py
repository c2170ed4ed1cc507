"""OpenTelemetry spans (tts.tracing): a beam search's solve, engine and verifier calls nest under one
solve span with the search's decisions; a served request continues the caller's trace (``traceparent``);
sandbox runs in worker threads stay in the caller's trace; with no tracer provider nothing is wrapped."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")
from fastapi.testclient import TestClient  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.util._once import Once  # noqa: E402

import tts  # noqa: E402
from tts import tracing  # noqa: E402
from tts.backends.scripted import ScriptedGenerator  # noqa: E402
from tts.serve import ServeConfig, create_app  # noqa: E402
from tts.session import Session  # noqa: E402


def _set_provider(provider) -> None:
    """Replace the process's tracer provider (OpenTelemetry allows setting it once; its own tests reset it so)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    if provider is not None:
        trace.set_tracer_provider(provider)


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _set_provider(provider)
    try:
        yield exporter
    finally:
        _set_provider(None)


def _by_name(exporter, name):
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_a_beam_search_is_one_solve_span_over_its_engine_and_verifier_calls(spans):
    sol = tts.solve("What is 6*7?", strategy={"kind": "beam", "beam_width": 2}, n=4, backend="scripted")
    [solve] = _by_name(spans, "tts.solve")
    generate, verify = _by_name(spans, "tts.generate"), _by_name(spans, "tts.verify")
    assert len(generate) >= 4 and len(verify) >= 3  # one engine and one verifier call per step at least
    assert all(s.parent.span_id == solve.context.span_id for s in generate + verify)
    a = solve.attributes
    assert (a["tts.strategy"], a["tts.n"], a["tts.answer"]) == ("beam", 4, sol.answer)
    assert a["tts.tree.nodes"] == len(sol.trace.tree)
    assert a["tts.tree.kept"] == sum(1 for node in sol.trace.tree if node.get("kept") is True) > 0
    assert a["tts.tree.pruned"] == sum(1 for node in sol.trace.tree if node.get("kept") is False) > 0
    # The engine calls' tokens add up to the solve's (the verifier here is arithmetic: no tokens).
    assert sum(s.attributes["gen_ai.usage.output_tokens"] for s in generate) == sol.usage.completion_tokens
    assert a["gen_ai.usage.output_tokens"] == sol.usage.completion_tokens
    assert a["tts.cost.tokens"] == sol.cost["tokens"]
    assert all(s.attributes["tts.verifier"] == "arithmetic" and s.attributes["tts.items"] > 0 for s in verify)


def test_a_vote_records_its_shares_and_the_per_request_stop(spans):
    sol = tts.solve("What is 6*7?", n=16, stop={"rule": "horizon", "wave": 4}, backend="scripted")
    [solve] = _by_name(spans, "tts.solve")
    a = solve.attributes
    assert a["tts.answer"] == sol.answer and a["tts.stop.rule"] == "horizon"
    assert a["tts.stop.drawn"] == sol.trace.notes["stop"]["drawn"] == len(sol.trace.samples)
    shares = {k: v / sum(sol.trace.votes.values()) for k, v in sol.trace.votes.items()}
    assert a["tts.votes"] == tracing._clean({"v": {k: round(v, 4) for k, v in sorted(shares.items(),
                                                                                      key=lambda kv: -kv[1])[:5]}})["v"]
    streams = _by_name(spans, "tts.generate.stream")
    assert streams and all(s.parent.span_id == solve.context.span_id for s in streams)
    assert sum(s.attributes["tts.samples"] for s in streams) == len(sol.trace.samples)
    # Each wave is one span: one request of this one question, the stop's wave and rule, whether it streamed.
    assert len(streams) == sol.trace.notes["stop"]["waves"]
    streamed = sol.trace.notes["stop"]["streamed"]
    assert all((s.attributes["tts.requests"], s.attributes["tts.wave"], s.attributes["tts.stop.rule"],
                s.attributes["tts.streamed"]) == (1, 4, "horizon", streamed) for s in streams)


def test_a_served_request_continues_the_callers_trace(spans):
    trace_id, parent_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    gen = ScriptedGenerator(default={"42": 0.7, "41": 0.2}, seed=0, model_name="scripted")
    with Session(generator=gen, price_as="smollm2-135m", max_tokens=256) as session:
        client = TestClient(create_app(session, ServeConfig(model="scripted", prompt="math")))
        r = client.post("/v1/chat/completions", headers={"traceparent": f"00-{trace_id}-{parent_id}-01"},
                        json={"model": "sc-4/scripted", "messages": [{"role": "user", "content": "6*7?"}]})
    assert r.status_code == 200, r.text
    [request] = _by_name(spans, "tts.serve.request")
    [solve] = _by_name(spans, "tts.solve")
    assert format(request.context.trace_id, "032x") == trace_id == format(solve.context.trace_id, "032x")
    assert format(request.parent.span_id, "016x") == parent_id and request.parent.is_remote
    assert solve.parent.span_id == request.context.span_id  # across the session's worker thread
    assert request.kind == trace.SpanKind.SERVER and request.attributes["http.response.status_code"] == 200
    assert solve.attributes["tts.answer"] == r.json()["tts"]["answer"]
    assert all(s.context.trace_id == request.context.trace_id for s in _by_name(spans, "tts.generate"))


def test_a_refused_request_is_a_span_with_its_error(spans):
    gen = ScriptedGenerator(default={"42": 1.0}, seed=0, model_name="scripted")
    with Session(generator=gen, max_tokens=64) as session:
        client = TestClient(create_app(session, ServeConfig(model="scripted")))
        r = client.post("/v1/chat/completions", json={"model": "no-such-strategy-4/scripted",
                                                      "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code in (400, 404)
    [request] = _by_name(spans, "tts.serve.request")
    assert request.status.status_code == trace.StatusCode.ERROR and request.events[0].name == "exception"


def test_sandbox_runs_in_worker_threads_are_children_of_the_callers_span(spans):
    from tts.execution.sandbox import run_many

    with tracing.span("caller") as caller:
        runs = run_many(["print(1)", "raise SystemExit(3)"], workers=2, unsafe_no_sandbox=True)
    sandbox = sorted(_by_name(spans, "tts.sandbox"), key=lambda s: s.attributes["tts.sandbox.status"])
    assert [r.status for r in runs] == ["ok", "error"]
    assert [s.attributes["tts.sandbox.status"] for s in sandbox] == ["error", "ok"]
    assert all(s.parent.span_id == caller.get_span_context().span_id for s in sandbox)
    assert sandbox[0].attributes["tts.sandbox.exit_code"] == 3


def test_a_sandbox_span_records_the_limit_isolation_verdict_and_time(spans):
    from tts.execution.sandbox import Limits, run_program

    run = run_program("raise SystemExit('the reason')", Limits(wall_seconds=7), unsafe_no_sandbox=True)
    ok = run_program("print(1)", Limits(wall_seconds=5), unsafe_no_sandbox=True)
    failed, passed = _by_name(spans, "tts.sandbox")
    assert dict(failed.attributes) == {
        "tts.sandbox.wall_limit_s": 7, "tts.sandbox.isolated": False, "tts.sandbox.status": "error",
        "tts.sandbox.error": "the reason", "tts.sandbox.exit_code": 1, "tts.sandbox.wall_seconds": run.wall_seconds}
    # An empty error and no exit code are left out, not recorded as "" or None.
    assert dict(passed.attributes) == {
        "tts.sandbox.wall_limit_s": 5, "tts.sandbox.isolated": False, "tts.sandbox.status": "ok",
        "tts.sandbox.exit_code": 0, "tts.sandbox.wall_seconds": ok.wall_seconds}


def test_an_eval_batch_is_a_solve_span_with_an_event_per_problem(spans, tmp_path):
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval

    cfg = EvalConfig.model_validate({"backend": {"kind": "scripted"}, "data": {"benchmark": "demo", "limit": 3},
                                     "strategies": [{"kind": "self_consistency", "n": 4}],
                                     "sampling": {"max_tokens": 64}})
    result = run_eval(cfg, tmp_path / "run")
    [solve] = _by_name(spans, "tts.solve")
    assert solve.attributes["tts.problems"] == 3 and solve.attributes["tts.strategy"] == "self_consistency"
    assert [e.attributes["tts.problem_id"] for e in solve.events] == [r.problem_id for r in result.rows]
    assert _by_name(spans, "tts.generate")[0].parent.span_id == solve.context.span_id


def test_without_a_tracer_provider_nothing_is_wrapped_or_recorded():
    _set_provider(None)
    gen = ScriptedGenerator(default={"42": 1.0}, seed=0)
    assert not tracing.enabled()
    assert tracing.traced_generator(gen) is gen and tracing.traced_verifier(gen, "x") is gen
    with tracing.span("x", {"a": 1}) as s:
        assert s is tracing.OFF
    f = lambda: 1  # noqa: E731
    assert tracing.carry(f) is f


def test_a_responses_api_request_continues_the_callers_trace_too(spans):
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    gen = ScriptedGenerator(default={"42": 1.0}, seed=0, model_name="scripted")
    with Session(generator=gen, max_tokens=64) as session:
        client = TestClient(create_app(session, ServeConfig(model="scripted", prompt="math")))
        r = client.post("/v1/responses", headers={"traceparent": f"00-{trace_id}-{parent_id}-01"},
                        json={"model": "sc-2/scripted", "input": "6*7?"})
    assert r.status_code == 200, r.text
    [request] = _by_name(spans, "tts.serve.request")
    [solve] = _by_name(spans, "tts.solve")
    assert format(request.parent.span_id, "016x") == parent_id and request.attributes["url.path"] == "/v1/responses"
    assert solve.parent.span_id == request.context.span_id and format(solve.context.trace_id, "032x") == trace_id


def test_an_eval_batch_of_a_shared_draw_names_every_strategy_and_config_on_its_solve_span(spans, tmp_path):
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval

    cfg = EvalConfig.model_validate({"backend": {"kind": "scripted"}, "data": {"benchmark": "demo", "limit": 2},
                                     "strategies": [{"kind": "self_consistency", "n": 2},
                                                    {"kind": "self_consistency", "n": 4}],
                                     "sampling": {"max_tokens": 32}})
    run_eval(cfg, tmp_path / "run")
    [solve] = _by_name(spans, "tts.solve")
    assert {k: solve.attributes[k] for k in ("tts.strategy", "tts.config", "tts.problems")} == {
        "tts.strategy": "self_consistency,self_consistency", "tts.config": "self_consistency@2,self_consistency@4",
        "tts.problems": 2}
    assert [e.attributes["tts.problem_id"] for e in solve.events] == ["demo-000", "demo-001"] * 2
