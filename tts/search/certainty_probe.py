"""Certainty probing (Dynasor-CoT): stop a trace once its probed answer stops changing.

Fu et al. 2024, "Efficiently Serving LLM Reasoning Programs with Certaindex" (Dynasor). A model
often knows its answer long before it stops writing. Every ``probe_every`` tokens the partial
trace is *probed*: a short greedy continuation of the trace with a forced answer prefix
(``probe_prefix``, e.g. "... Final answer: \\boxed{") reads the answer the model would give now.
Once ``stable`` probes in a row give the same answer, the trace stops and that answer is its
answer; the tokens it would have written afterwards are saved. A probe whose continuation hedges
(``hedges``: "wait", "hmm", ...) counts as no answer, as in the paper.

1. Round 0 samples the first ``probe_every`` tokens of n traces per problem (one call).
2. Probe every live trace (one call for all traces of all problems, greedy, ``probe_tokens``).
3. Stop traces whose last ``stable`` probes agree; continue the others by ``probe_every`` tokens
   (one call); a trace that ends on its own keeps the answer it wrote. Repeat 2-3 until every trace
   has stopped, ended, or reached ``max_tokens`` (then its last probe, if any, is its answer).
4. The answer is the majority vote over the n traces.

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
from tts.search.base import Strategy, StrategyInputError, vote
from tts.types import Budget, RequestShape, Sample, Solution, Trace, Usage


class CertaintyProbeConfig(StrategyConfigBase):
    """Probe each partial trace for its answer every k tokens; stop it once the answer is stable (Dynasor-CoT)."""

    kind: Literal["certainty_probe"] = "certainty_probe"
    n: int = Field(1, ge=1, le=4096)
    """Traces per problem, each probed and stopped on its own; the answer is their majority vote."""
    probe_every: int = Field(32, ge=1)
    """k: tokens generated between two probes."""
    stable: int = Field(3, ge=1, le=64)
    """m: consecutive probes that must give the same answer before a trace stops."""
    probe_prefix: str = Field("\n\nFinal answer: $\\boxed{", min_length=1)
    """Forced after the partial trace to read its answer (an open ``\\boxed{`` is closed for it)."""
    probe_tokens: int = Field(16, ge=1)
    """Most tokens of one probe's continuation."""
    hedges: tuple[str, ...] = ("wait", "hmm", "but ", "however", "double-check", "recheck", "let me")
    """A probe whose continuation contains one of these (case-insensitive) counts as no answer."""


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


class CertaintyProbe(Strategy):
    """Dynasor-CoT certainty probing; see the module docstring."""

    name = "certainty_probe"
    config_class: ClassVar[type[StrategyConfigBase]] = CertaintyProbeConfig
    pool_rule = None

    def _request(self, problem: Any, continuation: str, n: int, max_tokens: int, key: str,
                 temperature: float | None = None) -> GenerationRequest:
        return GenerationRequest(
            messages=self.prompt(problem), n=n, max_tokens=max_tokens, continuation=continuation,
            temperature=self.sampling.temperature if temperature is None else temperature, top_p=self.sampling.top_p,
            seed=derive_seed(self.seed, f"{problem.id}|{self.name}|{key}", 0), key=problem.id)

    def _probe_answer(self, reply: str) -> str | None:
        if any(h in reply.lower() for h in self.config.hedges):
            return None
        return self.extract(_close_braces(self.config.probe_prefix + reply))

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        if budgets is not None and len(budgets) != len(problems):
            raise StrategyInputError(f"got {len(budgets)} budgets for {len(problems)} problems; give one per problem")
        c, cap = self.config, self.sampling.max_tokens
        ns = [self.samples_within(b) for b in (budgets or [None] * len(problems))]
        usage = [Usage() for _ in problems]
        probe_usage = [Usage() for _ in problems]
        # 1. The first k tokens of n traces per problem.
        first = min(c.probe_every, cap)
        results = self.generator.generate([self._request(p, "", n, first, "t0") for p, n in zip(problems, ns, strict=True)])
        traces: list[_Trace] = []
        for i, result in enumerate(results):
            usage[i] = usage[i] + result.usage
            for j, comp in enumerate(result.completions):
                t = _Trace(i, j, comp.text, comp.completion_tokens)
                t.state = self._after_chunk(t, comp, cap)
                traces.append(t)
        step = 0
        while any(t.state == "live" for t in traces):
            step += 1
            live = [t for t in traces if t.state == "live"]
            # 2. Probe every live trace: greedy, forced answer prefix.
            results = self.generator.generate([
                self._request(problems[t.problem], t.text + c.probe_prefix, 1, c.probe_tokens,
                              f"{t.index}|probe{step}", temperature=0.0) for t in live])
            for t, result in zip(live, results, strict=True):
                probe_usage[t.problem] = probe_usage[t.problem] + result.usage
                reply = result.completions[0].text
                t.probes.append(self._probe_answer(reply))
                t.probe_texts.append(reply)
                last = t.probes[-c.stable:]
                keys = answer_keys(last)
                if len(last) == c.stable and last[0] is not None and len(set(keys)) == 1:
                    t.state = "stable"
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

    @staticmethod
    def _after_chunk(t: _Trace, comp: Any, cap: int) -> str:
        if comp.finish_reason != "length":
            return "ended"
        return "cap" if t.tokens >= cap else "live"

    def _solution(self, problem: Any, traces: list[_Trace], usage: Usage, probes: Usage) -> Solution:
        samples = []
        for t in traces:
            if t.state == "stable" or (t.state == "cap" and t.probes and t.probes[-1] is not None):
                answer = t.probes[-1]
                text = t.text + self.config.probe_prefix + t.probe_texts[-1]
            else:
                answer, text = self.extract(t.text), t.text
            samples.append(Sample(text, answer, t.tokens, None, "probe_stable" if t.state == "stable" else t.state))
        answer, share, votes, idx = vote(samples)
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
        """Cost hook (``tts cost``): n traces of ``gen_tokens`` (no early stop) and, every 32 tokens of
        each, a 16-token probe whose prompt (question and trace so far) is in the prefix cache."""
        every = cls.config_class.model_fields["probe_every"].default
        probe = cls.config_class.model_fields["probe_tokens"].default
        shapes = [RequestShape(prompt_tokens, cached_tokens, (gen_tokens,) * n)]
        for done in range(every, gen_tokens, every):
            head = prompt_tokens + done
            shapes += [RequestShape(head, head, (probe,)) for _ in range(n)]
        return shapes
