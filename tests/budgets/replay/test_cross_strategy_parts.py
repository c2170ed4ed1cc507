"""The parts of the cross-strategy replay (tts.budgets.replay.cross_strategy) on hand-made inputs,
each value worked out by hand: the realised cost of drawing pilot + rest and of one request, the
ladder and its refusals, the grid of budgets, the frontier table and the JSON report (each pinned
by a mutation run: docs/mutation.md)."""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass

import numpy as np
import pytest

from tts.benchmarks.pool import ModelPool
from tts.budgets.cross_allocator import calibrate, pilot_feature_rows
from tts.budgets.pricing import Pricer
from tts.budgets.replay.cross_strategy import (
    CrossConfig,
    CrossResult,
    _budget_grid,
    _expected_option_values,
    _fold_path,
    _frontier,
    _ladder_for,
    _realised_costs,
    _replay_set,
    cross_replay,
)
from tts.budgets.replay.matched import Interval, ModeResult
from tts.budgets.replay.prefix import random_orders
from tts.budgets.strategy_curves import rule_outcomes

NAN = np.nan


def _exactly(message: str) -> str:
    """A pattern that matches ``message`` and nothing longer."""
    return f"^{re.escape(message)}$"


def _pool(answers, tokens, real=None, correct=None, scores=None, model="m") -> ModelPool:
    answers = np.array(answers, dtype=np.int32)
    shape = answers.shape
    mask = np.ones(shape, bool) if real is None else np.array(real, bool)
    return ModelPool(model=model, problem_ids=tuple(f"q{i}" for i in range(shape[0])), answers=answers,
                     answer_texts=tuple(tuple(str(a) for a in range(answers.max(initial=-1) + 1)) for _ in answers),
                     correct=(answers == 0 if correct is None else np.array(correct, bool)) & mask,
                     tokens=np.array(tokens, float),
                     scores=np.full(shape, NAN) if scores is None else np.array(scores, float),
                     sample_idx=np.where(mask, np.arange(shape[1]), -1), mask=mask)


@dataclass
class _Cost:
    eflops: float
    gpu_seconds: float = 0.0


class _PerRequest:
    """A cost model whose every request costs 100 eFLOPs plus one per generated token."""

    def cost_request(self, prompt, lengths, cached=0):
        assert prompt == 0 and cached == 0  # pools record no prompts
        return _Cost(eflops=100.0 + sum(lengths))


# Problem 0: four samples of 10, 20, 30 and 40 tokens; problem 1: three samples (5, 6, 7) and a
# padding slot, which costs nothing. Ordering 0 reads them in place, ordering 1 backwards (the
# padding slot stays last).
POOL = _pool(answers=[[0, 0, 0, 0], [0, 0, 0, -1]], tokens=[[10, 20, 30, 40], [5, 6, 7, NAN]],
             real=[[1, 1, 1, 1], [1, 1, 1, 0]])
ORDERS = np.array([[[0, 1, 2, 3], [0, 1, 2, 3]], [[3, 2, 1, 0], [2, 1, 0, 3]]])
NS = [2, 3, 4]


def test_realised_cost_in_samples_and_tokens_is_what_the_first_n_samples_of_each_ordering_cost():
    alloc, unif = _realised_costs(POOL, ORDERS, NS, 2, Pricer("samples"))
    assert alloc.tolist() == unif.tolist() == [[[2, 3, 4], [2, 3, 4]], [[2, 3, 4], [2, 3, 4]]]
    alloc, unif = _realised_costs(POOL, ORDERS, NS, 2, Pricer("tokens"))
    assert alloc.tolist() == unif.tolist() == [[[30, 60, 100], [11, 18, 18]], [[70, 90, 100], [13, 18, 18]]]
    assert alloc.dtype == np.float64


