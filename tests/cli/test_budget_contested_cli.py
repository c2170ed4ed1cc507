"""`tts budget simulate --mode online --rule contested`: same JSON keys, and a clear error for an
unknown rule."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from tts.cli.budget import app

runner = CliRunner()


def _pool_file(tmp_path):
    """30 problems x 32 samples: most easy and short, some contested and long."""
    rng = np.random.default_rng(0)
    lines = []
    for p in range(30):
        pass_rate = 0.95 if p < 20 else rng.uniform(0.3, 0.7)
        for s in range(32):
            ok = bool(rng.random() < pass_rate)
            lines.append(json.dumps({"problem_id": f"q{p}", "model": "m", "sample_idx": s,
                                     "answer": "42" if ok else str(rng.integers(0, 3)), "correct": ok,
                                     "num_tokens": int((300 if p < 20 else 1500) * rng.uniform(0.5, 1.5)), "score": None}))
    path = tmp_path / "pool.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_contested_rule_keeps_the_json_keys(tmp_path):
    args = ["simulate", "--pool", str(_pool_file(tmp_path)), "--target", "self_consistency@16", "--mode", "online",
            "--orderings", "3", "--folds", "3", "--json"]
    beta = json.loads(runner.invoke(app, args).output)
    result = runner.invoke(app, [*args, "--rule", "contested", "--min-gain", "0.002"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert set(out) == set(beta)
    assert out["uniform_acc"] == beta["uniform_acc"]  # same baseline, another rule
    assert out["modes"]["online"]["tokens_at_uniform_budget"] != beta["modes"]["online"]["tokens_at_uniform_budget"]
    assert 0.0 <= out["allocator_acc"] <= 1.0


def test_unknown_rule_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["simulate", "--pool", str(_pool_file(tmp_path)), "--rule", "contest"])
    assert result.exit_code == 2
    assert "unknown rule 'contest'" in result.output and "contested" in result.output
