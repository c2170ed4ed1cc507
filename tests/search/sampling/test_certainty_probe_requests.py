"""Certainty probing's requests as sent (seeds, sampling, lengths), its budget arithmetic and cost
hook, and the one-probe stop, on a model whose replies the test writes."""

from __future__ import annotations

import pytest

from tts.backends.base import Completion, GenerationResult, derive_seed, request_usage
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.base import StrategyInputError
from tts.search.sampling.certainty_probe import DYNASOR_PROBE, CertaintyProbe, CertaintyProbeConfig
from tts.types import Budget, Problem, RequestShape

PROBLEM = Problem("p", "What is 1 + 1?", "2")


class Reasoner:
    """A trace of ``length`` words written as asked, ending with \\boxed{9}; every probe replies
    ``probe`` (5 tokens). Records the requests."""

    def __init__(self, length: int, probe: str) -> None:
        self.length, self.probe, self.requests = length, probe, []

    def generate(self, requests):
        self.requests += list(requests)
        out = []
        for r in requests:
            if r.continuation.endswith(DYNASOR_PROBE):
                text = self.probe if self.probe is not None else self.reply()
                comps = [Completion(text, 5, finish_reason="length") for _ in range(r.n)]
            else:
                done = len(r.continuation.split())
                take = min(r.max_tokens, self.length - done)
                end = done + take >= self.length
                comps = [Completion(" w" * take + (" so \\boxed{9}" if end else ""), take,
                                    finish_reason="stop" if end else "length") for _ in range(r.n)]
            out.append(GenerationResult(tuple(comps), request_usage(10, 0, [c.completion_tokens for c in comps], 0.0)))
        return out

    def close(self) -> None:
        pass


def probe(config: CertaintyProbeConfig, model: Reasoner, max_tokens: int = 256, seed: int = 3) -> CertaintyProbe:
    return CertaintyProbe(config, model, MATH_PROMPT.render, SamplingConfig(temperature=0.8, top_p=0.9, max_tokens=max_tokens),
                          seed=seed)


def seed(key: str) -> int:
    return derive_seed(3, f"p|certainty_probe|{key}", 0)


def test_the_draws_continuations_and_probes_as_sent():
    """Probes that never settle, max_tokens 150, k = 64: probe the prompt, draw 64, then probe and
    continue by min(64, tokens left): 64, then 22, where the trace is cut (no answer in its text)."""
    model = Reasoner(1000, "wait")
    sol = probe(CertaintyProbeConfig(n=1), model, max_tokens=150).solve([PROBLEM])[0]
    sent = [(r.continuation.endswith(DYNASOR_PROBE), r.n, r.max_tokens, r.temperature, r.top_p, r.seed, r.key)
            for r in model.requests]
    assert sent == [(True, 1, 20, 0.6, 0.95, seed("0|probe0"), "p"),
                    (False, 1, 64, 0.8, 0.9, seed("t0"), "p"),
                    (True, 1, 20, 0.6, 0.95, seed("0|probe1"), "p"),
                    (False, 1, 64, 0.8, 0.9, seed("0|c1"), "p"),
                    (True, 1, 20, 0.6, 0.95, seed("0|probe2"), "p"),
                    (False, 1, 22, 0.8, 0.9, seed("0|c2"), "p")]
    assert [r.continuation for r in model.requests[:2]] == [DYNASOR_PROBE, ""]
    sample = sol.trace.samples[0]
    assert (sol.answer, sample.completion_tokens, sample.finish_reason, sol.trace.events["probes"]) == (None, 150, "cap", 3)


def test_a_stable_trace_is_answered_by_its_probe_and_recorded_in_the_tree():
    """Every probe answers 7: stable at the third (prompt, 64, 128 tokens), 128 tokens written."""
    model = Reasoner(1000, "7} \\]")
    sol = probe(CertaintyProbeConfig(n=1), model).solve([PROBLEM])[0]
    [sample] = sol.trace.samples
    assert (sol.problem_id, sol.answer, sol.confidence, sol.trace.votes, sol.trace.selected) == ("p", "7", 1.0, {"7": 1.0}, 0)
    assert (sample.answer, sample.completion_tokens, sample.finish_reason) == ("7", 128, "probe_stable")
    assert sample.text == " w" * 128 + DYNASOR_PROBE + "7} \\]" and sol.trace.strategy == "certainty_probe"
    assert sol.trace.events == {"probes": 3, "probe_tokens": 15, "stopped_stable": 1}
    assert sol.trace.tree == tuple(
        {"id": f"0.{k}", "parent": f"0.{k - 1}" if k else None, "depth": k, "text": "7} \\]", "answer": "7",
         "score": None, "kept": k == 2} for k in range(3))
    assert sol.usage.completion_tokens == 128 + 15