def test_realised_cost_priced_per_request_pays_the_pilot_and_the_rest_as_two_requests_and_uniform_as_one():
    alloc, unif = _realised_costs(POOL, ORDERS, NS, 2, Pricer("eflops", cost_model=_PerRequest()))
    # Ordering 0, problem 0: pilot 10 + 20 -> 130; n = 2 draws nothing more, n = 3 one request of
    # 30 (130), n = 4 one of 30 + 40 (170). Uniform: one request of the first n samples.
    assert alloc[0, 0].tolist() == [130, 260, 300] and unif[0, 0].tolist() == [130, 160, 200]
    # Problem 1 (5, 6, 7, padding): pilot 111; then 7 (107), then 7 and the padding's 0 (107).
    assert alloc[0, 1].tolist() == [111, 218, 218] and unif[0, 1].tolist() == [111, 118, 118]
    # Ordering 1 reads 40, 30, 20, 10 and 7, 6, 5, padding.
    assert alloc[1, 0].tolist() == [170, 290, 300] and unif[1, 0].tolist() == [170, 190, 200]
    assert alloc[1, 1].tolist() == [113, 218, 218] and unif[1, 1].tolist() == [113, 118, 118]
    # One ordering of the two problems: the same rows as ordering 0 above.
    one, _ = _realised_costs(POOL, ORDERS[:1], NS, 2, Pricer("eflops", cost_model=_PerRequest()))
    assert one.tolist() == [alloc[0].tolist()]


def _five(counts=(8, 8, 8, 8, 6), tokens=True) -> ModelPool:
    real = [[s < c for s in range(8)] for c in counts]
    return _pool(answers=np.where(real, 0, -1), tokens=np.where(real, 10.0 if tokens else NAN, NAN), real=real)


def test_the_ladder_runs_from_the_pilot_to_the_samples_every_problem_has_with_the_target_in_it():
    pool, tokens = _five(), Pricer("tokens")
    assert _ladder_for(pool, CrossConfig(target_n=6, folds=5, pilot=4), tokens) == (6, 4, [4, 6])
    assert _ladder_for(pool, CrossConfig(target_n=5, folds=5, pilot=2), tokens) == (6, 2, [2, 4, 5, 6])
    assert _ladder_for(pool, CrossConfig(target_n=5, folds=2, pilot=4, max_n=5), tokens) == (5, 4, [4, 5])
    assert _ladder_for(pool, CrossConfig(target_n=3, folds=2, pilot=4, max_n=9), tokens) == (6, 3, [3, 4, 6])
    assert _ladder_for(_five(counts=(8,) * 5), CrossConfig(target_n=8, folds=2, pilot=1), tokens) == (
        8, 1, [1, 2, 4, 8])


def test_the_ladder_refuses_what_cannot_be_replayed_saying_what_to_change():
    pool = _five()
    with pytest.raises(ValueError, match=_exactly(
            "target n=7 exceeds the 6 samples every problem has; pick n <= 6")):
        _ladder_for(pool, CrossConfig(target_n=7, folds=2), Pricer("tokens"))
    with pytest.raises(ValueError, match=_exactly(
            "target n=6 exceeds the 5 samples every problem has; pick n <= 5")):
        _ladder_for(pool, CrossConfig(target_n=6, folds=2, max_n=5), Pricer("tokens"))
    with pytest.raises(ValueError, match=_exactly("5 problems cannot be split into 6 folds; lower --folds")):
        _ladder_for(pool, CrossConfig(target_n=4, folds=6), Pricer("tokens"))
    untimed = _five(tokens=False)
    with pytest.raises(ValueError, match=_exactly(
            "model 'm' has samples without num_tokens; price it in samples (--budget-unit samples) or use a pool "
            "with token counts")):
        _ladder_for(untimed, CrossConfig(target_n=4, folds=5), Pricer("tokens"))
    assert _ladder_for(untimed, CrossConfig(target_n=4, folds=5), Pricer("samples")) == (6, 4, [4, 6])


