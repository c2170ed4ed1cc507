"""Cross-strategy allocation: selection-rule curves, per-problem (rule, n) plans, and their replay."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from tts.benchmarks.pool import load_pool
from tts.budgets.allocator import BudgetTooSmallError, CalibrationError
from tts.budgets.cross_allocator import (
    Pricer,
    calibrate,
    choose,
    efficiency_from_report,
    make_pricer,
    plan_from_pilot,
)
from tts.budgets.replay.cross_strategy import CrossConfig, cross_replay
from tts.budgets.replay.prefix import random_orders
from tts.budgets.strategy_curves import UnknownRuleError, parse_rules, rule_outcomes


def _write_pool(path: Path, n_problems: int = 60, n_samples: int = 16, seed: int = 0, scores: bool = True) -> Path:
    """Three kinds of problems: easy (all correct), 'vote' problems (majority right, the wrong
    answers score high) and 'score' problems (majority wrong, the right answer scores high).
    Easy problems are short, the others long, so pilot length and agreement tell them apart."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(n_problems):
        kind = p % 3
        for s in range(n_samples):
            if kind == 0:
                ans, ok, sc, tok = "1", True, 0.5, 50
            elif kind == 1:
                ans, ok, sc = ("1", True, 0.2) if rng.random() < 0.7 else (str(rng.integers(2, 5)), False, 0.9)
                tok = 400
            else:
                ans, ok, sc = ("1", True, 0.9) if rng.random() < 0.3 else ("2", False, 0.1)
                tok = 800
            rows.append({"problem_id": f"p{p}", "model": "m", "sample_idx": s, "answer": ans, "correct": ok,
                         "num_tokens": int(tok + rng.integers(0, 20)), "score": sc if scores else None})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture()
def pool(tmp_path: Path):
    return load_pool(_write_pool(tmp_path / "pool.jsonl"))["m"]


def test_parse_rules_accepts_aliases_and_names_the_valid_ones() -> None:
    assert parse_rules("self_consistency, best_of_n,vote") == ("vote", "best_of_n")
    with pytest.raises(UnknownRuleError, match="valid: vote, best_of_n, weighted_vote, shortest"):
        parse_rules("vote,beam")


def test_rule_outcomes_follow_each_rule(pool) -> None:
    orders = random_orders(pool.mask, 3, np.random.default_rng(0))
    out = rule_outcomes(pool, orders, ("vote", "best_of_n", "shortest"), 16)
    assert out["vote"].shape == (3, pool.n_problems, 16)
    full = {r: v[:, :, -1].mean(axis=0) for r, v in out.items()}
    kinds = np.arange(pool.n_problems) % 3
    # With all 16 samples: vote is right on 'vote' problems, best score on 'score' problems.
    assert full["vote"][kinds == 1].mean() > 0.9 and full["best_of_n"][kinds == 1].mean() < 0.1
    assert full["best_of_n"][kinds == 2].mean() > 0.9 and full["vote"][kinds == 2].mean() < 0.1
    assert np.all(full["vote"][kinds == 0] == 1.0)


def test_a_pool_without_scores_names_the_rule_that_needs_them(tmp_path: Path) -> None:
    bare = load_pool(_write_pool(tmp_path / "bare.jsonl", scores=False))["m"]
    orders = random_orders(bare.mask, 2, np.random.default_rng(0))
    with pytest.raises(CalibrationError, match="'best_of_n' needs"):
        rule_outcomes(bare, orders, ("vote", "best_of_n"), 8)


