"""CodeT: code generation with generated tests, chosen by dual execution agreement (Chen et al., 2022).

The rule (arXiv:2207.10397, Sec. 2): sample n programs and, separately, test cases from the same
model; run every program on every test; programs that pass exactly the same tests form a
*consensus set* S together with those tests, scored f(S) = |S_programs| x |S_tests|; the answer
is a program of the highest-scoring set. A set scores high when many programs agree and they
pass many tests, so neither a popular wrong program nor a single lucky one wins alone.

How tts does it:

1. ONE generate call per batch holds both kinds of request for every problem: ``n`` code samples
   (the problem's prompt) and ``tests_n`` test samples (:data:`TEST_PROMPT`, key ``<id>#tests``).
2. From each test sample the first ``tests_per_sample`` one-line ``assert`` statements that call
   the function are kept (the paper: the first 5 of each sample), duplicates removed.
3. Every distinct program runs every test in ONE batch of sandboxes; a test fails when it raises
   (an assertion or anything else); a program that does not finish passes none.
4. Consensus sets and their scores as above; ties go to the set whose first program came
   earliest. The confidence is the chosen set's share of the n programs.

Departures (docs/faithfulness.md): the paper prompts a completion model with the function's
signature, docstring and ``assert``; a chat model is asked for assert statements in words
(:data:`TEST_PROMPT`); with no test extracted for a problem it falls back to the syntax-tree
vote (noted in the trace), where the paper always has tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from tts.backends.base import GenerationRequest, GenerationResult
from tts.config import ExecutionStrategyConfig
from tts.execution.behaviour import PROBE_LIMITS
from tts.execution.programs import assert_tests, read_tests, tests_program
from tts.execution.sandbox import Program, run_many
from tts.search.base import (
    Strategy,
    StrategyInputError,
    prefix_usage,
    to_sample,
    with_tool_calls,
)
from tts.search.sampling.execution_vote import (
    TEST_PROMPT,
    ExecutionVote,
    _coding,
)
from tts.types import Budget, Solution, Trace, Usage

class CodeTConfig(ExecutionStrategyConfig):
    """Sample n programs and tests_n sets of tests; answer from the consensus set with the most
    programs x tests passed (CodeT's dual execution agreement)."""

    kind: Literal["codet"] = "codet"  # type: ignore[assignment]
    tests_n: int = Field(8, ge=1, le=1024)
    """Test-generation samples per problem."""
    tests_per_sample: int = Field(5, ge=1, le=100)
    """Assert statements kept from each test sample (the paper: the first 5)."""


def consensus(passed: Sequence[tuple[bool, ...] | None]) -> tuple[int | None, float, dict[str, float]]:
    """CodeT's choice among programs given which tests each passed (None: no program / did not run).

    Returns:
        (index of the first program of the best consensus set or None, its score |S_x| x |S_y|,
        the score of every set keyed by its passed tests).
    """
    sets: dict[tuple[bool, ...], list[int]] = {}
    for i, p in enumerate(passed):
        if p is not None:
            sets.setdefault(p, []).append(i)
    if not sets:
        return None, 0.0, {}
    scores = {key: len(members) * sum(key) for key, members in sets.items()}
    best = max(sets, key=lambda k: (scores[k], -sets[k][0]))
    return sets[best][0], float(scores[best]), {"".join("1" if t else "0" for t in k): float(v) for k, v in scores.items()}


class CodeT(ExecutionVote):
    """CodeT (module docstring): dual execution agreement between sampled programs and sampled tests."""

    name = "codet"
    config_class: ClassVar[type] = CodeTConfig
    draw_group = "codet"

    def codet_test_request(self, problem: Any) -> GenerationRequest:
        """The request for ``tests_n`` test samples of one problem."""
        return self.test_request(problem, self.config.tests_n, self.config.tests_per_sample)

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        if budgets is not None and any(b is not None for b in budgets):
            raise StrategyInputError("codet does not take per-problem budgets yet; run it without an allocation")
        return self.solve_together([self], problems)[0]

    @classmethod
    def solve_together(cls, strategies: Sequence[Strategy], problems: Sequence[Any]) -> list[list[Solution]]:
        """ONE generate call (programs and tests of every problem), ONE batch of sandboxes; each
        config chooses among its first n programs with all of the draw's tests."""
        first = strategies[0]
        if not all(isinstance(s, CodeT) and first.shares_draw_with(s) and s.config.tests_n == first.config.tests_n
                   and s.config.tests_per_sample == first.config.tests_per_sample for s in strategies):
            return Strategy.solve_together(strategies, problems)
        voters: list[CodeT] = list(strategies)  # type: ignore[arg-type]
        lead = voters[0]
        n_max = max(s.config.n for s in voters)
        code_requests = [lead.request(p, n=n_max) for p in problems]
        test_requests = [lead.codet_test_request(p) for p in problems]
        results = with_tool_calls([*code_requests, *test_requests], lead.generator.generate([*code_requests, *test_requests]))
        code_results, test_results = results[: len(problems)], results[len(problems):]
        passed, tests, seconds = lead.run_tests(problems, code_results, test_results)
        return [[s.choose_codet(p, r, t, pa, sec, tr.usage, s.config.n)
                 for p, r, t, pa, sec, tr in zip(problems, code_results, tests, passed, seconds, test_results, strict=True)]
                for s in voters]

    def run_tests(self, problems: Sequence[Any], code_results: Sequence[GenerationResult],
                  test_results: Sequence[GenerationResult]) -> tuple[list[list[tuple[bool, ...] | None]], list[list[str]], list[dict[str, float]]]:
        """Per problem: which tests each sample's program passed, the tests, and per program its seconds."""
        jobs: dict[tuple[int, str], str] = {}
        tests_of: list[list[str]] = []
        answers: list[list[str | None]] = []
        for i, (p, cr, tr) in enumerate(zip(problems, code_results, test_results, strict=True)):
            prompt, entry = _coding(p, self.name)
            tests: list[str] = []
            for c in tr.completions:  # duplicates removed, within a sample too (a repeat would count twice)
                for t in assert_tests(c.text, entry, self.config.tests_per_sample):
                    if t not in tests:
                        tests.append(t)
            tests_of.append(tests)
            answers.append([to_sample(c, self.extract).answer for c in cr.completions])
            for a in answers[-1]:
                if a is not None and tests:
                    jobs.setdefault((i, a), tests_program(prompt, a, entry, tests))
        runs = dict(zip(jobs, run_many([Program(s) for s in jobs.values()], PROBE_LIMITS, workers=self.config.workers,
                                       unsafe_no_sandbox=self.config.unsafe_no_sandbox), strict=True))
        passed = [[None if a is None or (i, a) not in runs else (read_tests(runs[(i, a)].stdout, len(tests_of[i]))
                                                                 or (False,) * len(tests_of[i])) for a in row]
                  for i, row in enumerate(answers)]
        seconds = [{a: runs[(i, a)].wall_seconds for a in row if a is not None and (i, a) in runs}
                   for i, row in enumerate(answers)]
        return passed, tests_of, seconds

    def choose_codet(self, problem: Any, result: GenerationResult, tests: list[str],
                     passed: Sequence[tuple[bool, ...] | None], seconds: dict[str, float], test_usage: Usage,
                     n: int) -> Solution:
        """The answer among the first ``n`` programs by dual execution agreement (module docstring)."""
        samples = [to_sample(c, self.extract) for c in result.completions[:n]]
        usage = prefix_usage(result.usage, samples, len(result.completions)) + test_usage
        mine = {s.answer for s in samples if s.answer is not None}
        notes: dict[str, Any] = {"tests": len(tests), "executions": len(mine & set(seconds)),
                                 "execution_seconds": round(sum(v for a, v in seconds.items() if a in mine), 3)}
        if not tests:
            notes["by"] = "syntax"
            answer, share, votes, idx = self.vote(samples)
        else:
            notes["by"] = "dual agreement"
            idx, score, votes = consensus(passed[:n])
            answer = samples[idx].answer if idx is not None else None
            members = sum(p == passed[idx] for p in passed[:n]) if idx is not None else 0
            share, notes["score"] = members / max(len(samples), 1), score
        trace = Trace(self.name, tuple(samples), votes=votes, selected=idx, notes=notes)
        return Solution(problem.id, answer, share, usage, trace)


__all__ = ["TEST_PROMPT", "CodeT", "CodeTConfig", "consensus"]
