"""The allocator replay's parts on hand-made inputs: the report a user reads (``to_json``), the
n ladder, the budget grid, and the refusals of pools it cannot replay
(:mod:`tts.budgets.replay.simulate`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.budgets.replay.test_simulate import _pool
from tts.budgets.replay.matched import Interval, ModeResult
from tts.budgets.replay.simulate import SimulateConfig, SimulationResult, _grid, ladder_for, simulate


def _mode(name: str, base: float) -> ModeResult:
    return ModeResult(name, Interval(base, base - 1, base + 1), Interval(0.5, 0.4, 0.6), 0.9,
                      Interval(0.8, 0.7, 0.85), Interval(base * 2, base, base * 3), [1.0, 2.0], [0.1, 0.2])


def _result(**kw) -> SimulationResult:
    return SimulationResult("m", 45, 3, 16, Interval(1000.0, 900.0, 1100.0), Interval(0.75, 0.7, 0.8),
                            {"online": _mode("online", 500.0), "offline": _mode("offline", 600.0)}, **kw)


def test_the_report_leads_with_the_first_mode_and_keeps_every_modes_numbers() -> None:
    res = _result(oracle_ratio=Interval(2.0, 1.5, 2.5), oracle_ratio_chunk=Interval(1.8, 1.2, 2.2))
    out = res.to_json()
    assert out == {
        "model": "m", "n_problems": 45, "orderings": 3, "target": "self_consistency@16", "primary_mode": "online",
        "uniform_tokens": 1000.0, "uniform_tokens_ci": [900.0, 1100.0], "uniform_acc": 0.75, "uniform_acc_ci": [0.7, 0.8],
        "allocator_tokens": 500.0, "allocator_tokens_ci": [499.0, 501.0],
        "allocator_acc": 0.8, "allocator_acc_ci": [0.7, 0.85], "token_ratio": 0.5, "token_ratio_ci": [0.4, 0.6],
        "oracle_ratio": 2.0, "oracle_ratio_ci": [1.5, 2.5], "oracle_ratio_chunk": 1.8, "oracle_ratio_chunk_ci": [1.2, 2.2],
        "modes": {name: {"mode": name, "tokens_to_match": {"mean": b, "lo": b - 1, "hi": b + 1},
                         "token_ratio": {"mean": 0.5, "lo": 0.4, "hi": 0.6}, "reached": 0.9,
                         "acc_at_uniform_tokens": {"mean": 0.8, "lo": 0.7, "hi": 0.85},
                         "tokens_at_uniform_budget": {"mean": 2 * b, "lo": b, "hi": 3 * b}, "acc_change": None}
                  for name, b in (("online", 500.0), ("offline", 600.0))}}
    # The curves only when asked for.
    curves = res.to_json(curves=True)["modes"]["offline"]
    assert (curves["curve_tokens"], curves["curve_acc"]) == ([1.0, 2.0], [0.1, 0.2])
    assert "curve_tokens" not in res.to_json(curves=False)["modes"]["online"]


def test_the_n_ladder_is_the_powers_of_two_between_both_ends() -> None:
    assert ladder_for(16) == [1, 2, 4, 8, 16]
    assert ladder_for(24, 3) == [3, 4, 8, 16, 24]
    assert ladder_for(4, 4) == [4]
    assert ladder_for(100) == [1, 2, 4, 8, 16, 32, 64, 100]


def test_the_budget_grid_is_400_geometric_steps_from_at_least_one() -> None:
    g = _grid(10.0, 1000.0)
    assert len(g) == 400 and g[0] == pytest.approx(10.0) and g[-1] == pytest.approx(1000.0)
    assert np.allclose(g[1:] / g[:-1], 100 ** (1 / 399))
    g = _grid(0.0, 0.5)  # at least 1, and an upper end above the lower one
    assert g[0] == pytest.approx(1.0) and g[-1] == pytest.approx(2.0)
    g = _grid(100.0, 100.0)
    assert g[-1] == pytest.approx(101.0)


def test_pools_it_cannot_replay_are_refused_saying_what_to_change() -> None:
    pool = _pool(problems=6, samples=8)
    with pytest.raises(ValueError, match="^model 'm' has samples without num_tokens; a token-budget replay needs "
                                         "every sample's token count$"):
        simulate(dataclasses.replace(pool, tokens=np.full(pool.tokens.shape, np.nan)), SimulateConfig(target_n=4))
    with pytest.raises(ValueError, match="^6 problems cannot be split into 7 folds; lower --folds or use a bigger pool$"):
        simulate(pool, SimulateConfig(target_n=4, folds=7))
    with pytest.raises(ValueError, match=r"^target n=9 exceeds the pool's 8 samples per problem; pick n <= 8$"):
        simulate(pool, SimulateConfig(target_n=9, folds=2))
    # As many folds as problems, and a target of every sample, are fine.
    res = simulate(pool, SimulateConfig(target_n=8, folds=6, orderings=2, bootstrap=10, modes=("online",)))
    assert res.n_problems == 6 and res.target_n == 8 and sorted(res.folds.tolist()) == [0, 1, 2, 3, 4, 5]


def test_a_folds_bins_curves_and_sample_costs_come_from_the_other_folds() -> None:
    from tts.budgets.replay.simulate import _fold_expectations

    # Four problems, two orderings; problems 0 and 1 (fold 0) train, 2 and 3 (fold 1) are planned.
    # Pilot agreement (column 0) is the difficulty: training scores 0.9 and 0.3 put the edge at 0.6.
    feats = np.array([[[0.9, 0.0, 1.0], [0.3, 0.5, 1.0], [0.8, 0.1, 1.0], [0.2, 0.0, 1.0]],
                      [[0.9, 0.0, 1.0], [0.3, 0.5, 1.0], [0.25, 0.1, 1.0], [0.2, 0.0, 1.0]]])
    # Vote correctness after 1 and 2 samples; the planned problems' own rows must not matter.
    vote = np.array([[[1, 1], [0, 1], [9, 9], [9, 9]], [[1, 1], [0, 0], [9, 9], [9, 9]]], dtype=float)
    mean_tok = np.array([10.0, 20.0, 300.0, 400.0])
    te, acc, per_sample = _fold_expectations(None, feats, vote, mean_tok, np.array([0, 0, 1, 1]), 1,
                                             SimulateConfig(difficulty="pilot", n_bins=2), np.array([1, 2]))
    assert te.tolist() == [2, 3]
    # Bin 0 (easy): problem 0's rows, right at 1 and 2 samples; bin 1: problem 1's, (0 + 0) / 2 and (1 + 0) / 2.
    np.testing.assert_array_equal(acc, [[[1, 1], [0, 0.5]], [[0, 0.5], [0, 0.5]]])
    # Tokens per further sample: the training problems' mean in the bin (10 in bin 0, 20 in bin 1).
    np.testing.assert_array_equal(per_sample, [[10, 20], [20, 20]])


def test_a_bin_no_training_problem_fell_in_uses_every_training_problem() -> None:
    from tts.budgets.replay.simulate import _fold_expectations

    # Training scores 0.9, 0.9, 0.3 in three bins: edges 0.7 and 0.9, and nothing trains the middle bin.
    feats = np.array([[[0.9, 0.0], [0.9, 0.0], [0.3, 0.0], [0.8, 0.0], [0.95, 0.0]]])
    vote = np.array([[[1, 1], [1, 1], [0, 1], [0, 0], [0, 0]]], dtype=float)
    mean_tok = np.array([10.0, 20.0, 60.0, 999.0, 999.0])
    te, acc, per_sample = _fold_expectations(None, feats, vote, mean_tok, np.array([0, 0, 0, 1, 1]), 1,
                                             SimulateConfig(difficulty="pilot", n_bins=3), np.array([1, 2]))
    assert te.tolist() == [3, 4]
    # Problem 3 (0.8, the middle bin): all three training problems, 2/3 then 1, at 30 tokens a sample;
    # problem 4 (0.95, the easy bin): problems 0 and 1, at 15.
    np.testing.assert_allclose(acc, [[[2 / 3, 1], [1, 1]]])
    np.testing.assert_allclose(per_sample, [[30, 15]])


def test_the_pilot_features_are_the_first_k_samples_of_each_ordering_scores_included() -> None:
    from tts.benchmarks.pool import ModelPool
    from tts.budgets.replay.prefix import replay_prefixes
    from tts.budgets.replay.simulate import _pilot_inputs

    pool = ModelPool(model="m", problem_ids=("a", "b"), answers=np.array([[0, 0, 1], [1, 2, -1]], dtype=np.int32),
                     answer_texts=(("1", "2"), ("1", "2", "3")), correct=np.array([[1, 1, 0], [0, 0, 0]], bool),
                     tokens=np.array([[10.0, 30.0, 50.0], [100.0, 300.0, 700.0]]),
                     scores=np.array([[0.2, 0.4, 0.9], [0.1, 0.3, 0.5]]), sample_idx=np.tile(np.arange(3), (2, 1)),
                     mask=np.ones((2, 3), bool))
    orders = np.array([[[0, 1, 2], [0, 1, 2]], [[2, 1, 0], [2, 1, 0]]])
    reps = [replay_prefixes(pool, o) for o in orders]
    feats, pilot_tok = _pilot_inputs(pool, reps, orders, 2)
    # Columns: majority share, no-answer share, log1p mean tokens, mean score (of the first two samples).
    np.testing.assert_allclose(feats[0], [[1.0, 0.0, np.log1p(20.0), 0.3], [0.5, 0.0, np.log1p(200.0), 0.2]])
    np.testing.assert_allclose(feats[1], [[0.5, 0.0, np.log1p(40.0), 0.65], [0.5, 0.5, np.log1p(500.0), 0.4]])
    np.testing.assert_array_equal(pilot_tok, [[40.0, 400.0], [80.0, 1000.0]])


def test_offline_results_on_the_grid_take_each_folds_share_of_every_budget() -> None:
    from tts.budgets.replay.simulate import _offline_on_grid, _Path

    # Fold 0 (two of three problems) gets 2/3 of each budget, fold 1 a third.
    paths = [{0: _Path(np.array([10.0, 20.0, 40.0]), np.array([1.0, 1.5, 2.0]), np.array([100.0, 200.0, 400.0])),
              1: _Path(np.array([5.0, 15.0]), np.array([0.0, 1.0]), np.array([50.0, 150.0]))}]
    acc, tok = _offline_on_grid(paths, np.array([0, 0, 1]), np.array([12.0, 15.0, 30.0, 60.0]))
    # 12: fold 0's 8 cannot pay its first step (no result); 15, 30, 60: fold 0 at 10, 20, 40 (each
    # budget reached exactly counts), fold 1 at 5, 10, 20 (steps 0, 0, 1).
    np.testing.assert_allclose(acc, [[np.nan, 1 / 3, 0.5, 1.0]])
    np.testing.assert_allclose(tok, [[np.nan, 150.0, 250.0, 550.0]])


def test_a_folds_greedy_path_is_graded_on_the_replayed_votes_and_tokens() -> None:
    from tts.benchmarks.pool import ModelPool
    from tts.budgets.allocator import greedy_path
    from tts.budgets.replay.prefix import replay_prefixes
    from tts.budgets.replay.simulate import _graded_path

    # Answer 0 is right. p0: wrong at 1 and 2 samples, right at 4; p1: right at 1, 2 and 4.
    answers = np.array([[1, 2, 0, 0], [0, 0, 1, 2]], dtype=np.int32)
    pool = ModelPool(model="m", problem_ids=("p0", "p1"), answers=answers,
                     answer_texts=(("0", "1", "2"), ("0", "1", "2")), correct=answers == 0,
                     tokens=np.array([[10.0, 20.0, 30.0, 40.0], [1.0, 2.0, 3.0, 4.0]]),
                     scores=np.full((2, 4), np.nan), sample_idx=np.tile(np.arange(4), (2, 1)),
                     mask=np.ones((2, 4), bool))
    rep = replay_prefixes(pool, np.tile(np.arange(4), (2, 1)))
    ns = np.array([1, 2, 4])
    costs = np.array([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0]])
    accs = np.array([[0.5, 0.9, 1.0], [0.2, 0.3, 0.9]])
    # The plan: p0 to 2 samples (0.4 a unit), p1 to 4 (0.7 for 3), p0 to 4 (0.1 for 2).
    _, probs, opts, cum = greedy_path(costs, accs)
    assert probs.tolist() == [0, 1, 0] and opts.tolist() == [1, 2, 2] and cum.tolist() == [3.0, 6.0, 8.0]
    path, upgrades = _graded_path(rep, np.array([0, 1]), costs, accs, ns)
    np.testing.assert_array_equal(path.budget, [2.0, 3.0, 6.0, 8.0])
    # Right answers: p1 from the start (1), p0 once it has 4 samples (2).
    np.testing.assert_array_equal(path.correct, [1.0, 1.0, 1.0, 2.0])
    # Tokens: 10 + 1 at the start; p0's second sample (+20), p1's last three (+9), p0's last two (+70).
    np.testing.assert_array_equal(path.tokens, [11.0, 31.0, 40.0, 110.0])
    np.testing.assert_array_equal(upgrades, [[0, 1, 0], [2, 4, 4]])


def test_offline_plans_price_each_sample_at_its_bins_tokens_and_each_fold_gets_its_share() -> None:
    from tts.benchmarks.pool import ModelPool
    from tts.budgets.replay.prefix import replay_prefixes
    from tts.budgets.replay.simulate import _offline

    # Six problems of eight 10-token samples; answer 0 is right. More samples help (the vote turns right).
    rows = [[1, 1, 0, 0, 0, 0, 0, 0], [1, 2, 0, 1, 0, 0, 0, 0], [0, 1, 1, 0, 0, 0, 0, 0]] * 2
    answers = np.array(rows, dtype=np.int32)
    pool = ModelPool(model="m", problem_ids=tuple(f"p{i}" for i in range(6)), answers=answers,
                     answer_texts=tuple(("0", "1", "2") for _ in range(6)), correct=answers == 0,
                     tokens=np.full((6, 8), 10.0), scores=np.full((6, 8), np.nan),
                     sample_idx=np.tile(np.arange(8), (6, 1)), mask=np.ones((6, 8), bool))
    orders = np.tile(np.arange(8), (1, 6, 1))
    reps = [replay_prefixes(pool, o) for o in orders]
    fold = np.array([0, 0, 0, 1, 1, 1])
    cfg = SimulateConfig(target_n=8, pilot=2, difficulty="pilot", n_bins=1, folds=2)
    paths, steps, plan = _offline(pool, reps, orders, fold, cfg, 8)
    for f in (0, 1):
        path, (probs, n_new) = paths[0][f], steps[0][f]
        assert path.budget[0] == 3 * 2 * 10  # three pilots of two 10-token samples
        final = {p: 2 for p in np.nonzero(fold == f)[0].tolist()}
        final.update(zip(probs.tolist(), n_new.tolist()))
        # Every sample costs its 10 tokens: the path's last budget is the samples it ends with.
        assert path.budget[-1] == 10 * sum(final.values()) and len(probs) > 0
        np.testing.assert_allclose(path.budget % 10, 0)
    # No budget beyond the pilots: every problem keeps its two samples (each fold still pays its pilots).
    assert plan(0, 0.0).tolist() == [2] * 6 and plan(0, 120.0).tolist() == [2] * 6
    # Budget for everything: each problem ends where its fold's path ends. The two folds have three
    # problems each, so each gets half of a total budget: twice the dearer fold's path is enough.
    enough = 2 * max(paths[0][f].budget[-1] for f in (0, 1))
    assert plan(0, enough).tolist() == plan(0, 1e9).tolist()
    everything = plan(0, 1e9)
    for f in (0, 1):
        final = {p: 2 for p in np.nonzero(fold == f)[0].tolist()}
        final.update(zip(steps[0][f][0].tolist(), steps[0][f][1].tolist()))
        assert [everything[p] for p in sorted(final)] == [final[p] for p in sorted(final)]


def test_a_learned_difficulty_is_fitted_on_the_training_folds_pass_rates() -> None:
    from tts.benchmarks.pool import ModelPool
    from tts.budgets.replay.simulate import _fold_expectations

    # Training problems 0, 1, 2 pass 100%, 50% and 0% of the time while their pilots agree 0.2, 0.5 and
    # 0.9: agreement misleads here, and the learned score turns it round.
    correct = np.array([[1, 1], [1, 0], [0, 0], [1, 1], [1, 1], [1, 1]], bool)
    pool = ModelPool(model="m", problem_ids=tuple(f"p{i}" for i in range(6)), answers=np.zeros((6, 2), np.int32),
                     answer_texts=tuple(("0",) for _ in range(6)), correct=correct, tokens=np.full((6, 2), 10.0),
                     scores=np.full((6, 2), np.nan), sample_idx=np.tile(np.arange(2), (6, 1)), mask=np.ones((6, 2), bool))
    feats = np.array([[[0.2], [0.5], [0.9], [0.25], [0.85], [0.5]]])
    vote = np.array([[[1, 1], [0, 1], [0, 0], [9, 9], [9, 9], [9, 9]]], dtype=float)
    fold, ns = np.array([0, 0, 0, 1, 1, 1]), np.array([1, 2])
    args = (pool, feats, vote, np.full(6, 10.0), fold, 1)
    _, learned, _ = _fold_expectations(*args, SimulateConfig(difficulty="learned", n_bins=2), ns)
    _, pilot, _ = _fold_expectations(*args, SimulateConfig(difficulty="pilot", n_bins=2), ns)
    # Learned: problem 3 (agreement 0.25) sits with problems 0 and 1 in the easy bin, problem 4 with 2,
    # problem 5 (problem 1's features, on the edge) on the easy side.
    np.testing.assert_allclose(learned, [[[0.5, 1.0], [0.0, 0.0], [0.5, 1.0]]])
    # By agreement it is the other way round: 3 with problem 0; 4 and 5 with 1 and 2.
    np.testing.assert_allclose(pilot, [[[1.0, 1.0], [0.0, 0.5], [0.0, 0.5]]])
