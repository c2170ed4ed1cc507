"""The eval runner: problems -> strategies -> grading -> results store. Owns I/O, resume and progress.

The runner relies on one contract only, :meth:`Strategy.solve`; it never builds requests or
aggregates samples itself. Strategies that can share one draw of samples (best-of-N,
self-consistency, weighted vote at several n) say so through
:meth:`Strategy.shares_draw_with`, and the runner hands each such group to
:meth:`Strategy.solve_together`: a ladder n = 1, 4, 16 of two strategies costs one n = 16 sampling
pass, and the smaller n are honest (the first n of 16 i.i.d. samples are n i.i.d. samples).
Coverage (pass@n) comes from grading every sample in each solution's trace.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tts.backends.base import Generator
from tts.benchmarks.datasets import Benchmark
from tts.benchmarks.grading import GradeNote, Grader, Outcome
from tts.config import EvalConfig, StrategyConfigBase
from tts.eval.report import ConfigSummary, summarize
from tts.eval.rows import ResultRow
from tts.eval.store import ResultsStore
from tts.prompts import PromptTemplate, chat_prompt, extract_options
from tts import tracing
from tts.registry import BENCHMARKS, STRATEGIES
from tts.search.base import Strategy
from tts.types import Problem, Solution, to_jsonable

logger = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class EvalResult:
    """What an eval run produced: where it is stored, the per-config summaries, and the rows."""

    out: Path
    summaries: list[ConfigSummary]
    rows: list[ResultRow]
    problems: int
    skipped: int
    wall_seconds: float


def load_problems(config: EvalConfig, problems: Sequence[Problem] | None = None) -> tuple[Benchmark, list[Problem]]:
    """The benchmark object (its prompt) and its problems, as the data config says.

    ``problems`` already loaded by the caller are used as given, so data is read once.
    """
    bench: Benchmark = BENCHMARKS.load(config.data.benchmark)()
    d = config.data
    if problems is not None:
        bench.configure(d.options)  # the grading options (HumanEval's unsafe_no_sandbox) reach this object too
        return bench, list(problems)
    bench.check_options(d.options)
    return bench, bench.load(d.path, d.limit, d.id_field, d.question_field, d.answer_field, **d.options)


def check_sandbox(strategies: Sequence[StrategyConfigBase], bench: Benchmark) -> None:
    """Refuse, before any engine starts, a run that will execute model-written code where bubblewrap
    is missing: the strategies that run programs (``runs_code``) and the benchmark's grader
    (HumanEval), each unless the run opted out of the sandbox by name. Without this check the
    refusal came only after all generation, with no rows written.

    Raises:
        tts.execution.sandbox.SandboxUnavailableError: one line naming what runs code, the
            command that installs bubblewrap and the settings that opt out.
    """
    from tts.execution import sandbox

    programs = [s for s in strategies if s.runs_code and not getattr(s, "unsafe_no_sandbox", False)]
    users = list(dict.fromkeys(s.kind for s in programs)) + ([f"{bench.name}'s grading"] if bench.needs_sandbox else [])
    if not users or sandbox.bwrap_path() is not None:
        return
    # Only the execution strategies take the opt-out (revision's execution feedback always runs sandboxed).
    opt_outs = (["--set unsafe_no_sandbox=true (the strategies' programs)"]
                if any("unsafe_no_sandbox" in type(s).model_fields for s in programs) else [])
    opt_outs += ["--set data.unsafe_no_sandbox=true (grading)"] if bench.needs_sandbox else []
    risk = f", or run without isolation at your own risk with {' and '.join(opt_outs)}" if opt_outs else ""
    raise sandbox.SandboxUnavailableError(
        f"{', '.join(users)} run{'s' if len(users) == 1 else ''} model-written code in the bubblewrap sandbox, "
        f"which is not installed: `apt-get install bubblewrap` (Debian/Ubuntu; `make install` does it as root){risk}.")


def build_strategies(config: EvalConfig, generator: Generator, prompt: PromptTemplate) -> list[Strategy]:
    """One strategy object per configured strategy, all with one prompt function (so that they can
    share draws): a problem's conversation (``metadata["messages"]``, a BFCL entry) as sent when
    ``prompt`` adds nothing, its answers then read as free text (never a number read out of prose);
    other problems rendered by ``prompt``, answers extracted as math."""
    render = chat_prompt(prompt)
    extra = extract_options(prompt)
    generator = tracing.traced_generator(generator)  # itself while tracing is off
    return [STRATEGIES.load(sc.kind)(sc, generator, render, config.sampling, seed=config.seed, **extra)
            for sc in config.strategies]


def share_groups(strategies: Sequence[Strategy]) -> list[list[int]]:
    """Indices of the strategies, grouped so that each group can share one draw."""
    groups: list[list[int]] = []
    for i, s in enumerate(strategies):
        for g in groups:
            if strategies[g[0]].shares_draw_with(s):
                g.append(i)
                break
        else:
            groups.append([i])
    return groups


def solve_all(strategies: Sequence[Strategy], problems: Sequence[Problem]) -> list[list[Solution]]:
    """Every strategy's solutions for the problems (one list per strategy), sharing draws."""
    out: list[list[Solution]] = [[] for _ in strategies]
    for group in share_groups(strategies):
        members = [strategies[i] for i in group]
        attrs = {"tts.strategy": ",".join(s.name for s in members), "tts.config": ",".join(s.config.label for s in members),
                 "tts.problems": len(problems)}
        with tracing.span("tts.solve", attrs) as span:
            together = type(members[0]).solve_together(members, problems)
            for i, sols in zip(group, together, strict=True):
                if len(sols) != len(problems):
                    raise RuntimeError(f"strategy {strategies[i].name} returned {len(sols)} solutions for "
                                       f"{len(problems)} problems; Strategy.solve must return one per problem")
                out[i] = sols
                tracing.record_solutions(span, sols)
    return out


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
    if config.allocation is not None:
        raise ValueError("this config has an allocation section, which run_eval would ignore; run it with "
                         "tts.eval.allocated.run_allocated_eval (or tts.evaluate, or tts eval --allocate)")
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
    strategies: list[Strategy] = []
    try:
        if todo:
            check_sandbox(config.strategies, bench)
            generator = generator or create_generator(config.backend, loaded)
            strategies = build_strategies(config, generator, prompt)
            with bench.grader(config.grading_timeout) as grader:
                # 3. Per batch: every strategy solves (shared draws where they can), then grading.
                for i in range(0, len(todo), config.batch_size):
                    batch = todo[i : i + config.batch_size]
                    per_strategy = solve_all(strategies, batch)
                    per_problem = [[(s.config, sols[j]) for s, sols in zip(strategies, per_strategy, strict=True)]
                                   for j in range(len(batch))]
                    rows = grade_batch(batch, per_problem, grader, generator.model_name, config.backend.kind)
                    store.write(rows)
                    if progress:
                        progress(skipped + i + len(batch), len(loaded))
        ids = {p.id for p in loaded}
        rows = [r for r in store.rows if r.config in labels and r.problem_id in ids]
        return EvalResult(out, summarize(rows), rows, len(loaded), skipped, time.perf_counter() - start)
    finally:
        store.close()
        for s in strategies:
            s.close()  # verifiers a strategy built (a PRM or judge engine) go before the generator
        if owns_generator and generator is not None:
            generator.close()


