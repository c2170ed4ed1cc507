"""Offline allocation from pilot samples: budget kept, more samples where the pilot disagrees."""

from __future__ import annotations

import itertools
import logging
import math

import numpy as np
import pytest

from tts.benchmarks.pool import iter_pool_rows, load_pool
from tts.benchmarks.results_pool import write_pool
from tts.budgets.offline_plan import plan_from_pilot

K = 4
EASY = {"a": 1.0}
HARD = {"a": 0.4, "b": 0.15, "c": 0.15, "d": 0.15, "e": 0.15}  # plurality vote helps as n grows


def _draw(rng, dist, n):
    keys = list(dist)
    return [keys[i] for i in rng.choice(len(keys), size=n, p=[dist[k] for k in keys])]


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    """A past run: 60 unanimous easy problems (100 tokens/sample), 60 hard ones (300 tokens)."""
    rng = np.random.default_rng(1)
    rows = []
    for p in range(120):
        hard = p % 2 == 1
        for s, a in enumerate(_draw(rng, HARD if hard else EASY, 32)):
            rows.append({"problem_id": f"cal{p}", "model": "m", "sample_idx": s, "answer": a,
                         "correct": a == "a", "num_tokens": 300 if hard else 100, "score": None})
    return load_pool(write_pool(rows, tmp_path_factory.mktemp("cal") / "cal.jsonl.gz"))["m"]


def _live(seed=2, n=20):
    """Pilot answers and tokens of n new problems, half easy and half hard."""
    rng = np.random.default_rng(seed)
    ids, answers, tokens = [], [], []
    for p in range(n):
        hard = p % 2 == 1
        ids.append(f"live{p}")
        answers.append(_draw(rng, HARD if hard else EASY, K))
        tokens.append([int(t) for t in rng.integers(250, 350, K)] if hard else [100] * K)
    return ids, answers, tokens


def test_low_agreement_problems_get_more_samples_than_unanimous_ones(calibration):
    ids, answers, tokens = _live()
    budget = 10 * 12 * 300 / 2  # half of what n = 16 on every hard problem would cost
    res = plan_from_pilot(ids, answers, tokens, calibration, budget)
    unanimous = np.array([len(set(a)) == 1 for a in answers])
    n = np.array([p.n for p in res.plans])
    assert res.pilot == K and res.ns[0] == K and all(p.n >= K for p in res.plans)
    assert n[~unanimous].mean() > n[unanimous].mean() and np.median(n[unanimous]) == K
    # Unanimous problems only get what the hard ones could not use (the allocator's last pass).
    assert sum(p.expected_cost for p, u in zip(res.plans, unanimous) if u) < 0.1 * budget
    assert res.total_cost <= budget and res.total_cost > budget / 2
    # Cost counts only the samples beyond the pilot, at the problem's own mean pilot length.
    for plan, toks in zip(res.plans, tokens):
        assert plan.expected_cost == pytest.approx((plan.n - K) * np.mean(toks))
    # The easiest bin's curve is flat at 1; the hardest bin gains from more samples.
    easiest, hardest = res.curves[min(res.curves)], res.curves[max(res.curves)]
    assert easiest.at(K) > 0.95 and hardest.at(32) > hardest.at(K) + 0.1
    d = res.to_json()
    assert [q["n"] for q in d["problems"]] == n.tolist() and d["calibration"]["problems"] == 120


@pytest.mark.parametrize("budget", [300.0, 1234.5, 9_999.0, 50_000.0, 1e9])
def test_never_exceeds_the_budget(calibration, budget):
    ids, answers, tokens = _live(seed=3, n=30)
    res = plan_from_pilot(ids, answers, tokens, calibration, budget, ladder=(1, 2, 4, 6, 8, 16, 32, 64))
    assert math.fsum(p.expected_cost for p in res.plans) <= budget
    assert all(K <= p.n <= 32 for p in res.plans)  # 64 > the calibration's 32 samples: dropped


def test_missing_pilot_tokens_fall_back_to_the_bins_calibration_mean(calibration):
    ids, answers, tokens = _live()
    tokens[0] = [None] * K
    res = plan_from_pilot(ids, answers, None, calibration, 20_000.0)
    unanimous = [len(set(a)) == 1 for a in answers]
    per = np.array(res.sample_tokens)
    assert np.all(per[unanimous] < 150) and np.all(per[np.logical_not(unanimous)] > 250)
    partial = plan_from_pilot(ids, answers, tokens, calibration, 20_000.0)
    assert partial.sample_tokens[0] == res.sample_tokens[0] and partial.sample_tokens[1:] != res.sample_tokens[1:]


