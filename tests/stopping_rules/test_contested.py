"""The "contested" stopping rule: a predictor fitted on other problems never reads a problem's own
grade, a flat vote stops where the Beta rule samples it to the cap, and the replay makes the
decisions a live allocator makes with the same predictor."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from tts.benchmarks.pool import ModelPool
from tts.budgets.rate_models.contested import (
    FEATURES,
    ContestedRule,
    ContestedModel,
    _checkpoints,
    _training_rows,
    cross_fitted_rates,
    fit_pool,
    prefix_features,
    state_features,
)
from tts.budgets.difficulty import LearnedDifficulty, majority_share
from tts.budgets.online import OnlineAllocator, OnlinePolicy, plan_round, vote_confidence
from tts.budgets.replay.online import OnlineSequence
from tts.budgets.replay.prefix import random_orders, replay_prefixes
from tts.budgets.replay.simulate import SimulateConfig, simulate

CFG = SimulateConfig(target_n=16, orderings=3, folds=3, modes=("online",), rule="rate", min_gain=1e-3,
                     bootstrap=10)


def _pool(seed=0, problems=45, samples=24) -> ModelPool:
    """Mostly easy, short problems and some contested, long ones (answer ids; 0 is the gold)."""
    rng = np.random.default_rng(seed)
    rate = np.where(np.arange(problems) < problems * 2 // 3, 0.9, rng.uniform(0.3, 0.7, problems))[:, None]
    ok = rng.random((problems, samples)) < rate
    answers = np.where(ok, 0, rng.integers(-1, 4, (problems, samples))).astype(np.int32)
    ok &= answers == 0
    tokens = np.where(rate > 0.8, 300, 1500) * rng.uniform(0.5, 1.5, (problems, samples))
    return ModelPool(
        model="m", problem_ids=tuple(f"q{i}" for i in range(problems)), answers=answers,
        answer_texts=tuple(("42", "1", "2", "3") for _ in range(problems)), correct=ok, tokens=tokens.round(),
        scores=np.full((problems, samples), np.nan), sample_idx=np.tile(np.arange(samples), (problems, 1)),
        mask=np.ones((problems, samples), bool))


def _flip(pool: ModelPool, problem: int) -> ModelPool:
    """The same samples, but the problem's gold is the answer that is second at the end."""
    correct = pool.correct.copy()
    ids, counts = np.unique(pool.answers[problem][pool.answers[problem] >= 0], return_counts=True)
    correct[problem] = pool.answers[problem] == ids[np.argsort(counts)[-2]]
    return dataclasses.replace(pool, correct=correct)


def test_a_problems_own_grade_never_reaches_its_rates():
    pool = _pool()
    rng = np.random.default_rng(3)
    fold = rng.permutation(pool.n_problems) % 3
    orders = random_orders(pool.mask, 2, rng)
    cap = pool.counts.copy()
    base = cross_fitted_rates(pool, orders, [replay_prefixes(pool, o) for o in orders], fold, cap, 4)
    j = int(np.argmin(majority_share(pool.answers)))  # the most contested problem
    flipped = _flip(pool, j)
    other = cross_fitted_rates(flipped, orders, [replay_prefixes(flipped, o) for o in orders], fold, cap, 4)
    for a, b in zip(base, other):
        assert np.array_equal(a[j], b[j])  # its own rates: fitted without it
        assert not np.array_equal(a[fold != fold[j]], b[fold != fold[j]])  # the other folds trained on it


@pytest.mark.parametrize("problem", [5, 40])
def test_flipping_one_problems_grade_leaves_its_own_decisions(problem):
    """Each fold is its own run under "contested", so the flipped grade (which moves the other
    folds' models) cannot reach this problem's rounds or its samples at uniform's tokens."""
    pool = _pool()
    base = simulate(pool, CFG, rate_model=ContestedRule())
    other = simulate(_flip(pool, problem), CFG, rate_model=ContestedRule())
    f = int(base.folds[problem])
    on, on2 = base.decisions["online"], other.decisions["online"]
    assert np.array_equal(on.n_at_uniform[:, problem], on2.n_at_uniform[:, problem])
    for a, b in zip(on.steps, on2.steps):
        assert np.array_equal(a[f], b[f])  # the whole run of its fold
    assert other.uniform_acc != base.uniform_acc  # the grade did change the outcome


class _FlatIsWorthless:
    """A stand-in predictor: a vote whose two leaders are within one vote of each other after 8
    samples buys nothing more; any other vote buys 0.1 accuracy per sample."""

    stop_confident = True
    cross_fitted = True

    def live_rate(self, top1, top2, n, n_none, n_distinct, mean_tokens, cap, chunk):
        flat = (np.asarray(n) >= 8) & (np.abs(np.asarray(top1) - np.asarray(top2)) <= 1)
        return np.where(flat, 0.0, 0.1)


