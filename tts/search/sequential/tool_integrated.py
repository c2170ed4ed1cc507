"""Tool-integrated reasoning: the model runs code while it reasons and reads the output back.

``tir`` samples n solutions that interleave prose and programs. Whenever a sample closes a
``python`` block (or writes ToRA's ```` ```output ```` marker itself), generation stops there,
the block runs in the sandbox, and its output (or the error's last line) is appended to the
sample as an ```` ```output ```` block; the model then continues from its own text, now with the
result in view. After ``max_calls`` executions a sample continues without being stopped again.
The answer is read from the finished text (``\\boxed{}``, "the answer is", ...) and the n
samples vote, as self-consistency does.

This is ToRA's tool-integrated reasoning loop (Gou et al., 2023, arXiv:2309.17452, Sec. 2.2:
rationale, program, output, rationale, ... until the answer; inference stops at the program's
end, executes it and appends the output), the format Qwen2.5-Math's TIR mode uses. Where tts
decides what the paper leaves to its code (docs/faithfulness.md):

- each block runs on its own (a fresh interpreter), not in a session that keeps the variables of
  earlier blocks; a program that needs an earlier one's names fails with a ``NameError`` the model
  then sees;
- the prompt is zero-shot (:data:`TIR_PROMPT`), not ToRA's few-shot trajectories (ToRA's models
  are fine-tuned on the format; an instruction is what an untuned chat model gets);
- ``max_calls`` defaults to 4 (ToRA's evaluation code allows a few calls per problem); the output
  shown is cut at ``output_chars`` characters.

Batching: round 1 is one request per problem with its n samples; every later round is ONE engine
call holding every live sample of every problem (each continued from its own text), and the
programs of a round run in one parallel batch of sandboxes. Every round's tokens count: the
re-sent text of a continued sample is prompt (mostly served by the prefix cache), what it writes
is generated. Execution seconds are in the trace's notes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from tts.backends.base import Completion, GenerationRequest, GenerationResult, derive_seed
from tts.config import ExecutionStrategyConfig
from tts.execution.sandbox import Execution, Limits, Program, run_many
from tts.prompts import TIR_PROMPT, chat_prompt
from tts.search.base import SamplingStrategy, Strategy, StrategyInputError, prefix_usage
from tts.types import Budget, Sample, Solution, Trace, Usage

CLOSE_FENCE = "\n```\n"
"""A stop string: the end of a fenced block (an opening fence carries a language tag or text)."""
OUTPUT_MARK = "```output"
"""ToRA's output marker: a model trained on the format writes it when it expects a result."""
_OPEN_PY = re.compile(r"```(?:python|py)[^\n]*\n")


class ToolIntegratedConfig(ExecutionStrategyConfig):
    """Sample n solutions that run code while they reason (ToRA's tool-integrated reasoning), then vote."""

    kind: Literal["tir"] = "tir"
    max_calls: int = Field(4, ge=1, le=32)
    """Programs one sample may run; after that it continues without being stopped."""
    output_chars: int = Field(800, ge=16, le=20000)
    """Characters of a program's output shown back to the model."""
    timeout: float = Field(5.0, gt=0, le=120)
    """Wall-clock seconds one program may run (its CPU time is capped at the same)."""


def pending_program(text: str) -> str | None:
    """The program a sample stopped to have run: the body of its last ``python`` block when
    nothing but whitespace (or ToRA's output marker) follows it, the block open (the stop string
    ate its closing fence) or closed; None when the sample went on after its last block (that
    block's output is already there) or wrote no block.

    Example:
        >>> pending_program("We compute.\n```python\nprint(6 * 7)")
        'print(6 * 7)'
    """
    t = text.rstrip()
    if t.endswith(OUTPUT_MARK):
        t = t[: -len(OUTPUT_MARK)].rstrip()
    opens = list(_OPEN_PY.finditer(t))
    if not opens:
        return None
    body, fence, after = t[opens[-1].end():].partition("```")
    if fence and after.strip():
        return None
    return body.strip("\n") or None


def shown_output(execution: Execution, chars: int) -> str:
    """What the model is shown of a run: its output (cut at ``chars``), or the error's last line."""
    if execution.status == "ok":
        out = execution.stdout.strip("\n")
        return (out[:chars] + "\n...") if len(out) > chars else out
    return execution.error or execution.status


@dataclasses.dataclass
class _Sample:
    """One sample's text so far, its tokens and programs run."""

    text: str = ""
    completion_tokens: int = 0
    calls: int = 0
    done: bool = False
    finish_reason: str | None = None
    seconds: float = 0.0
    usage: Usage | None = None
    """Tokens of the rounds after the first (the first is shared by the problem's samples)."""


