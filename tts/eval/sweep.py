"""Budget sweeps: a grid of strategies x sample counts x models, each cell with accuracy and every cost.

A sweep answers "which strategy buys the most accuracy per unit of compute, at every budget?".
Each *cell* is one (model, strategy config, n, seed) and records accuracy with its 95% interval,
pass@n, tokens, FLOPs, eFLOPs, predicted GPU-seconds and dollars on a named GPU, and the measured
wall seconds. Cells come from one of two sources:

- **a sample pool** (``pool``: a pool file, or a past ``tts eval`` run directory): every cell is
  an estimate over subsets of the pool's samples (:mod:`tts.eval.estimators`: exact where a
  combinatorial estimator exists, 1000 bootstrap draws otherwise), so n up to the pool size costs
  no generation. Only strategies that aggregate independent samples can be replayed (their class
  declares a ``pool_rule``); tokens are the pool's generated tokens (prompts are priced at
  ``prompt_tokens``, default 0, since pools do not record them).
- **live** (no pool): ``tts eval`` runs every strategy of the grid on the engine, one run
  directory per (model, seed) under ``OUT/live/``; a ladder of n draws once and evaluates every
  smaller n on a prefix, as ``tts eval`` does. Costs come from the recorded usage, priced by the
  ledger on the model's architecture.

Resumable: cells are appended to ``OUT/cells.jsonl`` as they finish and a cell already there is
never recomputed (a live run also resumes problem by problem). ``OUT/sweep.json`` records the
spec; a different source or GPU in the same directory is refused, and so are other live eval
settings (a stored cell summarises the problems its settings chose, not those of a new --limit).

``correct`` only grades: no estimator or strategy reads it to decide anything.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tts.benchmarks.append_log import read_append_log
from tts.benchmarks.pool_draws import RULES, rule_name
from tts.config import StrategyConfigBase, parse_strategy_config
from tts.eval.labels import config_line
from tts.eval.store import MANIFEST as RUN_MANIFEST

logger = logging.getLogger(__name__)

CELLS = "cells.jsonl"
MANIFEST = "sweep.json"
SCHEMA_VERSION = 1
_POOL_RULES = tuple(r for r, info in RULES.items() if info.strategy is not None)
"""The ``pool_rule``s of strategy classes that :mod:`tts.eval.estimators` replays: the rules of the
one table that a live strategy runs (vote, best_of_n, weighted_vote)."""


class SweepError(ValueError):
    """A sweep that cannot run as specified; the message says what to change."""


class SweepSpec(BaseModel):
    """What a sweep covers. From flags (``tts sweep``) or a YAML file with the same keys.

    Example (YAML)::

        pool: ../shared/data/pools/math500_reasoning_models.jsonl.gz
        strategies: [self_consistency, {kind: best_of_n}]
        n: [1, 4, 16, 64]
        gpu: h100
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategies: list[dict[str, Any]] = Field(default_factory=lambda: [{"kind": "self_consistency"}], min_length=1)
    """Strategies with their knobs (a name or a mapping with ``kind``); ``n`` comes from ``n``."""
    n: list[int] = Field(default_factory=lambda: [1, 4, 16], min_length=1)
    """Sample counts (candidates per problem) of the grid."""
    models: list[str] = Field(default_factory=list)
    """Pool: the pool's models to sweep (default all). Live: the models to run (default the embedded one)."""
    pool: str | None = None
    """A sample-pool file or a past ``tts eval`` run directory; None runs the grid live."""
    seeds: int = Field(1, ge=1, le=100)
    """Repeats with seeds 0..seeds-1 (bootstrap draws for pools, the run seed live) for seed-to-seed spread."""
    draws: int = Field(1000, ge=10, le=100_000)
    """Bootstrap draws of a pool estimate where no exact estimator exists."""
    weighting: Literal["auto", "score", "exp", "sigmoid"] = "auto"
    """How a pool's scores weigh votes (weighted_vote): ``auto`` uses the score itself when every
    score lies in [0, 1] (a verifier's probability) and exp(score) otherwise (a mean logprob)."""
    gpu: str = "h100"
    """GPU kind the cost model prices every cell on (``tts cost --gpu all`` lists them)."""
    prices: dict[str, float] = Field(default_factory=dict)
    """Overrides of the GPU price table, kind -> USD per GPU-hour."""
    arch: dict[str, str] = Field(default_factory=dict)
    """Pool model name -> architecture to price it with (a shipped name such as ``qwen3-14b`` or a
    config.json path); pool models whose name is a known architecture need no entry."""
    prompt_tokens: int = Field(0, ge=0)
    """Pool: prompt length priced per problem (pools record generated tokens only)."""
    concurrency: int | None = Field(None, ge=1)
    """Pool: sequences in flight per decode step sharing each weight read, as in a busy serving
    engine (Kinetics' setting, where weight reads are nearly free); None: each problem's n samples
    run alone and share only their own steps' reads."""
    sparse: str | None = None
    """Price every cell as if the engine ran sparse attention (Kinetics' what-if):
    ``topk:K[,local=W]`` or ``block:K,size=S[,local=W]`` (:class:`tts.cost.cost_model.SparseAttention`).
    Accuracy is the pool's or run's, measured with dense attention; only the costs change."""
    lengths: list[int] = Field(default_factory=list)
    """Pool: length budgets, caps on generated tokens per sample. Each cap replays the grid from the
    stored generations as if they had been capped there (:meth:`ModelPool.capped`: a longer sample
    is cut off before its answer and costs the cap), so one generation serves every smaller cap.
    Empty: the stored lengths as they are."""
    eval: dict[str, Any] = Field(default_factory=dict)
    """Live: the ``tts eval`` settings (data, backend, sampling, batch_size), as in its YAML."""

    @field_validator("strategies", mode="before")
    @classmethod
    def _names_to_mappings(cls, value: Any) -> Any:
        if isinstance(value, (str, dict)):
            value = [value]
        if isinstance(value, list):
            return [{"kind": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("n")
    @classmethod
    def _positive_sorted(cls, value: list[int]) -> list[int]:
        if any(n < 1 for n in value):
            raise ValueError(f"every n must be at least 1, got {value}")
        return sorted(set(value))

    @field_validator("sparse")
    @classmethod
    def _sparse_readable(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from tts.cost.cost_model import SparseAttention

        return SparseAttention.parse(value).label

    @field_validator("lengths")
    @classmethod
    def _lengths_positive_sorted(cls, value: list[int]) -> list[int]:
        if any(v < 1 for v in value):
            raise ValueError(f"every length budget must be at least 1 token, got {value}")
        return sorted(set(value))

    @model_validator(mode="after")
    def _concurrency_needs_a_pool(self) -> SweepSpec:
        if self.concurrency is not None and not self.pool:
            raise ValueError("concurrency prices a pool's samples as part of a busy engine; a live sweep prices "
                             "the batches it ran (drop --concurrency, or sweep a pool)")
        return self

    @model_validator(mode="after")
    def _lengths_need_a_pool(self) -> SweepSpec:
        if self.lengths and not self.pool:
            raise ValueError("length budgets replay stored generations: run the live sweep once at the largest "
                             "length (--max-tokens), then sweep its run directory with --pool OUT/live/RUN --lengths ...")
        return self

    @model_validator(mode="after")
    def _strategies_valid(self) -> SweepSpec:
        for s in self.strategies:
            if "n" in s:
                raise ValueError(f"strategy {s.get('kind')!r} sets n; the grid's n list sets it for every strategy")
            for n in self.n:
                parse_strategy_config({**s, "n": n})
        return self

    def configs(self) -> list[StrategyConfigBase]:
        """Every strategy config of the grid, strategy-major, n ascending."""
        return [parse_strategy_config({**s, "n": n}) for s in self.strategies for n in self.n]

    def grid(self) -> list[tuple[StrategyConfigBase, int | None]]:
        """Every (strategy config, length budget) of the grid; None = the stored lengths."""
        return [(c, length) for c in self.configs() for length in (self.lengths or [None])]

    @property
    def source(self) -> str:
        """``pool:PATH`` or ``live``."""
        return f"pool:{self.pool}" if self.pool else "live"


def cell_label(config: StrategyConfigBase, length: int | None) -> str:
    """The label of a grid point: the config's label, and its length budget when it has one."""
    return config.label if length is None else f"{config.label},max_tokens={length}"


@dataclass(frozen=True)
class Cell:
    """One grid point's result. Costs are per problem; None where the model's architecture is unknown."""

    model: str
    strategy: str
    config: str
    n: int
    seed: int
    source: str
    method: str
    """``exact``, ``bootstrap`` (pool estimates) or ``run`` (live)."""
    problems: int
    accuracy: float
    accuracy_low: float
    accuracy_high: float
    pass_at_n: float | None
    tokens: float | None
    """Generated tokens per problem (generator and verifier); None for a pool without token counts."""
    prompt_tokens: float
    flops: float | None
    eflops: float | None
    gpu_seconds: float | None
    dollars: float | None
    wall_seconds: float
    """Measured: the cell's estimate (pool) or its share of the run's wall time (live)."""
    gpu: str
    events: dict[str, int]
    per_problem: dict[str, float] | None = None
    """Each problem's (expected) accuracy under this cell, for per-difficulty analyses."""
    max_tokens: int | None = None
    """The length budget the cell was replayed at (pool ``lengths``); None = stored lengths."""

    @property
    def key(self) -> tuple[str, str, int]:
        """What identifies a cell on resume."""
        return (self.model, self.config, self.seed)


def read_cells(directory: str | Path) -> list[Cell]:
    """The cells of a sweep directory (a half-written last line is dropped)."""
    path = Path(directory) / CELLS
    if not path.is_file():
        raise SweepError(f"{directory} holds no sweep ({CELLS} is missing); run `tts sweep --out {directory}` first")
    return [Cell(**{**row, "events": row.get("events") or {}}) for row in read_append_log(path, repair=True)]


class CellStore:
    """Append-only cells of one sweep directory, with its manifest checked on resume."""

    def __init__(self, directory: Path, spec: SweepSpec) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / CELLS
        manifest = self.directory / MANIFEST
        if manifest.exists():
            old = json.loads(manifest.read_text())
            # A live cell summarises the problems its eval settings chose: a stored cell of other
            # settings (a --limit of more or fewer problems, another benchmark) is not this sweep's.
            for key in ("source", "gpu", "prompt_tokens", "weighting", "sparse", "concurrency") + (
                    () if spec.pool else ("eval",)):
                before = old.get(key, old.get("spec", {}).get(key))
                now = spec.source if key == "source" else getattr(spec, key)
                if before != now:
                    raise SweepError(f"{self.directory} holds a sweep with {key} {before!r}, not {now!r}; pass a new "
                                     "--out directory (cells of the same source and GPU are resumed and extended)")
        tmp = manifest.with_suffix(".tmp")
        tmp.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "source": spec.source,
                                   "spec": spec.model_dump(mode="json")}, indent=2))
        os.replace(tmp, manifest)
        self.cells: dict[tuple[str, str, int], Cell] = {}
        if self.path.exists():
            for cell in read_cells(self.directory):
                self.cells.setdefault(cell.key, cell)
        self._fh = self.path.open("a", encoding="utf-8")

    def has(self, model: str, config: str, seed: int) -> bool:
        """Whether the cell is already stored."""
        return (model, config, seed) in self.cells

    def write(self, cells: Sequence[Cell]) -> None:
        """Append cells and force them to disk."""
        for cell in cells:
            if cell.key in self.cells:
                continue
            self._fh.write(json.dumps(asdict(cell)) + "\n")
            self.cells[cell.key] = cell
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        """Close the cells file."""
        self._fh.close()


