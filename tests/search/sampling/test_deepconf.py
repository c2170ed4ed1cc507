"""DeepConf on the scripted backend: in-engine stop, threshold from warm-up, filtering, refusals."""

from __future__ import annotations

import dataclasses

import pytest

from tts.backends.base import GenerationRequest
from tts.backends.confidence import ConfidenceStop, first_stop, group_confidences, token_confidence, token_confidences
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.demo import DEMO_PROMPT, generate_problems
from tts.config import SamplingConfig
from tts.search.base import MissingLogprobsError
from tts.search.sampling.deepconf import DeepConf, DeepConfConfig, quantile

PROBLEMS = generate_problems(40)
SAMPLING = SamplingConfig(max_tokens=256)


def _run(cfg, gen=None, problems=PROBLEMS):
    gen = gen or ScriptedGenerator.for_problems(problems, accuracy=0.35, seed=1)
    return DeepConf(cfg, gen, DEMO_PROMPT.render, SAMPLING).solve(problems)


def _accuracy(sols, problems=PROBLEMS):
    return sum(s.answer == p.answer for s, p in zip(sols, problems, strict=True)) / len(problems)


def test_token_confidence_is_minus_the_mean_top_k_logprob_and_groups_slide():
    assert token_confidence([-0.1, -3.0, -5.0, -9.0], k=2) == pytest.approx(1.55)
    assert group_confidences([1.0, 2.0, 3.0, 4.0], 3) == [2.0, 3.0]
    assert group_confidences([1.0, 2.0], 8) == [1.5]  # shorter than the window: one group
    stop = ConfidenceStop(threshold=2.5, window=2)
    assert first_stop([3.0, 3.0, 2.0, 2.0, 5.0], stop) == 3  # (3 + 2) / 2 = 2.5 is not below; (2 + 2) / 2 is
    assert first_stop([1.0], stop) is None  # never stopped before a full window


def test_the_in_engine_stop_shortens_exactly_the_stopped_samples():
    """Scripted emulation of the engine's stop: with a confidence stop, every sample either comes
    back exactly as without it, or is cut at its first group below the threshold, shorter, unanswered."""
    gen = ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.35, seed=3)
    base = GenerationRequest(DEMO_PROMPT.render(PROBLEMS[0]), n=32, max_tokens=256, logprobs=True,
                             top_logprobs=20, seed=11, key=PROBLEMS[0].id)
    free = gen.generate([base])[0].completions
    stop = ConfidenceStop(threshold=quantile([min(group_confidences(token_confidences(c.token_top_logprobs), 16))
                                              for c in free], 0.5), window=16)
    held = gen.generate([dataclasses.replace(base, confidence_stop=stop)])[0].completions
    stopped = [(f, h) for f, h in zip(free, held, strict=True) if h.finish_reason == "confidence"]
    assert 4 <= len(stopped) < len(free)
    for f, h in zip(free, held, strict=True):
        at = first_stop(token_confidences(f.token_top_logprobs), stop)
        if h.finish_reason == "confidence":
            assert h.completion_tokens == at + 1 < f.completion_tokens
            assert "boxed" not in h.text and h.token_top_logprobs == f.token_top_logprobs[: at + 1]
        else:
            assert h == f and (at is None or at == f.completion_tokens - 1)


def test_online_stops_traces_in_the_engine_and_spends_fewer_tokens_than_the_same_draw_unstopped():
    cfg = DeepConfConfig(n=16, warmup=4, keep=0.1, window=16, consensus=None)
    online = _run(cfg)
    offline_tokens = sum(s.usage.completion_tokens for s in _run(cfg.model_copy(update={"mode": "offline"})))
    stopped = sum(s.trace.events.get("stopped_low_confidence", 0) for s in online)
    assert stopped > 100  # keep = 0.1: the 90th warm-up percentile stops most later traces
    assert sum(s.usage.completion_tokens for s in online) < 0.8 * offline_tokens
    for sol in online:
        # stopped traces are marked, unanswered, and never vote
        for i, smp in enumerate(sol.trace.samples):
            if smp.finish_reason == "confidence":
                assert smp.answer is None and i >= 4 and i != sol.trace.selected
        # the voters: traces at or above the warm-up threshold (warm-up ones included), with an answer
        bar = sol.trace.tree[0]["score"]
        assert sum(sol.trace.votes.values()) == pytest.approx(sum(
            c for c, smp in zip(sol.trace.scores, sol.trace.samples, strict=True)
            if smp.finish_reason != "confidence" and smp.answer is not None and c >= bar))


