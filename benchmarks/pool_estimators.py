"""Speed of the vectorised pool estimators against a plain per-problem Python loop.

Case: the real MATH-500 pool, 7 reasoning models x 500 problems x 80 samples (no padding or
tiling needed), every n in 1..64, 1000 bootstrap draws (random subsets without replacement, one
set shared by all models and rules), three selection rules: majority vote, best-of-n by score and
score-weighted vote, all three bootstrapped; then the exact estimators (pass@n, best-of-n), and a
95% interval over problems for every accuracy.

The pool has no verifier scores, so the score rules use a signal a run has: the generated length,
score = -log(1 + tokens) (shorter answers score higher), weighted-vote weights proportional to
1 / (1 + tokens) (``weighting="exp"``).

The loop baseline (:func:`tts.eval.estimators.loop_outcomes`: per draw, per problem, per prefix,
a dict tally) runs on a random subset of problems and draws of every model, on the same draws,
and is checked equal to the vectorised outcomes there; its time for the full case is extrapolated
linearly in (draws x problems), which is how a per-problem loop scales, and printed as such.

Usage (from the repository root):
    python benchmarks/pool_estimators.py [--pool PATH] [--draws 1000] [--n-max 64]
        [--loop-problems 20] [--loop-draws 25]
"""

from __future__ import annotations

import argparse
import os
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from tts.benchmarks.pool import load_pool
from tts.eval import estimators as est
from tts.benchmarks import pool_draws

DEFAULT_POOL = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "pools" / \
    "math500_reasoning_models.jsonl.gz"
RULES = ("vote", "best_of_n", "weighted_vote")