@dataclass(frozen=True)
class SweepResult:
    """What a sweep wrote: every cell of the grid (resumed ones included) and what it skipped."""

    out: Path
    cells: list[Cell]
    computed: int
    resumed: int
    unpriced: list[str]
    """Models without FLOPs, seconds or dollars: their architecture is unknown (``arch`` fixes it)
    or their pool has no token counts."""


@dataclass(frozen=True)
class Unit:
    """One piece of a sweep that one worker computes: the missing configs of one (model, seed).

    A pool unit replays one model's samples; a live unit is one ``tts eval`` run (one engine),
    resumable on its own in ``OUT/live/<model>-seed<seed>/``, so a unit that dies is simply run again.
    """

    model: str
    seed: int
    configs: tuple[str, ...]
    """Labels of the strategy configs to compute."""


ProgressFn = Callable[[int, int], None]


def check_spec(spec: SweepSpec) -> list[str]:
    """Refuse what cannot run before any work starts; returns the models of the grid."""
    from tts.cost.hardware import get_hardware
    from tts.cost.prices import usd_per_hour

    try:
        get_hardware(spec.gpu)
        usd_per_hour(spec.gpu, spec.prices)
    except (KeyError, ValueError) as exc:
        raise SweepError(str(exc).strip("'\"")) from None
    if not spec.pool:
        backend = dict(spec.eval.get("backend") or {})
        from tts.models import DEFAULT_MODEL

        return spec.models or [backend.get("model", DEFAULT_MODEL)]
    pool = _load_pool(spec.pool)
    models = spec.models or list(pool.models)
    for m in models:
        if m not in pool.by_model:
            raise SweepError(f"model {m!r} is not in pool {spec.pool}; choose from: {', '.join(pool.models)}")
    rules = {pool_rule_of(c) for c in spec.configs()}
    for model in models:
        mp = pool[model]
        if spec.lengths and not mp.has_tokens:
            raise SweepError(f"{model} in {spec.pool} has samples without num_tokens, which length budgets need; "
                             "drop --lengths or use a pool that records generated tokens")
        smallest = int(mp.counts.min())
        if spec.n[-1] > smallest:
            raise SweepError(f"n={spec.n[-1]} is more than the {smallest} samples some problem of {model} has in "
                             f"the pool; use n up to {smallest}")
        need = sorted(r for r in rules if r != "vote")
        if need and not mp.has_scores:
            raise SweepError(f"{model} in {spec.pool} has samples without a score, which {', '.join(need)} needs; "
                             "sweep self_consistency, or a pool with scores")
    return models


