"""Certainty probing (Dynasor-CoT) on the scripted backend: probes in the ledger, stop at the stable point."""

from __future__ import annotations

from tts.answers import answer_keys
from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.demo import DEMO_PROMPT, generate_problems
from tts.config import SamplingConfig
from tts.search.sampling.certainty_probe import CertaintyProbe, CertaintyProbeConfig
from tts.search.sampling.self_consistency import SelfConsistency, SelfConsistencyConfig

PROBLEMS = generate_problems(20)
SAMPLING = SamplingConfig(max_tokens=512)


def _gen(accuracy=0.8):
    return RecordingGenerator(ScriptedGenerator.for_problems(PROBLEMS, accuracy=accuracy, seed=1, mean_tokens=200))


def test_probe_requests_are_in_the_usage_and_counted():
    gen = _gen()
    sols = CertaintyProbe(CertaintyProbeConfig(n=2, probe_every=16, stable=2), gen, DEMO_PROMPT.render,
                          SAMPLING).solve(PROBLEMS)
    probes = [r for r in gen.requests if r.continuation.endswith(CertaintyProbeConfig().probe_prefix)]
    # Dynasor's probes: sampled at 0.6, top-p 0.95, 20 tokens
    assert probes and all(r.temperature == 0.6 and r.top_p == 0.95 and r.max_tokens == 20 for r in probes)
    assert sum(s.trace.events["probes"] for s in sols) == len(probes)
    for sol in sols:
        trace_tokens = sum(s.completion_tokens for s in sol.trace.samples)
        assert sol.usage.completion_tokens == trace_tokens + sol.trace.events["probe_tokens"]
        # one priced request shape per call: first draw, every probe and every continuation
        assert len(sol.usage.shapes) == sol.usage.calls


def test_a_trace_stops_at_the_first_stable_point_and_saves_tokens():
    cfg = CertaintyProbeConfig(n=4, probe_every=16, stable=3)
    sols = CertaintyProbe(cfg, _gen(), DEMO_PROMPT.render, SAMPLING).solve(PROBLEMS)
    stopped = 0
    for sol in sols:
        by_trace: dict[str, list] = {}
        for node in sol.trace.tree:
            by_trace.setdefault(node["id"].split(".")[0], []).append(node["answer"])
        for sample, (_, answers) in zip(sol.trace.samples, sorted(by_trace.items(), key=lambda kv: int(kv[0])), strict=False):
            if sample.finish_reason != "probe_stable":
                continue
            stopped += 1
            keys = answer_keys(answers)
            assert answers[-1] is not None and len(set(keys[-3:])) == 1 and len(keys) >= 3
            # no earlier run of three equal answers: it stopped at the first stable point
            assert not any(answers[i] is not None and len(set(keys[i:i + 3])) == 1 for i in range(len(keys) - 3))
            # the first probe reads the bare prompt (Dynasor), then one after every k tokens
            assert sample.completion_tokens == 16 * (len(answers) - 1)
            assert sample.answer == answers[-1]
    assert stopped >= 20
    full = SelfConsistency(SelfConsistencyConfig(n=4), _gen(), DEMO_PROMPT.render, SAMPLING).solve(PROBLEMS)
    trace_tokens = sum(s.completion_tokens for sol in sols for s in sol.trace.samples)
    assert trace_tokens < 0.7 * sum(s.usage.completion_tokens for s in full)


def test_hedging_probes_count_as_no_answer():
    strat = CertaintyProbe(CertaintyProbeConfig(), _gen(), DEMO_PROMPT.render)
    assert strat._probe_answer("12} \\]. Wait, let me check") is None
    assert strat._probe_answer("12} \\]") == "12"
    assert strat._probe_answer("12} \\] I do not doubt it") is None  # "no" inside "not": a hedge (Dynasor)


def test_old_probe_rules_are_settings():
    old = CertaintyProbeConfig(probe_prefix="\n\nFinal answer: $\\boxed{", close_open_probes=True,
                               hedges=("wait", "hmm", "but ", "however", "double-check", "recheck", "let me"))
    strat = CertaintyProbe(old, _gen(), DEMO_PROMPT.render)
    assert strat._probe_answer("12") == "12"  # a box left open is closed for it
    assert strat._probe_answer("12}$. I do not doubt it") == "12"
    assert CertaintyProbe(CertaintyProbeConfig(), _gen(), DEMO_PROMPT.render)._probe_answer("12") is None
