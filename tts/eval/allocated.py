"""``tts eval --allocate``: self-consistency under one total budget, spent where it buys accuracy.

Two modes:

* ``online`` (default): the adaptive-consistency allocator
  (:class:`tts.budgets.online.OnlineAllocator`) decides each round which problems get one more
  sample; unanimous problems stop early and the budget they leave goes to contested ones. Each
  round is ONE generator call, and a chosen problem gets ``chunk`` samples as one request (its
  prompt is then paid once per chunk). Rounds are trimmed so that even the worst case (every
  sample at ``max_tokens``, prompt uncached) fits what is left, so the budget is never exceeded;
  prompt lengths are exact where the backend tokenizes locally (vLLM, scripted) and estimated
  from observed tokens per character otherwise (OpenAI servers). Budgets in tokens (generated
  plus uncached prompt tokens), Kinetics eFLOPs or predicted GPU-seconds on a named GPU.
* ``offline``: k pilot samples per problem, difficulty bins from pilot agreement, accuracy-vs-n
  curves per bin from a calibration pool (a past run of the same model, or a sample-pool file),
  then the greedy marginal-gain allocator (:func:`tts.budgets.offline_plan.plan_from_pilot`)
  plans each problem's n; the extra samples are drawn in one call. Plans keep the budget in
  expected generated tokens; the actual spend is reported.

Every drawn sample is appended to ``samples.jsonl`` as soon as its call returns, so a killed run
resumes from what it already paid for; results are written when the budget is spent.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from tts.answers import normalize_answer
from tts.backends.base import Generator, count_prompt_tokens, request_usage
from tts.benchmarks.append_log import read_append_log
from tts.benchmarks.grading import Grader
from tts.budgets.ledger import usage_from_json
from tts.config import EvalConfig, SelfConsistencyConfig
from tts.eval.report import summarize
from tts.eval.runner import EvalResult, grade_rows, load_problems
from tts.eval.store import ResultsStore
from tts.search.base import to_sample
from tts.search.self_consistency import SelfConsistency
from tts.types import Problem, Sample, Usage, to_jsonable

logger = logging.getLogger(__name__)

BudgetUnit = Literal["tokens", "eflops", "gpu_seconds"]
AllocateMode = Literal["online", "offline"]
SAMPLES_LOG = "samples.jsonl"
PLAN_FILE = "plan.json"


class BudgetError(ValueError):
    """A budget or allocation setting that cannot be used; the message says what to change."""


def _pricer(unit: BudgetUnit, model: str, gpu: str) -> Callable[[Usage], float]:
    if unit == "tokens":
        return lambda u: float(u.completion_tokens + u.prompt_tokens - u.cached_prompt_tokens)
    from tts.budgets.ledger import cost_model_for

    try:
        cm = cost_model_for(model, gpu)
    except ValueError as exc:
        raise BudgetError(f"--budget-unit {unit} needs the model's architecture: {exc}") from None
    attr = "eflops" if unit == "eflops" else "seconds"
    return lambda u: float(getattr(cm.cost_usage(u), attr))


class SamplesLog:
    """Append-only log of every paid-for sample of an allocated run (the resume state)."""

    def __init__(self, path: Path, problem_ids: Sequence[str]) -> None:
        self.path = path
        self.samples: dict[str, list[tuple[Sample, Usage]]] = {pid: [] for pid in problem_ids}
        self.finished = False
        if path.exists():
            for rec in read_append_log(path, repair=True):
                if rec.get("event") == "finished":
                    self.finished = True
                elif rec["problem_id"] in self.samples:
                    self.samples[rec["problem_id"]].append((Sample(**rec["sample"]), usage_from_json(rec["usage"])))
        self._fh = path.open("a", encoding="utf-8")

    def add(self, problem_id: str, sample: Sample, usage: Usage) -> None:
        """Record one sample (call :meth:`flush` after a batch)."""
        self.samples[problem_id].append((sample, usage))
        self._fh.write(json.dumps({"problem_id": problem_id, "sample": to_jsonable(sample),
                                   "usage": to_jsonable(usage)}) + "\n")

    def flush(self) -> None:
        """Force the batch to disk."""
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def finish(self) -> None:
        """Mark the sampling phase complete (a resumed run then only aggregates)."""
        self._fh.write(json.dumps({"event": "finished"}) + "\n")
        self.flush()
        self.finished = True

    def close(self) -> None:
        """Close the file."""
        self._fh.close()


def _split_usage(usage: Usage, n: int) -> list[Usage]:
    """One Usage per sample of an n-sample request: the prompt is charged to the first."""
    shape = usage.shapes[0]
    out = []
    for i, tokens in enumerate(shape.completion_tokens):
        prompt, cached = (shape.prompt_tokens, shape.cached_prompt_tokens) if i == 0 else (0, 0)
        out.append(request_usage(prompt, cached, [tokens], usage.wall_seconds / max(n, 1), shape.batch_sequences))
    return out


def _draw(generator: Generator, sc: SelfConsistency, log: SamplesLog, wanted: dict[str, int],
          by_id: dict[str, Problem], price: Callable[[Usage], float]) -> list[tuple[str, Sample, float]]:
    """One generator call for ``wanted[pid]`` more samples of each problem; logged at once."""
    pids = [pid for pid, k in wanted.items() if k > 0]
    drawn = []
    for pid, res in zip(pids, generator.generate([sc.request(by_id[pid], n=wanted[pid]) for pid in pids]), strict=True):
        for c, u in zip(res.completions, _split_usage(res.usage, len(res.completions)), strict=True):
            sample = to_sample(c, sc.extract)
            log.add(pid, sample, u)
            drawn.append((pid, sample, price(u)))
    log.flush()
    return drawn


def _online(config: EvalConfig, log: SamplesLog, sc: SelfConsistency, generator: Generator, loaded: list[Problem],
            budget: float, n_max: int, chunk: int, price: Callable[[Usage], float],
            progress: Callable[[float, float], None] | None) -> None:
    from tts.budgets.online import OnlineAllocator

    by_id = {p.id: p for p in loaded}
    first_chars = sum(len(m.content) for m in sc.request(loaded[0]).messages)
    prior = price(request_usage(first_chars // 4, 0, [config.sampling.max_tokens // 2], 0.0))
    if budget < prior * len(loaded):
        raise BudgetError(
            f"--budget {budget:g} is smaller than one sample per problem (about {prior * len(loaded):.4g} for "
            f"{len(loaded)} problems); raise it or lower --limit.")
    alloc = OnlineAllocator(budget=budget, expected_cost=prior * chunk, n_max=n_max)
    for pid, got in log.samples.items():
        for s, u in got:
            alloc.record(pid, s.answer and normalize_answer(s.answer), price(u))
    prompt_chars = {p.id: sum(len(m.content) for m in sc.request(p).messages) for p in loaded}
    exact = {p.id: count_prompt_tokens(generator, sc.request(p)) for p in loaded}

    def worst_case(pid: str, k: int) -> float:
        seen = [u.prompt_tokens for _, u in log.samples[pid] if u.prompt_tokens]
        if exact[pid] is not None:
            prompt = exact[pid]
        elif seen:
            prompt = max(seen)
        else:
            # Unseen prompt: tokens per character observed on other problems, with a 25% margin;
            # before any observation, 1 token per character (an upper bound for BPE tokenizers).
            ratios = [u.prompt_tokens / prompt_chars[q] for q, got in log.samples.items() for _, u in got
                      if u.prompt_tokens]
            prompt = int(prompt_chars[pid] * min(1.0, 1.25 * max(ratios))) + 1 if ratios else prompt_chars[pid]
        return price(request_usage(prompt, 0, [config.sampling.max_tokens] * k, 0.0))

    ids = [p.id for p in loaded]
    size = chunk
    while not log.finished:
        # 1. The allocator reasons in chunks: a chunk's expected cost is `size` observed samples.
        drawn = [price(u) for got in log.samples.values() for _, u in got]
        alloc.update_expected_cost(size * sum(drawn) / len(drawn) if drawn else prior * size)
        # 2. Trim the round so that even its worst case fits what is left.
        wanted, room = {}, budget - alloc.spent
        for pid in alloc.next_round(ids):
            k = min(size, n_max - len(log.samples[pid]))
            if worst_case(pid, k) > room:
                break
            wanted[pid] = k
            room -= worst_case(pid, k)
        if not wanted:
            if size > 1:  # spend the rest one sample at a time
                size = 1
                continue
            log.finish()
            break
        for pid, sample, cost in _draw(generator, sc, log, wanted, by_id, price):
            alloc.record(pid, sample.answer and normalize_answer(sample.answer), cost)
        if progress:
            progress(min(alloc.spent, budget), budget)


def _offline(out: Path, log: SamplesLog, sc: SelfConsistency, generator: Generator, loaded: list[Problem],
             budget: float, calibration: Path, model: str, pilot: int, price: Callable[[Usage], float],
             progress: Callable[[float, float], None] | None) -> None:
    from tts.benchmarks.pool import PoolError, load_pool
    from tts.benchmarks.results_pool import load_results_as_pool
    from tts.budgets.offline_plan import plan_from_pilot

    by_id = {p.id: p for p in loaded}
    try:
        is_run = calibration.is_dir() or calibration.name == "results.jsonl"
        pool = load_results_as_pool(calibration) if is_run else load_pool(calibration)
    except (PoolError, OSError) as exc:
        raise BudgetError(f"--calibration {calibration}: {exc}") from None
    if model in pool.models:
        cal = pool[model]
    elif len(pool.models) == 1:
        cal = pool[pool.models[0]]
        logger.warning("calibration pool holds model %r, not %r; using it anyway", pool.models[0], model)
    else:
        raise BudgetError(f"--calibration {calibration} has models {pool.models}, none of them {model!r}.")
    # 1. Pilot: k samples per problem in one call (skipped for what a killed run already drew).
    if not log.finished:
        _draw(generator, sc, log, {p.id: pilot - len(log.samples[p.id]) for p in loaded}, by_id, price)
    spent = sum(price(u) for got in log.samples.values() for _, u in got)
    if spent >= budget:
        raise BudgetError(f"--budget {budget:g} tokens is used up by the {pilot}-sample pilot ({spent:.4g} tokens); "
                          "raise it or lower --pilot / --limit.")
    # 2. Plan from the pilot (deterministic, so a resumed run recomputes the same plan).
    pilots = [log.samples[p.id][:pilot] for p in loaded]
    try:
        plan = plan_from_pilot([p.id for p in loaded], [[s.answer and normalize_answer(s.answer) for s, _ in got]
                                                        for got in pilots],
                               [[s.completion_tokens for s, _ in got] for got in pilots], cal,
                               budget - sum(price(u) for got in pilots for _, u in got), pilot=pilot)
    except ValueError as exc:
        raise BudgetError(str(exc)) from None
    (out / PLAN_FILE).write_text(json.dumps(plan.to_json(), indent=1, default=str))
    # 3. The planned extra samples, all in one call.
    if not log.finished:
        _draw(generator, sc, log, {pl.problem_id: pl.n - len(log.samples[pl.problem_id]) for pl in plan.plans},
              by_id, price)
        log.finish()
    if progress:
        progress(min(sum(price(u) for got in log.samples.values() for _, u in got), budget), budget)


def run_allocated_eval(
    config: EvalConfig,
    out: Path,
    budget: float,
    unit: BudgetUnit = "tokens",
    gpu: str = "h100",
    n_max: int = 64,
    generator: Generator | None = None,
    problems: Sequence[Problem] | None = None,
    progress: Callable[[float, float], None] | None = None,
    mode: AllocateMode = "online",
    calibration: Path | None = None,
    pilot: int = 4,
    chunk: int = 4,
) -> EvalResult:
    """Spend ``budget`` over the problems with budget-allocated self-consistency.

    Args:
        config: Run config (data, backend, sampling); its strategies are ignored.
        out: Run directory (resumes from its samples log).
        budget: Total budget in ``unit``.
        unit: "tokens", "eflops" or "gpu_seconds" (the latter two priced on ``gpu``; online only).
        gpu: GPU the cost model prices eFLOPs / seconds on.
        n_max: Most samples any problem gets (online).
        generator: A ready generator (default: built from ``config.backend``).
        problems: Problems to use instead of loading ``config.data``.
        progress: Called with (budget spent, budget).
        mode: "online" (adaptive stopping) or "offline" (pilot + calibrated curves + greedy plan).
        calibration: Offline: a past run directory / results.jsonl of the same model, or a pool file.
        pilot: Offline: pilot samples per problem.
        chunk: Online: samples a chosen problem gets per round, drawn as one n-sample request so
            the prompt is paid once per chunk (vLLM caches prompts in whole blocks only).

    Raises:
        BudgetError: Budget not positive or too small, or offline settings missing.
    """
    from tts.backends.factory import create_generator

    start = time.perf_counter()
    if not budget > 0:
        raise BudgetError(f"--budget must be a positive number, got {budget!r}.")
    if mode == "offline" and (calibration is None or unit != "tokens"):
        raise BudgetError("--allocate offline needs --calibration (a past run of this model or a sample pool) "
                          "and --budget-unit tokens.")
    bench, loaded = load_problems(config, problems)
    price = _pricer(unit, config.backend.model, gpu)
    label = f"allocated-{mode}@{budget:g}{unit}"
    if chunk < 1:
        raise BudgetError(f"--chunk must be at least 1, got {chunk}.")
    settings = {"mode": mode, "budget": budget, "unit": unit, "gpu": gpu, "n_max": n_max,
                "calibration": str(calibration) if calibration else None, "pilot": pilot, "chunk": chunk}
    store = ResultsStore(out, {**config.model_dump(mode="json"), "allocate": settings}, config.backend.model)
    log = SamplesLog(Path(out) / SAMPLES_LOG, [p.id for p in loaded])
    owns = generator is None
    generator = generator or create_generator(config.backend, loaded)
    sc = SelfConsistency(SelfConsistencyConfig(n=1), generator, bench.prompt.render, config.sampling, seed=config.seed)
    try:
        # 1. Sampling under the budget.
        if mode == "online":
            _online(config, log, sc, generator, loaded, budget, n_max, chunk, price, progress)
        else:
            assert calibration is not None  # checked above
            _offline(Path(out), log, sc, generator, loaded, budget, calibration, config.backend.model, pilot, price,
                     progress)
        # 2. Aggregate, grade and store one row per problem.
        with Grader(timeout=config.grading_timeout) as grader:
            rows = []
            for p in loaded:
                if store.is_done(p.id, label):
                    continue
                got = log.samples[p.id]
                sol = sc.aggregate(p.id, [s for s, _ in got], Usage.total([u for _, u in got]))
                row = grade_rows(p, [(sc, sol)], grader, generator.model_name, config.backend.kind)[0]
                row.update(config=label, budget_spent=sum(price(u) for _, u in got),
                           strategy={"kind": "self_consistency", "n": len(got), "allocator": mode,
                                     "budget": budget, "unit": unit})
                rows.append(row)
            store.write(rows)
        rows = [r for r in store.rows if r["config"] == label]
        return EvalResult(Path(out), summarize(rows), rows, len(loaded), 0, time.perf_counter() - start)
    finally:
        log.close()
        store.close()
        if owns:
            generator.close()