def short_metadata(problem: Problem) -> dict[str, str | int | float | bool]:
    """The metadata a result row keeps: numbers, flags and short strings (not a reference solution)."""
    return {k: v for k, v in problem.metadata.items()
            if isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= 40)}


def grade_rows(problem: Problem, sols: Sequence[tuple[StrategyConfigBase, Solution]], grader: Grader,
               model: str, backend: str) -> list[ResultRow]:
    """Grade each solution's answer and every sample of its trace (for coverage) in one grader call.

    Shared samples (the prefixes of one draw) are graded once: the grader caches (answer, gold).
    """
    return grade_batch([problem], [sols], grader, model, backend)


def grade_batch(problems: Sequence[Problem], sols: Sequence[Sequence[tuple[StrategyConfigBase, Solution]]],
                grader: Grader, model: str, backend: str) -> list[ResultRow]:
    """:func:`grade_rows` for a batch of problems (``sols[i]``: the solutions of ``problems[i]``),
    graded in one ``grader.grade_problems`` call: a grader with a slow worker start-up (BFCL's
    checker) gets one request per batch."""
    answers = [[sol.answer for _, sol in ps] + [s.answer for _, sol in ps for s in sol.trace.samples] for ps in sols]
    graded = grader.grade_problems(list(zip(problems, answers, strict=True)))
    # A grader that can say why an answer is not correct, and how long its check ran (the code grader).
    note: Callable[[Problem, str | None], GradeNote | None] = getattr(grader, "note", lambda p, a: None)
    rows: list[ResultRow] = []
    for problem, ps, outcomes, said in zip(problems, sols, graded, answers, strict=True):
        graded_answers = zip(outcomes, (note(problem, a) for a in said), strict=True)
        rows.extend(_rows(problem, ps, graded_answers, model, backend))
    return rows


def _rows(problem: Problem, sols: Sequence[tuple[StrategyConfigBase, Solution]],
          graded: Iterator[tuple[Outcome, GradeNote | None]], model: str, backend: str) -> list[ResultRow]:
    """The result rows of one problem's solutions, given the outcomes (and the grader's notes) of their
    answers, then of their samples."""
    answer_grades = [next(graded) for _ in sols]
    rows = []
    for (config, sol), (outcome, note) in zip(sols, answer_grades, strict=True):
        sample_grades = [next(graded) for _ in sol.trace.samples]
        trace = to_jsonable(sol.trace)
        for s, (o, n) in zip(trace["samples"], sample_grades, strict=True):
            s["outcome"] = o.value
            # Every sample has both keys (None where the grader has no note: no answer, a grader without
            # notes), so that rows of every backend and benchmark have one shape.
            s["grade_reason"], s["grading_seconds"] = (n.reason, n.seconds) if n is not None else (None, None)
        rows.append(ResultRow(
            problem_id=problem.id, config=config.label, strategy=config.model_dump(mode="json"), model=model,
            backend=backend, answer=sol.answer, gold=problem.answer, outcome=outcome.value,
            correct=outcome is Outcome.CORRECT, coverage=any(o is Outcome.CORRECT for o, _ in sample_grades),
            confidence=min(max(sol.confidence, 0.0), 1.0), usage=sol.usage, trace=trace, metadata=short_metadata(problem),
            grade_reason=note.reason if note else None, grading_seconds=note.seconds if note else None,
        ))
    return rows
