"""Program-aided answers: the model writes a program, the sandbox runs it, its output is the answer.

``program_vote`` samples n programs for a problem (a math question, a chain of operations), runs
each one in the sandbox (:mod:`tts.execution.sandbox`) and reads the answer from what it prints,
then votes over those answers as self-consistency does (values compared by
:mod:`tts.answers`, ``0.5`` and ``1/2`` one answer). This is Program of Thoughts with
self-consistency (Chen et al., 2022, arXiv:2211.12588, Sec. 2: "the generated program is executed
by a Python interpreter to obtain the answer"; PoT+SC samples programs and takes the majority of
their executed answers) and PAL's program-as-reasoning (Gao et al., 2022, arXiv:2211.10435: the
interpreter, not the model, does the arithmetic).

Where tts decides what the papers leave open (docs/faithfulness.md):

- the prompt is zero-shot (:data:`tts.prompts.PROGRAM_PROMPT`: write a program in a ``python``
  block that prints only the answer), not the papers' few-shot programs; PoT reports zero-shot
  PoT as well. The benchmark's own prompt (its few-shot prose) is not used: it asks for prose.
- the answer is the last non-empty line the program prints, read as one value: a number
  (``1e-05`` as ``0.00001``), a fraction, a formula the math extraction reads as a whole
  (``\\frac{1}{2}``, ``(1, 2)``), optionally after ``The answer is``; never a number found inside
  other text (a dict, a log line: ``{'LANG': 'C.UTF-8'}`` is no answer, not ``-8``). PAL calls
  ``solution()`` and PoT reads the variable ``ans``; printing is what a chat model writes unprompted.
- a program that fails (an exception, a time-out, no output) votes for nothing, as a reply without
  an answer does in self-consistency; its error is counted in the trace's notes.

Every program of every problem runs in one parallel batch of sandboxes (``workers``); the same
program text is run once per problem. The trace's notes hold ``executions``, ``execution_seconds``
and ``failed`` (programs that printed no answer); the run summary sums execution seconds in a
column of its own (they are not engine time, so not in ``Usage``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, ClassVar, Literal

from pydantic import Field

from tts.answers.code import extract_script
from tts.answers.extraction import extract_answer
from tts.backends.base import GenerationRequest, GenerationResult
from tts.config import ExecutionStrategyConfig, StopSetting
from tts.execution.sandbox import Execution, Limits, Program, run_many
from tts.prompts import PROGRAM_PROMPT, chat_prompt
from tts.search.base import (
    SamplingStrategy,
    Strategy,
    StrategyInputError,
    completion_calls,
    prefix_usage,
    stop_of,
    with_stop_record,
    with_tool_calls,
)
from tts.search.stopping import VoteStop, draw_until_settled
from tts.types import Budget, Sample, Solution, Trace, Usage


class ProgramVoteConfig(ExecutionStrategyConfig):
    """Sample n programs, run each in the sandbox, vote over what they print (Program of Thoughts
    with self-consistency; PAL)."""

    kind: Literal["program_vote"] = "program_vote"
    timeout: float = Field(5.0, gt=0, le=120)
    """Wall-clock seconds one program may run (its CPU time is capped at the same)."""
    stop: StopSetting = None
    """Stop sampling programs once the vote over their printed answers is settled
    (:class:`tts.config.StopConfig`; each program runs as it finishes); None draws all ``n``."""


_ANSWER_IS = re.compile(r"^(?:the\s+)?(?:final\s+)?answer\s*(?:is\b|:)\s*", re.IGNORECASE)
_SCIENTIFIC = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+")  # how Python prints 1e-05 and 1.5e+20
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:/\d+)?")  # 42, -0.5, 1/2: kept as printed
_SPACED_DIGITS = re.compile(r"\d\s+\d")  # print(3, 4): two values, not one
_WORD = re.compile(r"[A-Za-z]{2,}")  # a word (LaTeX commands removed first): prose or a Python repr
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def read_printed(line: str) -> str | None:
    """One printed line read as a value, or None when it is not one.

    The whole line must be the value: a number, a fraction, or a formula the math extraction reads
    with every digit of the line in its reading (``0.5``, ``1/2``, ``\\frac{1}{2}``, ``(1, 2)``,
    ``$42$``, ``\\boxed{42}``), optionally after "The answer is". A line with words or quotes (a
    dict, a log line, ``42 apples``), two numbers (``3 4``) or a reading that drops digits is not a value:
    a number found inside it would be a guess (``{'LANG': 'C.UTF-8'}`` is not ``-8``).
    """
    line = _ANSWER_IS.sub("", line.strip()).rstrip(".").strip()
    if _NUMBER.fullmatch(line):
        return line
    if _SCIENTIFIC.fullmatch(line):  # math-verify would read "1e-05" as e - 5
        value = Decimal(line)
        return format(value, "f") if abs(value.adjusted()) <= 50 else None
    if (not line or "'" in line or '"' in line or _SPACED_DIGITS.search(line)
            or _WORD.search(_LATEX_COMMAND.sub(" ", line))):
        return None
    # Read as one formula (bare LaTeX "\\dfrac{1}{2}" is read as 2 otherwise), unless it says how.
    formula = line if "$" in line or "\\boxed" in line or "\\(" in line else f"${line}$"
    answer = extract_answer(formula)
    return answer if answer is not None and _digits(answer) == _digits(line) else None


def printed_answer(execution: Execution) -> str | None:
    """The answer a program printed: its last non-empty stdout line read as a value
    (:func:`read_printed`); None when it failed or its last line is not a value."""
    if execution.status != "ok":
        return None
    lines = [line.strip() for line in execution.stdout.splitlines() if line.strip()]
    return read_printed(lines[-1]) if lines else None


class ProgramVote(SamplingStrategy):
    """Program of Thoughts with self-consistency: each sample is a program run in the sandbox, what it
    prints is its answer, and the n answers are voted."""

    name = "program_vote"
    config_class: ClassVar[type] = ProgramVoteConfig
    pool_rule = "vote"
    draw_group = "program"
    takes_tools = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.render_program = chat_prompt(PROGRAM_PROMPT)

    def request(self, problem: Any, n: int | None = None, drawn: int = 0) -> GenerationRequest:
        """The sampling request with the program prompt in place of the benchmark's."""
        base = super().request(problem, n=n, drawn=drawn)
        return dataclasses.replace(base, messages=self.render_program(problem), tools=None, tool_choice=None)

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        ns = self.samples_for(problems, budgets)
        if stop_of(self) is not None:
            return self._solve_until_settled(problems, ns)
        requests = [self.request(p, n=n) for p, n in zip(problems, ns, strict=True)]
        results = with_tool_calls(requests, self.generator.generate(requests))
        runs = self.execute(results)
        return [self.choose(p.id, r, ran, n) for p, r, ran, n in zip(problems, results, runs, ns, strict=True)]

    @classmethod
    def solve_together(cls, strategies: Sequence[Strategy], problems: Sequence[Any]) -> list[list[Solution]]:
        """ONE generator call with max(n) programs per problem and ONE batch of executions; each
        config votes among its first n."""
        first = strategies[0]
        if not all(isinstance(s, ProgramVote) and first.shares_draw_with(s) for s in strategies):
            return super().solve_together(strategies, problems)
        voters: list[ProgramVote] = list(strategies)  # type: ignore[arg-type]
        n_max = max(s.config.n for s in voters)
        requests = [voters[0].request(p, n=n_max) for p in problems]
        results = with_tool_calls(requests, voters[0].generator.generate(requests))
        runs = voters[0].execute(results)
        return [[s.choose(p.id, r, ran, s.config.n) for p, r, ran in zip(problems, results, runs, strict=True)]
                for s in voters]

    def _solve_until_settled(self, problems: Sequence[Any], ns: Sequence[int]) -> list[Solution]:
        """Programs drawn in waves until the vote over what they print is settled (``config.stop``);
        each new program runs when the rule judges (all of a judgement's new programs in one batch),
        and a program repeated within a problem runs once."""
        rules = [VoteStop(self.config.stop, n) for n in ns]
        ran: list[dict[str, Execution]] = [{} for _ in problems]
        limits = Limits(wall_seconds=self.config.timeout, cpu_seconds=max(1, int(self.config.timeout)))

        def runs_of(i: int, completions: Sequence[Any]) -> list[Execution | None]:
            codes = [extract_script(c.text) for c in completions]
            new = [c for c in dict.fromkeys(codes) if c is not None and c not in ran[i]]
            if new:
                done = run_many([Program(c) for c in new], limits, workers=self.config.workers,
                                unsafe_no_sandbox=self.config.unsafe_no_sandbox)
                ran[i].update(zip(new, done, strict=True))
            return [ran[i][c] if c is not None else None for c in codes]

        def judge(i: int, completions: Sequence[Any]) -> str | None:
            answers = [printed_answer(x) if x is not None else None for x in runs_of(i, completions)]
            return rules[i].check(self.sample_keys([Sample(c.text, a) for c, a in zip(completions, answers,
                                                                                       strict=True)]))

        draws = draw_until_settled(self.generator, ns, self.config.stop,
                                   lambda i, k, drawn: self.request(problems[i], n=k, drawn=drawn), judge,
                                   prepare=completion_calls)
        return [with_stop_record(self.choose(p.id, d.result, runs_of(i, d.result.completions),
                                             len(d.result.completions)), d.record)
                for i, (p, d) in enumerate(zip(problems, draws, strict=True))]

    def execute(self, results: Sequence[GenerationResult]) -> list[list[Execution | None]]:
        """Every sample's run, all problems' programs in one parallel batch (a program repeated
        within a problem runs once); None for a sample without code."""
        jobs: dict[tuple[int, str], int] = {}
        programs: list[Program] = []
        scripts: list[list[str | None]] = []
        for i, r in enumerate(results):
            scripts.append([extract_script(c.text) for c in r.completions])
            for code in scripts[-1]:
                if code is not None and (i, code) not in jobs:
                    jobs[(i, code)] = len(programs)
                    programs.append(Program(code))
        limits = Limits(wall_seconds=self.config.timeout, cpu_seconds=max(1, int(self.config.timeout)))
        ran = run_many(programs, limits, workers=self.config.workers, unsafe_no_sandbox=self.config.unsafe_no_sandbox)
        return [[ran[jobs[(i, code)]] if code is not None else None for code in row] for i, row in enumerate(scripts)]

    def choose(self, problem_id: str, result: GenerationResult, runs: Sequence[Execution | None], n: int) -> Solution:
        """The vote among the first ``n`` samples' printed answers, with execution notes."""
        completions = result.completions[:n]
        samples = [Sample(text=c.text, answer=printed_answer(x) if x is not None else None,
                          completion_tokens=c.completion_tokens, mean_logprob=c.mean_logprob,
                          finish_reason=c.finish_reason)
                   for c, x in zip(completions, runs[:n], strict=True)]
        usage = prefix_usage(result.usage, samples, len(result.completions))
        distinct = {c.text: x for c, x in zip(completions, runs[:n], strict=True) if x is not None}
        notes: dict[str, Any] = {
            "executions": len(distinct),
            "execution_seconds": round(sum(x.wall_seconds for x in distinct.values()), 3),
            "failed": sum(s.answer is None for s in samples),
        }
        answer, share, votes, idx = self.vote(samples)
        return Solution(problem_id, answer, share, usage, Trace(self.name, tuple(samples), votes=votes, selected=idx,
                                                                 notes=notes))

    def aggregate(self, problem_id: str, samples: Sequence[Sample], usage: Usage,
                  scores: Sequence[float] | None = None) -> Solution:
        """The vote over samples whose answers are already their programs' printed answers (a
        replayed pool)."""
        answer, share, votes, idx = self.vote(samples)
        return Solution(problem_id, answer, share, usage, Trace(self.name, tuple(samples), votes=votes, selected=idx))


__all__ = ["ProgramVote", "ProgramVoteConfig", "printed_answer", "read_printed"]