def test_a_live_bin_without_calibration_problems_uses_the_nearest_bin(tmp_path):
    # Calibration pilots are either unanimous or all different (agreement 1 or 0.25), so the
    # median edge is interpolated (0.625) and the bin [0.625, 1) holds no calibration problem.
    rows = [{"problem_id": f"c{p}", "model": "m", "sample_idx": s, "answer": "a" if p % 2 else f"w{s}",
             "correct": bool(p % 2), "num_tokens": 10, "score": None} for p in range(40) for s in range(16)]
    cal = load_pool(write_pool(rows, tmp_path / "c.jsonl"))["m"]
    res = plan_from_pilot(["x", "y"], [["a", "a", "a", "b"], ["a"] * K], None, cal, 1e4, n_bins=4)
    b = res.difficulty[0].bin
    assert b not in res.curves and b - 1 in res.curves and b + 1 in res.curves
    # Equally near bins on both sides: the harder one's curve is used.
    assert res.plans[0].expected_accuracy == pytest.approx(res.curves[b + 1].at(res.plans[0].n))


def test_errors_say_what_to_change(calibration, tmp_path):
    ids, answers, tokens = _live()
    for bad in (0, -5.0, float("nan"), "lots"):
        with pytest.raises(ValueError, match="positive number|must be a number"):
            plan_from_pilot(ids, answers, tokens, calibration, bad)
    with pytest.raises(ValueError, match="cannot buy any step up.*raise the budget to at least 400"):
        plan_from_pilot(ids, answers, tokens, calibration, 50.0)
    with pytest.raises(ValueError, match="same number of pilot samples"):
        plan_from_pilot(ids, [answers[0][:2]] + answers[1:], tokens, calibration, 1e4)
    with pytest.raises(ValueError, match="pass pilot=4"):
        plan_from_pilot(ids, answers, tokens, calibration, 1e4, pilot=2)
    with pytest.raises(ValueError, match="one list per problem"):
        plan_from_pilot(ids[:-1], answers, tokens, calibration, 1e4)
    with pytest.raises(ValueError, match="unique"):
        plan_from_pilot([ids[0]] * len(ids), answers, tokens, calibration, 1e4)
    with pytest.raises(ValueError, match="orderings"):
        plan_from_pilot(ids, answers, tokens, calibration, 1e4, orderings=0)
    with pytest.raises(ValueError, match="lower the pilot"):
        plan_from_pilot(ids, answers, tokens, calibration, 1e4, ladder=(1, 2, 4))
    no_tok = load_pool(write_pool([{"problem_id": f"p{p}", "model": "m", "sample_idx": s, "answer": "a",
                                    "correct": True, "num_tokens": None, "score": None}
                                   for p in range(4) for s in range(8)], tmp_path / "nt.jsonl"))["m"]
    with pytest.raises(ValueError, match="pass pilot_tokens"):
        plan_from_pilot(ids, answers, None, no_tok, 1e4)


def test_real_pool_held_out_half(shared_data, tmp_path, caplog):
    """Calibrate on half of MATH-500 (one reasoning model), plan the other half from 4 pilots."""
    path = shared_data / "pools" / "math500_reasoning_models.jsonl.gz"
    rows = [r for _, r in itertools.islice(iter_pool_rows(path), 40_000)]  # the first model, 80 each
    pool = load_pool(write_pool(rows, tmp_path / "pool.jsonl"))[rows[0]["model"]]
    cal, live = pool.subset(np.arange(0, pool.n_problems, 2)), pool.subset(np.arange(1, pool.n_problems, 2))
    texts = [[live.answer_text(p, int(a)) for a in live.answers[p, :K]] for p in range(live.n_problems)]
    toks = live.tokens[:, :K].astype(int).tolist()
    budget = float(live.tokens[:, K:16].sum())  # what uniform n = 16 spends after the same pilot
    with caplog.at_level(logging.WARNING, logger="tts.budgets.offline_plan"):
        res = plan_from_pilot(list(live.problem_ids), texts, toks, cal, budget)
        assert not caplog.records
        plan_from_pilot(list(live.problem_ids), texts, toks, pool, budget)  # calibrated on itself
    assert "also in the calibration pool" in caplog.text
    n = np.array([p.n for p in res.plans])
    assert res.total_cost <= budget and n.min() >= K
    agree = np.array([d.score for d in res.difficulty])
    assert n[agree < 1].mean() > n[agree == 1].mean()