def test_the_budget_grid_starts_where_every_fold_of_every_ordering_pays_its_cheapest_plans():
    # Two orderings, three problems (folds 0, 0, 1), options [a1, a2, b1]; each fold gets its share
    # (problems in it / 3) of a total budget, so a fold's cheapest plans scale by 3 / its size.
    exp_cost = np.array([[[1, 2, 4], [3, 5, 1], [2, 6, 8]],
                         [[1, 1, 9], [1, 2, 9], [4, 4, 3]]], float)
    fold = np.array([0, 0, 1])
    sets = {"cross": [0, 1, 2], "a": [0, 1], "b": [2]}
    # Ordering 0: fold 0 pays cross 1 + 1, a 1 + 3, b 4 + 1 -> at most 5 * 3/2 = 7.5; fold 1 pays
    # cross 2, a 2, b 8 -> 8 * 3 = 24. Ordering 1: fold 0 b 9 + 9 -> 27; fold 1 cross 3, a 4, b 3
    # -> 12. So the grid starts at 27. The dearest plans: ordering 1's 9 + 9 + 4 = 22 (ordering 0:
    # 4 + 5 + 8 = 17); uniform's dearest 30 -> the grid ends at 30 * 1.01 = 30.3.
    grid = _budget_grid(exp_cost, np.array([[10.0, 30.0], [12.0, 20.0]]), fold, sets, 3)
    assert len(grid) == 300 and grid[0] == pytest.approx(27.0) and grid[-1] == pytest.approx(30.3)
    assert np.allclose(grid[1:] / grid[:-1], (30.3 / 27.0) ** (1 / 299))
    # With only the cross set the start is ordering 1's fold 1 (3 * 3 = 9), and uniform costing less
    # than the dearest plans, those end the grid: 22 * 1.01.
    cross_only = _budget_grid(exp_cost, np.array([[1.0], [2.0]]), fold, {"cross": [0, 1, 2]}, 3)
    assert cross_only[0] == pytest.approx(9.0) and cross_only[-1] == pytest.approx(22.22)
    # A grid that would end below its start (27 > 22.22) ends 1% above it.
    low = _budget_grid(exp_cost, np.array([[1.0], [2.0]]), fold, sets, 3)
    assert low[0] == pytest.approx(27.0) and low[-1] == pytest.approx(27.27)
    # Costs far below 1 (dollars, GPU-seconds) keep their own scale.
    dollars = _budget_grid(exp_cost * 1e-6, np.array([[1e-5], [3e-5]]), fold, sets, 3)
    assert dollars[0] == pytest.approx(27e-6) and dollars[-1] == pytest.approx(30.3e-6)


def test_the_frontier_row_of_each_n_holds_the_uniform_best_rule_the_best_in_hindsight_and_the_allocators():
    # Rules listed with the best one second. At n = 4 the single-rule allocators reach 0.5 (vote)
    # and 0.75 (shortest); the cross allocator cannot pay a fold's pilot in ordering 1 (NaN): None.
    # At n = 8 vote's allocator has a NaN (None), so the best single one is shortest's 0.625.
    unif_acc = {"vote": np.array([[0.5, 0.5], [0.75, 1.0]]), "shortest": np.array([[0.25, 1.0], [0.25, 1.0]])}
    at_points = {"vote": np.array([[0.5, NAN], [0.5, 1.0]]), "shortest": np.array([[0.75, 0.5], [0.75, 0.75]]),
                 "cross": np.array([[0.75, 1.0], [NAN, 0.0]])}
    rows = _frontier([4, 8], ("shortest", "vote"), "vote", np.array([100.0, 250.0]), unif_acc, at_points)
    assert rows == [
        {"n": 4, "cost": 100.0, "uniform_best": 0.625, "uniform_any_best": 0.625, "single_allocator_best": 0.75,
         "cross": None},
        {"n": 8, "cost": 250.0, "uniform_best": 0.75, "uniform_any_best": 1.0, "single_allocator_best": 0.625,
         "cross": 0.5},
    ]
    assert all(type(r["n"]) is int and type(r["cost"]) is float for r in rows)
    assert all(type(r[k]) is float for r in rows for k in ("uniform_best", "uniform_any_best"))
    none = _frontier([4], ("vote",), "vote", np.array([1.0]), {"vote": np.array([[0.5]])},
                     {"vote": np.array([[NAN]]), "cross": np.array([[NAN]])})
    assert none[0]["single_allocator_best"] is None and none[0]["cross"] is None


