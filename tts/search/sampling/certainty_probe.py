"""Certainty probing (Dynasor-CoT): stop a trace once its probed answer stops changing.

Fu et al. 2024, "Efficiently Serving LLM Reasoning Programs with Certaindex" (Dynasor), and its
code (github.com/hao-ai-lab/Dynasor, ``dynasor/core/cot.py``). A model often knows its answer long
before it stops writing. Every ``probe_every`` tokens the partial trace is *probed*: a short
continuation of the trace with a forced answer prefix (``probe_prefix``, Dynasor's text :data:`DYNASOR_PROBE`,
"... Oh, I suddenly got the answer to the whole problem, **Final Answer**", then an open box) reads the
answer the model would give now: the text up to the brace that closes the box (a probe that never
closes it has no answer). A probe whose continuation contains a hedge (``hedges``, Dynasor's
"wait", "hold", "but", "okay", "no", "hmm", matched case-insensitively anywhere, as in the
reference) counts as no answer. Once the last ``stable`` probes all give the same answer, the
trace stops and that answer is its answer; the tokens it would have written afterwards are saved.
The defaults are Dynasor's "mid" effort (3 probes, every 64 tokens), its probe of 20 tokens
sampled at temperature 0.6, top-p 0.95, and its first probe on the bare prompt.

1. Probe the bare prompt of the n traces per problem (``probe_at_start``), then sample their
   first ``probe_every`` tokens (one call).
2. Probe every live trace (one call for all traces of all problems, ``probe_tokens``).
3. Stop traces whose last ``stable`` probes agree; continue the others by ``probe_every`` tokens
   (one call); a trace that ends on its own keeps the answer it wrote. Repeat 2-3 until every trace
   has stopped, ended, or reached ``max_tokens`` (then the answer is the one its text gives).
4. The answer is the majority vote over the n traces.

Departures from the reference, on purpose:

* Dynasor sends each chunk and the probe of the text before it at the same time, so the chunk
  after the deciding probe is generated (and shown) but adds nothing to the answer; tts probes
  between chunks and does not generate it. Same probes, same stop probe, one chunk fewer.
* Dynasor's chat client is one trace; tts runs n per problem and votes (n = 1 is the reference).

The rules tts used before it was pinned to Dynasor are settings: ``probe_at_start=False``,
``probe_temperature=0.0`` (greedy probes), ``close_open_probes=True`` (a box left open is closed
for the probe), ``cap_answer_from_probe=True`` (a trace cut at ``max_tokens`` takes its last
probe's answer), with the old strings ``probe_prefix`` (two newlines, "Final answer: $" and an open box),
``hedges`` ("wait", "hmm", "but ", "however", "double-check", "recheck", "let me"),
``probe_every=32`` and ``probe_tokens=16``.

Every probe is a real request: its prompt (the trace so far plus the prefix) and its generated
tokens are in the problem's usage (the ledger prices them), and the trace counts them in the
events ``probes`` and ``probe_tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field

from tts.answers import answer_keys
from tts.backends.base import GenerationRequest, derive_seed
from tts.config import StrategyConfigBase
from tts.search.base import BudgetUse, Strategy, StrategyInputError
from tts.types import Budget, RequestShape, Sample, Solution, Trace, Usage


DYNASOR_PROBE = "... Oh, I suddenly got the answer to the whole problem, **Final Answer**\n\n\\[ \\boxed{"
"""Dynasor's probe text (``probeing_suffix`` of ``dynasor/core/cot.py``)."""


class CertaintyProbeConfig(StrategyConfigBase):
    """Probe each partial trace for its answer every k tokens; stop it once the answer is stable (Dynasor-CoT)."""

    kind: Literal["certainty_probe"] = "certainty_probe"
    n: int = Field(1, ge=1, le=4096)
    """Traces per problem, each probed and stopped on its own; the answer is their majority vote."""
    probe_every: int = Field(64, ge=1)
    """k: tokens generated between two probes (Dynasor's chunk size: 64; 32 before tts followed it)."""
    stable: int = Field(3, ge=1, le=64)
    """m: consecutive probes that must give the same answer before a trace stops (Dynasor "mid": 3)."""
    probe_prefix: str = Field(DYNASOR_PROBE, min_length=1)
    """Forced after the partial trace to read its answer (Dynasor's probe text). When it leaves a
    brace open, the answer is the probe's text up to the brace that closes it."""
    probe_tokens: int = Field(20, ge=1)
    """Most tokens of one probe's continuation (Dynasor: 20)."""
    probe_temperature: float = Field(0.6, ge=0.0, le=5.0)
    """Sampling temperature of the probes (Dynasor: 0.6; 0.0 for greedy probes)."""
    probe_top_p: float = Field(0.95, gt=0.0, le=1.0)
    """Top-p of the probes (Dynasor: 0.95)."""
    hedges: tuple[str, ...] = ("wait", "hold", "but", "okay", "no", "hmm")
    """A probe whose continuation contains one of these anywhere (case-insensitive, so "no" also
    matches "not" and "know", as in Dynasor) counts as no answer."""
    probe_at_start: bool = True
    """Probe the bare prompt too, before the first chunk (Dynasor). False: the first probe reads
    the first ``probe_every`` tokens."""
    close_open_probes: bool = False
    """Close a box the probe left open and read the answer anyway (tts's old rule). False
    (Dynasor): a probe that never closes the box has no answer."""
    cap_answer_from_probe: bool = False
    """A trace cut at ``max_tokens`` takes its last probe's answer (tts's old rule). False
    (Dynasor): its answer is the one its text gives."""


