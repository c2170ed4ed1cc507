"""Parity: the sequential strategies (budget forcing, certainty probing, revision) against their references.

* budget_forcing: s1 (Muennighoff et al. 2025, "s1: Simple test-time scaling", section 3.1) and
  its code, github.com/simplescaling/s1 at commit 77272c6e925d610257a50b520bad15330b513389:
  ``eval/lm-evaluation-harness/lm_eval/models/vllm_causallms.py`` (``_model_generate``: the
  thinking phase, ``thinking_n_ignore`` "Wait" rounds, and, for a thought cut at the cap, a newline
  unless the thought ends in one, the end-of-thinking delimiter and "\\nFinal Answer:") and the
  README's "vLLM with budget forcing" example (each "Wait" round gets the budget left).
* certainty_probe: Dynasor (Fu et al. 2024/2025, "Efficiently Serving LLM Reasoning Programs with
  Certaindex"), github.com/hao-ai-lab/Dynasor at commit 0d2f1b93a60e031cfc7fb43843d2b736b225960c:
  ``dynasor/core/cot.py::openai_chat_completion_stream`` (probe text, 20-token probes at
  temperature 0.6 / top-p 0.95, a probe of the text before every chunk including the bare prompt,
  ``obtain_answer``: the text up to the first unmatched "}", the uncertain words, and the stop
  rule: the last ``threshold`` answers equal, non-empty and certain) with ``effort_level("mid")``
  = (3, 64) of the same file.
* revision: Snell et al. 2024 ("Scaling LLM Test-Time Compute Optimally...", section 6): a budget
  of N attempts split into S parallel chains of R + 1 sequential attempts (the sequential:parallel
  ratio), each revision conditioned on the chain's previous attempt, the answer selected across
  all attempts by majority or verifier. Snell et al. fine-tune a revision model that sees several
  earlier attempts; tts prompts an ordinary model with the previous attempt only (Self-Refine's
  prompt-only setting, Madaan et al. 2023), which the strategy's docstring says. No reference code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tts.backends.base import Completion, GenerationResult, request_usage
from tts.backends.function import FunctionGenerator
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.sequential.budget_forcing import BudgetForcing, BudgetForcingConfig
from tts.search.sampling.certainty_probe import DYNASOR_PROBE, CertaintyProbe, CertaintyProbeConfig
from tts.search.sequential.revision import Revision, RevisionConfig, plan_attempts
from tts.types import Problem

PINNED = {"strategy:budget_forcing", "strategy:certainty_probe", "strategy:revision"}

PROBLEM = Problem("p", "What is 1 + 1?", "2")


def _result(comps):
    return GenerationResult(tuple(comps), request_usage(1, 0, [c.completion_tokens for c in comps], 0.0))


# --- budget forcing (s1) ---------------------------------------------------------------------------


@dataclass
class _Thinker:
    """A thinking model: ``words`` words of thought per request (a word is a token), then the
    delimiter (a stop string: cut from the text, its token counted); after the delimiter it answers."""

    words: int
    word: str = "hmm "
    end: str = "</think>"
    requests: list = field(default_factory=list)

    def think(self, max_tokens: int) -> Completion:
        if self.words + 1 <= max_tokens:
            return Completion(self.word * self.words, self.words + 1, finish_reason="stop", ended_by_eos=False)
        return Completion(self.word * max_tokens, max_tokens, finish_reason="length", ended_by_eos=False)

    def generate(self, requests):
        self.requests += list(requests)
        out = []
        for r in requests:
            if self.end in r.stop:
                out.append(_result([self.think(r.max_tokens) for _ in range(r.n)]))
            else:
                out.append(_result([Completion(" \\boxed{2}", 4, finish_reason="stop", ended_by_eos=True)]))
        return out

    def close(self):
        pass


def _s1_head(model: _Thinker, cap: int, ignores: int, start: str, end: str, wait: str) -> str:
    """s1, restated (harness ``_model_generate`` and README example, commit 77272c6): think with at
    most ``cap`` tokens; while the thought was not cut and budget is left, up to ``ignores`` times,
    drop its end, append "Wait" and think on with the budget left; then a cut thought gets a newline
    (unless it ends in one), the delimiter and "\\nFinal Answer:", any other just the delimiter."""
    first = model.think(cap)
    text, used, finish = first.text, first.completion_tokens, first.finish_reason
    for _ in range(ignores):
        left = cap - used
        if finish == "length" or left <= 0:
            break
        more = model.think(left)
        text, used, finish = text + wait + more.text, used + more.completion_tokens, more.finish_reason
    if finish == "length":
        return start + text + ("" if text.endswith("\n") else "\n") + end + "\nFinal Answer:"
    return start + text + end


@pytest.mark.parametrize(("words", "word", "cap", "ignores"), [
    (50, "hmm ", 20, 0),  # cut at the cap: newline, delimiter, "Final Answer:"
    (50, "hmm\n", 20, 0),  # cut right after a newline: none added
    (5, "hmm ", 20, 0),  # ends on its own: the delimiter only
    (10, "hmm ", 25, 2),  # two "Wait"s, the second round cut by the budget left
    (10, "hmm ", 100, 2),  # two "Wait"s, then it ends on its own
])
def test_budget_forcing_prompt_bytes_are_s1s(words, word, cap, ignores):
    """s1 (simplescaling/s1, vllm_causallms.py and README, commit 77272c6): the answer request's
    prompt (the thought and what is forced after it) is byte for byte s1's, for cut and uncut
    thoughts, with and without "Wait" rounds. s1's "ignore the end k times" is
    ``min_thinking_tokens = max_thinking_tokens`` with ``max_waits = k``."""
    model = _Thinker(words, word)
    cfg = BudgetForcingConfig(max_thinking_tokens=cap, min_thinking_tokens=cap if ignores else 0, max_waits=ignores)
    BudgetForcing(cfg, model, MATH_PROMPT.render, SamplingConfig(max_tokens=500)).solve([PROBLEM])
    answer_request = model.requests[-1]
    want = _s1_head(_Thinker(words, word), cap, ignores, cfg.think_start, cfg.think_end, cfg.wait)
    assert answer_request.continuation == want
    thinking = [r for r in model.requests if cfg.think_end in r.stop]
    assert thinking[0].max_tokens == cap  # the first request gets the whole budget


def test_budget_forcing_keeps_the_pre_s1_forcing_as_settings():
    """The documented old rule, reachable: no newline before the delimiter and a boxed prefix, and
    a thought ended by the end-of-sequence token forced like a cut one (``force_after_eos``)."""
    model = _Thinker(50)
    cfg = BudgetForcingConfig(max_thinking_tokens=20, cut_newline=False, answer_prefix="\nFinal answer: $\\boxed{")
    BudgetForcing(cfg, model, MATH_PROMPT.render, SamplingConfig(max_tokens=500)).solve([PROBLEM])
    assert model.requests[-1].continuation == "<think>\n" + "hmm " * 20 + "</think>\nFinal answer: $\\boxed{"

    class _EndsMessage(_Thinker):
        def think(self, max_tokens):
            return Completion("hmm " * 5 + "so \\boxed{2}", 8, finish_reason="stop", ended_by_eos=True)

    for force, tail in ((False, "</think>"), (True, "</think>\nFinal Answer:")):
        model = _EndsMessage(0)
        cfg = BudgetForcingConfig(max_thinking_tokens=20, force_after_eos=force)
        sol = BudgetForcing(cfg, model, MATH_PROMPT.render, SamplingConfig(max_tokens=500)).solve([PROBLEM])[0]
        assert model.requests[-1].continuation.endswith(tail)
        assert sol.trace.events == ({"forced_eos": 1} if force else {})


# --- certainty probing (Dynasor) -----------------------------------------------------------------


@dataclass
class _Reasoner:
    """A model whose trace is ``length`` words written ``k`` at a time, ending with its own answer;
    a probe of the trace after w words replies ``probes[w // k]`` (the same for every sample)."""

    length: int
    probes: list[str]
    requests: list = field(default_factory=list)

    def reply(self, position: int, k: int) -> str:
        return self.probes[min(position // k, len(self.probes) - 1)]

    def generate(self, requests):
        self.requests += list(requests)
        out = []
        for r in requests:
            if r.continuation.endswith(self.prefix):
                done = len(r.continuation[: -len(self.prefix)].split())
                comps = [Completion(self.reply(done, self.k), 5, finish_reason="length") for _ in range(r.n)]
            else:
                done = len(r.continuation.split())
                take = min(r.max_tokens, self.length - done)
                if done + take >= self.length:
                    comps = [Completion(" w" * take + " so \\boxed{9}", take, finish_reason="stop", ended_by_eos=True)
                             for _ in range(r.n)]
                else:
                    comps = [Completion(" w" * take, take, finish_reason="length") for _ in range(r.n)]
            out.append(_result(comps))
        return out

    def close(self):
        pass


def _obtain_answer(reply: str) -> str:
    """Dynasor's obtain_answer: the text before the first "}" that closes a brace opened before it."""
    depth = 0
    for i, ch in enumerate(reply):
        if ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:
                return reply[:i]
            depth -= 1
    return ""


UNCERTAIN = ["wait", "hold", "but", "okay", "no", "hmm"]


def _dynasor(model: _Reasoner, k: int, threshold: int, max_tokens: int) -> tuple[list[int], str, int]:
    """Dynasor-CoT restated (cot.py, commit 0d2f1b9): every round, a chunk of k tokens is written
    while the text before it is probed; a chunk that ends the reply ends the loop (its own answer);
    otherwise the probe's answer and certainty are recorded, and once the last ``threshold``
    answers are equal, non-empty and certain, the reply stops with the last answer.
    Returns the probed positions (every probe sent), the answer ("text" for the trace's own) and
    the tokens written."""
    positions, answers, certain, written = [], [], [], 0
    for _ in range(0, max_tokens, k):
        probe = model.reply(written, k)
        positions.append(written)
        take = min(k, model.length - written)
        written += take
        if written >= model.length:
            return positions, "text", written  # the probe sent alongside is not read
        answers.append(_obtain_answer(probe))
        certain.append(not any(w in probe.lower() for w in UNCERTAIN))
        last = answers[-threshold:]
        if len(last) == threshold and len(set(last)) == 1 and all(last) and all(certain[-threshold:]):
            return positions, answers[-1], written
    return positions, "text", written


CERTAIN = "7} \\]"
CASES = [
    # stable from the start: stops after three probes (0, k, 2k)
    (1000, [CERTAIN] * 50),
    # a hedge breaks the run, then three certain probes
    (1000, ["3} \\]", CERTAIN, "7} \\] wait", CERTAIN, CERTAIN, CERTAIN] + [CERTAIN] * 40),
    # "no" inside "not" is a hedge (the reference's substring rule); an unclosed box is no answer
    (1000, [CERTAIN, "7} \\] not sure", CERTAIN, "7", CERTAIN, CERTAIN, CERTAIN] + [CERTAIN] * 40),
    # answers keep changing: the trace ends on its own with its own answer
    (300, [f"{i}}} \\]" for i in range(50)]),
]


@pytest.mark.parametrize(("length", "probes"), CASES)
def test_certainty_probe_probes_and_stops_where_dynasor_does(length, probes):
    """Dynasor (hao-ai-lab/Dynasor, dynasor/core/cot.py, commit 0d2f1b9): the same probe text and
    sampling (20 tokens, temperature 0.6, top-p 0.95), the same probed positions (the bare prompt,
    then every k tokens), the same stop probe and answer. The one documented difference: Dynasor
    writes the chunk that runs alongside the deciding probe; tts does not (k tokens fewer)."""
    k, m = 64, 3
    model = _Reasoner(length, probes)
    model.prefix, model.k = DYNASOR_PROBE, k
    cfg = CertaintyProbeConfig()
    assert (cfg.probe_every, cfg.stable, cfg.probe_prefix) == (k, m, DYNASOR_PROBE)
    sol = CertaintyProbe(cfg, model, MATH_PROMPT.render, SamplingConfig(max_tokens=4096)).solve([PROBLEM])[0]
    probes_sent = [r for r in model.requests if r.continuation.endswith(DYNASOR_PROBE)]
    assert all((r.max_tokens, r.temperature, r.top_p) == (20, 0.6, 0.95) for r in probes_sent)
    positions, answer, written = _dynasor(_Reasoner(length, probes), k, m, 4096)
    assert [len(r.continuation[: -len(DYNASOR_PROBE)].split()) for r in probes_sent] == positions
    sample = sol.trace.samples[0]
    if answer == "text":
        assert sample.answer == "9" and sample.completion_tokens == written
    else:
        assert sample.finish_reason == "probe_stable" and sample.answer == answer.strip()
        assert sample.completion_tokens == written - k


def test_certainty_probe_keeps_the_pre_dynasor_rules_as_settings():
    """The documented old rules, reachable: no probe of the bare prompt, greedy 16-token probes,
    a box left open closed for the probe, and a capped trace answered by its last probe."""
    model = _Reasoner(10_000, ["7"] * 200)
    old = CertaintyProbeConfig(probe_every=32, probe_tokens=16, probe_temperature=0.0, probe_at_start=False,
                               close_open_probes=True, cap_answer_from_probe=True, stable=50)
    model.prefix, model.k = old.probe_prefix, 32
    sol = CertaintyProbe(old, model, MATH_PROMPT.render, SamplingConfig(max_tokens=320)).solve([PROBLEM])[0]
    probes = [r for r in model.requests if r.continuation.endswith(old.probe_prefix)]
    assert [len(r.continuation[: -len(old.probe_prefix)].split()) for r in probes] == list(range(32, 320, 32))
    assert all((r.max_tokens, r.temperature) == (16, 0.0) for r in probes)
    assert sol.answer == "7" and sol.trace.samples[0].finish_reason == "cap"
    # Dynasor's rules: the unclosed "7" is no answer, and a capped trace answers from its text.
    model = _Reasoner(10_000, ["7"] * 200)
    model.prefix, model.k = DYNASOR_PROBE, 64
    new = CertaintyProbe(CertaintyProbeConfig(), model, MATH_PROMPT.render, SamplingConfig(max_tokens=320))
    sol = new.solve([PROBLEM])[0]
    assert sol.answer is None and sol.trace.samples[0].finish_reason == "cap"


# --- revision (Snell et al. 2024) ----------------------------------------------------------------


def _revise(r):
    """Answers <round>, where round = how many assistant turns the prompt already holds."""
    prior = sum(m.role == "assistant" for m in r.messages)
    return Completion(f"step\n\nThe answer is \\boxed{{{prior}}}", 6, finish_reason="stop", ended_by_eos=True)


def test_revision_splits_n_into_chains_and_rounds_and_conditions_on_the_previous_attempt():
    """Snell et al. 2024 section 6: N attempts = S parallel chains x (R + 1) sequential attempts;
    every revision sees the problem and the chain's previous attempt; all N attempts are candidates
    for the final selection (majority here). tts's documented departure: one previous attempt in
    context (Snell et al.'s fine-tuned reviser sees several)."""
    model = FunctionGenerator(_revise)
    cfg = RevisionConfig(n=8, rounds=3)
    assert cfg.chains == 2 and plan_attempts(cfg.chains, cfg.rounds, cfg.n) == (2, 3)
    sol = Revision(cfg, model, MATH_PROMPT.render, SamplingConfig(max_tokens=64)).solve([PROBLEM])[0]
    first, revisions = model.requests[0], model.requests[1:]
    assert first.n == 2 and len(revisions) == 2 * 3
    prompt = MATH_PROMPT.render(PROBLEM)
    for r in revisions:
        assert tuple(r.messages[: len(prompt)]) == tuple(prompt)
        assert [m.role for m in r.messages[len(prompt):]] == ["assistant", "user"]  # the previous attempt only
        assert r.messages[-1].content == cfg.instruction
    assert len(sol.trace.samples) == 8  # every attempt of every chain is a candidate
    assert sorted(s.answer for s in sol.trace.samples) == ["0", "0", "1", "1", "1", "1", "1", "1"]
    assert sol.answer == "1"  # the majority over all attempts