def plan_units(spec: SweepSpec, models: Sequence[str], store: CellStore) -> list[Unit]:
    """The units still to compute (cells already stored are skipped)."""
    labels = [cell_label(c, length) for c, length in spec.grid()]
    units = []
    for model in models:
        for seed in range(spec.seeds):
            todo = tuple(label for label in labels if not store.has(model, label, seed))
            if todo:
                units.append(Unit(model, seed, todo))
    return units


def compute_unit(spec: SweepSpec, unit: Unit, out: str | Path, generator: Any = None) -> list[Cell]:
    """Compute one unit's cells (pool replay, or a resumable live run under ``out``). Safe to rerun."""
    points = [(c, length) for c, length in spec.grid() if cell_label(c, length) in unit.configs]
    if spec.pool:
        return _pool_cells(spec, unit, points)
    return _live_cells(spec, unit, [c for c, _ in points], Path(out), generator)


def run_sweep(spec: SweepSpec, out: str | Path, progress: ProgressFn | None = None,
              generator: Any = None) -> SweepResult:
    """Run (or resume) a sweep in this process; returns every cell of the grid.

    Args:
        spec: The grid and its source.
        out: Sweep directory.
        progress: Called with (cells done, cells total).
        generator: Live sweeps: a ready generator for every model (tests); default builds from the spec.
    """
    out = Path(out)
    models = check_spec(spec)
    store = CellStore(out, spec)
    try:
        units = plan_units(spec, models, store)
        total = len(models) * len(spec.grid()) * spec.seeds
        done = total - sum(len(u.configs) for u in units)
        if progress:
            progress(done, total)
        for unit in units:
            cells = compute_unit(spec, unit, out, generator)
            store.write(cells)
            done += len(cells)
            if progress:
                progress(done, total)
    finally:
        store.close()
    return finish(spec, out, models, store, sum(len(u.configs) for u in units))