def test_plans_pick_the_rule_each_difficulty_favours_and_stay_within_budget(pool) -> None:
    orders = random_orders(pool.mask, 8, np.random.default_rng(1))
    cal = calibrate(pool, ("vote", "best_of_n"), 4, [4, 8, 16], orders=orders, difficulty="learned", n_bins=3)
    # Live problems: pilots like a 'vote' problem (3 of 4 agree, 400 tokens) and a 'score' one (3 of 4, 800).
    feats_vote = [[0.75, 0.0, np.log1p(400)]]
    feats_score = [[0.75, 0.0, np.log1p(800)]]
    feats = np.array(feats_vote + feats_score)
    plan = choose(["a", "b"], feats, [0, 0], [400, 800], cal, Pricer("tokens"), budget=20000)
    assert plan.expected_cost <= 20000
    by_id = {c.problem_id: c for c in plan.choices}
    assert by_id["b"].rule == "best_of_n" and by_id["b"].strategy == "best_of_n"
    assert by_id["a"].alternatives["vote"] >= by_id["a"].alternatives["best_of_n"]
    assert by_id["b"].gain_per_cost >= 0


def test_a_budget_below_the_cheapest_plan_names_the_minimum(pool) -> None:
    with pytest.raises(BudgetTooSmallError, match="at least") as err:
        plan_from_pilot(["x"], [["1", "2", "3", "4"]], [[100, 100, 100, 100]], [10], pool, ("vote",),
                        budget=-500.0, pricer=Pricer("tokens"))
    assert err.value.minimum == pytest.approx(500.0)


def test_pricer_units_use_the_cost_model_and_the_efficiency_factor(tmp_path: Path) -> None:
    base = make_pricer("gpu_seconds", "smollm2-135m", "h100")
    slow = dataclasses.replace(base, efficiency=3.0)
    assert slow.request(100, [200] * 4) == pytest.approx(3.0 * base.request(100, [200] * 4))
    eflops = make_pricer("eflops", "smollm2-135m", "h100")
    # Four samples sharing a prompt cost less than four single-sample requests (the prompt's KV is read once).
    assert eflops.request(300, [200] * 4) < 4 * eflops.request(300, [200])
    dollars = make_pricer("dollars", "smollm2-135m", "h100")
    assert dollars.request(100, [200]) == pytest.approx(base.request(100, [200]) / 3600 * dollars.usd_per_hour)
    report = tmp_path / "cal.json"
    report.write_text(json.dumps({"engine": {"median_ratio": 2.5}}))
    assert efficiency_from_report(report) == 2.5
    report.write_text(json.dumps({"cpu": {}}))
    with pytest.raises(ValueError, match="--engine"):
        efficiency_from_report(report)


def test_cross_replay_beats_each_single_rule_when_problems_differ(pool) -> None:
    res = cross_replay(pool, CrossConfig(rules=("vote", "best_of_n"), target_n=16, orderings=4, folds=3,
                                         difficulty="learned", n_bins=3, bootstrap=50))
    cross = res.allocators["cross"].acc_at_uniform_tokens.mean
    singles = [res.allocators[r].acc_at_uniform_tokens.mean for r in ("vote", "best_of_n")]
    assert cross > max(singles) + 0.1
    assert 0 < res.chosen["best_of_n"] < 1
    assert set(res.to_json()) >= {"best_single", "allocators", "frontier", "chosen"}


def test_cross_replay_never_reads_a_problems_own_grade(pool) -> None:
    cfg = CrossConfig(rules=("vote", "best_of_n"), target_n=16, orderings=3, folds=3, bootstrap=20)
    before = cross_replay(pool, cfg)
    flipped = dataclasses.replace(pool, correct=pool.correct.copy())
    flipped.correct[0] = ~flipped.correct[0] & flipped.mask[0]
    after = cross_replay(flipped, cfg)
    assert np.array_equal(before.plans[:, 0], after.plans[:, 0])


