"""The consistency oracle: what stopping at the right moment could save, as a bound for online rules.

The oracle stops each problem at the first n after which the running majority of the ordering
never changes again up to ``target_n``, so it returns exactly uniform self-consistency@target_n's
answer (same accuracy) with the fewest samples any rule that returns that answer could draw. It
reads the future samples of the ordering, so it is an analysis tool, labelled "oracle" wherever
it appears, never an allocator (docs/architecture.md, "Honest simulation"). Its token ratio to
uniform bounds what a stopping rule can save while returning uniform's answers; a rule can only beat it
by returning other answers (stopping early on problems uniform gets wrong, or luck on near-ties).
"""

from __future__ import annotations

import numpy as np

from tts.benchmarks.pool import ModelPool
from tts.budgets.replay.matched import Interval


def running_leaders(pool: ModelPool, order: np.ndarray) -> np.ndarray:
    """``(n_problems, n_samples)`` answer id leading the vote after each prefix of the ordering
    (ties: the answer seen first, as :func:`~tts.budgets.replay.prefix.replay_prefixes`); -1 while
    no sample has an answer."""
    p_idx = np.arange(pool.n_problems)[:, None]
    ans = pool.answers[p_idx, order]
    valid = pool.mask[p_idx, order] & (ans >= 0)
    n_ans = int(pool.answers.max(initial=-1)) + 1
    if n_ans == 0:
        return np.full(ans.shape, -1)
    onehot = (ans[..., None] == np.arange(n_ans)) & valid[..., None]
    cum = np.cumsum(onehot, axis=1, dtype=np.int32)
    s = pool.n_samples
    first = np.where(onehot.any(axis=1), np.argmax(onehot, axis=1), s)
    lead = np.argmax(cum * (s + 1) - first[:, None, :], axis=2)
    return np.where(cum.max(axis=2) > 0, lead, -1)


def oracle_samples(leaders: np.ndarray, target_n: int, chunk: int = 1) -> np.ndarray:
    """Per problem, the samples the oracle draws: the first n after which the leader of every
    prefix up to ``target_n`` is the final one, rounded up to whole chunks (at most ``target_n``).

    Args:
        leaders: ``(n_problems, >= target_n)`` running leaders (:func:`running_leaders`).
        target_n: The uniform baseline's samples per problem.
        chunk: Samples per request: a run stops only at multiples of it.
    """
    lead = np.asarray(leaders)[:, :target_n]
    differs = lead != lead[:, -1:]
    # Index of the last prefix whose leader differs; the oracle needs one sample more than it.
    last = target_n - 1 - np.argmax(differs[:, ::-1], axis=1)
    n = np.where(differs.any(axis=1), last + 2, 1)
    return np.minimum(-(-n // chunk) * chunk, target_n)


def oracle_ratio(uniform_tokens: np.ndarray, oracle_tokens: np.ndarray, *, seed: int, bootstrap: int) -> Interval:
    """Uniform's tokens over the oracle's (ratio of means over orderings), with a 95% percentile
    bootstrap interval over orderings (resample 0 = the observed orderings, as
    :func:`~tts.budgets.replay.matched.compare_at_matched`)."""
    u, o = np.asarray(uniform_tokens, dtype=float), np.asarray(oracle_tokens, dtype=float)
    boot = np.random.default_rng(seed + 2).integers(0, len(u), size=(bootstrap, len(u)))
    boot[0] = np.arange(len(u))
    ratio = u[boot].mean(axis=1) / o[boot].mean(axis=1)
    return Interval(float(ratio[0]), *np.percentile(ratio, [2.5, 97.5]).tolist())