def _grid_keys(spec: SweepSpec, models: Sequence[str]) -> set[tuple[str, str, int]]:
    """The keys (model, config label, seed) of every cell of the grid."""
    return {(m, cell_label(c, length), s) for m in models for c, length in spec.grid() for s in range(spec.seeds)}


def cells_saved(spec: SweepSpec, out: str | Path) -> int:
    """How many cells of ``spec``'s grid the sweep directory ``out`` holds: what a resume skips."""
    wanted = _grid_keys(spec, check_spec(spec))
    return len({c.key for c in read_cells(out)} & wanted)


def finish(spec: SweepSpec, out: Path, models: Sequence[str], store: CellStore, computed: int) -> SweepResult:
    """The result of a sweep whose units are all written to ``store``."""
    wanted = _grid_keys(spec, models)
    cells = [c for k, c in store.cells.items() if k in wanted]
    unpriced = sorted({c.model for c in cells if c.dollars is None})
    return SweepResult(out, cells, computed, len(cells) - computed, unpriced)


# --- pool sweeps --------------------------------------------------------------------------------


def _load_pool(source: str) -> Any:
    from tts.benchmarks.pool import PoolError
    from tts.benchmarks.results_pool import load_results_as_pool

    path = Path(source)
    try:
        if path.is_dir():
            return load_results_as_pool(path)
        if not path.is_file():
            raise SweepError(f"--pool {source}: no such file or run directory")
        return _cached_pool(str(path.resolve()), path.stat().st_mtime_ns)
    except PoolError as exc:
        raise SweepError(str(exc)) from None


