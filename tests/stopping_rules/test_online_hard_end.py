"""The rules that lost run from the benchmark that measured them, and `tts budget simulate` no longer
offers them (a clear error that says where they went)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.pool_fakes import write_contested_pool
from tts.benchmarks.pool import load_pool
from tts.budgets.rate_models.contested import ContestedRule
from tts.budgets.rate_models.vote_value import VoteValue
from tts.budgets.replay.simulate import SimulateConfig, simulate
from tts.cli.budget import app


def _load_script(name: str):
    """A script of benchmarks/ loaded as a module by its path (scripts are not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rate_rule = _load_script("online_hard_end").rate_rule

runner = CliRunner()


def _pool_file(tmp_path):
    """30 problems x 32 samples: most easy and short, some contested and long."""
    return write_contested_pool(tmp_path / "pool.jsonl", samples=32, easy=20, seed=0, contested=(0.3, 0.7),
                                length=lambda p, ok: 300 if p < 20 else 1500, spread=(0.5, 1.5))


@pytest.mark.parametrize("rule", ["gain", "contested"])
def test_the_benchmark_replays_the_old_rules_through_the_rate_hook(tmp_path, rule):
    settings, model = rate_rule({"rule": rule, "min_gain": 0.002})
    assert settings == {"rule": "rate", "min_gain": 0.002}
    assert isinstance(model, VoteValue if rule == "gain" else ContestedRule)
    pool = load_pool(_pool_file(tmp_path))["m"]
    common = dict(target_n=16, modes=("online",), orderings=3, folds=3, max_n=32)  # the pool's 32, as before
    beta = simulate(pool, SimulateConfig(**common, rule="beta"))
    other = simulate(pool, SimulateConfig(**common, **settings), rate_model=model)
    assert other.uniform_acc == beta.uniform_acc  # same baseline, another rule
    assert other.modes["online"].tokens_at_uniform_budget != beta.modes["online"].tokens_at_uniform_budget
    assert 0.0 <= other.modes["online"].acc_at_uniform_tokens.mean <= 1.0


@pytest.mark.parametrize("rule", ["contest", "gain", "contested"])
def test_tts_budget_simulate_refuses_other_rules_and_says_where_they_went(tmp_path, rule):
    result = runner.invoke(app, ["simulate", "--pool", str(_pool_file(tmp_path)), "--rule", rule])
    assert result.exit_code == 2
    assert f"unknown rule '{rule}'" in result.output and "tts.budgets.rate_models" in result.output
