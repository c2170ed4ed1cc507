"""The glue that lets the reference searches use tts's chain checker, and the settings each side gets
(benchmarks/peers/, benchmarks/side_by_side.py): no engine, no reference installed."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tts.config import EvalConfig

PEERS = Path(__file__).resolve().parents[2] / "benchmarks" / "peers"
QUESTION = "Start with 7.\n1. Add 5.\n2. Double it.\nWhat is the result?"


def _load(path: Path, name: str):
    """A script loaded as a module by its path (scripts are not a package)."""
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))


chain_prm = _load(PEERS / "chain_prm.py", "peers_chain_prm")
engine_calls = _load(PEERS / "engine_calls.py", "peers_engine_calls")


def test_split_steps_drops_the_empty_piece_after_a_trailing_separator():
    # search-and-learn's partial solutions end with the separator it keeps in the output.
    assert chain_prm.split_steps("1. 7 + 5 = 12\n\n2. 12 * 2 = 24\n\n") == ["1. 7 + 5 = 12", "2. 12 * 2 = 24"]
    assert chain_prm.split_steps(" 1. 7 + 5 = 12 \n\n\n\nThe answer is 24.") == ["1. 7 + 5 = 12", "The answer is 24."]
    assert chain_prm.split_steps("") == []


def test_sal_scores_are_step_lists_per_output_per_question():
    right = "1. 7 + 5 = 12\n\n2. 12 * 2 = 24\n\nThe answer is 24."
    wrong_op = "1. 7 + 5 = 12\n\n2. 12 * 3 = 36\n\n"  # correct arithmetic, wrong operation
    scores = chain_prm.sal_scores([QUESTION, QUESTION], [[right, wrong_op], [""]])
    assert scores == [[[1.0, 1.0, 1.0], [1.0, 0.0]], [[chain_prm.EMPTY_SCORE]]]


def test_sal_scores_refuse_mismatched_lengths():
    with pytest.raises(ValueError, match="2 questions but 1"):
        chain_prm.sal_scores([QUESTION, QUESTION], [["1. 7 + 5 = 12"]])


def test_its_hub_scores_aggregate_with_the_chosen_rule():
    prompt = "user: ...\nuser: " + QUESTION
    # A wrong middle step followed by a step that happens to score: min sees the mistake, last does not.
    text = "1. 7 + 5 = 12\n\n2. 12 * 3 = 36\n\n3. 36 + 0 = 36"
    assert chain_prm.its_hub_scores({prompt: QUESTION}, prompt, [text], "min") == [0.0]
    assert chain_prm.its_hub_scores({prompt: QUESTION}, prompt, ["1. 7 + 5 = 12"], "min") == [1.0]
    # its_hub joins a partial particle's steps without the trailing separator: one score per response.
    assert chain_prm.its_hub_scores({prompt: QUESTION}, prompt, ["1. 7 + 5 = 12", "1. 7 + 4 = 11"]) == [1.0, 0.0]


def test_its_hub_scores_refuse_an_unknown_prompt():
    with pytest.raises(KeyError, match="did not send"):
        chain_prm.its_hub_scores({"a": QUESTION}, "b", ["1. 7 + 5 = 12"])


def _output(prompt_tokens: int, *completions: int):
    return SimpleNamespace(prompt_token_ids=list(range(prompt_tokens)),
                           outputs=[SimpleNamespace(token_ids=list(range(c))) for c in completions])


def test_count_generate_records_calls_tokens_and_span():
    class FakeLLM:
        def generate(self, prompts, params=None, use_tqdm=False):
            return [_output(10, 3, 4) for _ in prompts]

    log = engine_calls.count_generate(FakeLLM)
    llm = FakeLLM()
    assert len(llm.generate(["a", "b"], None, use_tqdm=False)) == 2
    llm.generate(["c"])
    report = log.report()
    assert (report["calls"], report["prompts"], report["sequences"]) == (2, 3, 6)
    assert (report["prompt_tokens"], report["completion_tokens"]) == (30, 21)
    assert report["span_seconds"] >= report["engine_seconds"] * 0.999 > 0
    assert [c["prompts"] for c in report["per_call"]] == [2, 1]


def _side_by_side():
    bench = PEERS.parent
    sys.path.insert(0, str(bench))
    try:
        return _load(bench / "side_by_side.py", "peers_side_by_side")
    finally:
        sys.path.remove(str(bench))


def _args(**kw) -> argparse.Namespace:
    base = {"search": "beam", "n": 4, "beam_width": 2, "depth": 10, "step_tokens": 32, "temperature": 0.7,
            "aggregation": "min", "problems": 8, "chain_steps": None, "model_path": "/models/smollm2-135m",
            "tts_concurrency": 64}
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("search", ["beam", "particle_filtering"])
def test_tts_side_gets_the_peers_settings(search):
    sbs = _side_by_side()
    args = _args(search=search, chain_steps="1,2")
    raw = sbs._tts_search_config(args, {"url": "http://127.0.0.1:1/v1", "model": "smollm2-135m"}, seed=3)
    config = EvalConfig.model_validate(raw)  # every key is one tts reads
    strategy = config.strategies[0]
    assert strategy.kind == search and strategy.n == 4 and strategy.max_depth == 10 and strategy.step_tokens == 32
    assert strategy.heal_separator is False  # the peers continue from the whole separator
    assert strategy.select == "verifier"
    assert (strategy.verifier.kind, strategy.verifier.aggregation) == ("chain", "min")
    assert config.sampling.max_tokens >= 32 * 10  # never binds before the per-step cap and the depth
    assert config.data.options == {"steps": [1, 2]} and config.data.limit == 8 and config.seed == 3
    if search == "beam":
        assert (strategy.width, strategy.fill, config.backend.kind) == (2, "every_step", "vllm")
    else:
        assert (config.backend.kind, config.backend.concurrency, config.backend.timeout) == ("openai", 64, 300.0)


def test_the_tts_default_side_differs_only_in_the_step_boundary():
    sbs = _side_by_side()
    ctx = {"url": "http://127.0.0.1:1/v1", "model": "smollm2-135m"}
    matched = sbs._tts_search_config(_args(), ctx, seed=0)
    default = sbs._tts_search_config(_args(), ctx, seed=0, heal=True)
    assert default["strategies"][0].pop("heal_separator") is True
    assert matched["strategies"][0].pop("heal_separator") is False
    assert default == matched


def test_chain_steps_must_be_numbers():
    with pytest.raises(SystemExit, match="comma-separated"):
        _side_by_side()._chain_options(_args(chain_steps="1-3"))


def test_server_occupancy_counts_idle_polls_between_the_first_and_last_busy_one():
    # (running, waiting) as /metrics gave them: idle before the first request and after the last are
    # the tool's start-up and grading, not counted; the two idle polls in between are.
    occupancy = _side_by_side()._Occupancy("http://127.0.0.1:1/metrics")
    occupancy.samples = [(0, 0), (0, 0), (3, 1), (4, 0), (0, 0), (0, 2), (0, 0), (2, 0), (0, 0)]
    assert occupancy.summary() == {"idle_share": 0.3333, "mean_running": 1.5, "polls": 6}
    occupancy.samples = [(0, 0)] * 3
    assert occupancy.summary() == {"idle_share": None, "mean_running": None, "polls": 3}


def test_server_occupancy_polls_the_gauges_of_a_metrics_page():
    import http.server
    import threading
    import time

    pages = iter(["vllm:num_requests_running{engine=\"0\"} 2.0\nvllm:num_requests_waiting{engine=\"0\"} 1.0\n"]
                 + ["vllm:num_requests_running{engine=\"0\"} 0.0\nvllm:num_requests_waiting{engine=\"0\"} 0.0\n"] * 1000)

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = next(pages).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with _side_by_side()._Occupancy(f"http://127.0.0.1:{server.server_port}/metrics", period=0.01) as occ:
            deadline = time.monotonic() + 5
            while len(occ.samples) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        server.shutdown()
    assert occ.samples[0] == (2.0, 1.0) and all(s == (0.0, 0.0) for s in occ.samples[1:])
    assert occ.summary() == {"idle_share": 0.0, "mean_running": 2.0, "polls": 1}


def test_counted_eval_leaves_vllm_unimported_only_for_an_openai_run(tmp_path):
    counted = _load(PEERS / "tts_counted_eval.py", "peers_tts_counted_eval")
    openai, vllm = tmp_path / "openai.json", tmp_path / "vllm.json"
    openai.write_text(json.dumps({"backend": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1"}}))
    vllm.write_text(json.dumps({"backend": {"kind": "vllm"}}))
    assert not counted._may_use_vllm(["eval", "--config", str(openai), "--out", "x"])
    assert not counted._may_use_vllm(["eval", "--backend", "openai"])
    assert counted._may_use_vllm(["eval", "--config", str(vllm)])
    assert counted._may_use_vllm(["eval", "--backend", "vllm"])
    assert counted._may_use_vllm(["eval", "--benchmark", "demo"])  # the default backend is vllm
    assert counted._may_use_vllm(["eval", "--config", str(tmp_path / "missing.yaml")])


def test_the_benchmarks_cpu_server_runs_as_the_in_process_engine(monkeypatch):
    # A vLLM server left at its defaults ran the checkpoint's bfloat16 on one core with 128-token
    # blocks: every comparison on it was slower than the in-process engine for reasons of set-up.
    from tts.backends import vllm as vllm_backend

    sbs = _side_by_side()
    serve = sys.modules["serve_vs_engine"]
    monkeypatch.setattr(vllm_backend, "cpu_has_fast_bf16", lambda: False)
    args = serve.cpu_vllm_args()
    assert args[args.index("--dtype") + 1] == "float32"
    assert args[args.index("--block-size") + 1] == str(vllm_backend.CPU_BLOCK_SIZE) == "32"
    monkeypatch.setattr(serve.os, "cpu_count", lambda: 2)
    assert serve.cpu_vllm_env() == {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    monkeypatch.setattr(serve.os, "cpu_count", lambda: 64)
    assert serve.cpu_vllm_env() == {}
    assert sbs.cpu_vllm_args is serve.cpu_vllm_args
