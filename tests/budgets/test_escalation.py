"""Escalation in `auto`: a search calibrated per difficulty bin from a past run, chosen after the pilot
only where it measurably beats the sampling rules at matched cost."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.budgets.test_cross_strategy import _write_pool
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.pool import load_pool
from tts.budgets.allocator import CalibrationError
from tts.budgets.auto_strategy import AutoConfig, AutoStrategy
from tts.budgets.cross_allocator import Pricer, calibrate, choose
from tts.budgets.escalation import fit_escalation, read_escalation_runs
from tts.budgets.replay.prefix import random_orders
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.types import Problem


def _write_search_run(path: Path, correct, label: str = "rebase@2", tokens: int = 2000,
                      n_problems: int = 60) -> Path:
    """A past `tts eval` run of a search on the calibration problems: who it got right, what it cost."""
    path.mkdir(parents=True, exist_ok=True)
    rows = []
    for p in range(n_problems):
        usage = {"prompt_tokens": tokens // 2, "cached_prompt_tokens": 0, "completion_tokens": tokens // 2,
                 "wall_seconds": 0.1, "calls": 1, "shapes": []}
        rows.append({"problem_id": f"p{p}", "config": label, "strategy": {"kind": "rebase", "n": 2},
                     "correct": bool(correct(p)), "usage": usage})
        rows.append({"problem_id": f"p{p}", "config": "self_consistency@4", "strategy": {"kind": "self_consistency",
                     "n": 4}, "correct": True, "usage": usage})
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture()
def pool(tmp_path: Path):
    return load_pool(_write_pool(tmp_path / "pool.jsonl", scores=False))["m"]


def _fit(pool, run_dir: Path, z: float = 3.0):
    orders = random_orders(pool.mask, 8, np.random.default_rng(0))
    cal = calibrate(pool, ("vote",), 4, [4, 8, 16], orders=orders, n_bins=3)
    (run,) = read_escalation_runs(run_dir)
    return cal, fit_escalation(run, pool, cal, orders, Pricer("tokens"), z)


def test_a_search_that_wins_the_hard_bin_is_chosen_there_only(pool, tmp_path: Path) -> None:
    # The search is right on the 'score' problems (kind 2: the majority is wrong) and wrong on the
    # 'vote' problems (kind 1: the majority is right); both are right on the easy ones.
    cal, esc = _fit(pool, _write_search_run(tmp_path / "run", lambda p: p % 3 != 1))
    assert esc.label == "rebase@2" and esc.strategy["kind"] == "rebase"
    assert esc.allowed.any() and not esc.allowed.all()
    assert np.allclose(esc.cost, 2000.0)
    feats = np.array([[0.75, 0.0, np.log1p(400)], [0.75, 0.0, np.log1p(800)], [1.0, 0.0, np.log1p(50)]])
    plan = choose(["vote-like", "score-like", "easy"], feats, [0, 0, 0], [400, 800, 50], cal, Pricer("tokens"),
                  budget=3 * 4000.0, escalations=[esc])
    by_id = {c.problem_id: c for c in plan.choices}
    assert by_id["score-like"].escalation == "rebase@2" and by_id["score-like"].strategy == "rebase"
    assert by_id["vote-like"].escalation is None and by_id["easy"].escalation is None
    assert by_id["vote-like"].alternatives["rebase@2"] < by_id["vote-like"].alternatives["vote"]
    assert plan.expected_cost <= 3 * 4000.0


def test_a_search_no_better_than_voting_is_never_chosen(pool, tmp_path: Path) -> None:
    # The search is right exactly where the vote is (its grades copy the pool's majority at 16).
    majority_right = {f"p{p}": pool.correct[p, pool.mask[p]].mean() > 0.5 for p in range(pool.n_problems)}
    cal, esc = _fit(pool, _write_search_run(tmp_path / "run", lambda p: majority_right[f"p{p}"]))
    assert not esc.allowed.any()
    feats = np.array([[0.75, 0.0, np.log1p(800)], [0.5, 0.0, np.log1p(400)]])
    plan = choose(["a", "b"], feats, [0, 0], [800, 400], cal, Pricer("tokens"), budget=1e6, escalations=[esc])
    assert all(c.escalation is None for c in plan.choices)


def test_a_run_without_a_search_config_says_what_it_holds(tmp_path: Path) -> None:
    run = _write_search_run(tmp_path / "run", lambda p: True)
    with pytest.raises(CalibrationError, match="self_consistency@4"):
        read_escalation_runs(run, only="beam@8")


def test_auto_escalates_contested_problems_and_pays_for_pilot_and_search(tmp_path: Path) -> None:
    cal = _write_pool(tmp_path / "cal.jsonl", n_samples=16)
    run = _write_search_run(tmp_path / "run", lambda p: True)  # the search solves every calibration problem
    problems = [Problem(f"q{i}", f"What is {i} + 1?", "1") for i in range(4)]
    # Live problems that look like the calibration's 'score' problems: long, 70% on a wrong answer.
    gen = ScriptedGenerator({p.id: {"1": 0.3, "2": 0.7} for p in problems}, seed=0, mean_tokens=800)
    auto = AutoStrategy(AutoConfig(calibration=str(cal), budget=8000.0, strategies=("self_consistency",),
                                   escalate=(str(run),)), gen, MATH_PROMPT.render, SamplingConfig(max_tokens=2048))
    sols = auto.solve(problems)
    auto.close()
    escalated = [s for s in sols if s.trace.notes["escalation"] == "rebase@2"]
    assert escalated, [s.trace.notes for s in sols]
    for s in escalated:
        assert s.trace.strategy == "auto:rebase"
        assert sum(s.trace.notes["pilot_votes"].values()) <= 4  # the pilot is recorded, not voted
        assert s.usage.calls >= 2  # the pilot's call and the search's
        assert s.trace.notes["spent"] == s.usage.completion_tokens + s.usage.prompt_tokens - s.usage.cached_prompt_tokens


def _verified_run(path: Path, tokens: int = 2000) -> Path:
    """A past run of best_of_n@16 by the arithmetic tool that solved every calibration problem."""
    run = _write_search_run(path, lambda p: True, label="best_of_n@16,verifier=arithmetic", tokens=tokens)
    rows = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    for r in rows:
        if r["config"].startswith("best_of_n"):
            r["strategy"] = {"kind": "best_of_n", "n": 16, "verifier": {"kind": "arithmetic"}}
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_sampling_configs_with_a_verifier_are_escalation_options_and_plain_ones_are_not(tmp_path: Path) -> None:
    # best_of_n by the arithmetic tool is not on the allocator's logprob curves, so it is an option;
    # self_consistency@4 (no verifier) is, so it is left to the curves.
    run = _verified_run(tmp_path / "run")
    (found,) = read_escalation_runs(run)
    assert found.label == "best_of_n@16,verifier=arithmetic" and found.strategy["verifier"] == {"kind": "arithmetic"}
    with pytest.raises(CalibrationError, match="no graded config 'self_consistency@4'"):
        read_escalation_runs(run, only="self_consistency@4")


def test_a_verifier_scored_option_keeps_the_pilot_and_draws_only_the_rest(pool, tmp_path: Path) -> None:
    run = _verified_run(tmp_path / "run")
    orders = random_orders(pool.mask, 8, np.random.default_rng(0))
    cal = calibrate(pool, ("vote",), 4, [4, 8, 16], orders=orders, n_bins=3)
    (found,) = read_escalation_runs(run)
    esc = fit_escalation(found, pool, cal, orders, Pricer("tokens"), 3.0)
    assert np.allclose(esc.cost, 2000.0 * 12 / 16)  # 4 of its 16 samples are the pilot's, already paid
    cal_pool = _write_pool(tmp_path / "cal.jsonl", n_samples=16)
    problems = [Problem(f"q{i}", f"What is {i} + 1?", "1") for i in range(4)]
    gen = ScriptedGenerator({p.id: {"1": 0.3, "2": 0.7} for p in problems}, seed=0, mean_tokens=800)
    calls = []
    real = gen.generate
    gen.generate = lambda requests: calls.append([r.n for r in requests]) or real(requests)
    auto = AutoStrategy(AutoConfig(calibration=str(cal_pool), budget=8000.0, strategies=("self_consistency",),
                                   escalate=(str(run),), switch_z=0.0), gen, MATH_PROMPT.render,
                        SamplingConfig(max_tokens=2048))
    sols = auto.solve(problems)
    auto.close()
    escalated = [s for s in sols if s.trace.notes["escalation"] == "best_of_n@16,verifier=arithmetic"]
    assert escalated, [s.trace.notes for s in sols]
    assert calls[0] == [4] * 4 and [12] * len(escalated) in calls[1:]  # the pilot, then only the rest
    for s in escalated:
        assert len(s.trace.samples) == 16 and "pilot_votes" not in s.trace.notes
        assert s.usage.calls == 2  # the pilot's call and the completing one, each counted once
        assert s.trace.notes["spent"] == s.usage.completion_tokens + s.usage.prompt_tokens - s.usage.cached_prompt_tokens


def test_a_learned_escalation_accuracy_tells_apart_what_its_bin_mixes(tmp_path: Path) -> None:
    """One difficulty bin holds short questions (the vote is right on 90%, the search on none) and
    long ones (the vote right on 10%, the search on all). By its bin's mean the search is worth
    0.5 on both kinds, so a plan treats them alike; by a model of its own correctness on the pilot
    features (the prompt length among them) it is sent to the long ones only."""
    from tests.budgets.test_prompt_length import _pool
    from tts.budgets.cross_allocator import ladder, pilot_feature_rows
    from tts.budgets.difficulty import pool_prompt_lengths
    from tts.budgets.strategy_curves import parse_rules

    pool = load_pool(_pool(tmp_path / "pool.jsonl"))["m"]
    run_dir = _write_search_run(tmp_path / "run", lambda p: p % 2 == 1, n_problems=pool.n_problems)
    orders = random_orders(pool.mask, 8, np.random.default_rng(0))
    cal = calibrate(pool, parse_rules(["vote"]), 4, ladder(4, 16), orders=orders, n_bins=1, prompt_length=True)
    (run,) = read_escalation_runs(run_dir)
    idx = np.arange(pool.n_problems)
    feats = pilot_feature_rows(pool.answers[idx[:, None], orders[0][:, :4]], pool.tokens[idx[:, None], orders[0][:, :4]],
                               pool_prompt_lengths(pool))
    short, long = feats[0:1], feats[1:2]  # p0 is short, p1 long
    both = np.vstack([short, long])
    plans = {}
    for accuracy in ("bin", "learned"):
        esc = fit_escalation(run, pool, cal, orders, Pricer("tokens"), z=0.0, accuracy=accuracy)
        assert (esc.model is not None) == (accuracy == "learned")
        plans[accuracy] = choose(["short", "long"], both, [0, 0], [50, 50], cal, Pricer("tokens"), budget=1e6,
                                 escalations=[esc])
    by_bin = {c.problem_id: c for c in plans["bin"].choices}
    assert by_bin["short"].alternatives["rebase@2"] == by_bin["long"].alternatives["rebase@2"] == 0.5
    assert (by_bin["short"].escalation is None) == (by_bin["long"].escalation is None)  # alike, by their bin
    learned = {c.problem_id: c for c in plans["learned"].choices}
    assert learned["long"].escalation == "rebase@2" and learned["short"].escalation is None
    assert learned["long"].alternatives["rebase@2"] > 0.9 > 0.1 > learned["short"].alternatives["rebase@2"]


def test_a_learned_escalation_stays_under_the_guard_and_an_unknown_mode_is_refused(pool, tmp_path: Path) -> None:
    majority_right = {f"p{p}": pool.correct[p, pool.mask[p]].mean() > 0.5 for p in range(pool.n_problems)}
    run_dir = _write_search_run(tmp_path / "run", lambda p: majority_right[f"p{p}"])
    orders = random_orders(pool.mask, 8, np.random.default_rng(0))
    cal = calibrate(pool, ("vote",), 4, [4, 8, 16], orders=orders, n_bins=3)
    (run,) = read_escalation_runs(run_dir)
    esc = fit_escalation(run, pool, cal, orders, Pricer("tokens"), 3.0, accuracy="learned")
    assert not esc.allowed.any()  # no better than voting anywhere: every bin caps it below the vote
    feats = np.array([[0.75, 0.0, np.log1p(800)], [0.5, 0.0, np.log1p(400)]])
    plan = choose(["a", "b"], feats, [0, 0], [800, 400], cal, Pricer("tokens"), budget=1e6, escalations=[esc])
    assert all(c.escalation is None for c in plan.choices)
    with pytest.raises(CalibrationError, match="'bin' or 'learned'"):
        fit_escalation(run, pool, cal, orders, Pricer("tokens"), 3.0, accuracy="per-problem")
    assert AutoConfig(budget=1, calibration="x", escalate_accuracy="learned").escalate_accuracy == "learned"