def _drive(alloc, answer):
    while call := alloc.next_call(lambda p, k: np.asarray(k, float)):
        for pid, k in call:
            for _ in range(k):
                i = alloc.problem_ids.index(pid)
                alloc.record(pid, answer(pid, int(alloc.n[i])), 1.0, tokens=100.0)
    return alloc


def test_contested_rule_stops_a_flat_vote_that_the_beta_rule_runs_to_the_cap():
    def answer(pid, i):  # "flat": two answers alternate forever; "easy": always the same
        return "1" if pid == "easy" or i % 2 == 0 else "2"

    common = dict(n_max=64, chunk=4, escalate=False)
    beta = _drive(OnlineAllocator(["easy", "flat"], 1e9, OnlinePolicy(**common)), answer)
    contested = _drive(OnlineAllocator(["easy", "flat"], 1e9, OnlinePolicy(rule="rate", rate_model=_FlatIsWorthless(),
                                                                            **common)), answer)
    assert beta.n.tolist() == [4, 64]
    assert contested.n.tolist() == [4, 8]


def test_the_rate_rule_needs_a_model_and_rates_and_a_live_contested_run_a_fitted_model():
    with pytest.raises(ValueError, match="rate_model"):
        OnlinePolicy(rule="rate")
    policy = OnlinePolicy(rule="rate", rate_model=ContestedRule())
    with pytest.raises(ValueError, match="predicted gain per sample"):
        plan_round(policy, np.array([1]), np.array([0]), np.array([1]), np.array([64]), 0)
    with pytest.raises(ValueError, match="fit_pool"):
        OnlineAllocator(["a"], 1e6, policy).next_call(lambda p, k: np.asarray(k, float))


def test_the_replay_makes_the_live_allocators_decisions_with_the_same_predictor():
    calib, pool = _pool(seed=1), _pool(seed=2, problems=20)
    model = fit_pool(calib, chunk=4, orderings=3)
    assert isinstance(model, ContestedModel)
    policy = OnlinePolicy(n_max=24, chunk=4, rule="rate", min_gain=2e-3, rate_model=ContestedRule(model))
    order = random_orders(pool.mask, 1, np.random.default_rng(0))[0]
    rep = replay_prefixes(pool, order)
    cap = pool.counts.copy()
    x = prefix_features(pool, order, rep, cap)
    n = np.arange(1, pool.n_samples + 1)[None, :]
    rates = np.concatenate([np.full((pool.n_problems, 1), np.inf), model.rate(x, n, cap[:, None])], axis=1)
    seq = OnlineSequence.build(rep.top1, rep.top2, rep.sample_tokens, cap, policy, rates)

    ans = pool.answers[np.arange(pool.n_problems)[:, None], order]
    tok = rep.sample_tokens
    ids = list(pool.problem_ids)
    alloc = OnlineAllocator(ids, 1e12, policy)
    while call := alloc.next_call(lambda p, k: np.asarray(k, float)):
        for pid, k in call:
            i = ids.index(pid)
            for _ in range(k):
                t = int(alloc.n[i])
                alloc.record(pid, None if ans[i, t] < 0 else str(ans[i, t]), float(tok[i, t]), tokens=float(tok[i, t]))
    assert alloc.n.tolist() == seq.n_at(len(seq.sample_problem)).tolist()
    assert [{ids.index(p): k for p, k in r.items()} for r in alloc.rounds] == seq.rounds_at(len(seq.sample_problem))


def test_state_features_are_the_votes_shares_margin_confidence_and_what_is_left():
    # Columns: top1, top2, n, no-answer, distinct, mean tokens, cap.
    rows = [(3, 1, 5, 1, 3, 99.0, 12), (1, 0, 1, 0, 1, np.nan, 4), (0, 0, 0, 0, 0, np.nan, 8), (2, 2, 6, 2, 2, 10.0, 5)]
    got = state_features(*(np.array(c) for c in zip(*rows)))
    want = [
        [3 / 5, 1 / 5, 1 / 5, 3 / 5, 2 / np.sqrt(5), vote_confidence(3, 1), np.log(5), 7 / 12, np.log(100)],
        [1, 0, 0, 1, 1 / np.sqrt(2), vote_confidence(1, 0), 0, 3 / 4, 0],  # unknown length: log1p(0)
        [0] * len(FEATURES),  # never sampled: all zeros
        [1 / 3, 1 / 3, 1 / 3, 1 / 3, 0, vote_confidence(2, 2), np.log(6), 0, np.log(11)],  # past its cap: none left
    ]
    assert got.shape == (4, len(FEATURES)) and got.dtype == float
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def _tiny_pool() -> ModelPool:
    """Two problems of 5 slots: the first with answers 0, 1, none, 0, 2; the second with 0, 0, 1 and
    two padding slots."""
    answers = np.array([[0, 1, -1, 0, 2], [0, 0, 1, -1, -1]], dtype=np.int32)
    mask = np.array([[True] * 5, [True] * 3 + [False] * 2])
    return ModelPool(
        model="m", problem_ids=("a", "b"), answers=answers, answer_texts=(("1", "2", "3"), ("1", "2")),
        correct=answers == 0, tokens=np.where(mask, [[10, 20, 30, 40, 50], [5, 7, 9, 0, 0]], np.nan),
        scores=np.full((2, 5), np.nan), sample_idx=np.where(mask, np.arange(5), -1), mask=mask)