@dataclass(slots=True)
class _Trace:
    problem: int
    index: int
    text: str = ""
    tokens: int = 0
    probes: list[str | None] = field(default_factory=list)
    probe_texts: list[str] = field(default_factory=list)
    state: str = "live"  # live, stable, ended, cap
    final_text: str = ""


def _close_braces(text: str) -> str:
    return text + "}" * max(text.count("{") - text.count("}"), 0)


def _closing_brace(text: str) -> int | None:
    """Index of the first ``}`` that closes a brace opened before ``text`` (None: none does)."""
    depth = 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:
                return i
            depth -= 1
    return None


class CertaintyProbe(Strategy):
    """Dynasor-CoT certainty probing; see the module docstring."""

    name = "certainty_probe"
    config_class: ClassVar[type[StrategyConfigBase]] = CertaintyProbeConfig
    budget_use = BudgetUse.WHOLE_SAMPLES  # its probes ride on each sample's worst case
    pool_rule = None

    def _request(self, problem: Any, continuation: str, n: int, max_tokens: int, key: str,
                 temperature: float | None = None, top_p: float | None = None) -> GenerationRequest:
        return GenerationRequest(
            messages=self.prompt(problem), n=n, max_tokens=max_tokens, continuation=continuation,
            temperature=self.sampling.temperature if temperature is None else temperature,
            top_p=self.sampling.top_p if top_p is None else top_p,
            seed=derive_seed(self.seed, f"{problem.id}|{self.name}|{key}", 0), key=problem.id)

    def _probe_answer(self, reply: str) -> str | None:
        """The answer one probe gives: None for a hedge, or (Dynasor) for a box it never closes."""
        c = self.config
        if any(h in reply.lower() for h in c.hedges):
            return None
        if c.close_open_probes or c.probe_prefix.count("{") <= c.probe_prefix.count("}"):
            return self.extract(_close_braces(c.probe_prefix + reply))
        end = _closing_brace(reply)
        if end is None or not reply[:end].strip():
            return None
        return self.extract(_close_braces(c.probe_prefix + reply[:end + 1]))

    def _probe(self, problems: Sequence[Any], traces: list[_Trace], step: int, probe_usage: list[Usage]) -> None:
        """Probe ``traces`` (one call) and mark those whose last ``stable`` probes agree."""
        c = self.config
        results = self.generator.generate([
            self._request(problems[t.problem], t.text + c.probe_prefix, 1, c.probe_tokens,
                          f"{t.index}|probe{step}", temperature=c.probe_temperature, top_p=c.probe_top_p)
            for t in traces])
        for t, result in zip(traces, results, strict=True):
            probe_usage[t.problem] = probe_usage[t.problem] + result.usage
            reply = result.completions[0].text
            t.probes.append(self._probe_answer(reply))
            t.probe_texts.append(reply)
            last = t.probes[-c.stable:]
            keys = answer_keys(last)
            if len(last) == c.stable and last[0] is not None and len(set(keys)) == 1:
                t.state = "stable"

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        if budgets is not None and len(budgets) != len(problems):
            raise StrategyInputError(f"got {len(budgets)} budgets for {len(problems)} problems; give one per problem")
        c, cap = self.config, self.sampling.max_tokens
        ns = [self.samples_within(b) for b in (budgets or [None] * len(problems))]
        usage = [Usage() for _ in problems]
        probe_usage = [Usage() for _ in problems]
        traces = [_Trace(i, j) for i, n in enumerate(ns) for j in range(n)]
        # 1. Probe the bare prompts (Dynasor), then the first k tokens of n traces per problem.
        if c.probe_at_start:
            self._probe(problems, traces, 0, probe_usage)
        first = min(c.probe_every, cap)
        live_of = [[t for t in traces if t.problem == i and t.state == "live"] for i in range(len(problems))]
        asked = [(i, ts) for i, ts in enumerate(live_of) if ts]
        results = self.generator.generate([self._request(problems[i], "", len(ts), first, "t0") for i, ts in asked])
        for (i, ts), result in zip(asked, results, strict=True):
            usage[i] = usage[i] + result.usage
            for t, comp in zip(ts, result.completions, strict=True):
                t.text, t.tokens = comp.text, comp.completion_tokens
                t.state = self._after_chunk(t, comp, cap)
        step = 0
        while any(t.state == "live" for t in traces):
            step += 1
            live = [t for t in traces if t.state == "live"]
            # 2. Probe every live trace with the forced answer prefix.
            self._probe(problems, live, step, probe_usage)
            # 3. Continue the others by k tokens.
            go = [t for t in live if t.state == "live"]
            if not go:
                break
            results = self.generator.generate([
                self._request(problems[t.problem], t.text, 1, min(c.probe_every, cap - t.tokens), f"{t.index}|c{step}")
                for t in go])
            for t, result in zip(go, results, strict=True):
                usage[t.problem] = usage[t.problem] + result.usage
                comp = result.completions[0]
                t.text += comp.text
                t.tokens += comp.completion_tokens
                t.state = self._after_chunk(t, comp, cap)
        # 4. Vote.
        return [self._solution(p, [t for t in traces if t.problem == i], usage[i], probe_usage[i])
                for i, p in enumerate(problems)]

    def sample_worst_case_tokens(self) -> int:
        """A trace of ``max_tokens`` plus its probes: one of the bare prompt (``probe_at_start``)
        and one after every chunk of ``probe_every`` tokens but the last, ``probe_tokens`` each."""
        c, cap = self.config, self.sampling.max_tokens
        probes = -(-cap // c.probe_every) - 1 + (1 if c.probe_at_start else 0)
        return cap + max(probes, 0) * c.probe_tokens

    @staticmethod
    def _after_chunk(t: _Trace, comp: Any, cap: int) -> str:
        if comp.finish_reason != "length":
            return "ended"
        return "cap" if t.tokens >= cap else "live"

    def _solution(self, problem: Any, traces: list[_Trace], usage: Usage, probes: Usage) -> Solution:
        samples = []
        for t in traces:
            if t.state == "stable" or (self.config.cap_answer_from_probe and t.state == "cap" and t.probes
                                       and t.probes[-1] is not None):
                answer = t.probes[-1]
                text = t.text + self.config.probe_prefix + t.probe_texts[-1]
            else:
                answer, text = self.extract(t.text), t.text
            samples.append(Sample(text, answer, t.tokens, None, "probe_stable" if t.state == "stable" else t.state))
        answer, share, votes, idx = self.vote(samples)
        events = {"probes": sum(len(t.probes) for t in traces), "probe_tokens": probes.completion_tokens,
                  "stopped_stable": sum(t.state == "stable" for t in traces)}
        tree = tuple({"id": f"{t.index}.{k}", "parent": f"{t.index}.{k - 1}" if k else None, "depth": k,
                      "text": reply, "answer": a, "score": None, "kept": t.state == "stable" and k == len(t.probes) - 1}
                     for t in traces for k, (reply, a) in enumerate(zip(t.probe_texts, t.probes, strict=True)))
        trace = Trace(self.name, tuple(samples), votes=votes, selected=idx, tree=tree,
                      events={k: v for k, v in events.items() if v})
        return Solution(problem.id, answer, share, usage + probes, trace)

    @classmethod
    def planned_requests(cls, n: int, prompt_tokens: int, gen_tokens: int, cached_tokens: int = 0) -> list[RequestShape]:
        """Cost hook (``tts cost``): n traces of ``gen_tokens`` (no early stop) and, at the start and
        every 64 tokens of each, a 20-token probe whose prompt (question and trace so far) is in the
        prefix cache (the defaults)."""
        d = cls.config_class.model_fields
        every, probe = d["probe_every"].default, d["probe_tokens"].default
        shapes = [RequestShape(prompt_tokens, cached_tokens, (gen_tokens,) * n)]
        for done in range(0 if d["probe_at_start"].default else every, gen_tokens, every):
            head = prompt_tokens + done
            shapes += [RequestShape(head, head, (probe,)) for _ in range(n)]
        return shapes
