"""The compute-optimal frontier of a sweep: per budget, the best strategy per difficulty bin, cross-fitted.

Snell, Lee, Xu and Kumar (2024, arXiv:2408.03314, "Scaling LLM Test-Time Compute Optimally can be
More Effective than Scaling Model Parameters", Sec. 3) bin problems into 5 levels of
model-predicted difficulty and choose, per bin and budget, the strategy that does best there
("compute-optimal scaling"); they report its gain over one fixed strategy at the same budget.
Here, for every (model, budget level) of a sweep:

1. **Difficulty** (:func:`difficulty_from_pool`, :func:`difficulty_for_run`): per problem, the
   share of the modal answer among the model's own samples (:func:`tts.budgets.difficulty.majority_share`;
   higher = easier). A pool sweep takes the samples of the pool named in ``OUT/sweep.json``; a live
   sweep those of its runs (``OUT/live/*/results.jsonl``: each problem's largest sampling config,
   whose samples every smaller config shares; averaged over seeds). Only answers are read, never
   ``correct`` (docs/architecture.md, "Honest simulation"); the samples' cost is not charged to
   the budget (nor is it in Snell et al.).
2. **Budget levels**: ``axis="n"`` (default): the configs of the sweep with the same n compete.
   A cost axis (``"tokens"``, ``"eflops"``, ...): every distinct cost of a config is a level and
   the configs costing at most that much compete (so a cheaper n of one strategy can win a bin).
3. **Cross-fitting**: problems are split into ``folds`` seeded folds. For each fold, the bin edges
   (difficulty quantiles, ``bins`` bins; tied scores such as unanimous problems share a bin and
   the bins they would have filled go to the other problems, :func:`bin_edges`) and, per bin, the
   config with the best mean per-problem accuracy are fitted on the *other* folds; the held-out
   problems are scored with their bin's choice. The best single config is chosen the same way
   (best on the other folds). A bin empty in training, or one where the single choice ties the
   best, takes the single choice, so identical strategies give a gain of exactly 0.
4. **Gain**: compute-optimal minus best single, per problem. Its 95% interval is a paired
   percentile bootstrap over problems that refits the folds' bins and choices on every resample
   (a resampled problem keeps its fold), so the choices' own noise is in it. On synthetic sweeps
   (300 problems, 40 datasets each) it covered the true gain 37/40 times where per-bin choice pays
   and 0 in 40/40 where it cannot (two equal noisy strategies: conservative there); an interval
   that keeps the choices fixed covered 0 only 34/40 times. For reference, the best single config
   and the per-bin choice fitted and scored on all problems are reported "in hindsight (oracle)":
   they are not achievable numbers.

Optimism of sharing samples: the difficulty and the accuracy estimates come from the same samples
(a problem whose samples happen to agree is both "easy" and, for voting, likely right), which can
flatter the per-bin choice; a deployment would estimate difficulty from pilot samples and then
run the strategy. Measured on the Qwen2.5-Math RM pool (100 problems, 8 samples; 20 random splits
into two halves of 4; self_consistency / best_of_n / weighted_vote swept on one half at n = 1, 2,
4): the mean gain with difficulty from the same half was +0.0000, -0.0003, -0.0040 and from the
disjoint half +0.0000, -0.0012, -0.0034 (split-to-split sd up to 0.007): no measurable optimism
there (under 0.001), because the per-bin choice itself gains nothing on that pool. The mechanism
shows on GPQA-Diamond (self_consistency@16 on one half of 80 samples, 5 bins of ~40 problems):
difficulty from the same half made the easiest bin look more accurate than difficulty from the
other half for 5 of 6 models (by up to 0.05), while the other bins moved both ways (up to ±0.25,
mostly noise); the gain only inherits this where the strategies rank differently by bin. To
measure it on another pool, sweep a pool file of one half of the samples and pass
:func:`compute_optimal` the difficulty of the other half (:func:`difficulty_from_pool`).

Example:
    >>> report = compute_optimal_for_run("runs/sw", read_cells("runs/sw"))        # doctest: +SKIP
    >>> report.write_json("runs/sw/plots/compute_optimal.json")                  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tts.budgets.difficulty import assign_bins, majority_share
from tts.eval.frontier_report import BinChoice, BudgetRow, FrontierReport
from tts.eval.labels import config_line
from tts.eval.sweep import MANIFEST, Cell

_BOOT_CHUNK = 100
"""Bootstrap resamples fitted at once (bounds the (resamples, bins, problems) arrays)."""
Difficulty = Mapping[str, Mapping[str, float]]
"""model -> problem id -> difficulty score in [0, 1], higher = easier (agreement of the model's answers)."""


# --- difficulty ----------------------------------------------------------------------------------


def difficulty_from_pool(pool: Any) -> dict[str, dict[str, float]]:
    """Agreement of each model's answers per problem (share of the modal answer; no answer disagrees).

    Args:
        pool: A :class:`~tts.benchmarks.pool.SamplePool`, a pool file, or a ``tts eval`` run directory.

    Returns:
        model -> problem id -> agreement in [0, 1] (higher = easier). ``correct`` is never read.
    """
    if isinstance(pool, (str, Path)):
        pool = _load(Path(pool))
    return {model: dict(zip(mp.problem_ids, majority_share(mp.answers, mp.mask).tolist(), strict=True))
            for model, mp in pool.by_model.items()}


def _load(path: Path) -> Any:
    from tts.benchmarks.pool import load_pool
    from tts.benchmarks.results_pool import load_results_as_pool

    return load_results_as_pool(path) if path.is_dir() else load_pool(path)


def difficulty_for_run(run: str | Path) -> tuple[dict[str, dict[str, float]], str]:
    """The difficulty of a sweep's problems from its own samples, and a sentence saying where it came from.

    A pool sweep reads the pool named in ``RUN/sweep.json`` (as given, else relative to ``RUN``);
    a live sweep its runs under ``RUN/live/``. Raises ``ValueError`` saying why when neither is found.
    """
    from tts.benchmarks.pool import PoolError

    run = Path(run)
    manifest = run / MANIFEST
    source = json.loads(manifest.read_text()).get("source", "") if manifest.is_file() else ""
    if source.startswith("pool:"):
        given = Path(source.removeprefix("pool:"))
        path = next((p for p in (given, run / given) if p.exists()), None)
        if path is None:
            raise ValueError(f"the sweep's pool {given} is not found (from here or {run}); run `tts plot` "
                             "from the directory the sweep ran in")
        try:
            return difficulty_from_pool(path), (f"agreement of each problem's pool samples ({path.name}: share "
                                                "of the modal answer; grades never read)")
        except PoolError as exc:
            raise ValueError(str(exc)) from None
    lists: dict[str, dict[str, list[float]]] = {}
    for results in sorted(run.glob("live/*/results.jsonl")):
        try:
            found = difficulty_from_pool(results.parent)
        except PoolError:
            continue  # no sampling config in that run: no samples to agree
        for model, scores in found.items():
            for pid, s in scores.items():
                lists.setdefault(model, {}).setdefault(pid, []).append(s)
    if not lists:
        raise ValueError(f"{run} has no pool in {MANIFEST} and no live run with sampled answers "
                         "(self_consistency, best_of_n or weighted_vote) to estimate difficulty from")
    return ({m: {p: float(np.mean(v)) for p, v in d.items()} for m, d in lists.items()},
            "agreement of each problem's samples in the live runs (the largest sampling config's answers, "
            "averaged over seeds; grades never read)")


# --- the frontier -------------------------------------------------------------------------------


def _value_bins(counts: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin (0 = easiest) of each distinct score, per row of weighted counts (B, V) over ascending scores.

    Equal-count bins where ties allow: from the easiest down, a bin closes at the first score at
    which it holds ceil(problems left / bins left) problems, and the hardest present score always
    stays in the last bin; a row with no more present scores than bins gives each its own bin.
    Scores of zero count fall where :func:`~tts.budgets.difficulty.assign_bins` would put them.
    """
    desc = counts[:, ::-1]  # easiest first
    present = desc > 0
    cum = np.cumsum(desc, axis=1)
    rows = np.arange(len(counts))
    last = desc.shape[1] - 1 - np.argmax(present[:, ::-1], axis=1)  # hardest present score
    left, done = cum[:, -1].copy(), np.zeros(len(counts))
    active = np.ones(len(counts), dtype=bool)
    bins = np.zeros(desc.shape, dtype=np.int64)
    position = np.arange(desc.shape[1])[None, :]
    for bins_left in range(n_bins, 1, -1):
        j = np.argmax(cum >= (done - (-left // bins_left) - 1e-9)[:, None], axis=1)
        active &= j < last
        bins += active[:, None] & (position > j[:, None])
        closed = cum[rows, j]
        left = np.where(active, left - (closed - done), left)
        done = np.where(active, closed, done)
    few = present.sum(axis=1) <= n_bins  # each present score its own bin
    above = np.cumsum(present, axis=1) - present  # present scores easier than this one
    bins[few] = np.minimum(above, present.sum(axis=1, keepdims=True) - 1)[few]
    return bins[:, ::-1]


def bin_edges(score: np.ndarray, n_bins: int) -> np.ndarray:
    """Cut points of ``n_bins`` equal-count difficulty bins where ties allow (quantile bins).

    Agreement over a few samples is heavily tied (most problems are unanimous), and plain quantile
    edges (:func:`~tts.budgets.difficulty.quantile_edges`) then collapse into two bins. Here, from
    the easiest down, each bin takes whole groups of tied scores until it holds its share of the
    problems not yet binned, so the bins a tie swallows go to the other problems; with no more
    distinct scores than bins, each score is a bin.

    Returns:
        Ascending edges for :func:`~tts.budgets.difficulty.assign_bins` (a score on an edge goes to
        the easier bin; bin 0 = easiest).
    """
    values, counts = np.unique(np.asarray(score, dtype=float), return_counts=True)
    bins = _value_bins(counts[None, :].astype(float), n_bins)[0]
    return np.array(sorted(values[bins == b].min() for b in range(int(bins.max()))))


def _per_bin(rows: np.ndarray, bins: np.ndarray, n_bins: int, weights: np.ndarray) -> np.ndarray:
    """(B, n_bins) sums of ``weights`` (B, P) over each row's bins (B, P)."""
    return np.bincount((rows * n_bins + bins).ravel(), weights=weights.ravel(),
                       minlength=len(bins) * n_bins).reshape(len(bins), n_bins)


@dataclass(frozen=True)
class _Fits:
    """Cross-fitted choices under B weightings of the problems (one row of ones = the data itself)."""

    chosen: np.ndarray
    """(B, P) column each problem's fold chose for its bin; -1 where its fold could not be fitted."""
    single: np.ndarray
    """(B, P) column of its fold's best single config; -1 likewise."""
    choice: list[np.ndarray]
    """Per fold: (B, n_bins) column chosen per bin."""

    def gains(self, acc: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """(B,) weighted mean of compute-optimal minus single accuracy over the scored problems."""
        cols = np.arange(acc.shape[0])[None, :]
        ok = (self.chosen >= 0) * weights
        diff = acc[cols, self.chosen.clip(0)] - acc[cols, self.single.clip(0)]
        return (ok * diff).sum(axis=1) / np.maximum(ok.sum(axis=1), 1e-12)


def _crossfit(acc: np.ndarray, score: np.ndarray, fold: np.ndarray, k: int, n_bins: int, weights: np.ndarray,
              hold_out: bool = True) -> _Fits:
    """Fit bin edges, the best single config and per-bin choices on the other folds, for each fold.

    Weighted, for many weightings at once (a bootstrap resample is a row of problem counts; a
    resampled problem keeps its fold, so its copies are never both fitted on and scored). Without
    ``hold_out`` every fold also fits on itself (the "in hindsight" reference).
    """
    values, code = np.unique(score, return_inverse=True)
    b, v = len(weights), len(values)
    rows = np.arange(b)[:, None]
    fits = _Fits(np.full(weights.shape, -1), np.full(weights.shape, -1), [])
    for f in range(k):
        test = fold == f
        train = weights * ~test if hold_out else weights
        # 1. Bins per weighting, from the weighted count of each distinct score.
        counts = np.bincount((rows * v + code).ravel(), weights=train.ravel(), minlength=b * v).reshape(b, v)
        bins = _value_bins(counts, n_bins)[:, code]  # (B, P)
        # 2. The best single config, then per bin the best one (the single one where it ties or the bin is empty).
        single = (train @ acc).argmax(axis=1)
        size = _per_bin(rows, bins, n_bins, train)
        means = np.stack([_per_bin(rows, bins, n_bins, train * acc[:, c]) for c in range(acc.shape[1])], axis=2)
        means /= np.maximum(size, 1e-12)[..., None]
        tie = np.take_along_axis(means, single[:, None, None], axis=2)[..., 0] >= means.max(axis=2) - 1e-12
        choice = np.where((size == 0) | tie, single[:, None], means.argmax(axis=2))
        # 3. The held-out problems get their bin's choice.
        fitted = (train.sum(axis=1) > 0)[:, None]
        fits.chosen[:, test] = np.where(fitted, np.take_along_axis(choice, bins, axis=1)[:, test], -1)
        fits.single[:, test] = np.where(fitted, single[:, None], -1)
        fits.choice.append(choice)
    return fits


def _modal(values: Sequence[str]) -> tuple[str, int]:
    (value, count), = Counter(values).most_common(1)
    return value, count


def _budget_row(model: str, axis: str, budget: float, labels: list[str], acc: np.ndarray, score: np.ndarray,
                fold: np.ndarray, k: int, n_bins: int, boot: int, seed: int, costs: dict[str, float | None]
                ) -> BudgetRow:
    # 1. Cross-fit: fit on the other folds, score the held-out fold.
    p = len(score)
    rows = np.arange(p)
    ones = np.ones((1, p))
    fits = _crossfit(acc, score, fold, k, n_bins, ones)
    chosen, single_col = fits.chosen[0], fits.single[0]
    scored = chosen >= 0
    co, single = acc[rows, chosen], acc[rows, single_col]
    fitted = [f for f in range(k) if (fold == f).any() and (fold != f).any()]
    fold_edges = tuple(tuple(float(e) for e in bin_edges(score[fold != f], n_bins)) for f in fitted)
    fold_choices = tuple({b: labels[c] for b, c in enumerate(fits.choice[f][0].tolist()) if b <= len(fold_edges[i])}
                         for i, f in enumerate(fitted))
    fold_single = tuple(labels[single_col[fold == f][0]] for f in fitted)
    # 2. The gain's paired bootstrap over problems, refitting bins and choices on every resample.
    rng = np.random.default_rng(seed + 1)
    means = []
    for start in range(0, boot, _BOOT_CHUNK):
        w = rng.multinomial(p, np.full(p, 1.0 / p), size=min(_BOOT_CHUNK, boot - start)).astype(float)
        means.append(_crossfit(acc, score, fold, k, n_bins, w).gains(acc, w))
    lo, hi = np.percentile(np.concatenate(means), [2.5, 97.5])
    diff = co - single
    # 3. References in hindsight (fitted and scored on all problems).
    hind = _crossfit(acc, score, np.zeros(p, dtype=np.int64), 1, n_bins, ones, hold_out=False)
    edges, s_all, choice_all = bin_edges(score, n_bins), int(hind.single[0][0]), hind.choice[0][0]
    all_bins = assign_bins(score, edges)
    oracle_per_bin = float(acc[rows, hind.chosen[0]].mean())
    # 4. Per bin of all problems: the cross-fitted choices its problems were given.
    bins_out = []
    for b in range(len(edges) + 1):
        members = (all_bins == b) & scored
        if not members.any():
            continue
        choice, count = _modal([labels[c] for c in chosen[members].tolist()])
        bins_out.append(BinChoice(b, int(members.sum()), float(score[members].min()), float(score[members].max()),
                                  choice, count, float(co[members].mean()), float(single[members].mean()),
                                  labels[int(choice_all[b])]))
    priced = [costs.get(labels[c]) for c in chosen.tolist()]
    cost = None if axis == "n" or any(c is None for c in priced) else float(np.mean(priced))
    return BudgetRow(
        model=model, axis=axis, budget=float(budget), candidates=tuple(labels), problems=p,
        compute_optimal=float(co.mean()), single=float(single.mean()), single_choice=_modal(fold_single)[0],
        gain=float(diff.mean()), gain_low=float(lo), gain_high=float(hi),
        oracle_single=float(acc[:, s_all].mean()), oracle_single_choice=labels[s_all], oracle_per_bin=oracle_per_bin,
        cost=cost, bins=tuple(bins_out), fold_edges=fold_edges, fold_choices=fold_choices, fold_single=fold_single)


def _levels(info: dict[str, tuple[int, float | None]], axis: str) -> list[tuple[float, list[str]]]:
    """(budget, competing configs) per level: same n, or (cost axes) costing at most the level."""
    if axis == "n":
        ns = sorted({n for n, _ in info.values()})
        return [(n, sorted(label for label, (m, _) in info.items() if m == n)) for n in ns]
    priced = {label: c for label, (_, c) in info.items() if c is not None}
    levels: list[float] = []
    for c in sorted(set(priced.values())):
        if not levels or c > levels[-1] * (1 + 1e-6):
            levels.append(c)
    return [(b, sorted((lb for lb, c in priced.items() if c <= b * (1 + 1e-6)), key=lambda lb: (priced[lb], lb)))
            for b in levels]


def fold_assignment(problem_ids: Sequence[str], folds: int, seed: int = 0) -> np.ndarray:
    """The cross-fitting fold of each problem (ids sorted first, so the order they come in does not matter)."""
    ids = sorted(problem_ids)
    k = min(folds, len(ids))
    fold = np.empty(len(ids), dtype=np.int64)
    fold[np.random.default_rng(seed).permutation(len(ids))] = np.arange(len(ids)) % k
    where = {pid: f for pid, f in zip(ids, fold.tolist(), strict=True)}
    return np.array([where[pid] for pid in problem_ids], dtype=np.int64)


def compute_optimal(cells: Sequence[Cell], difficulty: Difficulty, *, axis: str = "n", bins: int = 5,
                    folds: int = 5, seed: int = 0, boot: int = 1000) -> FrontierReport:
    """Cross-fitted compute-optimal accuracy per (model, budget level) against the best single config.

    Args:
        cells: Sweep cells with ``per_problem`` (seeds of a config are averaged per problem).
        difficulty: model -> problem id -> score, higher = easier; never derived from grades.
        axis: ``"n"`` (configs with the same n compete) or a cost axis of the cells (``"tokens"``, ...).
        bins: Difficulty bins (quantiles of the training folds' scores).
        folds: Cross-fitting folds over problems (at most one per problem).
        seed: Seeds the fold split and the bootstrap.
        boot: Bootstrap draws of the gain's interval.

    Returns:
        The rows (model-major, budget ascending), settings and notes.
    """
    if bins < 1 or folds < 2 or boot < 10:
        raise ValueError(f"need bins >= 1, folds >= 2 and boot >= 10; got bins={bins}, folds={folds}, boot={boot}")
    report = FrontierReport([], {"axis": axis, "bins": bins, "folds": folds, "seed": seed, "bootstrap": boot}, "")
    by_model: dict[str, dict[str, list[Cell]]] = {}
    for c in cells:
        by_model.setdefault(c.model, {}).setdefault(c.config, []).append(c)
    for model in sorted(by_model):
        configs = {label: group for label, group in by_model[model].items() if all(c.per_problem for c in group)}
        if len(configs) < len(by_model[model]):
            report.notes.append(f"{model}: cells without per-problem accuracies are left out (re-run the sweep)")
        strategies = sorted({config_line(label) for label, g in configs.items()})
        if len(strategies) == 1:
            report.single_strategy[model] = strategies[0]
            continue
        if model not in difficulty:
            report.notes.append(f"{model}: no difficulty estimate (no samples of it), so no compute-optimal rows")
            continue
        ids = set(difficulty[model])
        for group in configs.values():
            for c in group:
                ids &= set(c.per_problem or {})
        pids = sorted(ids)
        if len(pids) < 2:
            report.notes.append(f"{model}: fewer than 2 problems have both a difficulty and every config's accuracy")
            continue
        score = np.array([difficulty[model][pid] for pid in pids], dtype=float)
        fold = fold_assignment(pids, folds, seed)
        k = int(fold.max()) + 1
        acc = {label: np.mean([[c.per_problem[pid] for pid in pids] for c in group], axis=0)  # type: ignore[index]
               for label, group in configs.items()}
        info = {label: (g[0].n, None if axis == "n" else _mean_cost(g, axis)) for label, g in configs.items()}
        if axis != "n" and any(c is None for _, c in info.values()):
            report.notes.append(f"{model}: configs without a {axis} cost are left out of the {axis} levels")
        costs = {label: c for label, (_, c) in info.items()}
        for budget, labels in _levels(info, axis):
            matrix = np.column_stack([acc[label] for label in labels])
            report.rows.append(_budget_row(model, axis, budget, labels, matrix, score, fold, k, bins, boot, seed,
                                           costs))
    return report


def _mean_cost(group: Sequence[Cell], axis: str) -> float | None:
    values = [getattr(c, axis) for c in group]
    if any(v is None or not math.isfinite(v) for v in values):
        return None
    return float(np.mean(values))


def compute_optimal_for_run(run: str | Path, cells: Sequence[Cell], **settings: Any) -> FrontierReport:
    """:func:`compute_optimal` of a sweep directory, difficulty from its own samples; never raises
    for a missing difficulty source (the report's notes say why there are no rows)."""
    kinds: dict[str, set[str]] = {}
    for c in cells:
        kinds.setdefault(c.model, set()).add(config_line(c.config))
    if max(map(len, kinds.values()), default=0) < 2:  # nothing to choose between: no samples needed
        report = compute_optimal(cells, {}, **settings)
        report.difficulty_source = "not needed (one strategy per model)"
        return report
    try:
        difficulty, source = difficulty_for_run(run)
    except ValueError as exc:
        difficulty, source = {}, f"unavailable: {exc}"
    report = compute_optimal(cells, difficulty, **settings)
    report.difficulty_source = source
    s = report.settings
    method = (f"Per model and budget ({'same n' if s['axis'] == 'n' else 'at most that ' + s['axis']}), problems "
              f"are binned into {s['bins']} difficulty quantiles and each bin runs the config best there; bins "
              f"and choices are fitted on {s['folds'] - 1} of {s['folds']} folds and scored on the held-out one "
              "(Snell et al. 2024, cross-fitted). The best single config is chosen the same way. Gain: 95% paired "
              "bootstrap over problems, refitting bins and choices on each resample. 'In hindsight' columns fit on "
              "all problems: references, not achievable.")
    report.notes[:0] = [method, f"Difficulty: {source}. The same samples feed the accuracy estimates, which can "
                        "flatter the per-bin choice (measured under 0.001 on the Qwen2.5-Math RM pool; see "
                        "tts.eval.frontier)."]
    return report
