"""auto's ``prompt_length`` feature: the question's length joins the learned difficulty's pilot
features, for problems (such as ``chains``) whose pilot answers do not show how hard they are."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tts.benchmarks.pool import load_pool
from tts.budgets.allocator import CalibrationError
from tts.budgets.auto_strategy import AutoConfig, AutoStrategy
from tts.budgets.cross_allocator import calibrate, ladder, pilot_feature_rows
from tts.budgets.difficulty import pool_prompt_lengths
from tts.budgets.replay.prefix import random_orders
from tts.budgets.strategy_curves import parse_rules
from tts.registry import STRATEGIES


def _pool(path: Path, prompts: bool = True, n_problems: int = 80, seed: int = 0) -> Path:
    """Short questions (100 prompt tokens) right 90% of the time, long ones (400) 10%. Every wrong
    sample says "7", so a pilot agrees as much on a hard problem as on an easy one and its answers
    cannot tell them apart; only the prompt length can."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(n_problems):
        short = p % 2 == 0
        for s in range(16):
            ok = rng.random() < (0.9 if short else 0.1)
            row = {"problem_id": f"p{p}", "model": "m", "sample_idx": s, "answer": "1" if ok else "7",
                   "correct": bool(ok), "num_tokens": 50, "score": -0.1}
            if prompts:
                row["prompt_tokens"] = 100 if short else 400
            rows.append(row)
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _predicted(pool, prompt_length: bool) -> tuple[float, float]:
    """Mean predicted difficulty score of the short and of the long problems (higher = easier)."""
    rules = parse_rules(["vote"])
    orders = random_orders(pool.mask, 4, np.random.default_rng(0))
    cal = calibrate(pool, rules, 4, ladder(4, 16), orders=orders, prompt_length=prompt_length)
    idx = np.arange(pool.n_problems)
    feats = pilot_feature_rows(pool.answers[idx[:, None], orders[0][:, :4]], pool.tokens[idx[:, None], orders[0][:, :4]],
                               pool_prompt_lengths(pool) if prompt_length else None)
    scores = cal.scores(feats)
    return float(scores[idx % 2 == 0].mean()), float(scores[idx % 2 == 1].mean())


def test_the_prompt_length_tells_apart_what_the_pilot_cannot(tmp_path: Path) -> None:
    pool = load_pool(_pool(tmp_path / "pool.jsonl"))["m"]
    short, long = _predicted(pool, prompt_length=True)
    assert short > 0.75 and long < 0.25  # the true pass rates are 0.9 and 0.1
    short0, long0 = _predicted(pool, prompt_length=False)
    assert abs(short0 - long0) < 0.25  # from the pilot's answers alone the two look about alike


def test_a_source_without_prompt_lengths_says_what_gives_them(tmp_path: Path) -> None:
    pool = load_pool(_pool(tmp_path / "bare.jsonl", prompts=False))["m"]
    orders = random_orders(pool.mask, 2, np.random.default_rng(0))
    with pytest.raises(CalibrationError, match="tts eval run"):
        calibrate(pool, parse_rules(["vote"]), 4, ladder(4, 16), orders=orders, prompt_length=True)
    with pytest.raises(CalibrationError, match="learned"):
        calibrate(pool, parse_rules(["vote"]), 4, ladder(4, 16), orders=orders, prompt_length=True, difficulty="pilot")


def test_the_config_refuses_the_feature_without_the_learned_difficulty() -> None:
    with pytest.raises(ValueError, match="difficulty=learned"):
        AutoConfig(budget=100, calibration="x", prompt_length=True, difficulty="pilot")


def _bins(tmp_path: Path, prompt_length: bool) -> tuple[list[int], list[int]]:
    """auto's bins for 4 short and 4 long questions that a scripted model answers alike (right half
    the time), calibrated on :func:`_pool` (short prompts 100 tokens, long 400; the scripted
    backend counts a token per 4 characters)."""
    from tts.backends.scripted import ScriptedGenerator
    from tts.prompts import PromptTemplate
    from tts.types import Problem

    problems = [Problem(f"q{i}", ("Short question %d?" % i) if i % 2 == 0 else "Long question. " * 100, "1")
                for i in range(8)]
    generator = ScriptedGenerator({p.id: {"1": 0.5, "7": 0.5} for p in problems}, seed=0, mean_tokens=50)
    padding = "x" * 380  # brings a short question's prompt to about 100 tokens
    cfg = AutoConfig(budget=2000.0, calibration=str(_pool(tmp_path / "cal.jsonl")), prompt_length=prompt_length,
                     strategies=("self_consistency",), n_bins=2)
    auto = STRATEGIES.load("auto")(cfg, generator, PromptTemplate(system=padding).render)
    assert isinstance(auto, AutoStrategy)
    bins = [s.trace.notes["bin"] for s in auto.solve(problems)]
    return bins[0::2], bins[1::2]


def test_auto_bins_long_questions_as_harder_when_told_to(tmp_path: Path) -> None:
    short, long = _bins(tmp_path, prompt_length=True)
    assert max(short) < min(long)  # same answers, told apart by the question's length alone
    short0, long0 = _bins(tmp_path, prompt_length=False)
    assert sorted(short0 + long0) != sorted(short + long) or set(short0) & set(long0)
