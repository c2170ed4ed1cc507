"""strategy="auto": pilot, per-problem (strategy, n) from calibration curves, one budget, a trace that says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tts
from tests.budgets.test_cross_strategy import _write_pool
from tts.backends.scripted import ScriptedGenerator
from tts.budgets.allocator import BudgetTooSmallError, CalibrationError
from tts.budgets.auto_strategy import AutoConfig, AutoStrategy
from tts.config import parse_strategy_config
from tts.prompts import MATH_PROMPT
from tts.registry import STRATEGIES
from tts.types import Problem


def _problems(n: int = 6) -> list[Problem]:
    return [Problem(f"q{i}", f"What is {i} + 1?", "1") for i in range(n)]


def _generator() -> ScriptedGenerator:
    dists = {f"q{i}": ({"1": 0.95} if i % 2 == 0 else {"1": 0.45, "2": 0.4}) for i in range(6)}
    return ScriptedGenerator(dists, seed=0, mean_tokens=100)


def _auto(tmp_path: Path, **kw) -> AutoStrategy:
    cal = _write_pool(tmp_path / "cal.jsonl", n_samples=16)
    cfg = AutoConfig(calibration=str(cal), **{"budget": 2000.0, **kw})
    return AutoStrategy(cfg, _generator(), MATH_PROMPT.render)


def test_auto_is_registered_and_parses() -> None:
    assert "auto" in STRATEGIES.names()
    cfg = parse_strategy_config({"kind": "auto", "budget": 100, "calibration": "x.jsonl",
                                 "strategies": "vote,best_of_n"})
    assert cfg.strategies == ("self_consistency", "best_of_n")
    with pytest.raises(ValueError, match="pool-only"):
        parse_strategy_config({"kind": "auto", "budget": 100, "calibration": "x", "strategies": ["shortest"]})


def test_auto_stays_within_budget_and_records_why(tmp_path: Path) -> None:
    auto = _auto(tmp_path)
    problems = _problems()
    sols = auto.solve(problems)
    spent = sum(s.usage.completion_tokens + s.usage.prompt_tokens - s.usage.cached_prompt_tokens for s in sols)
    assert spent <= 2000.0 * len(problems) * 1.05  # plans use predicted lengths; real samples vary
    for s in sols:
        notes = s.trace.notes
        assert s.trace.strategy == f"auto:{notes['strategy']}"
        assert notes["strategy"] in ("self_consistency", "best_of_n", "weighted_vote")
        assert len(s.trace.samples) == notes["n"] >= 4
        assert {"bin", "expected_accuracy", "gain_per_cost", "alternatives"} <= set(notes)


class _LengthsLikeTheCalibration(ScriptedGenerator):
    """Easy problems (even) answer short and contested ones (odd) long, as the calibration pool's
    easy and contested problems do, so that their pilots look like those calibration problems."""

    def _sample(self, req, index, prompt):
        self.mean_tokens = 50 if int(req.key[1:]) % 2 == 0 else 400
        return super()._sample(req, index, prompt)


def test_a_pilot_like_the_calibrations_easy_problems_lands_in_an_easier_bin(tmp_path: Path) -> None:
    """The difficulty model reads the pilot: short unanimous pilots sort below long contested ones.
    (Whether a contested bin then gets more samples depends on its curve: on this pool the long
    problems' weighted vote does not improve with n, so every problem keeps its 4 pilot samples.)"""
    cal = _write_pool(tmp_path / "cal.jsonl", n_samples=16)
    dists = {f"q{i}": ({"1": 0.95} if i % 2 == 0 else {"1": 0.45, "2": 0.4}) for i in range(6)}
    auto = AutoStrategy(AutoConfig(calibration=str(cal), budget=2000.0), _LengthsLikeTheCalibration(dists, seed=0),
                        MATH_PROMPT.render)
    bins = [s.trace.notes["bin"] for s in auto.solve(_problems())]
    assert bins[0::2] == [0, 0, 0]
    assert min(bins[1::2]) > 0


def test_auto_refuses_a_budget_below_the_pilot_before_drawing(tmp_path: Path) -> None:
    auto = _auto(tmp_path, budget=10.0)
    calls = []
    generate = auto.generator.generate
    auto.generator.generate = lambda requests: calls.append(requests) or generate(requests)
    with pytest.raises(BudgetTooSmallError, match="at least") as err:
        auto.solve(_problems())
    assert err.value.minimum > 10.0 * 6
    assert calls == []  # refused before any sample was paid for


def test_auto_names_what_the_calibration_lacks(tmp_path: Path) -> None:
    bare = _write_pool(tmp_path / "bare.jsonl", scores=False)
    auto = AutoStrategy(AutoConfig(calibration=str(bare), budget=2000.0), _generator(), MATH_PROMPT.render)
    with pytest.raises(CalibrationError, match="best_of_n"):
        auto.solve(_problems())


def test_solve_auto_from_the_api(tmp_path: Path) -> None:
    cal = _write_pool(tmp_path / "cal.jsonl", n_samples=16)
    sol = tts.solve(Problem("q1", "What is 1 + 1?", "1"), strategy="auto", budget=3000, calibration=cal,
                    generator=_generator())
    assert sol.trace.notes["strategy"] in ("self_consistency", "best_of_n", "weighted_vote")
    json.dumps(tts.types.to_jsonable(sol.trace))  # the trace is JSON-ready
    with pytest.raises(ValueError, match="calibration="):
        tts.solve("What is 1 + 1?", strategy="auto", budget=3000, generator=_generator())


def test_auto_says_when_its_calibration_caps_n(tmp_path: Path, caplog) -> None:
    auto = _auto(tmp_path)  # 16 calibration samples per problem, n_max 64
    with caplog.at_level("WARNING", logger="tts.budgets.auto_strategy"):
        sols = auto.solve(_problems())
    assert max(s.trace.notes["n"] for s in sols) <= 16
    assert "n is capped at 16" in caplog.text and "n_max is 64" in caplog.text


def test_auto_reads_a_budget_in_any_form_the_solve_and_the_server_take():
    """One budget type: ``auto``'s config reads what tts.solve, Session and the server's tts.budget
    read (ComputeBudget), not only a number beside a separate unit field."""
    import pydantic

    from tts.budgets.auto_strategy import AutoConfig

    assert (AutoConfig(budget="0.01 dollars", calibration="x").budget_unit,
            AutoConfig(budget="0.01 dollars", calibration="x").budget) == ("dollars", 0.01)
    cfg = AutoConfig(budget={"eflops": 1e15}, calibration="x")
    assert (cfg.budget, cfg.budget_unit) == (1e15, "eflops")
    assert AutoConfig(budget=2000, calibration="x").budget_unit == "tokens"
    with pytest.raises(pydantic.ValidationError, match="0.01 dollars and budget_unit 'tokens' disagree"):
        AutoConfig(budget="0.01 dollars", budget_unit="tokens", calibration="x")
    with pytest.raises(pydantic.ValidationError, match="unknown"):
        AutoConfig(budget="3 apples", calibration="x")