def test_prefix_features_count_votes_no_answers_and_distinct_answers_of_each_prefix():
    pool = _tiny_pool()
    order = np.tile(np.arange(5), (2, 1))
    got = prefix_features(pool, order, replay_prefixes(pool, order), np.array([5, 3]))
    # By hand, per prefix: top1, top2, n, no-answer, distinct, mean tokens, cap.
    a = [(1, 0, 1, 0, 1, 10, 5), (1, 1, 2, 0, 2, 15, 5), (1, 1, 3, 1, 2, 20, 5), (2, 1, 4, 1, 2, 25, 5),
         (2, 1, 5, 1, 3, 30, 5)]
    b = [(1, 0, 1, 0, 1, 5, 3), (2, 0, 2, 0, 1, 6, 3), (2, 1, 3, 0, 2, 7, 3), (2, 1, 3, 0, 2, 7, 3), (2, 1, 3, 0, 2, 7, 3)]
    want = np.stack([state_features(*(np.array(c, float) for c in zip(*p))) for p in (a, b)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_cross_fitted_rates_are_zero_at_the_cap_and_use_the_rules_l2():
    pool = _pool(problems=18, samples=20)
    fold = np.arange(pool.n_problems) % 3
    orders = random_orders(pool.mask, 1, np.random.default_rng(0))
    reps = [replay_prefixes(pool, o) for o in orders]
    cap = np.full(pool.n_problems, 16)
    (rates,) = cross_fitted_rates(pool, orders, reps, fold, cap, 4)
    assert np.all(rates[:, 0] == np.inf) and np.all(rates[:, 16:] == 0) and np.all(rates[:, 1:16] != 0)
    (floats,) = cross_fitted_rates(pool, orders, reps, fold, cap.astype(float), 4)  # caps given as floats
    assert np.array_equal(floats, rates)
    (explicit,) = cross_fitted_rates(pool, orders, reps, fold, cap, 4, l2=0.05)  # the default ridge
    (strong,) = ContestedRule(l2=1.0).replay_rates(pool, orders, reps, fold, cap, 4)
    assert np.array_equal(explicit, rates)
    assert np.array_equal(strong, cross_fitted_rates(pool, orders, reps, fold, cap, 4, l2=1.0)[0])
    assert not np.allclose(strong[:, 1:16], rates[:, 1:16])


def test_fit_pool_is_seeded_with_documented_defaults_and_needs_two_samples():
    calib = _pool(seed=1, problems=15, samples=16)
    x = state_features(np.array([3, 5, 8]), np.array([1, 4, 0]), np.array([4, 12, 8]), np.array([0, 2, 0]),
                       np.array([2, 4, 1]), np.array([900.0, 1400.0, 300.0]), np.array([24, 24, 24]))
    default = fit_pool(calib).gain(x)
    assert np.array_equal(default, fit_pool(calib, cap=None, chunk=4, orderings=8, seed=0, l2=0.05).gain(x))
    for other in (dict(chunk=5), dict(orderings=9), dict(seed=1), dict(l2=1.05)):
        assert not np.array_equal(default, fit_pool(calib, **other).gain(x)), other
    assert np.isfinite(fit_pool(_pool(samples=2)).gain(x)).all()
    with pytest.raises(ValueError, match="^the calibration pool of 'm' has 1 sample per problem; fitting which "
                                         "votes stay contested needs at least 2$"):
        fit_pool(_pool(samples=1))
    with pytest.raises(ValueError, match=r"^a live run of the contested rule needs model=fit_pool\(calibration_pool\)$"):
        ContestedRule().live_rate([1], [0], [1], [0], [1], [10.0], [8], 4)


def test_the_models_gain_is_p_up_minus_p_down_of_two_ridge_fits_per_row():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(60, len(FEATURES)))
    # Up (the vote at the cap fixes a wrong vote) where the first feature is high, down where it is low.
    now = np.where(x[:, 0] > 0.5, False, np.where(x[:, 0] < -0.5, True, rng.random(60) < 0.5))
    cap = np.where(x[:, 0] > 0.5, True, np.where(x[:, 0] < -0.5, False, now))
    model = ContestedModel().fit(x, now, cap)
    strength = 0.05 * 60  # l2 per training row
    up = LearnedDifficulty(strength).fit(x, (cap & ~now).astype(float))
    down = LearnedDifficulty(strength).fit(x, (now & ~cap).astype(float))
    np.testing.assert_allclose(model.gain(x), up.predict(x) - down.predict(x), rtol=1e-9, atol=1e-12)
    probe = np.zeros((2, len(FEATURES)))
    probe[:, 0] = [2.0, -2.0]
    assert model.gain(probe)[0] > 0.3 and model.gain(probe)[1] < -0.3
    # Stacked vote states ((orderings, states, d), grades as 0/1 floats) fit as their rows.
    stacked = ContestedModel().fit(x.reshape(2, 30, -1), now.reshape(2, 30).astype(float), cap.reshape(2, 30) * 1.0)
    assert stacked.gain(x.reshape(2, 30, -1)).shape == (2, 30)
    np.testing.assert_allclose(stacked.gain(x), model.gain(x), rtol=1e-9, atol=1e-12)
    with pytest.raises(RuntimeError, match=r"^call fit\(\) \(or fit_pool\) before gain\(\)$"):
        ContestedModel().gain(x)
    with pytest.raises(ValueError, match="^no graded vote states to fit the contested model on; the calibration "
                                         "pool needs problems with at least two samples$"):
        ContestedModel().fit(np.zeros((0, len(FEATURES))), [], [])


def test_the_rate_is_the_gain_per_sample_left_and_zero_at_the_cap():
    model = fit_pool(_pool(problems=15, samples=12), orderings=2)
    x = state_features(np.array([3, 5, 4, 6]), np.array([1, 2, 4, 2]), np.array([4, 7, 8, 9]), 0, 2,
                       np.array([500.0, 900.0, 1200.0, 800.0]), 8)
    gain = model.gain(x)
    assert np.all(gain != 0)
    np.testing.assert_allclose(model.rate(x, np.array([4, 7, 8, 9]), 8), [gain[0] / 4, gain[1] / 1, 0.0, 0.0],
                               rtol=1e-12, atol=0)


def test_rules_decide_after_1_to_chunk_minus_1_samples_then_every_chunk_below_the_cap():
    assert _checkpoints(10, 4).tolist() == [1, 2, 3, 4, 8]
    assert _checkpoints(3, 4).tolist() == [1, 2]
    assert _checkpoints(4, 4).tolist() == [1, 2, 3]
    assert _checkpoints(5, 1).tolist() == [1, 2, 3, 4]
    assert _checkpoints(1, 4).tolist() == []


def test_training_rows_are_the_vote_states_at_the_decision_points_against_the_vote_at_the_cap():
    pool = _tiny_pool()
    order = np.tile(np.arange(5), (2, 1))
    rep = replay_prefixes(pool, order)
    cap = np.array([5, 3])
    f = prefix_features(pool, order, rep, cap)
    x, now, at_cap = _training_rows([f], [rep], np.arange(2), cap, 2)
    # Caps in increasing order: problem b (cap 3: after 1 and 2 samples), then a (cap 5: 1, 2, 4).
    np.testing.assert_array_equal(x, np.concatenate([f[1, [0, 1]], f[0, [0, 1, 3]]]))
    assert now.tolist() == rep.vote_correct[1, [0, 1]].tolist() + rep.vote_correct[0, [0, 1, 3]].tolist()
    assert at_cap.tolist() == [rep.vote_correct[1, 2]] * 2 + [rep.vote_correct[0, 4]] * 3
    # The label is the vote after exactly `cap` samples (not the one before it).
    votes = SimpleNamespace(vote_correct=np.array([[False, False, True, False, True], [True, False, True, False, False]]))
    _, now, at_cap = _training_rows([f], [votes], np.arange(2), cap, 2)
    assert now.tolist() == [True, False, False, False, False] and at_cap.tolist() == [True] * 5
    # A problem capped at one sample has no decision point; the others still give their rows.
    x, now, at_cap = _training_rows([f], [rep], np.arange(2), np.array([5, 1]), 2)
    np.testing.assert_array_equal(x, f[0, [0, 1, 3]])
    with pytest.raises(ValueError, match="^no graded vote states to fit the contested model on"):
        fit_pool(_pool(), cap=1)