def test_the_json_report_renames_the_allocators_fields_to_cost_and_leaves_the_curves_out():
    iv = Interval(0.5, 0.25, 0.75)

    def mode(name: str, m: float) -> ModeResult:
        return ModeResult(name, Interval(m, m - 1, m + 1), Interval(m / 10, 0.0, 1.0), 0.875,
                          Interval(0.6, 0.5, 0.7), Interval(m * 2, m, m * 3), [1.0, 2.0], [0.1, 0.2],
                          Interval(0.05, -0.01, 0.1))

    res = CrossResult("m", "eflops", ("vote", "shortest"), 16, "vote",
                      {"vote": {"acc": iv, "cost": Interval(9.0, 8.0, 10.0)}},
                      {"cross": mode("cross", 4.0)}, [{"n": 4, "cost": 1.0}], {"vote": 0.25, "shortest": 0.75})
    assert res.to_json() == {
        "model": "m", "unit": "eflops", "rules": ["vote", "shortest"], "target_n": 16, "best_single": "vote",
        "uniform": {"vote": {"acc": {"mean": 0.5, "lo": 0.25, "hi": 0.75}, "cost": {"mean": 9.0, "lo": 8.0, "hi": 10.0}}},
        "allocators": {"cross": {"cost_to_match": {"mean": 4.0, "lo": 3.0, "hi": 5.0},
                                 "cost_ratio": {"mean": 0.4, "lo": 0.0, "hi": 1.0}, "reached": 0.875,
                                 "acc_at_best_single_cost": {"mean": 0.6, "lo": 0.5, "hi": 0.7},
                                 "cost_at_best_single_budget": {"mean": 8.0, "lo": 4.0, "hi": 12.0},
                                 "acc_change": {"mean": 0.05, "lo": -0.01, "hi": 0.1}}},
        "frontier": [{"n": 4, "cost": 1.0}], "chosen": {"vote": 0.25, "shortest": 0.75}}
    assert res.plans.shape == (0, 0) and res.options == ()


def _clear_pool(problems: int = 4) -> ModelPool:
    """Every problem: seven samples of the right answer 0 (20 tokens each) and one short wrong one
    (answer 1, 5 tokens). The vote of 3 or more samples is always right; the shortest sample is
    the wrong one as soon as it is drawn, so shortest at n = 8 is always wrong."""
    answers = [[0] * 7 + [1] for _ in range(problems)]
    return _pool(answers=answers, tokens=[[20.0] * 7 + [5.0] for _ in range(problems)])


def test_a_replay_where_the_vote_is_always_right_picks_it_everywhere_and_reports_it_as_the_best_single_rule(caplog):
    cfg = CrossConfig(rules=("shortest", "vote"), target_n=8, orderings=3, folds=2, pilot=4, n_bins=1, bootstrap=10)
    with caplog.at_level(logging.INFO, logger="tts.budgets.replay.cross_strategy"):
        res = cross_replay(_clear_pool(), cfg)
    assert caplog.messages == [f"m: best single vote; cross ratio {res.allocators['cross'].token_ratio}"]
    assert (res.model, res.unit, res.rules, res.target_n, res.best_single) == ("m", "tokens", ("shortest", "vote"), 8,
                                                                               "vote")
    assert res.options == (("shortest", 4), ("shortest", 8), ("vote", 4), ("vote", 8))
    # Uniform at n = 8: every sample of the four problems, 4 * (7 * 20 + 5) = 580 tokens in every ordering.
    assert res.uniform["vote"] == {"acc": Interval(1.0, 1.0, 1.0), "cost": Interval(580.0, 580.0, 580.0)}
    assert res.uniform["shortest"] == {"acc": Interval(0.0, 0.0, 0.0), "cost": Interval(580.0, 580.0, 580.0)}
    # The vote of the pilot is already right and costs nothing more: every problem keeps it.
    assert res.plans.shape == (3, 4) and (res.plans == 2).all()
    assert res.chosen == {"shortest": 0.0, "vote": 1.0}
    assert {name: m.mode for name, m in res.allocators.items()} == {"cross": "cross", "shortest": "shortest",
                                                                    "vote": "vote"}
    assert res.allocators["cross"].acc_at_uniform_tokens.mean == 1.0
    # Each rule alone plans with its own options only: vote alone is always right, shortest alone
    # keeps its pilot (its 8 samples are always wrong) and is wrong whenever the short sample came early.
    assert res.allocators["vote"].acc_at_uniform_tokens.mean == 1.0
    assert res.allocators["shortest"].acc_at_uniform_tokens.mean < 1.0
    assert [r["n"] for r in res.frontier] == [4, 8] and res.frontier[1]["cost"] == 580.0
    assert [r["uniform_best"] for r in res.frontier] == [1.0, 1.0]
    assert res.frontier[1]["uniform_any_best"] == 1.0
    again = cross_replay(_clear_pool(), cfg)  # seeded: the same orderings, folds and bootstrap
    assert again.frontier == res.frontier and again.to_json() == res.to_json()


