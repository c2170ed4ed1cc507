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
    res = _result(oracle_ratio=Interval(2.0, 1.5, 2.5))
    out = res.to_json()
    assert out == {
        "model": "m", "n_problems": 45, "orderings": 3, "target": "self_consistency@16", "primary_mode": "online",
        "uniform_tokens": 1000.0, "uniform_tokens_ci": [900.0, 1100.0], "uniform_acc": 0.75, "uniform_acc_ci": [0.7, 0.8],
        "allocator_tokens": 500.0, "allocator_tokens_ci": [499.0, 501.0],
        "allocator_acc": 0.8, "allocator_acc_ci": [0.7, 0.85], "token_ratio": 0.5, "token_ratio_ci": [0.4, 0.6],
        "oracle_ratio": 2.0, "oracle_ratio_ci": [1.5, 2.5], "oracle_ratio_chunk": None, "oracle_ratio_chunk_ci": None,
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