def test_the_threshold_is_the_warm_up_quantile_and_a_backend_without_the_stop_pays_every_token():
    class NoStop(ScriptedGenerator):
        supports_confidence_stop = False

    cfg = DeepConfConfig(n=12, warmup=4, keep=0.5, window=16, consensus=None)
    engine = _run(cfg, problems=PROBLEMS[:10])
    after = _run(cfg, NoStop.for_problems(PROBLEMS[:10], accuracy=0.35, seed=1), problems=PROBLEMS[:10])
    for a, b in zip(engine, after, strict=True):
        assert a.answer == b.answer  # same rule, same answers
        assert b.trace.events.get("stop_after_generation", 0) == a.trace.events.get("stopped_low_confidence", 0)
    saved = sum(b.usage.completion_tokens - a.usage.completion_tokens for a, b in zip(engine, after, strict=True))
    assert saved > 0
    warm = [min(group_confidences(token_confidences(t.token_top_logprobs), 16)) for t in
            ScriptedGenerator.for_problems(PROBLEMS[:1], accuracy=0.35, seed=1).generate([GenerationRequest(
                DEMO_PROMPT.render(PROBLEMS[0]), n=4, max_tokens=256, logprobs=True, top_logprobs=20,
                seed=DeepConf(cfg, None, DEMO_PROMPT.render)._request(PROBLEMS[0], 4, 0, None).seed,
                key=PROBLEMS[0].id)])[0].completions]
    assert engine[0].trace.tree[0]["score"] == pytest.approx(quantile(warm, 0.5))


def test_offline_filter_keeps_the_most_confident_share_and_weights_the_vote():
    sols = _run(DeepConfConfig(n=16, mode="offline", keep=0.25, window=16))
    for sol in sols:
        # among the answered traces, those at or above the 75th percentile of their confidences vote
        answered = [i for i, smp in enumerate(sol.trace.samples) if smp.answer is not None]
        bar = quantile([sol.trace.scores[i] for i in answered], 0.75)
        kept = [i for i in answered if sol.trace.scores[i] >= bar]
        assert sol.trace.events.get("filtered_out", 0) == 16 - len(kept)
        assert sol.trace.selected in kept
    # on this backend confident traces are more often right: filtering helps over a plain vote
    plain = _run(DeepConfConfig(n=16, mode="offline", keep=1.0, measure="mean"))
    assert _accuracy(sols) > _accuracy(plain)


def test_consensus_stops_sampling_a_problem_early():
    easy = [dataclasses.replace(p) for p in PROBLEMS[:10]]
    gen = ScriptedGenerator.for_problems(easy, accuracy=0.9, seed=0)
    sols = _run(DeepConfConfig(n=32, warmup=4, chunk=4, consensus=0.8, window=16), gen, easy)
    assert sum(len(s.trace.samples) < 32 for s in sols) >= 5


def test_missing_top_logprobs_is_refused_naming_the_unavailable_scorers():
    gen = ScriptedGenerator.for_problems(PROBLEMS[:2], returns_logprobs=False)
    with pytest.raises(MissingLogprobsError, match="self_certainty") as err:
        _run(DeepConfConfig(n=4), gen, PROBLEMS[:2])
    assert "self_consistency" in str(err.value)


def test_warmup_above_n_is_refused_and_the_default_is_capped_at_n():
    with pytest.raises(ValueError, match="warmup"):
        DeepConfConfig(n=2, warmup=4)
    sols = _run(DeepConfConfig(n=4, window=16, consensus=None), problems=PROBLEMS[:3])  # warmup 16, capped at 4
    assert all(len(s.trace.samples) == 4 and "stopped_low_confidence" not in s.trace.events for s in sols)
