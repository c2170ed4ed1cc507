"""CodeT, Self-Debugging and exec_vote with model-written inputs on the draw of a ``tts eval --benchmark humaneval`` run, the extra
generation (tests, revisions) done by the run's own engine.

A generator serves every request for a problem's own prompt from the run's largest
self-consistency draw (the samples every other rule of the run chose among) and sends every other
request, CodeT's test requests and Self-Debugging's revision requests, to a vLLM engine built from
the run's backend and sampling config. The library's strategies (``codet``; ``revision`` with
``feedback=execution``) run unchanged on it; their choices are graded by the check programs.

    PYTHONPATH=. .venv/bin/python scripts/humaneval_engine_rules.py runs/<the run dir> --tests-n 2

Prints a markdown table: accuracy with its 95% Wilson interval, generated tokens per problem (the
replayed samples' and the new ones'), new engine tokens per problem, execution seconds per problem.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tts.answers.code import CODE
from tts.backends.base import Completion, GenerationResult, request_usage
from tts.backends.factory import create_generator
from tts.benchmarks.humaneval import HumanEvalBenchmark
from tts.benchmarks.humaneval_grading import CodeGrader
from tts.config import EvalConfig
from tts.eval.report import wilson_interval
from tts.prompts import CODE_PROMPT, chat_prompt
from tts.search.sampling.codet import CodeT, CodeTConfig
from tts.search.sampling.execution_vote import ExecutionVote, ExecutionVoteConfig
from tts.search.sequential.revision import Revision, RevisionConfig


class ReplayThenEngine:
    """Serves a problem's own prompt from a saved draw, everything else from an engine (built on first use)."""

    def __init__(self, draws, problems, render, backend):
        self.draws, self.render, self.backend, self.problems = draws, render, backend, problems
        self.prompts = {p.id: render(p) for p in problems}
        self.engine = None
        self.new_tokens = 0
        self.drawn: dict = {}  # a request asked again (CodeT's tests, exec_vote's model inputs) gets the same draw
        self.model_name = backend.model

    def _replay(self, req) -> GenerationResult:
        saved = self.draws[req.key]
        if req.n > len(saved["samples"]):
            raise ValueError(f"{req.key}: {req.n} samples asked, the draw has {len(saved['samples'])}")
        comps = tuple(Completion(s["text"], s["completion_tokens"], s.get("mean_logprob"), s.get("finish_reason"))
                      for s in saved["samples"][: req.n])
        return GenerationResult(comps, request_usage(saved["prompt_tokens"], 0, [c.completion_tokens for c in comps], 0.0))

    def generate(self, requests):
        out: list[GenerationResult | None] = [None] * len(requests)
        fresh = []
        for i, req in enumerate(requests):
            if req.key in self.draws and req.messages == self.prompts.get(req.key):
                out[i] = self._replay(req)
            elif (req.key, req.messages, req.n, req.seed) in self.drawn:
                out[i] = self.drawn[req.key, req.messages, req.n, req.seed]
            else:
                fresh.append(i)
        if fresh:
            if self.engine is None:
                self.engine = create_generator(self.backend, self.problems)
            start = time.perf_counter()
            results = self.engine.generate([requests[i] for i in fresh])
            print(f"  engine call: {len(fresh)} requests, {time.perf_counter() - start:.0f} s", file=sys.stderr)
            for i, r in zip(fresh, results, strict=True):
                out[i] = self.drawn[requests[i].key, requests[i].messages, requests[i].n, requests[i].seed] = r
                self.new_tokens += r.usage.completion_tokens
        return out

    def close(self):
        if self.engine is not None:
            self.engine.close()


def _draws(rows):
    best = {}
    for r in rows:
        if r["strategy"]["kind"] == "self_consistency" and len(r["trace"]["samples"]) > len(best.get(r["problem_id"], {}).get("samples", [])):
            best[r["problem_id"]] = {"samples": r["trace"]["samples"], "prompt_tokens": r["usage"]["prompt_tokens"]}
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--tests-n", type=int, default=2, help="CodeT's test samples per problem")
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--rules", nargs="+", default=["codet", "self_debug", "exec_model_inputs"])
    parser.add_argument("--rounds", type=int, nargs="+", default=[1],
                        help="Self-Debugging's revision rounds, one row each (a later row's first rounds are the earlier draws)")
    args = parser.parse_args()
    config = EvalConfig.model_validate(json.loads((args.run / "run.json").read_text())["config"])
    rows = [json.loads(x) for x in (args.run / "results.jsonl").read_text().splitlines()]
    draws = _draws(rows)
    problems = [p for p in HumanEvalBenchmark().load() if p.id in draws]
    render = chat_prompt(CODE_PROMPT)
    sampling = config.sampling
    gen = ReplayThenEngine(draws, problems, render, config.backend)
    strategies = []
    if "codet" in args.rules:
        strategies.append(CodeT(CodeTConfig(n=args.n, tests_n=args.tests_n), gen, render, sampling, extract=CODE))
    if "self_debug" in args.rules:
        strategies += [Revision(RevisionConfig(n=args.n, rounds=rounds, feedback="execution", accept_score=1.0,
                                               select="verifier"), gen, render, sampling, extract=CODE) for rounds in args.rounds]
    if "exec_model_inputs" in args.rules:  # exec_vote grouping also on the calls of model-written tests
        strategies.append(ExecutionVote(ExecutionVoteConfig(n=args.n, inputs="model", inputs_n=args.tests_n), gen, render,
                                        sampling, extract=CODE))
    print("| rule | n | accuracy [95% Wilson] | generated tok/pb | new engine tok/pb | exec s/pb |\n|---|---|---|---|---|---|")
    try:
        with CodeGrader(timeout=10) as grader:
            for s in strategies:
                before = gen.new_tokens
                sols = s.solve(problems)
                graded = grader.grade_problems([(p, [x.answer]) for p, x in zip(problems, sols, strict=True)])
                correct = [o[0].value == "correct" for o in graded]
                lo, hi = wilson_interval(sum(correct), len(correct))
                tokens = sum(x.usage.completion_tokens for x in sols) / len(sols)
                exec_s = sum(x.trace.notes.get("execution_seconds", 0.0) for x in sols) / len(sols)
                print(f"| {s.config.label} | {args.n} | {sum(correct) / len(correct):.3f} [{lo:.2f}-{hi:.2f}] | {tokens:.0f} | "
                      f"{(gen.new_tokens - before) / len(sols):.0f} | {exec_s:.2f} |", flush=True)
    finally:
        gen.close()
    print(f"{len(problems)} problems", file=sys.stderr)


if __name__ == "__main__":
    main()
