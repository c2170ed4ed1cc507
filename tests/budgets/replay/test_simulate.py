"""`simulate` and the replay primitives: grades never feed a decision; strategies replay by their rule."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tts.benchmarks.pool import ModelPool
from tts.budgets.replay.prefix import pool_rule, replay_prefixes
from tts.budgets.replay.simulate import SimulateConfig, simulate
from tts.registry import STRATEGIES

CFG = SimulateConfig(target_n=16, orderings=3, folds=3, pilot=2, bootstrap=10)


def _pool(seed=0, problems=45, samples=24, scores=False) -> ModelPool:
    """Mostly easy, short problems and some contested, long ones (answer ids; 0 is the gold)."""
    rng = np.random.default_rng(seed)
    rate = np.where(np.arange(problems) < problems * 2 // 3, 0.9, rng.uniform(0.3, 0.7, problems))[:, None]
    ok = rng.random((problems, samples)) < rate
    answers = np.where(ok, 0, rng.integers(1, 4, (problems, samples))).astype(np.int32)
    tokens = np.where(rate > 0.8, 300, 1500) * rng.uniform(0.5, 1.5, (problems, samples))
    return ModelPool(
        model="m", problem_ids=tuple(f"q{i}" for i in range(problems)), answers=answers,
        answer_texts=tuple(("42", "1", "2", "3") for _ in range(problems)), correct=ok, tokens=tokens.round(),
        scores=rng.random((problems, samples)) if scores else np.full((problems, samples), np.nan),
        sample_idx=np.tile(np.arange(samples), (problems, 1)), mask=np.ones((problems, samples), bool))


def _with_correct(pool: ModelPool, correct: np.ndarray) -> ModelPool:
    return dataclasses.replace(pool, correct=correct)


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("how", ["shuffle", "randomise"])
def test_grades_of_the_scored_problems_change_no_decision(how):
    """Honest simulation: only grading reads ``correct``.

    Online decisions use answers and token counts only, so changing every grade must leave every
    round and every n as it was. Offline decisions of a problem use its own pilot plus the
    difficulty model, bin edges and curves fitted on the OTHER folds, whose fit does read those
    folds' grades (that is cross-fitting, and honest). So the test changes the grades of one fold
    only (the scored problems) and checks that this fold's decisions stay the same: its plans at
    uniform's tokens and its greedy path. The other folds may change, since they trained on it.
    A global allocation across folds would fail here: fold B's curves (fitted on fold A's
    grades) would move fold A's share of the budget.
    """
    pool = _pool()
    base = simulate(pool, CFG)
    rng = np.random.default_rng(1)
    for f in np.unique(base.folds).tolist():
        scored = np.nonzero(base.folds == f)[0]
        correct = pool.correct.copy()
        if how == "shuffle":
            correct[scored] = correct[rng.permutation(scored)]
        else:
            correct[scored] = rng.random(correct[scored].shape) < 0.5
        other = simulate(_with_correct(pool, correct), CFG)
        off, off2 = base.decisions["offline"], other.decisions["offline"]
        assert np.array_equal(off.n_at_uniform[:, scored], off2.n_at_uniform[:, scored])
        assert all(np.array_equal(a[f], b[f]) for a, b in zip(off.steps, off2.steps))
        assert other.uniform_acc != base.uniform_acc  # the grades did change the outcome
    everything = simulate(_with_correct(pool, rng.random(pool.correct.shape) < 0.5), CFG)
    on, on2 = base.decisions["online"], everything.decisions["online"]
    assert np.array_equal(on.n_at_uniform, on2.n_at_uniform)
    assert all(_same(a, b) for a, b in zip(on.steps, on2.steps))


def test_the_online_replay_follows_the_runs_chunks_and_worst_case():
    pool = _pool()
    res = simulate(pool, CFG.model_copy(update={"modes": ("online",), "chunk": 3}))
    requests = res.decisions["online"].steps[0][0]
    assert requests[1].max() == 3 and requests[1, : pool.n_problems].tolist() == [3] * pool.n_problems
    # A generation limit no budget on the grid can pay for: no sample is ever drawn.
    broke = simulate(pool, CFG.model_copy(update={"modes": ("online",), "max_tokens": 10**9}))
    assert broke.modes["online"].acc_at_uniform_tokens.mean == 0.0


def test_strategies_replay_by_their_pool_rule_not_their_name():
    pool = _pool(scores=True)
    rep = replay_prefixes(pool, np.tile(np.arange(pool.n_samples), (pool.n_problems, 1)))
    n = np.full(pool.n_problems, 8)
    assert pool_rule("self_consistency") == "vote" and pool_rule("best_of_n") == "best_of_n"
    np.testing.assert_array_equal(rep.correct_at(n, "best_of_n"), rep.best_correct[:, 7])
    # A strategy that is more than an aggregate of i.i.d. samples cannot be replayed from a pool.
    assert STRATEGIES.load("beam").pool_rule is None
    with pytest.raises(ValueError, match="cannot be replayed from a sample pool"):
        rep.correct_at(n, "beam")
    with pytest.raises(ValueError, match="has no budget replay yet"):
        rep.correct_at(n, "weighted_vote")
    # A plugin strategy replays by the rule it declares.
    from tts.search.base import Strategy

    class PluginVote(Strategy):
        pool_rule = "vote"

        def solve(self, problems, budgets=None):
            raise AssertionError("a pool replay never runs the strategy")

    STRATEGIES.register("plugin_vote", PluginVote)
    try:
        np.testing.assert_array_equal(rep.correct_at(n, "plugin_vote"), rep.vote_correct[:, 7])
    finally:
        STRATEGIES.unregister("plugin_vote")
    # No samples: never correct, no tokens.
    assert not rep.correct_at(np.zeros(pool.n_problems, int)).any()
    assert not rep.tokens_at(np.zeros(pool.n_problems, int)).any()
