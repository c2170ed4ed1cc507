"""`tts budget simulate` on a small pool: JSON keys, sane values, the table, and clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tts.cli.budget import app

runner = CliRunner()


@pytest.fixture()
def pool_file(tmp_path):
    """40 problems x 32 samples for two models: most easy and short, some contested and long."""
    rng = np.random.default_rng(0)
    lines = []
    for model in ("small-model", "big-model"):
        for p in range(40):
            pass_rate = 0.95 if p < 28 else rng.uniform(0.3, 0.7)
            base_tokens = 300 if p < 28 else 1500
            for s in range(32):
                ok = bool(rng.random() < pass_rate)
                answer = "42" if ok else str(rng.integers(0, 3))
                lines.append(json.dumps({
                    "problem_id": f"q{p}", "model": model, "sample_idx": s, "answer": answer,
                    "correct": ok, "num_tokens": int(base_tokens * rng.uniform(0.5, 1.5)), "score": None,
                }))
    path = tmp_path / "pool.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_json_has_the_promised_keys_and_sane_values(pool_file):
    result = runner.invoke(app, ["simulate", "--pool", str(pool_file), "--target", "self_consistency@16",
                                 "--orderings", "4", "--folds", "4", "--pilot", "2", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    for key in ("uniform_tokens", "uniform_acc", "allocator_tokens", "allocator_acc", "token_ratio"):
        assert key in out
    assert out["model"] == "small-model" and "first model" in out["note"]
    assert 0.5 <= out["uniform_acc"] <= 1.0
    assert out["uniform_tokens"] > 0
    assert 0.0 <= out["allocator_acc"] <= 1.0
    lo, hi = out["uniform_acc_ci"]
    assert lo <= out["uniform_acc"] <= hi
    assert set(out["modes"]) == {"offline", "online"}
    if out["token_ratio"] is not None:
        assert out["token_ratio"] > 0
        assert out["allocator_tokens"] == pytest.approx(out["uniform_tokens"] / out["token_ratio"], rel=1e-6)
    # Online adaptive stopping spends less than uniform on a pool that is mostly easy (every
    # problem still gets one chunk of 4 samples, as in a real run: uniform here has 16).
    online = out["modes"]["online"]
    assert online["token_ratio"] is not None and online["token_ratio"]["mean"] > 1.3
    assert online["acc_at_uniform_tokens"]["mean"] >= out["uniform_acc"] - 0.05
    # One sample per round saves more on the easy problems.
    result = runner.invoke(app, ["simulate", "--pool", str(pool_file), "--target", "self_consistency@16",
                                 "--orderings", "4", "--mode", "online", "--chunk", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["token_ratio"] > 1.5


def test_model_option_and_table_output(pool_file):
    result = runner.invoke(app, ["simulate", "--pool", str(pool_file), "--model", "big-model",
                                 "--target", "self_consistency@8", "--orderings", "3", "--folds", "4",
                                 "--mode", "online"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "big-model" in text and "uniform self_consistency@8" in text
    assert "online, to match" in text and "offline" not in text
    assert "first model" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "nope"], "choose one of"),
        (["--target", "beam@4"], "self_consistency@N"),
        (["--target", "self_consistency@99"], "pick n <= 32"),
    ],
)
def test_errors_say_what_to_change(pool_file, args, message):
    result = runner.invoke(app, ["simulate", "--pool", str(pool_file), "--orderings", "2", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_malformed_pool_names_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem_id": "a", "model": "m", "sample_idx": 0}\n')
    result = runner.invoke(app, ["simulate", "--pool", str(bad)])
    assert result.exit_code == 2
    text = "".join(result.output.split())
    assert "bad.jsonl:1" in text and "missingfield" in text


def test_a_past_eval_run_directory_is_accepted_as_the_pool(tmp_path):
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval

    cfg = EvalConfig.model_validate({"data": {"benchmark": "demo", "limit": 30}, "backend": {"kind": "scripted"},
                                     "strategies": [{"kind": "self_consistency", "n": 8}]})
    run_eval(cfg, tmp_path / "run")
    result = runner.invoke(app, ["simulate", "--pool", str(tmp_path / "run"), "--target", "self_consistency@8",
                                 "--orderings", "3", "--folds", "3", "--pilot", "2", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["model"] == "scripted" and 0 <= out["uniform_acc"] <= 1 and out["uniform_tokens"] > 0


def test_every_model_in_one_table_worst_first_with_the_oracle(pool_file):
    args = ["simulate", "--pool", str(pool_file), "--target", "self_consistency@16", "--orderings", "4",
            "--mode", "online", "--model", "all"]
    result = runner.invoke(app, args + ["--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["models"]
    assert {r["model"] for r in rows} == {"small-model", "big-model"}
    ratios = [r["token_ratio"] or 0.0 for r in rows]
    assert ratios == sorted(ratios)                                   # worst first
    for r in rows:
        assert r["oracle_ratio"] >= r["oracle_ratio_chunk"] > 1.0     # stopping at any n saves at least as much
        # capped at the target's 16 samples, the full online run is uniform's vote: no accuracy lost at its tokens
        assert r["modes"]["online"]["acc_change"]["mean"] >= -1e-12
    table = runner.invoke(app, args + ["--rule", "beta", "--n-max", "32"])
    assert table.exit_code == 0, table.output
    assert "worst first" in table.stdout and "oracle" in table.stdout and "median" in table.stdout