class ToolIntegratedReasoning(SamplingStrategy):
    """Tool-integrated reasoning (ToRA): each sample's code blocks run as it writes them, and it reads
    their output before going on; the n samples' answers are voted."""

    name = "tir"
    config_class: ClassVar[type] = ToolIntegratedConfig
    pool_rule = "vote"
    draw_group = "tir"
    takes_tools = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.render_tir = chat_prompt(TIR_PROMPT)

    def request(self, problem: Any, n: int | None = None, drawn: int = 0) -> GenerationRequest:
        """Round 1: the TIR prompt, stopped at the end of a code block."""
        base = super().request(problem, n=n, drawn=drawn)
        return dataclasses.replace(base, messages=self.render_tir(problem), tools=None, tool_choice=None,
                                   stop=(CLOSE_FENCE, OUTPUT_MARK))

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        ns = self.samples_for(problems, budgets)
        return self._run(problems, ns, [ns])[0]

    @classmethod
    def solve_together(cls, strategies: Sequence[Strategy], problems: Sequence[Any]) -> list[list[Solution]]:
        """One run at max(n) samples per problem; each config votes among its first n. Configs that
        differ in more than n (max_calls, timeout, output_chars) each run their own loop: a plain
        shared draw (SamplingStrategy's) would never run their programs."""
        first = strategies[0]
        if not all(isinstance(s, ToolIntegratedReasoning) and first.shares_draw_with(s)
                   and s.config.model_copy(update={"n": 1}) == first.config.model_copy(update={"n": 1})
                   for s in strategies):
            return Strategy.solve_together(strategies, problems)
        n_max = max(s.config.n for s in strategies)
        lead: ToolIntegratedReasoning = first  # type: ignore[assignment]
        return lead._run(problems, [n_max] * len(problems), [[s.config.n] * len(problems) for s in strategies],
                         voters=list(strategies))

    def _run(self, problems: Sequence[Any], ns: Sequence[int], per_voter_ns: Sequence[Sequence[int]],
             voters: Sequence[Strategy] | None = None) -> list[list[Solution]]:
        """Round 1 for every problem, then rounds of (run the pending programs, continue every
        live sample) until none is live; each voter votes among its first n samples."""
        first = [self.request(p, n=n) for p, n in zip(problems, ns, strict=True)]
        opening = self.generator.generate(first)
        samples = [[self._absorb(_Sample(), c) for c in r.completions] for r in opening]
        for round_ in range(1, self.config.max_calls + 1):
            for row in samples:  # a sample without tokens left ends here, its program not run
                for s in row:
                    if not s.done and s.completion_tokens >= self.sampling.max_tokens:
                        s.done, s.finish_reason = True, "length"
            live = [(i, j) for i, row in enumerate(samples) for j, s in enumerate(row) if not s.done]
            if not live:
                break
            runs = self._execute([pending_program(samples[i][j].text) or "" for i, j in live])
            requests = []
            for (i, j), ran in zip(live, runs, strict=True):
                s = samples[i][j]
                s.calls += 1
                s.seconds += ran.wall_seconds
                s.text = s.text.rstrip().removesuffix(OUTPUT_MARK).rstrip()
                s.text += ("\n" if s.text.endswith("```") else "\n```\n") + \
                    f"```output\n{shown_output(ran, self.config.output_chars)}\n```\n"
                left = self.sampling.max_tokens - s.completion_tokens
                last = s.calls >= self.config.max_calls
                requests.append(((i, j), dataclasses.replace(
                    first[i], n=1, continuation=s.text, max_tokens=left, stop=() if last else first[i].stop,
                    seed=derive_seed(self.seed, problems[i].id, 1000 * round_ + j))))
            for ((i, j), _), res in zip(requests, self.generator.generate([r for _, r in requests]), strict=True):
                s = samples[i][j]
                s.usage = res.usage if s.usage is None else s.usage + res.usage
                self._absorb(s, res.completions[0], last=s.calls >= self.config.max_calls)
        return [[v._choose(p.id, opening[i], row, n)  # type: ignore[attr-defined]
                 for i, (p, row, n) in enumerate(zip(problems, samples, nv, strict=True))]
                for v, nv in zip(voters or [self], per_voter_ns, strict=True)]

    def _absorb(self, s: _Sample, c: Completion, last: bool = False) -> _Sample:
        """Add a completion to a sample; it is done unless it stopped to run a program."""
        s.text += c.text
        s.completion_tokens += c.completion_tokens
        s.finish_reason = c.finish_reason
        s.done = last or c.finish_reason == "length" or pending_program(s.text) is None
        return s

    def _execute(self, codes: Sequence[str]) -> list[Execution]:
        """Every pending program of a round in one parallel batch of sandboxes."""
        limits = Limits(wall_seconds=self.config.timeout, cpu_seconds=max(1, int(self.config.timeout)))
        return run_many([Program(c) for c in codes], limits, workers=self.config.workers,
                        unsafe_no_sandbox=self.config.unsafe_no_sandbox)

    def _choose(self, problem_id: str, opening: GenerationResult, row: Sequence[_Sample], n: int) -> Solution:
        """The vote among the first ``n`` samples; usage: their share of round 1 (priced as if
        drawn alone) and every later round of theirs."""
        mine = row[:n]
        samples = [Sample(text=s.text, answer=self.extract(s.text), completion_tokens=s.completion_tokens,
                          finish_reason=s.finish_reason) for s in mine]
        firsts = [Sample(text=c.text, answer=None, completion_tokens=c.completion_tokens) for c in opening.completions[:n]]
        usage = prefix_usage(opening.usage, firsts, len(opening.completions))
        for s in mine:
            if s.usage is not None:
                usage = usage + s.usage
        notes = {"executions": sum(s.calls for s in mine), "execution_seconds": round(sum(s.seconds for s in mine), 3)}
        answer, conf, votes, idx = self.vote(samples)
        return Solution(problem_id, answer, conf, usage, Trace(self.name, tuple(samples), votes=votes, selected=idx,
                                                               notes=notes))

    def aggregate(self, problem_id: str, samples: Sequence[Sample], usage: Usage,
                  scores: Sequence[float] | None = None) -> Solution:
        """The vote over finished samples (a replayed pool)."""
        answer, conf, votes, idx = self.vote(samples)
        return Solution(problem_id, answer, conf, usage, Trace(self.name, tuple(samples), votes=votes, selected=idx))


__all__ = ["ToolIntegratedConfig", "ToolIntegratedReasoning", "pending_program", "shown_output"]