@functools.lru_cache(maxsize=2)
def _cached_pool(path: str, mtime: int) -> Any:
    """A pool file read once per process (a sweep checks it, then replays every model of it)."""
    from tts.benchmarks.pool import load_pool

    return load_pool(path)


def pool_rule_of(config: StrategyConfigBase) -> str:
    """The estimator that replays ``config`` from a pool, or a :class:`SweepError` naming those that can."""
    from tts.registry import STRATEGIES

    rule = rule_name(getattr(STRATEGIES.load(config.kind), "pool_rule", None) or "")
    if rule not in _POOL_RULES:
        able = [n for n in STRATEGIES.names()
                if rule_name(getattr(STRATEGIES.load(n), "pool_rule", None) or "") in _POOL_RULES]
        raise SweepError(f"{config.kind} cannot be replayed from a sample pool (it does more than aggregate "
                         f"independent samples); sweep it live (drop --pool), or choose from: {', '.join(able)}")
    if rule != "vote" and getattr(config, "verifier", None) is not None:
        raise SweepError(f"{config.label}: a pool replay scores samples with the pool's own score field, not a "
                         "verifier; drop the verifier setting or sweep live")
    return rule


def _weighting(spec: SweepSpec, scores: np.ndarray) -> str:
    if spec.weighting != "auto":
        return spec.weighting
    finite = scores[np.isfinite(scores)]
    return "score" if finite.size and finite.min() >= 0.0 and finite.max() <= 1.0 else "exp"


def _cost_model(model: str, spec: SweepSpec) -> Any:
    from tts.cost.ledger import cost_model_for

    try:
        cost_model = cost_model_for(spec.arch.get(model, model), spec.gpu)
    except (ValueError, OSError, KeyError):
        if model in spec.arch:
            raise SweepError(f"arch {model}={spec.arch[model]}: no such architecture; give a shipped name "
                             "(`tts cost --help` lists them) or a config.json path") from None
        return None
    if spec.sparse is None:
        return cost_model
    from tts.cost.cost_model import CostModel, SparseAttention

    return CostModel(cost_model.arch, cost_model.hardware, sparse=SparseAttention.parse(spec.sparse))