def test_a_folds_greedy_path_read_at_each_share_gives_the_realised_correct_count_and_cost_of_the_plans_that_fit():
    # Two problems, two options. Planned: both start at option 0 (cost 1 + 2 = 3); p0's upgrade
    # gains 0.4 for 2 (slope 0.2), p1's 0.2 for 4 (0.05): p0 first (total 5), then p1 (9).
    # Realised: p0 right only at option 1, p1 only at option 0; costs 10/30 and 20/60.
    c, a = np.array([[1.0, 3.0], [2.0, 6.0]]), np.array([[0.2, 0.6], [0.5, 0.7]])
    g, pd = np.array([[0, 1], [1, 0]]), np.array([[10.0, 30.0], [20.0, 60.0]])
    share = np.array([2.5, 3.0, 4.9, 5.0, 8.99, 9.0, 100.0])
    ok, spent, (start, probs, opts, steps) = _fold_path(c, a, g, pd, share)
    # Below 3 the starting plans do not fit (NaN); 3 exactly pays them.
    assert np.array_equal(ok, [NAN, 1, 1, 2, 2, 1, 1], equal_nan=True)
    assert np.array_equal(spent, [NAN, 30, 30, 50, 50, 90, 90], equal_nan=True)
    assert start.tolist() == [0, 0] and probs.tolist() == [0, 1] and opts.tolist() == [1, 1]
    assert steps.tolist() == [0, 0, 0, 1, 1, 2, 2]