def _coin_pool(path: Path, n_problems: int = 60, n_samples: int = 16, seed: int = 3) -> Path:
    """Every problem a coin flip between a right and a wrong answer, with scores that carry no
    signal: vote and best-of-N by score are equally good in truth, so any gap is noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(n_problems):
        q = rng.uniform(0.3, 0.7)
        for s in range(n_samples):
            ok = bool(rng.random() < q)
            rows.append({"problem_id": f"p{p}", "model": "m", "sample_idx": s, "answer": "1" if ok else "2",
                         "correct": ok, "num_tokens": int(300 + rng.integers(0, 50)), "score": float(rng.random())})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_the_noise_guard_keeps_real_gains_and_drops_ties(pool, tmp_path: Path) -> None:
    orders = random_orders(pool.mask, 8, np.random.default_rng(1))
    # Real differences: best_of_n wins the 'score' problems by far, so the guard lets it be chosen there.
    cal = calibrate(pool, ("vote", "best_of_n"), 4, [4, 8, 16], orders=orders, n_bins=3, switch_z=1.0)
    assert cal.reference is not None
    other = "best_of_n" if cal.reference == "vote" else "vote"
    assert any(cal.switches[(other, b)] for b in range(3))
    # Noise only: unguarded, the fitted curves put the score rule ahead somewhere; guarded, it is never
    # ahead of the reference, so the allocator keeps one rule.
    coin = load_pool(_coin_pool(tmp_path / "coin.jsonl"))["m"]
    orders = random_orders(coin.mask, 8, np.random.default_rng(2))
    raw = calibrate(coin, ("vote", "best_of_n"), 4, [4, 8, 16], orders=orders, n_bins=3, switch_z=0.0)
    guarded = calibrate(coin, ("vote", "best_of_n"), 4, [4, 8, 16], orders=orders, n_bins=3, switch_z=1.0)

    def ahead(c):  # (bin, n) cells where the non-reference rule's curve beats the reference's
        ref = guarded.reference
        oth = "best_of_n" if ref == "vote" else "vote"
        return sum(a > b for bn in range(3) for a, b in zip(c.curves[(oth, bn)].accuracy, c.curves[(ref, bn)].accuracy))

    assert ahead(raw) >= 1
    assert ahead(guarded) <= 1
    assert sum(len(v) for v in guarded.switches.values()) <= 1


@pytest.mark.parametrize(("answers", "samples"), [(3, 8), (14, 40)])  # few repeated answers (dense tallies), many (flat)
def test_replayed_weighted_vote_of_verifier_scores_is_the_live_rule_zero_weights_and_all(tmp_path: Path, answers: int,
                                                                                        samples: int) -> None:
    """Scores in [0, 1] with zeros (a tool verifier's): each prefix's replayed outcome equals the live
    weighted_vote on those samples, with its fallback to a plain vote where every answered sample
    weighs 0 (ties share credit, as the replay counts them)."""
    from tts.search.sampling.weighted_vote import WeightedVote, WeightedVoteConfig
    from tts.types import Sample, Usage

    rng = np.random.default_rng(3)
    rows, table = [], {}
    for p in range(40):
        for s in range(samples):
            answer = None if rng.random() < 0.25 else str(int(rng.integers(1, answers + 1)))
            score = float(rng.choice([0.0, 0.0, 0.5, 1.0]))
            table[(p, s)] = (answer, score)
            rows.append({"problem_id": f"p{p}", "model": "m", "sample_idx": s, "answer": answer,
                         "correct": answer == "1", "num_tokens": 10, "score": score})
    (tmp_path / "pool.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pool = load_pool(tmp_path / "pool.jsonl")["m"]
    orders = random_orders(pool.mask, 3, np.random.default_rng(0))
    replayed = rule_outcomes(pool, orders, ("weighted_vote",), samples)["weighted_vote"]
    live = WeightedVote(WeightedVoteConfig(n=samples), generator=None, prompt=None)
    fallbacks = 0
    for r in range(3):
        for p in range(40):
            for t in range(samples):
                picked = [table[(p, int(j))] for j in orders[r, p, :t + 1]]
                sol = live.aggregate(f"p{p}", [Sample("x", a) for a, _ in picked], Usage(), [w for _, w in picked])
                fallbacks += bool(sol.trace.events.get("unweighted_vote"))
                votes = sol.trace.votes
                top = [a for a, v in votes.items() if v == max(votes.values())] if votes else []
                expected = sum(a == "1" for a in top) / len(top) if top else 0.0
                assert replayed[r, p, t] == pytest.approx(expected), (r, p, t, picked)
    assert fallbacks > 20  # the fallback was exercised, not only the weighted case