class _Clock:
    """Wall and CPU seconds summed per key: ``with clock("name"): ...``."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    @contextmanager
    def __call__(self, key: str):
        w, c = time.perf_counter(), time.process_time()
        yield
        self.wall[key] = self.wall.get(key, 0.0) + time.perf_counter() - w
        self.cpu[key] = self.cpu.get(key, 0.0) + time.process_time() - c


def _length_scores(mp) -> np.ndarray:
    return -np.log1p(np.where(mp.mask, np.nan_to_num(mp.tokens, nan=0.0), 0.0))


def _vectorised(mp, rule: str, ns: np.ndarray, order: np.ndarray, scores: np.ndarray) -> est.Curve:
    if rule == "vote":
        return est.majority_vote(mp, ns, order=order)
    if rule == "best_of_n":
        return est.best_of_n(mp, ns, scores=scores, method="bootstrap", order=order)
    return est.weighted_vote(mp, ns, scores=scores, weighting="exp", order=order)


def _loop_args(mp, rule: str, scores: np.ndarray) -> np.ndarray | None:
    if rule == "vote":
        return None
    return scores if rule == "best_of_n" else est.vote_weights(mp, "exp", scores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--n-max", type=int, default=64)
    parser.add_argument("--loop-problems", type=int, default=20, help="Problems per model timed in the loop.")
    parser.add_argument("--loop-draws", type=int, default=25, help="Draws timed in the loop.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    t0 = time.perf_counter()
    pool = load_pool(args.pool)
    shapes = {mp.answers.shape for mp in pool.by_model.values()}
    print(f"pool: {args.pool.resolve()}: {len(pool.models)} models, shapes {sorted(shapes)} (problems x samples); "
          f"loaded in {time.perf_counter() - t0:.1f} s (not timed below)")
    counts = next(iter(pool.by_model.values())).counts
    if any(not np.array_equal(mp.counts, counts) for mp in pool.by_model.values()):
        raise SystemExit("models have different sample counts per problem; this benchmark shares one set of draws")
    ns = np.arange(1, args.n_max + 1)
    mixed = sum(int((~np.isfinite(pool_draws._shortcuts(mp)[0])).sum()) for mp in pool.by_model.values())
    print(f"{mixed} of {len(pool.models) * len(counts)} (model, problem) pairs mix right and wrong samples; the "
          f"vectorised path draws only for those (for the others every rule's outcome is fixed), the loop for all")
    scores = {m: _length_scores(mp) for m, mp in pool.by_model.items()}

    # 1. Vectorised: one set of draws, every model, the three rules bootstrapped, then the exact ones.
    #    Wall and CPU seconds both: these machines are shared, and the CPU time of this
    #    (single-threaded) process is what an idle machine's wall time would be.
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    clock = _Clock()
    with clock("draw"):
        order = pool_draws.draw_orders(counts, args.n_max, args.draws, args.seed)
    curves = {}
    for m, mp in pool.by_model.items():
        for rule in RULES:
            with clock(rule):
                curves[m, rule] = _vectorised(mp, rule, ns, order, scores[m])
    with clock("exact"):
        for m, mp in pool.by_model.items():
            curves[m, "pass"] = est.pass_at_k(mp, ns)
            curves[m, "best_exact"] = est.best_of_n(mp, ns, scores=scores[m])
    cells = len(pool.models) * len(counts) * args.draws * len(ns)
    print(f"\nvectorised, {len(pool.models)} models x {len(counts)} problems x {args.draws} draws x n=1..{args.n_max}"
          f" ({cells / 1e6:.0f}M (model, problem, draw, n) cells per rule), 95% intervals included:")
    print(f"  {'':<34}{'wall s':>8}{'CPU s':>8}")
    print(f"  {'drawing subsets (shared)':<34}{clock.wall['draw']:8.2f}{clock.cpu['draw']:8.2f}")
    for rule in RULES:
        print(f"  {rule + ' (bootstrap)':<34}{clock.wall[rule]:8.2f}{clock.cpu[rule]:8.2f}")
    print(f"  {'pass@n + best-of-n exact':<34}{clock.wall['exact']:8.2f}{clock.cpu['exact']:8.2f}")
    print(f"  {'total (target < 30 s)':<34}{sum(clock.wall.values()):8.2f}{sum(clock.cpu.values()):8.2f}")

    # 2. The plain loop on a random subset of problems and draws, same draws; checked equal.
    rng = np.random.default_rng(args.seed + 1)
    d_loop = min(args.loop_draws, args.draws)
    loop = _Clock()
    done = 0
    for m, mp in pool.by_model.items():
        rows = np.sort(rng.choice(len(counts), size=min(args.loop_problems, len(counts)), replace=False))
        sub, sub_order = mp.subset(rows), order[:, :d_loop][:, :, rows]
        for rule in RULES:
            extra = _loop_args(sub, rule, scores[m][rows])
            with loop(rule):
                ref = pool_draws.loop_outcomes(sub, sub_order, rule, extra)
            if rule == "best_of_n":
                vec = pool_draws.best_score_outcomes(sub, sub_order, scores[m][rows])
            else:
                vec = pool_draws.vote_outcomes(sub, sub_order, extra)
            if not np.array_equal(ref, vec):
                raise SystemExit(f"loop and vectorised outcomes differ for {m} {rule}")
        done += len(rows) * d_loop
    scale = len(pool.models) * len(counts) * args.draws / done
    print(f"\nplain Python loop, measured on {done:,} of {len(pool.models) * len(counts) * args.draws:,} "
          f"(model, problem, draw) triples ({args.loop_problems} random problems x {d_loop} draws per model), "
          f"same draws, outcomes identical; full-case times EXTRAPOLATED x{scale:.0f}:")
    print(f"  {'':<16}{'measured wall/CPU s':>22}{'extrapolated wall/CPU s':>26}{'speed ratio wall/CPU':>24}")
    for rule in RULES:
        print(f"  {rule:<16}{loop.wall[rule]:11.2f}{loop.cpu[rule]:11.2f}{loop.wall[rule] * scale:13.0f}"
              f"{loop.cpu[rule] * scale:13.0f}{loop.wall[rule] * scale / clock.wall[rule]:12.0f}x"
              f"{loop.cpu[rule] * scale / clock.cpu[rule]:11.0f}x")
    vec_wall = clock.wall["draw"] + sum(clock.wall[r] for r in RULES)
    vec_cpu = clock.cpu["draw"] + sum(clock.cpu[r] for r in RULES)
    loop_wall, loop_cpu = sum(loop.wall.values()) * scale, sum(loop.cpu.values()) * scale
    print(f"  three rules: loop {loop_wall:.0f} s wall / {loop_cpu:.0f} s CPU (extrapolated) vs vectorised "
          f"{vec_wall:.2f} s / {vec_cpu:.2f} s incl. drawing: speed ratio {loop_wall / vec_wall:.0f}x wall, "
          f"{loop_cpu / vec_cpu:.0f}x CPU")

    # 3. What was computed (a glance at the numbers).
    print("\naccuracy at n=1 / n=" + str(args.n_max) + " [95% interval over problems]:")
    for m in pool.models:
        parts = []
        for rule in ("pass", "vote", "best_exact", "weighted_vote"):
            a, lo, hi = curves[m, rule].at(args.n_max)
            parts.append(f"{rule} {a:.3f} [{lo:.3f}, {hi:.3f}]")
        print(f"  {m:<28} mean {curves[m, 'pass'].at(1)[0]:.3f}; @{args.n_max}: " + "; ".join(parts))


if __name__ == "__main__":
    main()
