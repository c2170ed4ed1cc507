"""`tts budget simulate --strategies`: allocation across selection rules, keeping the existing keys."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tests.budgets.test_cross_strategy import _write_pool
from tts.cli.budget import app

runner = CliRunner()


def test_strategies_add_a_cross_strategy_replay_and_keep_the_keys(tmp_path: Path) -> None:
    pool = _write_pool(tmp_path / "pool.jsonl")
    res = runner.invoke(app, ["simulate", "--pool", str(pool), "--target", "self_consistency@16", "--mode", "online",
                              "--orderings", "3", "--folds", "3", "--strategies", "vote,best_of_n,weighted_vote",
                              "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert {"token_ratio", "uniform_acc", "allocator_acc"} <= set(out)
    cross = out["strategies"]
    assert cross["rules"] == ["vote", "best_of_n", "weighted_vote"]
    assert set(cross["allocators"]) == {"cross", "vote", "best_of_n", "weighted_vote"}
    assert cross["allocators"]["cross"]["acc_at_best_single_cost"]["mean"] >= \
        cross["uniform"][cross["best_single"]]["acc"]["mean"]


def test_unknown_strategy_lists_the_valid_ones(tmp_path: Path) -> None:
    pool = _write_pool(tmp_path / "pool.jsonl")
    res = runner.invoke(app, ["simulate", "--pool", str(pool), "--strategies", "vote,beam"])
    assert res.exit_code == 2
    assert "vote, best_of_n, weighted_vote, shortest" in res.output


def test_a_pool_without_scores_names_what_is_missing(tmp_path: Path) -> None:
    pool = _write_pool(tmp_path / "pool.jsonl", scores=False)
    res = runner.invoke(app, ["simulate", "--pool", str(pool), "--target", "self_consistency@8", "--mode", "online",
                              "--orderings", "2", "--folds", "3", "--strategies", "vote,best_of_n"])
    assert res.exit_code == 2
    assert "best_of_n" in res.output and "score" in res.output