def test_a_set_of_options_is_replayed_fold_by_fold_each_fold_at_its_share_of_every_budget():
    # Three problems in folds 0, 0, 1; options 0 and 2 only (option 1, free and never right, would
    # show if it were read). Fold 0 gets 2/3 of a budget, fold 1 1/3.
    exp_cost = np.array([[[1, 100, 3], [1, 100, 2], [2, 100, 4]]], float)
    exp_acc = np.array([[[0.1, 1.0, 0.5], [0.2, 1.0, 0.3], [0.3, 1.0, 0.8]]])
    got = np.array([[[0, 0, 1], [1, 0, 1], [0, 0, 1]]])
    paid = np.array([[[10, 0, 30], [11, 0, 21], [20, 0, 40]]], float)
    # Fold 0 starts at 1 + 1 = 2 (right: p1; paid 21), upgrades p0 (slope 0.2, total 4: +1 right,
    # +20 paid), then p1 (0.1, total 5: +0, +10). Fold 1 starts at 2 (wrong, 20), upgrades p2 at 4
    # (right, 40). Totals 3, 6, 7.5, 12 give fold 0 2, 4, 5, 8 and fold 1 1, 2, 2.5, 4 (below 2:
    # its start does not fit). Uniform's 6.9: 4.6 and 2.3. The frontier's 9: 6 and 3.
    acc, cost, at_u, pts, picks = _replay_set([0, 2], np.array([3.0, 6.0, 7.5, 12.0]), np.array([6.9]),
                                              np.array([9.0]), np.array([0, 0, 1]), exp_cost, exp_acc, got, paid)
    assert np.allclose(acc, [[NAN, 2 / 3, 2 / 3, 1.0]], equal_nan=True)
    assert np.array_equal(cost, [[NAN, 61, 71, 91]], equal_nan=True)
    assert np.allclose(at_u, [[2 / 3, 61]]) and np.allclose(pts, [[2 / 3]])
    assert picks.tolist() == [[2, 0, 0]]  # at 6.9 only p0 was upgraded, to option 2
    # A second ordering with the grades of the first: its own rows, the same values.
    two = _replay_set([0, 2], np.array([3.0, 6.0, 7.5, 12.0]), np.array([6.9, 12.0]), np.array([9.0]),
                      np.array([0, 0, 1]), np.repeat(exp_cost, 2, 0), np.repeat(exp_acc, 2, 0), np.repeat(got, 2, 0),
                      np.repeat(paid, 2, 0))
    assert np.allclose(two[0], np.repeat(acc, 2, 0), equal_nan=True) and np.allclose(two[2], [[2 / 3, 61], [1.0, 91]])
    assert two[4].tolist() == [[2, 0, 0], [2, 2, 2]]
    # Three folds of one problem each, a third of every budget: p0 upgrades at 3 (total 9), p1 at 2
    # (6), p2 starts at 2 (6) and upgrades at 4 (12).
    acc, cost, at_u, pts, picks = _replay_set([0, 2], np.array([3.0, 6.0, 7.5, 12.0]), np.array([6.9]),
                                              np.array([9.0]), np.array([0, 1, 2]), exp_cost, exp_acc, got, paid)
    assert np.allclose(acc, [[NAN, 1 / 3, 1 / 3, 1.0]], equal_nan=True)
    assert np.array_equal(cost, [[NAN, 51, 51, 91]], equal_nan=True)
    assert np.allclose(at_u, [[1 / 3, 51]]) and np.allclose(pts, [[2 / 3]]) and picks.tolist() == [[0, 2, 0]]


def _graded_pool(seed: int = 4, problems: int = 8, samples: int = 6) -> ModelPool:
    rng = np.random.default_rng(seed)
    answers = rng.integers(0, 3, (problems, samples))
    tokens = rng.integers(10, 60, (problems, samples)).astype(float)
    return _pool(answers=answers, tokens=tokens, correct=answers == 0)


