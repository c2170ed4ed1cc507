"""``tts eval --allocate``: self-consistency under one total budget, spent where it buys accuracy.

The settings come from ``EvalConfig.allocation`` (:class:`tts.config.AllocationConfig`). Two modes:

* ``online`` (default): the rule of :mod:`tts.budgets.online`, the same one that
  ``tts budget simulate`` replays. Each round gives every problem whose vote is not decided
  ``chunk`` more samples (one n-sample request, so its prompt is paid once), least confident
  first; unanimous problems stop early and the budget they leave goes to contested ones. A round's
  requests go to the engine in as few calls as the budget allows: each call carries the requests
  whose worst case (every sample at ``max_tokens``, prompt uncached) fits what is left, so the
  budget is never exceeded. Prompt lengths are exact where the backend tokenizes locally (vLLM,
  scripted) and bounded from observed tokens per character otherwise (OpenAI servers). Budgets
  in tokens (generated plus uncached prompt tokens), Kinetics eFLOPs or predicted GPU-seconds on
  a named GPU. The decisions of every round are written to ``rounds.json``.
* ``offline``: k pilot samples per problem, difficulty bins from pilot agreement, accuracy-vs-n
  curves per bin from a calibration pool (a past run of the same model, or a sample-pool file),
  then the greedy marginal-gain allocator (:func:`tts.budgets.offline_plan.plan_from_pilot`)
  plans each problem's n (at most ``n_max``); the extra samples are drawn in one call. Plans keep
  the budget in expected generated tokens; the actual spend is reported. The plan is written to
  ``plan.json``.

Every request's seed is derived from the samples of its problem already drawn, so no round
repeats an earlier one's samples. Every drawn sample is appended to ``samples.jsonl`` as soon as
its call returns; a killed run resumes by replaying the same decisions on the samples it already
paid for, then continues. Results are written when the budget is spent.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tts.answers import answer_keys
from tts.backends.base import Generator, count_prompt_tokens, request_usage
from tts.benchmarks.append_log import read_append_log
from tts.budgets.allocator import (
    AllocationError,
    BudgetError,
    BudgetTooSmallError,
    CalibrationError,
)
from tts.config import AllocationConfig, EvalConfig
from tts.cost.deployment import deployment_of
from tts.cost.ledger import usage_from_json
from tts.eval.report import summarize
from tts.eval.runner import EvalResult, check_sandbox, grade_rows, load_problems
from tts.eval.store import ResultsStore
from tts.prompts import chat_prompt, extract_options
from tts.search.base import to_sample
from tts.search.sampling.self_consistency import SelfConsistency, SelfConsistencyConfig
from tts.types import Problem, Sample, Usage, to_jsonable

if TYPE_CHECKING:
    from tts.budgets.online import OnlinePolicy

logger = logging.getLogger(__name__)

__all__ = ["AllocationError", "BudgetError", "BudgetTooSmallError", "CalibrationError", "SamplesLog",
           "run_allocated_eval"]

SAMPLES_LOG = "samples.jsonl"
PLAN_FILE = "plan.json"
ROUNDS_FILE = "rounds.json"

Price = Callable[[Usage], float]


def _pricer(alloc: AllocationConfig, model: str, deployment: dict[str, Any] | None = None) -> Price:
    """What a recorded usage cost in the allocation's unit: :meth:`Pricer.usage
    <tts.budgets.pricing.Pricer.usage>` of the one pricer, so that ``tts eval --allocate``, ``auto`` and
    the replays count a budget alike.

    Raises:
        AllocationError: A GPU-priced unit for a model whose architecture (or GPU) is unknown.
    """
    from tts.budgets.pricing import make_pricer

    try:
        return make_pricer(alloc.unit, model, alloc.gpu, deployment=deployment).usage
    except ValueError as exc:  # unknown architecture or GPU
        raise AllocationError(f"--budget-unit {alloc.unit} needs the model's architecture and a known GPU: "
                              f"{exc}") from None


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


class _Sampler:
    """Draws the samples the allocator asks for: first those a killed run already paid for (in
    the samples log, in order), then the rest in ONE generator call.

    Each request's seed is derived from the samples of its problem already drawn (``drawn=``), so
    a later round never repeats an earlier one's samples on engines that honour seeds.
    """

    def __init__(self, generator: Generator, sc: SelfConsistency, log: SamplesLog, problems: Sequence[Problem],
                 price: Price) -> None:
        self.generator, self.sc, self.log, self.price = generator, sc, log, price
        self.by_id = {p.id: p for p in problems}
        self.used = {p.id: 0 for p in problems}

    def consumed(self, pid: str) -> list[tuple[Sample, Usage]]:
        """The samples of ``pid`` handed out so far."""
        return self.log.samples[pid][: self.used[pid]]

    def draw(self, wanted: Sequence[tuple[str, int]]) -> list[tuple[str, Sample, float]]:
        """``k`` more samples of each (problem, k), with their costs; logged at once."""
        out: list[tuple[str, Sample, float]] = []
        fresh: list[tuple[str, int]] = []
        for pid, k in wanted:
            have = self.log.samples[pid][self.used[pid]: self.used[pid] + k]
            out.extend((pid, s, self.price(u)) for s, u in have)
            self.used[pid] += len(have)
            if k > len(have):
                fresh.append((pid, k - len(have)))
        if fresh:
            requests = [self.sc.request(self.by_id[pid], n=k, drawn=len(self.log.samples[pid])) for pid, k in fresh]
            for (pid, _), res in zip(fresh, self.generator.generate(requests), strict=True):
                for c, u in zip(res.completions, _split_usage(res.usage, len(res.completions)), strict=True):
                    sample = to_sample(c, self.sc.extract)
                    self.log.add(pid, sample, u)
                    out.append((pid, sample, self.price(u)))
                self.used[pid] += len(res.completions)
            self.log.flush()
        return out


class _WorstCase:
    """The most one request of k samples can cost: every sample at ``max_tokens``, prompt uncached.

    Prompt lengths are exact where the backend counts them; otherwise the largest prompt seen for
    the problem, else its characters times the largest tokens-per-character ratio seen (plus 25%),
    else one token per character (an upper bound for BPE tokenizers).
    """

    def __init__(self, ids: Sequence[str], sampler: _Sampler, price: Price, max_tokens: int) -> None:
        self.ids, self.sampler = list(ids), sampler
        sc, gen = sampler.sc, sampler.generator
        self.exact = {pid: count_prompt_tokens(gen, sc.request(sampler.by_id[pid])) for pid in self.ids}
        self.chars = {pid: sum(len(m.content) for m in sc.request(sampler.by_id[pid]).messages) for pid in self.ids}
        self._cost = lru_cache(maxsize=None)(
            lambda prompt, k: price(request_usage(prompt, 0, [max_tokens] * k, 0.0)))

    def prompts(self, problems: np.ndarray) -> dict[int, int]:
        """Prompt-token bound of each problem index, from what has been observed so far."""
        unknown = [self.ids[int(i)] for i in problems if self.exact[self.ids[int(i)]] is None]
        ratio = None
        if unknown:  # tokens per character seen on any problem (backends that do not count)
            ratios = [u.prompt_tokens / self.chars[q] for q in self.ids for _, u in self.sampler.consumed(q)
                      if u.prompt_tokens]
            ratio = min(1.0, 1.25 * max(ratios)) if ratios else None
        out = {}
        for i in problems.tolist():
            pid = self.ids[i]
            if self.exact[pid] is not None:
                out[i] = int(self.exact[pid])
                continue
            seen = [u.prompt_tokens for _, u in self.sampler.consumed(pid) if u.prompt_tokens]
            out[i] = max(seen) if seen else int(self.chars[pid] * ratio) + 1 if ratio else self.chars[pid]
        return out

    def __call__(self, p: np.ndarray, k: np.ndarray) -> np.ndarray:
        p, k = np.broadcast_arrays(np.asarray(p), np.asarray(k))
        prompts = self.prompts(np.unique(p))
        out = [self._cost(prompts[int(i)], int(m)) for i, m in zip(p.ravel(), k.ravel())]
        return np.asarray(out, dtype=float).reshape(p.shape)


def online_policy(alloc_cfg: AllocationConfig) -> OnlinePolicy:
    """The online rule of an allocated run: ``n_max``, ``chunk`` and every setting of
    :data:`tts.config.ONLINE_RULE_SETTINGS` (ValueError, naming the setting, for a combination the
    rule refuses, e.g. ``confirm_window`` with rule "window")."""
    from tts.budgets.online import OnlinePolicy
    from tts.config import ONLINE_RULE_SETTINGS

    settings = {key: getattr(alloc_cfg, key) for key in ONLINE_RULE_SETTINGS}
    return OnlinePolicy(n_max=alloc_cfg.n_max, chunk=alloc_cfg.chunk, **settings)


def _online(config: EvalConfig, out: Path, log: SamplesLog, sampler: _Sampler, loaded: list[Problem],
            price: Price, progress: Callable[[float, float], None] | None) -> None:
    from tts.budgets.online import OnlineAllocator

    alloc_cfg = config.allocation
    assert alloc_cfg is not None  # checked by run_allocated_eval
    ids = [p.id for p in loaded]
    worst = _WorstCase(ids, sampler, price, config.sampling.max_tokens)
    need = float(worst(np.arange(len(ids)), np.ones(len(ids), dtype=np.int64)).sum())
    budget = alloc_cfg.budget
    if budget < need:
        raise BudgetTooSmallError(
            f"--budget {budget:g} {alloc_cfg.unit} is smaller than one sample per problem at its worst case "
            f"({need:.4g} {alloc_cfg.unit} for {len(ids)} problems: up to --max-tokens "
            f"{config.sampling.max_tokens} generated tokens plus the prompt each); raise --budget to at least "
            f"{need:.4g}, or lower --max-tokens or --limit.", need)
    alloc = OnlineAllocator(ids, budget, online_policy(alloc_cfg))
    # Decide, pay, record: a resumed run takes the same decisions on the samples it already has.
    # Vote keys come from all of a problem's answers so far, so that equal answers written
    # differently (0.5, \frac{1}{2}) vote together across rounds; a group keeps its first key.
    answers: dict[str, list[str | None]] = {pid: [] for pid in ids}
    while call := alloc.next_call(worst):
        for pid, sample, cost in sampler.draw(call):
            answers[pid].append(sample.answer)
            alloc.record(pid, answer_keys(answers[pid])[-1], cost)
        if progress:
            progress(min(alloc.spent, budget), budget)
    starved = [pid for pid, n in zip(ids, alloc.n.tolist(), strict=True) if n == 0]
    if starved:
        raise BudgetTooSmallError(
            f"the budget ran out in the first round: {len(starved)} of {len(ids)} problems got no sample "
            f"({alloc.spent:.4g} of {budget:g} {alloc_cfg.unit} spent); raise --budget, or lower --chunk so "
            "that the first round costs less.", alloc.spent * len(ids) / max(len(ids) - len(starved), 1))
    (out / ROUNDS_FILE).write_text(json.dumps(
        {"budget": budget, "unit": alloc_cfg.unit, "spent": alloc.spent, "rounds": alloc.rounds}, indent=1))
    log.finish()


def _offline(config: EvalConfig, out: Path, log: SamplesLog, sampler: _Sampler, loaded: list[Problem],
             price: Price, progress: Callable[[float, float], None] | None) -> None:
    from tts.benchmarks.pool import PoolError, load_pool
    from tts.benchmarks.results_pool import load_results_as_pool
    from tts.budgets.allocator import DEFAULT_LADDER
    from tts.budgets.offline_plan import plan_from_pilot

    alloc_cfg = config.allocation
    assert alloc_cfg is not None and alloc_cfg.calibration is not None  # checked by AllocationConfig
    calibration, model, pilot, budget = alloc_cfg.calibration, config.backend.model, alloc_cfg.pilot, alloc_cfg.budget
    try:
        is_run = calibration.is_dir() or calibration.name == "results.jsonl"
        pool = load_results_as_pool(calibration) if is_run else load_pool(calibration)
    except (PoolError, OSError) as exc:
        raise CalibrationError(f"--calibration {calibration}: {exc}") from None
    if model in pool.models:
        cal = pool[model]
    elif len(pool.models) == 1:
        cal = pool[pool.models[0]]
        logger.warning("calibration pool holds model %r, not %r; using it anyway", pool.models[0], model)
    else:
        raise CalibrationError(f"--calibration {calibration} has models {pool.models}, none of them {model!r}.")
    # 1. Pilot: k samples per problem in one call (from the log where a killed run drew them).
    sampler.draw([(p.id, pilot) for p in loaded])
    pilots = {p.id: [s for s, _ in sampler.consumed(p.id)] for p in loaded}
    spent = sum(price(u) for p in loaded for _, u in sampler.consumed(p.id))
    if spent >= budget:
        raise BudgetTooSmallError(
            f"--budget {budget:g} tokens is used up by the {pilot}-sample pilot ({spent:.4g} tokens); "
            "raise it or lower --pilot / --limit.", spent)
    # 2. Plan from the pilot (deterministic, so a resumed run recomputes the same plan).
    ladder = tuple(sorted({n for n in DEFAULT_LADDER if n <= alloc_cfg.n_max} | {alloc_cfg.n_max}))
    plan = plan_from_pilot([p.id for p in loaded],
                           [answer_keys([s.answer for s in pilots[p.id]]) for p in loaded],
                           [[s.completion_tokens for s in pilots[p.id]] for p in loaded], cal, budget - spent,
                           pilot=pilot, ladder=ladder, max_tokens=config.sampling.max_tokens)
    (out / PLAN_FILE).write_text(json.dumps(plan.to_json(), indent=1, default=str))
    # 3. The planned extra samples, all in one call.
    sampler.draw([(pl.problem_id, pl.n - pilot) for pl in plan.plans if pl.n > pilot])
    log.finish()
    if progress:
        progress(min(sum(price(u) for p in loaded for _, u in sampler.consumed(p.id)), budget), budget)


def run_allocated_eval(
    config: EvalConfig,
    out: Path,
    generator: Generator | None = None,
    problems: Sequence[Problem] | None = None,
    progress: Callable[[float, float], None] | None = None,
) -> EvalResult:
    """Spend ``config.allocation.budget`` over the problems with budget-allocated self-consistency.

    Args:
        config: Run config (data, backend, sampling) with its ``allocation`` settings.
        out: Run directory (resumes from its samples log).
        generator: A ready generator (default: built from ``config.backend``).
        problems: Problems to use instead of loading ``config.data``.
        progress: Called with (budget spent, budget).

    Returns:
        One row per problem, labelled ``allocated-<mode>@<budget><unit>``; each row's ``strategy``
        is self-consistency with the n that problem got, its ``allocation`` the settings and its
        ``budget_spent`` what it cost.

    Raises:
        ValueError: ``config.allocation`` is not set.
        BudgetTooSmallError: The budget cannot pay one sample per problem (online), or the pilot
            (offline), or ran out before every problem got a sample.
        CalibrationError: Offline: the calibration run or pool cannot be read or used.
        AllocationError: A GPU-priced unit for a model whose architecture is unknown.
    """
    from tts.backends.factory import create_generator

    start = time.perf_counter()
    alloc_cfg = config.allocation
    if alloc_cfg is None:
        raise ValueError("config.allocation is not set; give an allocation section (or --allocate --budget) "
                         "or run tts.eval.runner.run_eval for fixed-n strategies")
    out = Path(out)
    bench, loaded = load_problems(config, problems)
    price = _pricer(alloc_cfg, config.backend.model, deployment_of(config.backend))
    label = f"allocated-{alloc_cfg.mode}@{alloc_cfg.budget:g}{alloc_cfg.unit}"
    store = ResultsStore(out, config.model_dump(mode="json"), config.backend.model)
    log = SamplesLog(out / SAMPLES_LOG, [p.id for p in loaded])
    owns = generator is None
    try:
        check_sandbox([], bench)  # self-consistency runs no code; a benchmark's grader may (HumanEval)
        generator = generator or create_generator(config.backend, loaded)
        extra = extract_options(bench.prompt)  # as the runner's strategies
        sc = SelfConsistency(SelfConsistencyConfig(n=1), generator, chat_prompt(bench.prompt), config.sampling,
                             seed=config.seed, **extra)
        # 1. Sampling under the budget (skipped when a finished run is re-opened).
        if not log.finished:
            sampler = _Sampler(generator, sc, log, loaded, price)
            mode_run = _online if alloc_cfg.mode == "online" else _offline
            mode_run(config, out, log, sampler, loaded, price, progress)
        # 2. Aggregate, grade and store one row per problem.
        settings = alloc_cfg.model_dump(mode="json")
        with bench.grader(config.grading_timeout) as grader:
            rows = []
            for p in loaded:
                if store.is_done(p.id, label):
                    continue
                got = log.samples[p.id]
                sol = sc.aggregate(p.id, [s for s, _ in got], Usage.total([u for _, u in got]))
                row = grade_rows(p, [(SelfConsistencyConfig(n=len(got)), sol)], grader, generator.model_name,
                                 config.backend.kind)[0]
                rows.append(row.model_copy(update={"config": label, "allocation": settings,
                                                   "budget_spent": sum(price(u) for _, u in got)}))
            store.write(rows)
        ids = {p.id for p in loaded}  # a resumed run with a smaller limit reports its own problems only
        rows = [r for r in store.rows if r.config == label and r.problem_id in ids]
        return EvalResult(out, summarize(rows), rows, len(loaded), 0, time.perf_counter() - start)
    finally:
        log.close()
        store.close()
        if owns and generator is not None:
            generator.close()
