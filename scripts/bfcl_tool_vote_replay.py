"""tool_vote at n = 1, 4, 8 replayed on the draw of a BFCL ``self_consistency`` run, graded by BFCL's checker.

``tts eval -s tool_vote -n 1 -n 4 -n 8`` shares one draw of 8 replies across the three n; this
script instead applies tool_vote's rule (``ToolVote._vote``, unchanged) to the first n samples of each
problem's stored draw of a ``self_consistency`` run with ``-n 8``: the same i.i.d. samples the vote
of ``self_consistency`` saw, so the two rules are compared on equal samples (and a draw made before
a change of the rule can be scored again). Needs ``make bfcl-env``.

    PYTHONPATH=. .venv/bin/python scripts/bfcl_tool_vote_replay.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tts.answers.kinds import TEXT
from tts.backends.base import Completion, GenerationResult
from tts.backends.chat import ToolCall
from tts.benchmarks.bfcl_grading import BFCLGrader
from tts.eval.report import wilson_interval
from tts.registry import BENCHMARKS
from tts.search.sampling.tool_vote import ToolVote, ToolVoteConfig
from tts.types import Usage


def completion(sample: dict) -> Completion:
    calls = tuple(ToolCall(c["function"]["name"], c["function"]["arguments"], c.get("id", ""))
                  for c in sample.get("tool_calls") or ())
    return Completion(sample["text"], sample["completion_tokens"], finish_reason=sample.get("finish_reason"),
                      tool_calls=calls, tool_call_error=None if calls else "no_tool_call")


def replay(run: Path, ns: tuple[int, ...] = (1, 4, 8)) -> None:
    config = json.loads((run / "run.json").read_text())["config"]
    data = config["data"]
    problems = {p.id: p for p in BENCHMARKS.load(data["benchmark"])().load(None, data["limit"])}
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    draws = {r["problem_id"]: r["trace"]["samples"] for r in rows if r["config"] == f"self_consistency@{max(ns)}"}
    with BFCLGrader() as grader:
        for n in ns:
            strategy = ToolVote(ToolVoteConfig(n=n), None, None, extract=TEXT)  # type: ignore[arg-type]
            answers = [(problems[pid], [strategy._vote(problems[pid], GenerationResult(
                tuple(completion(s) for s in samples[:n]), Usage())).answer]) for pid, samples in draws.items()]
            graded = grader.grade_problems(answers)
            k = sum(g[0].value == "correct" for g in graded)
            lo, hi = wilson_interval(k, len(graded))
            print(f"{data['benchmark']:18} tool_vote@{n}: {k}/{len(graded)} = {k / len(graded):.3f} [{lo:.2f}-{hi:.2f}]")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        replay(Path(arg))