def test_a_folds_expected_values_come_from_the_other_folds_and_its_own_pilot():
    pool = _graded_pool()
    cfg = CrossConfig(rules=("vote", "shortest"), target_n=6, folds=2, pilot=2, difficulty="pilot", n_bins=2,
                      switch_z=0.0)
    rules, k, ns = ("vote", "shortest"), 2, [2, 4, 6]
    options = [(r, n) for r in rules for n in ns]
    orders = random_orders(pool.mask, 2, np.random.default_rng(0))
    fold = np.array([0, 1] * 4)
    real_alloc = np.zeros((2, 8, 3))
    real_alloc[:, :, 0] = np.arange(16).reshape(2, 8) * 1000.0  # the pilot's realised cost
    real_alloc[:, :, 1:] = -1.0  # never read
    outcomes = rule_outcomes(pool, orders, rules, 6)
    exp_cost, exp_acc = _expected_option_values(pool, cfg, k, ns, orders, outcomes, fold, real_alloc, options,
                                                Pricer("tokens"))
    # Cost: the realised pilot plus n - k more samples of the pilot's mean length (rounded), no prompt.
    for r in range(2):
        for p in range(8):
            pilot = pool.tokens[p, orders[r, p, :2]]
            m = max(1, round(float(pilot.mean())))
            assert exp_cost[r, p].tolist() == [real_alloc[r, p, 0] + (n - 2) * m for _, n in options]
    # Priced per request (no prompt): the rest is one more request, none at n = k.
    eflops, _ = _expected_option_values(pool, cfg, k, ns, orders, outcomes, fold, real_alloc, options,
                                        Pricer("eflops", cost_model=_PerRequest()))
    m = max(1, round(float(pool.tokens[0, orders[0, 0, :2]].mean())))
    assert eflops[0, 0].tolist() == [0.0 + (0 if n == 2 else 100 + (n - 2) * m) for _, n in options]
    # Accuracy: each fold's calibration is fitted on the other fold with the settings' difficulty,
    # bins and noise guard, and read at the fold's own pilot (its first k samples in each ordering).
    for f in (0, 1):
        te = np.nonzero(fold == f)[0]
        cal = calibrate(pool, rules, k, ns, orders=orders, problems=np.nonzero(fold != f)[0], difficulty="pilot",
                        n_bins=2, switch_z=0.0)
        for r in range(2):
            feats = pilot_feature_rows(pool.answers[te[:, None], orders[r, te, :2]],
                                       pool.tokens[te[:, None], orders[r, te, :2]])
            assert np.array_equal(exp_acc[r, te], cal.accuracy(cal.bins(feats)))
    # Regrading a problem of fold 0 moves fold 1's expected values, never its own fold's.
    flipped = dataclasses.replace(pool, correct=pool.correct.copy())
    flipped.correct[0] = ~flipped.correct[0]
    _, acc2 = _expected_option_values(flipped, cfg, k, ns, orders, rule_outcomes(flipped, orders, rules, 6), fold,
                                      real_alloc, options, Pricer("tokens"))
    assert np.array_equal(acc2[:, fold == 0], exp_acc[:, fold == 0]) and not np.array_equal(acc2[:, fold == 1],
                                                                                            exp_acc[:, fold == 1])


def test_the_best_single_rule_is_the_most_accurate_at_the_target_whatever_its_name():
    # Five long wrong answers (1) and three short right ones (0): the vote is wrong, the shortest
    # sample right, so "shortest" is the best single rule although "vote" sorts after it.
    answers = [[1] * 5 + [0] * 3 for _ in range(4)]
    pool = _pool(answers=answers, tokens=[[30.0] * 5 + [5.0] * 3 for _ in range(4)])
    res = cross_replay(pool, CrossConfig(rules=("shortest", "vote"), target_n=8, orderings=2, folds=2, pilot=4,
                                         n_bins=1, bootstrap=10))
    assert res.best_single == "shortest"
    assert res.uniform["shortest"]["acc"].mean == 1.0 and res.uniform["vote"]["acc"].mean == 0.0


def test_a_pool_without_token_counts_is_replayed_in_samples_and_a_cost_model_prices_pilot_and_rest_as_requests():
    real = [[True] * 8 for _ in range(4)]
    untimed = _pool(answers=[[0] * 7 + [1] for _ in range(4)], tokens=np.full((4, 8), NAN), real=real)
    cfg = CrossConfig(rules=("shortest", "vote"), target_n=8, orderings=2, folds=2, pilot=4, n_bins=1, bootstrap=10)
    res = cross_replay(untimed, cfg.model_copy(update={"rules": ("vote",)}), Pricer("samples"))  # shortest reads tokens
    assert res.unit == "samples" and res.uniform["vote"]["cost"] == Interval(32.0, 32.0, 32.0)  # 4 problems x 8
    # eFLOPs of the per-request model (100 a request + 1 a token): uniform n = 8 is one request of
    # 7 x 20 + 5 tokens per problem; the allocator keeps every problem at its pilot, one request
    # of its first 4 samples: 100 + 80, or 100 + 65 where the short one was among them.
    res = cross_replay(_clear_pool(), cfg, Pricer("eflops", cost_model=_PerRequest()))
    assert res.unit == "eflops" and res.uniform["vote"]["cost"] == Interval(980.0, 980.0, 980.0)
    assert (res.plans == 2).all()
    assert 4 * 165 <= res.allocators["cross"].tokens_at_uniform_budget.mean <= 4 * 180