def _pool_costs(cost_model: Any, tokens: np.ndarray, mask: np.ndarray, n: int, prompt: int,
                concurrency: int | None = None) -> tuple[float, ...]:
    """Per-problem mean FLOPs, eFLOPs and GPU-seconds of n samples of each problem's mean length."""
    valid = mask & ~np.isnan(tokens)
    counts = valid.sum(axis=1)
    totals = np.where(valid, tokens, 0.0).sum(axis=1)  # a problem with no sample counts 0 tokens, without numpy's warning
    means = np.divide(totals, counts, out=np.zeros(len(counts)), where=counts > 0)
    costs = [cost_model.cost_request(prompt, [max(1, int(round(m)))] * n, concurrency=concurrency)
             for m in means]
    return (float(np.mean([c.flops for c in costs])), float(np.mean([c.eflops for c in costs])),
            float(np.mean([c.gpu_seconds for c in costs])))


def _pool_cells(spec: SweepSpec, unit: Unit, points: Sequence[tuple[StrategyConfigBase, int | None]]) -> list[Cell]:
    """The cells of one model and seed from its pool, one estimate per length budget."""
    full = _load_pool(spec.pool or "")[unit.model]
    cells = []
    for length in sorted({length for _, length in points}, key=lambda v: -1 if v is None else v):
        configs = [c for c, cap in points if cap == length]
        mp = full if length is None else full.capped(length)
        events = {} if length is None else {"cut_at_length": int((full.mask & (full.tokens > length)).sum())}
        cells += _pool_cells_at(spec, unit, configs, mp, length, events)
    return cells


def _pool_cells_at(spec: SweepSpec, unit: Unit, configs: Sequence[StrategyConfigBase], mp: Any,
                   length: int | None, events: dict[str, int]) -> list[Cell]:
    from tts.cost.prices import dollars
    from tts.eval import estimators as est

    rules = {c.label: pool_rule_of(c) for c in configs}
    cost_model = _cost_model(unit.model, spec) if mp.has_tokens else None
    mean_tokens = float(np.nanmean(np.where(mp.mask, mp.tokens, np.nan), axis=1).mean()) if mp.has_tokens else None
    start = time.perf_counter()
    curves = est.pool_curves(mp, rules=tuple(sorted(set(rules.values()) | {"pass"})), ns=sorted({c.n for c in configs}),
                             draws=spec.draws, seed=unit.seed, weighting=_weighting(spec, mp.scores[mp.mask]))
    wall = (time.perf_counter() - start) / len(configs)
    cells = []
    for c in configs:
        curve = curves[rules[c.label]]
        acc, lo, hi = curve.at(c.n)
        column = int(np.flatnonzero(curve.ns == c.n)[0])
        costs = (_pool_costs(cost_model, mp.tokens, mp.mask, c.n, spec.prompt_tokens, spec.concurrency)
                 if cost_model else None)
        cells.append(Cell(
            model=unit.model, strategy=c.kind, config=cell_label(c, length), n=c.n, seed=unit.seed,
            source=spec.source, method=curve.method, problems=mp.n_problems, accuracy=acc, accuracy_low=lo,
            accuracy_high=hi, pass_at_n=curves["pass"].at(c.n)[0], tokens=c.n * mean_tokens if mean_tokens else None,
            prompt_tokens=float(spec.prompt_tokens), flops=costs[0] if costs else None,
            eflops=costs[1] if costs else None, gpu_seconds=costs[2] if costs else None,
            dollars=dollars(costs[2], spec.gpu, spec.prices) if costs else None, wall_seconds=wall,
            gpu=spec.gpu, events=dict(events), max_tokens=length,
            per_problem=dict(zip(mp.problem_ids, np.round(curve.per_problem[:, column], 6).tolist(), strict=True))))
    return cells


