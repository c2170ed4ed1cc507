"""The eval runner: problems -> strategy -> grading -> results store. Owns I/O, resume and progress.

Strategies that only aggregate samples (best-of-N, self-consistency, weighted vote) share one
set of samples: for each batch of problems the runner makes ONE generator call with max(n)
samples per problem, then lets every configured strategy aggregate the first n of them. A ladder
n = 1, 4, 16 of two strategies therefore costs one n = 16 sampling pass, and the smaller n are
honest (the first n of 16 i.i.d. samples are n i.i.d. samples).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tts.backends.base import Generator
from tts.benchmarks.datasets import Benchmark
from tts.benchmarks.grading import Grader, Outcome
from tts.config import EvalConfig
from tts.eval.report import ConfigSummary, summarize
from tts.eval.store import ResultsStore
from tts.prompts import PromptTemplate
from tts.registry import BENCHMARKS, STRATEGIES
from tts.search.base import SamplingStrategy
from tts.types import Problem, Solution, to_jsonable

logger = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class EvalResult:
    """What an eval run produced: where it is stored, the per-config summaries, and the rows."""

    out: Path
    summaries: list[ConfigSummary]
    rows: list[dict[str, Any]]
    problems: int
    skipped: int
    wall_seconds: float


def load_problems(config: EvalConfig, problems: Sequence[Problem] | None = None) -> tuple[Benchmark, list[Problem]]:
    """The benchmark object (its prompt) and its problems, as the data config says.

    ``problems`` already loaded by the caller are used as given, so data is read once.
    """
    bench: Benchmark = BENCHMARKS.load(config.data.benchmark)()
    if problems is not None:
        return bench, list(problems)
    d = config.data
    return bench, bench.load(d.path, d.limit, d.id_field, d.question_field, d.answer_field)


def build_strategies(
    config: EvalConfig, generator: Generator, prompt: PromptTemplate
) -> list[SamplingStrategy]:
    """One strategy object per configured strategy."""
    out = []
    for sc in config.strategies:
        cls = STRATEGIES.load(sc.kind)
        out.append(cls(sc, generator, prompt.render, config.sampling, seed=config.seed))
    return out


def _row(problem: Problem, solution: Solution, strategy: SamplingStrategy, outcome: Outcome,
         sample_outcomes: list[Outcome], model: str, backend: str) -> dict[str, Any]:
    trace = to_jsonable(solution.trace)
    for s, o in zip(trace["samples"], sample_outcomes, strict=True):
        s["outcome"] = o.value
    return {
        "problem_id": problem.id,
        "config": strategy.config.label,
        "strategy": strategy.config.model_dump(),
        "model": model,
        "backend": backend,
        "answer": solution.answer,
        "gold": problem.answer,
        "outcome": outcome.value,
        "correct": outcome is Outcome.CORRECT,
        "coverage": any(o is Outcome.CORRECT for o in sample_outcomes),
        "confidence": solution.confidence,
        "usage": to_jsonable(solution.usage),
        "trace": trace,
    }


def run_eval(
    config: EvalConfig,
    out: Path,
    generator: Generator | None = None,
    problems: Sequence[Problem] | None = None,
    progress: ProgressFn | None = None,
) -> EvalResult:
    """Run (or resume) an evaluation and return its summaries.

    Args:
        config: The run config.
        out: Run directory; results already there are kept and their problems skipped.
        generator: A ready generator; default builds one from ``config.backend``.
        problems: Problems to use instead of loading ``config.data``.
        progress: Called with (problems done, problems total) after each batch.

    Returns:
        The run's summaries (over all rows, resumed ones included) and rows.
    """
    from tts.backends.factory import create_generator

    start = time.perf_counter()
    # 1. Problems and prompt.
    bench, loaded = load_problems(config, problems)
    prompt = bench.prompt
    # 2. Store: resume what is done.
    store = ResultsStore(out, config.model_dump(mode="json"), config.backend.model)
    labels = [s.label for s in config.strategies]
    todo = [p for p in loaded if not all(store.is_done(p.id, lab) for lab in labels)]
    skipped = len(loaded) - len(todo)
    if skipped:
        logger.info("resuming %s: %d of %d problems already done", out, skipped, len(loaded))
    if progress:
        progress(skipped, len(loaded))
    owns_generator = generator is None
    try:
        if todo:
            generator = generator or create_generator(config.backend, loaded)
            strategies = build_strategies(config, generator, prompt)
            n_max = max(s.config.n for s in strategies)
            needs_logprobs = any(s.needs_logprobs for s in strategies)
            with Grader(timeout=config.grading_timeout) as grader:
                # 3. One generator call per batch with max(n) samples; every config aggregates.
                for i in range(0, len(todo), config.batch_size):
                    batch = todo[i : i + config.batch_size]
                    requests = [
                        dataclasses.replace(strategies[0].request(p, n=n_max), logprobs=needs_logprobs)
                        for p in batch
                    ]
                    results = generator.generate(requests)
                    rows = []
                    for p, res in zip(batch, results, strict=True):
                        sols = [(s, s.aggregate_result(p.id, res, s.config.n)) for s in strategies]
                        rows.extend(grade_rows(p, sols, grader, generator.model_name, config.backend.kind))
                    store.write(rows)
                    if progress:
                        progress(skipped + i + len(batch), len(loaded))
        ids = {p.id for p in loaded}
        rows = [r for r in store.rows if r["config"] in labels and r["problem_id"] in ids]
        return EvalResult(out, summarize(rows), rows, len(loaded), skipped, time.perf_counter() - start)
    finally:
        store.close()
        if owns_generator and generator is not None:
            generator.close()


def grade_rows(problem: Problem, sols: list[tuple[SamplingStrategy, Solution]], grader: Grader,
                model: str, backend: str) -> list[dict[str, Any]]:
    """Grade each solution's answer and each of its samples (for coverage) in one grader call."""
    gold = problem.answer or ""
    # Samples are shared prefixes of one list: grade the longest list once.
    longest = max((sol.trace.samples for _, sol in sols), key=len)
    pairs = [(s.answer, gold) for s in longest] + [(sol.answer, gold) for _, sol in sols]
    outcomes = grader.grade_many(pairs)
    sample_outcomes, answer_outcomes = outcomes[: len(longest)], outcomes[len(longest) :]
    return [
        _row(problem, sol, strat, oc, sample_outcomes[: len(sol.trace.samples)], model, backend)
        for (strat, sol), oc in zip(sols, answer_outcomes, strict=True)
    ]
