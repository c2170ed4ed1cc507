"""Execution votes replayed on the draw of a ``tts eval --benchmark humaneval`` run.

The run's largest self-consistency draw (its samples' texts, per problem) is served again by a
generator that replays those texts, so that ``exec_vote`` and ``public_tests`` (the library's own
strategy code) choose among exactly the samples the run's other strategies chose among; the
choices are graded by the check programs in the sandbox. Nothing here sees a check program
before grading: the votes read only the prompt's docstring and the samples.

    PYTHONPATH=. .venv/bin/python scripts/humaneval_exec_replay.py runs/<the run dir> [--n 1 4 8]

Prints one markdown table: every config of the run and the replayed votes, accuracy with its 95%
Wilson interval, generated tokens and execution seconds per problem.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tts.answers.code import CODE
from tts.backends.base import Completion
from tts.backends.function import FunctionGenerator
from tts.benchmarks.humaneval import HumanEvalBenchmark
from tts.benchmarks.humaneval_grading import CodeGrader
from tts.eval.report import wilson_interval
from tts.prompts import CODE_PROMPT, chat_prompt
from tts.search.sampling.execution_vote import (
    ExecutionVote,
    ExecutionVoteConfig,
    PublicTestsConfig,
    PublicTestsVote,
)


def _draws(rows: list[dict]) -> dict[str, list[dict]]:
    """Per problem, the samples of the largest self-consistency config (the whole draw)."""
    best: dict[str, list[dict]] = {}
    for r in rows:
        if r["strategy"]["kind"] == "self_consistency" and len(r["trace"]["samples"]) > len(best.get(r["problem_id"], [])):
            best[r["problem_id"]] = r["trace"]["samples"]
    return best


def _line(name: str, n: int, correct: list[bool], tokens: float, exec_s: float) -> str:
    lo, hi = wilson_interval(sum(correct), len(correct))
    acc = sum(correct) / len(correct)
    return f"| {name} | {n} | {acc:.3f} [{lo:.2f}-{hi:.2f}] | {tokens:.0f} | {exec_s:.2f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--n", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args()
    rows = [json.loads(x) for x in (args.run / "results.jsonl").read_text().splitlines()]
    draws = _draws(rows)
    problems = [p for p in HumanEvalBenchmark().load() if p.id in draws]
    ns = [n for n in args.n if all(len(draws[p.id]) >= n for p in problems)]
    # 1. The run's own configs, as recorded.
    print("| rule | n | accuracy [95% Wilson] | generated tok/pb | exec s/pb |\n|---|---|---|---|---|")
    for label in sorted({r["config"] for r in rows}):
        mine = [r for r in rows if r["config"] == label and r["problem_id"] in draws]
        print(_line(label.split("@")[0], mine[0]["strategy"]["n"], [r["correct"] for r in mine],
                    sum(r["usage"]["completion_tokens"] for r in mine) / len(mine), 0.0))
    # 2. Per-sample accuracy (pass@1 estimated from all samples) and coverage (pass@n).
    for n in ns:
        per_sample = [s["outcome"] == "correct" for p in problems for s in draws[p.id][:n]]
        covered = [any(s["outcome"] == "correct" for s in draws[p.id][:n]) for p in problems]
        lo, hi = wilson_interval(sum(per_sample), len(per_sample))
        print(f"| per sample (pass@1 estimate, {len(per_sample)} samples) | {n} | {sum(per_sample) / len(per_sample):.3f} "
              f"[{lo:.2f}-{hi:.2f}] | | |")
        print(_line("pass@n (coverage)", n, covered, 0, 0.0))
    # 3. The execution votes on the same draw.
    texts = {p.id: [Completion(s["text"], s["completion_tokens"]) for s in draws[p.id]] for p in problems}
    gen = FunctionGenerator(lambda req: texts[req.key])
    render = chat_prompt(CODE_PROMPT)
    voters = [cls(cfg(n=n), gen, render, extract=CODE) for cls, cfg in ((ExecutionVote, ExecutionVoteConfig),
                                                                         (PublicTestsVote, PublicTestsConfig)) for n in ns]
    solutions = ExecutionVote.solve_together(voters, problems)
    with CodeGrader(timeout=10) as grader:
        for voter, sols in zip(voters, solutions, strict=True):
            graded = grader.grade_problems([(p, [s.answer]) for p, s in zip(problems, sols, strict=True)])
            correct = [o[0].value == "correct" for o in graded]
            tokens = sum(s.usage.completion_tokens for s in sols) / len(sols)
            exec_s = sum(s.trace.notes.get("execution_seconds", 0.0) for s in sols) / len(sols)
            print(_line(voter.name, voter.config.n, correct, tokens, exec_s))
            fallbacks = sum("fallback" in s.trace.notes for s in sols)
            syntax = sum(s.trace.notes.get("by") == "syntax" for s in sols)
            if fallbacks or syntax:
                print(f"|  ({voter.name} n={voter.config.n}: {fallbacks} none-passed fallbacks, {syntax} by syntax) | | | | |")
    print(f"\n{len(problems)} problems: {', '.join(p.id for p in problems[:3])} ... {problems[-1].id}", file=sys.stderr)


if __name__ == "__main__":
    main()
