"""``tts eval --allocate``: self-consistency under one total budget, spent where votes are contested.

The online allocator (:class:`tts.budgets.online.OnlineAllocator`, adaptive-consistency style)
decides each round which problems get one more sample: unanimous problems stop early, and the
budget they leave goes to problems whose vote is still open. Each round is ONE generator call
for all chosen problems. The budget is counted in tokens (generated plus uncached prompt tokens),
Kinetics eFLOPs or predicted GPU-seconds on a named GPU (both priced by the cost model).

Every drawn sample is appended to ``samples.jsonl`` in the run directory as soon as its round
ends, so a killed run resumes from the samples it already paid for; the per-problem results are
written to ``results.jsonl`` when the budget is spent or every vote is settled.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from tts.backends.base import GenerationRequest, Generator, request_usage
from tts.benchmarks.extraction import normalize_answer
from tts.benchmarks.grading import Grader
from tts.benchmarks.report import summarize
from tts.benchmarks.runner import EvalResult, _grade_rows, load_problems
from tts.benchmarks.store import ResultsStore
from tts.budgets.ledger import usage_from_json
from tts.budgets.online import OnlineAllocator
from tts.config import EvalConfig, SelfConsistencyConfig
from tts.search.base import to_sample
from tts.search.self_consistency import SelfConsistency
from tts.types import Problem, Sample, Usage, to_jsonable

logger = logging.getLogger(__name__)

BudgetUnit = Literal["tokens", "eflops", "gpu_seconds"]
SAMPLES_LOG = "samples.jsonl"


class BudgetError(ValueError):
    """A budget that cannot be used; the message says what to change."""


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
) -> EvalResult:
    """Spend ``budget`` over the problems with online adaptive self-consistency.

    Args:
        config: Run config (data, backend, sampling); its strategies are ignored.
        out: Run directory (resumes from its samples log).
        budget: Total budget in ``unit``.
        unit: "tokens", "eflops" or "gpu_seconds" (the latter two priced on ``gpu``).
        gpu: GPU the cost model prices eFLOPs / seconds on.
        n_max: Most samples any problem gets.
        progress: Called with (budget spent, budget) after each round.

    Raises:
        BudgetError: Budget not positive, or too small for one sample per problem.
    """
    from tts.backends.factory import create_generator

    start = time.perf_counter()
    if not budget > 0:
        raise BudgetError(f"--budget must be a positive number, got {budget!r}.")
    bench, all_problems = load_problems(config)
    loaded = list(problems) if problems is not None else all_problems
    prompt = bench.prompt
    price = _pricer(unit, config.backend.model, gpu)
    label = f"allocated@{budget:g}{unit}"
    store = ResultsStore(out, {**config.model_dump(mode="json"), "allocate": {"budget": budget, "unit": unit,
                                                                              "gpu": gpu, "n_max": n_max}},
                         config.backend.model)
    log_path = Path(out) / SAMPLES_LOG
    by_id = {p.id: p for p in loaded}
    owns = generator is None
    generator = generator or create_generator(config.backend, loaded)
    sc = SelfConsistency(SelfConsistencyConfig(n=1), generator, prompt.render, config.sampling, seed=config.seed)
    # Prior expected cost of one sample: half the token cap plus the prompt, priced; refined as we go.
    first_chars = sum(len(m.content) for m in sc.request(loaded[0]).messages)
    prior = price(request_usage(first_chars // 4, 0, [config.sampling.max_tokens // 2], 0.0))
    need = prior * len(loaded)
    if budget < need:
        raise BudgetError(
            f"--budget {budget:g} {unit} is smaller than one sample per problem (about {need:.4g} {unit} for "
            f"{len(loaded)} problems); raise it or lower --limit."
        )
    alloc = OnlineAllocator(budget=budget, expected_cost=prior, n_max=n_max)
    samples: dict[str, list[tuple[Sample, Usage]]] = {p.id: [] for p in loaded}
    finished = False
    # 1. Replay what a killed run already paid for.
    if log_path.exists():
        good = 0
        for line in log_path.read_bytes().splitlines(keepends=True):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                break  # half-written last line: cut it off below
            if not line.endswith(b"\n"):
                break
            good += len(line)
            if rec.get("event") == "finished":
                finished = True
                continue
            s, u = Sample(**rec["sample"]), usage_from_json(rec["usage"])
            samples[rec["problem_id"]].append((s, u))
            alloc.record(rec["problem_id"], s.answer and normalize_answer(s.answer), price(u))
        with log_path.open("r+b") as fh:
            fh.truncate(good)
    # A sample can cost at most its prompt (uncached) plus max_tokens: rounds are trimmed so that
    # even the worst case fits what is left, which makes "never over budget" a guarantee.
    prompt_chars = {p.id: sum(len(m.content) for m in sc.request(p).messages) for p in loaded}

    def worst_case(pid: str) -> float:
        seen = [u.prompt_tokens for _, u in samples[pid]]
        prompt = max(seen) if seen else prompt_chars[pid]  # <= 1 token per character
        return price(request_usage(prompt, 0, [config.sampling.max_tokens], 0.0))

    try:
        with log_path.open("a", encoding="utf-8") as log:
            # 2. Rounds: one batched call per round for the problems the allocator picks.
            ids = [p.id for p in loaded]
            while not finished:
                drawn = [u for v in samples.values() for _, u in v]
                if drawn:
                    alloc.expected_cost = sum(price(u) for u in drawn) / len(drawn)
                chosen, room = [], budget - alloc.spent
                for pid in alloc.next_round(ids):
                    if worst_case(pid) > room:
                        break
                    chosen.append(pid)
                    room -= worst_case(pid)
                if not chosen:
                    log.write(json.dumps({"event": "finished"}) + "\n")
                    break
                requests: list[GenerationRequest] = [sc.request(by_id[pid]) for pid in chosen]
                for pid, res in zip(chosen, generator.generate(requests), strict=True):
                    sample = to_sample(res.completions[0], sc.extract)
                    samples[pid].append((sample, res.usage))
                    alloc.record(pid, sample.answer and normalize_answer(sample.answer), price(res.usage))
                    log.write(json.dumps({"problem_id": pid, "sample": to_jsonable(sample),
                                          "usage": to_jsonable(res.usage)}) + "\n")
                log.flush()
                os.fsync(log.fileno())
                if progress:
                    progress(min(alloc.spent, budget), budget)
        # 3. Aggregate, grade and store one row per problem.
        with Grader(timeout=config.grading_timeout) as grader:
            rows = []
            for p in loaded:
                if store.is_done(p.id, label):
                    continue
                got = samples[p.id]
                sol = sc.aggregate(p.id, [s for s, _ in got], Usage.total([u for _, u in got]))
                sc_n = SelfConsistency(SelfConsistencyConfig(n=max(len(got), 1)), generator, prompt.render)
                row = _grade_rows(p, [(sc_n, sol)], grader, generator.model_name, config.backend.kind)[0]
                row["config"] = label
                row["strategy"] = {"kind": "self_consistency", "n": len(got), "allocator": "online",
                                   "budget": budget, "unit": unit}
                row["budget_spent"] = sum(price(u) for _, u in got)
                rows.append(row)
            store.write(rows)
        rows = [r for r in store.rows if r["config"] == label]
        return EvalResult(Path(out), summarize(rows), rows, len(loaded), 0, time.perf_counter() - start)
    finally:
        store.close()
        if owns:
            generator.close()