def test_a_capped_trace_takes_its_last_probes_answer_only_under_the_old_rule():
    """Probes answer 5, 6, 7 (at 0, 64, 128 tokens), never stable; cut at 192: the old rule answers
    with the last probe (7), Dynasor's with the text (none). A trace that ends on its own answers
    with its own text (9) under both."""
    model = Reasoner(1000, "")
    model.probe = None
    answers = iter(["5} \\]", "6} \\]", "7} \\]"])
    model.reply = lambda: next(answers)
    old = CertaintyProbeConfig(stable=5, cap_answer_from_probe=True)
    sol = probe(old, model, max_tokens=192).solve([PROBLEM])[0]
    assert (sol.answer, sol.trace.samples[0].finish_reason) == ("7", "cap")
    assert sol.trace.samples[0].text.endswith(DYNASOR_PROBE + "7} \\]")
    hedged = Reasoner(1000, None)
    last_hedged = iter(["5} \\]", "6} \\]", "wait"])
    hedged.reply = lambda: next(last_hedged)
    sol = probe(old, hedged, max_tokens=192).solve([PROBLEM])[0]  # the last probe hedged: the text answers
    assert (sol.answer, sol.trace.samples[0].text) == (None, " w" * 192)
    ended = probe(old, Reasoner(100, "5} \\]"), max_tokens=192).solve([PROBLEM])[0]
    assert (ended.answer, ended.trace.samples[0].finish_reason) == ("9", "ended")


def test_braces_closed_and_found():
    from tts.search.sampling.certainty_probe import _close_braces, _closing_brace

    assert _close_braces("\\boxed{\\frac{1}{2") == "\\boxed{\\frac{1}{2}}" and _close_braces("{a}") == "{a}"
    assert (_closing_brace("{a}} rest"), _closing_brace("{{}}} x"), _closing_brace("{a}")) == (3, 4, None)


def test_a_probe_prefix_with_balanced_braces_reads_the_whole_reply():
    strategy = probe(CertaintyProbeConfig(probe_prefix="\n\n\\textbf{Answer}: "), Reasoner(10, ""))
    assert strategy._probe_answer("12") == "12"


def test_one_stable_probe_stops_a_trace_before_it_writes():
    """stable = 1: the bare prompt's probe already answers, so no trace token is drawn."""
    model = Reasoner(1000, "7} \\]")
    sol = probe(CertaintyProbeConfig(n=2, stable=1), model).solve([PROBLEM])[0]
    assert [r.continuation for r in model.requests] == [DYNASOR_PROBE, DYNASOR_PROBE]
    assert (sol.answer, sol.confidence, [s.finish_reason for s in sol.trace.samples]) == ("7", 1.0, ["probe_stable"] * 2)


def test_a_samples_worst_case_counts_its_probes():
    """max_tokens 256, k = 64: 4 chunks, so a probe of the prompt and one after each of the first
    3 chunks, 20 tokens each: 256 + 4 * 20; without the prompt's probe 3; one chunk and no prompt
    probe: none."""
    model = Reasoner(10, "wait")
    assert probe(CertaintyProbeConfig(), model).sample_worst_case_tokens() == 256 + 4 * 20
    assert probe(CertaintyProbeConfig(probe_at_start=False), model).sample_worst_case_tokens() == 256 + 3 * 20
    assert probe(CertaintyProbeConfig(probe_at_start=False), model, max_tokens=10).sample_worst_case_tokens() == 10
    assert probe(CertaintyProbeConfig(n=4), model).samples_within(Budget(tokens=2 * 336)) == 2
    assert probe(CertaintyProbeConfig(), model, max_tokens=150).sample_worst_case_tokens() == 150 + 3 * 20  # 3 chunks


def test_budgets_cap_each_problems_traces_and_must_be_one_per_problem():
    model = Reasoner(10, "wait")
    strategy = probe(CertaintyProbeConfig(n=4), model)
    sols = strategy.solve([PROBLEM, Problem("q", "What is 2 + 2?", "4")], [Budget(samples=2), None])
    assert [len(s.trace.samples) for s in sols] == [2, 4]
    with pytest.raises(StrategyInputError, match=r"^got 1 budgets for 2 problems; give one per problem$"):
        strategy.solve([PROBLEM, PROBLEM], [None])


def test_the_cost_hook_plans_the_traces_and_a_probe_every_64_tokens():
    """n = 2 traces of 150 tokens; probes (20 tokens, cached prompt) at 0, 64 and 128 tokens, one per trace."""
    shapes = CertaintyProbe.planned_requests(2, 100, 150, 10)
    assert shapes == [RequestShape(100, 10, (150, 150))] + [
        RequestShape(head, head, (20,)) for head in (100, 164, 228) for _ in range(2)]
    assert CertaintyProbe.planned_requests(1, 100, 10)[0] == RequestShape(100, 0, (10,))