# --- live sweeps --------------------------------------------------------------------------------


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "model"


def live_eval_config(spec: SweepSpec, unit: Unit, configs: Sequence[StrategyConfigBase] | None = None) -> Any:
    """The ``tts eval`` config of a live unit: the sweep's eval settings, the unit's model and seed
    (the run seed, hence the engine seed), its strategy configs; the backend defaults to vLLM."""
    from tts.config import EvalConfig, settings_line

    if configs is None:
        configs = [c for c in spec.configs() if c.label in unit.configs]
    base = dict(spec.eval)
    backend = {"kind": "vllm", **(base.get("backend") or {}), "model": unit.model}
    try:
        return EvalConfig.model_validate({**base, "backend": backend, "seed": unit.seed,
                                          "strategies": [c.model_dump(mode="json") for c in configs]})
    except ValueError as exc:
        raise SweepError(settings_line(exc, "the live settings do not make a valid tts eval config")) from None


def live_run_dir(out: Path, unit: Unit, cfg: Any) -> Path:
    """Where a live unit's ``tts eval`` run goes: ``live/MODEL-seedS``, or, where that directory holds a
    run of other strategy configs (an earlier sweep of this grid before an n or a strategy was
    added), ``live/MODEL-seedS-DIGEST`` named by the configs this run computes.

    A run directory holds one set of configs (resuming it with others is refused), and the cells of
    the earlier run are already stored, so only the added configs run, in a directory of their own;
    an interrupted run of the same configs finds its directory again and resumes.
    """
    base = out / "live" / f"{_slug(unit.model)}-seed{unit.seed}"
    strategies = cfg.model_dump(mode="json")["strategies"]
    manifest = base / RUN_MANIFEST
    if not manifest.exists():
        return base
    try:
        held = json.loads(manifest.read_text()).get("config", {}).get("strategies")
    except (OSError, ValueError):
        return base  # unreadable: the run's own check says what is wrong with it
    if held == strategies:
        return base
    digest = hashlib.sha256(json.dumps(strategies, sort_keys=True).encode()).hexdigest()[:8]
    return base.with_name(f"{base.name}-{digest}")


def _live_cells(spec: SweepSpec, unit: Unit, configs: Sequence[StrategyConfigBase], out: Path,
                generator: Any) -> list[Cell]:
    from tts.cost.ledger import price_usages
    from tts.cost.prices import dollars
    from tts.eval.runner import run_eval

    cost_model = _cost_model(unit.model, spec)
    cfg = live_eval_config(spec, unit, configs)
    result = run_eval(cfg, live_run_dir(out, unit, cfg), generator=generator)
    by_label = {s.config: s for s in result.summaries}
    ledger = price_usages(((r.config, r.usage) for r in result.rows), cost_model) if cost_model else {}
    cells = []
    for c in configs:
        s = by_label[c.label]
        per = ledger[c.label].per_problem if c.label in ledger else None
        cells.append(Cell(
            model=unit.model, strategy=c.kind, config=c.label, n=c.n, seed=unit.seed, source=spec.source,
            method="run", problems=s.problems, accuracy=s.accuracy, accuracy_low=s.accuracy_low,
            accuracy_high=s.accuracy_high, pass_at_n=s.coverage, tokens=s.completion_tokens_per_problem,
            prompt_tokens=s.tokens_per_problem - s.completion_tokens_per_problem,
            flops=per.flops if per else None, eflops=per.eflops if per else None,
            gpu_seconds=per.gpu_seconds if per else None,
            dollars=dollars(per.gpu_seconds, spec.gpu, spec.prices) if per else None,
            wall_seconds=s.wall_seconds, gpu=spec.gpu, events=dict(s.events),
            per_problem={r.problem_id: float(r.correct) for r in result.rows if r.config == c.label}))
    return cells


