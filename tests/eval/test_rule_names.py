"""One table of pool selection rules, one name per rule.

The highest-scored sample was ``best_score`` to the strategy classes, the estimators and
``tts sweep --pool``, and ``best_of_n`` to the cross-strategy allocators, with a table each. Now
:data:`tts.benchmarks.pool_draws.RULES` is the table every reader uses, and ``best_score`` is an
alias that is still accepted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tts.benchmarks.pool import load_pool
from tts.benchmarks.pool_draws import RULES
from tts.budgets.replay.prefix import pool_rule
from tts.budgets.strategy_curves import RULES as CURVE_RULES
from tts.budgets.strategy_curves import parse_rules
from tts.config import parse_strategy_config
from tts.eval import estimators as est
from tts.eval.sweep import pool_rule_of
from tts.registry import STRATEGIES


def test_every_strategy_declares_its_pool_rule_by_a_name_of_the_one_table():
    declared = {n: STRATEGIES.load(n).pool_rule for n in STRATEGIES.names()}
    assert {r for r in declared.values() if r is not None} <= set(RULES)
    # ... and each rule's live strategy declares that very rule
    for rule, info in RULES.items():
        if info.strategy is not None:
            assert declared[info.strategy] == rule


def test_the_allocators_the_estimators_and_the_sweep_read_the_same_names():
    assert CURVE_RULES is RULES
    assert set(est.RULES) == {"pass"} | {r for r, info in RULES.items() if not info.needs_tokens}
    assert pool_rule("best_of_n") == "best_of_n" == parse_rules("best_of_n")[0]
    assert pool_rule_of(parse_strategy_config({"kind": "best_of_n"})) == "best_of_n"


def _pool(tmp_path: Path):
    rows = [{"problem_id": f"p{p}", "model": "m", "sample_idx": s, "answer": str(s % 2), "correct": s % 2 == 0,
             "num_tokens": 10, "score": 0.9 if s == 0 else 0.1} for p in range(3) for s in range(4)]
    path = tmp_path / "pool.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return load_pool(path)["m"]


def test_best_score_is_still_accepted_as_the_old_name(tmp_path):
    assert parse_rules("best_score") == ("best_of_n",)
    curves = est.pool_curves(_pool(tmp_path), ("best_score",), ns=[1, 4])
    assert list(curves) == ["best_of_n"] and curves["best_of_n"].at(4)[0] == pytest.approx(1.0)