# --- reading a sweep ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CurvePoint:
    """A (model, config) averaged over seeds: accuracy, its interval, spread and costs."""

    model: str
    strategy: str
    config: str
    n: int
    accuracy: float
    low: float
    high: float
    seed_sd: float | None
    """Standard deviation of accuracy across seeds (None with one seed)."""
    costs: dict[str, float | None]
    max_tokens: int | None = None
    """The cells' length budget (None = stored lengths)."""

    @property
    def line(self) -> str:
        """The curve this point lies on (:func:`~tts.eval.labels.config_line`)."""
        return config_line(self.config)


COST_AXES = ("tokens", "eflops", "flops", "gpu_seconds", "dollars")
"""Cost axes a sweep records per cell (all per problem)."""


def curve_points(cells: Sequence[Cell]) -> list[CurvePoint]:
    """Cells averaged over seeds, one point per (model, config), ordered by model, strategy and n."""
    groups: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        groups.setdefault((c.model, c.config), []).append(c)
    points = []
    for (model, config), group in groups.items():
        acc = np.array([c.accuracy for c in group])

        def mean(attr: str) -> float | None:
            values = [getattr(c, attr) for c in group]
            return None if any(v is None for v in values) else float(np.mean(values))

        points.append(CurvePoint(
            model=model, strategy=group[0].strategy, config=config, n=group[0].n, accuracy=float(acc.mean()),
            low=float(np.mean([c.accuracy_low for c in group])), high=float(np.mean([c.accuracy_high for c in group])),
            seed_sd=float(acc.std(ddof=1)) if len(group) > 1 else None,
            costs={axis: mean(axis) for axis in COST_AXES}, max_tokens=group[0].max_tokens))
    return sorted(points, key=lambda p: (p.model, p.line.split(",max_tokens=")[0], p.max_tokens or 0, p.n))


def pareto_front(points: Sequence[CurvePoint], axis: str) -> list[CurvePoint]:
    """The points no other point beats on both ``axis`` cost (lower) and accuracy (higher), cheapest first."""
    priced = sorted((p for p in points if p.costs.get(axis) is not None),
                    key=lambda p: (p.costs[axis], -p.accuracy))
    front: list[CurvePoint] = []
    best = -math.inf
    for p in priced:
        if p.accuracy > best:
            front.append(p)
            best = p.accuracy
    return front


def saturation(points: Sequence[CurvePoint], axis: str, gain: float = 0.01) -> CurvePoint | None:
    """The point of one curve past which every doubling of the cost buys less than ``gain`` accuracy.

    "Scaling over Scaling" (Chen et al. 2025, arXiv:2505.20522) locates the saturation point of a
    test-time scaling curve where extra compute stops paying. Here: the gain of doubling at a point
    is the accuracy at twice its cost (linear interpolation in log cost between the curve's points)
    minus its own; the saturation point is the cheapest point from which on every doubling gains
    less than ``gain``. A flat start followed by a rise is not saturation. None when the last
    doubling within the curve's range still pays (or the curve is unpriced).
    """
    curve = sorted((p for p in points if p.costs.get(axis)), key=lambda p: p.costs[axis])
    if len(curve) < 2:
        return None
    log_cost = np.log2([p.costs[axis] for p in curve])
    accuracy = np.array([p.accuracy for p in curve])
    doubling = [float(np.interp(x + 1, log_cost, accuracy) - a)
                for x, a in zip(log_cost, accuracy, strict=True) if x + 1 <= log_cost[-1] + 1e-9]
    if not doubling or doubling[-1] >= gain:
        return None
    first = len(doubling) - 1
    while first > 0 and doubling[first - 1] < gain:
        first -= 1
    return curve[first]


def within_noise(a: CurvePoint, b: CurvePoint) -> bool:
    """Whether two points' accuracies differ by less than the noise: their intervals overlap, or
    (with seeds) the difference is within two seed-to-seed standard deviations."""
    if a.low <= b.high and b.low <= a.high:
        return True
    sds = [s for s in (a.seed_sd, b.seed_sd) if s is not None]
    return bool(sds) and abs(a.accuracy - b.accuracy) < 2 * max(sds)
