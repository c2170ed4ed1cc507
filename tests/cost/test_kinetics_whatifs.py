"""Kinetics what-ifs as a user runs them: ``--sparse`` and ``--concurrency`` in ``tts cost``,
``tts sweep`` and ``tts plot``, and the shipped pools priced model by model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tts.cli.app import app
from tts.eval.sweep import read_cells

runner = CliRunner(env={"COLUMNS": "120"})
POOLS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "pools"
GPQA = POOLS / "gpqa_diamond_reasoning_models.jsonl.gz"


@pytest.fixture
def long_pool(tmp_path) -> Path:
    """Qwen3-8B and gpt-oss-20b samples of 3-6k tokens: long enough for sparse attention to matter."""
    rng = np.random.default_rng(1)
    path = tmp_path / "pool.jsonl"
    with path.open("w") as fh:
        for model in ("Qwen3-8B", "gpt-oss-20b"):
            for p in range(12):
                for s in range(8):
                    right = rng.random() < 0.6
                    fh.write(json.dumps({"problem_id": f"p{p}", "model": model, "sample_idx": s,
                                         "answer": "1" if right else "2", "correct": bool(right),
                                         "num_tokens": int(rng.integers(3000, 6000)), "score": None}) + "\n")
    return path


def _sweep(pool: Path, out: Path, *extra: str):
    return runner.invoke(app, ["sweep", "--pool", str(pool), "-s", "self_consistency", "--n", "1,4",
                               "--draws", "10", "--out", str(out), *extra])


def _by_key(out: Path) -> dict[tuple[str, int], object]:
    return {(c.model, c.n): c for c in read_cells(out)}


def test_sweep_sparse_lowers_eflops_and_leaves_accuracy_alone(long_pool, tmp_path):
    dense, sparse = tmp_path / "dense", tmp_path / "sparse"
    assert _sweep(long_pool, dense).exit_code == 0
    r = _sweep(long_pool, sparse, "--sparse", "block:32,size=16,local=128")
    assert r.exit_code == 0, r.output
    d, s = _by_key(dense), _by_key(sparse)
    assert d.keys() == s.keys() and len(d) == 4
    for key in d:
        assert s[key].accuracy == d[key].accuracy and s[key].tokens == d[key].tokens
        assert s[key].eflops < d[key].eflops and s[key].flops < d[key].flops
    # Resuming the directory under another sparse setting would mix two pricings: refused.
    r = _sweep(long_pool, sparse, "--sparse", "topk:512")
    assert r.exit_code != 0 and "sparse" in r.output
    # The plot says how the cells were priced.
    r = runner.invoke(app, ["plot", str(sparse)])
    assert r.exit_code == 0, r.output
    assert "sparse attention block:32,size=16,local=128" in (sparse / "plots" / "report.html").read_text()


@pytest.mark.parametrize(("spec", "message"), [("block:32", "needs size"), ("window:5", "topk:K")])
def test_sweep_bad_sparse_setting_is_a_usage_error(long_pool, tmp_path, spec, message):
    r = _sweep(long_pool, tmp_path / "bad", "--sparse", spec)
    assert r.exit_code == 2 and message in r.output


def test_sweep_concurrency_shares_weight_reads(long_pool, tmp_path):
    alone, busy = tmp_path / "alone", tmp_path / "busy"
    assert _sweep(long_pool, alone).exit_code == 0
    assert _sweep(long_pool, busy, "--concurrency", "256").exit_code == 0
    a, b = _by_key(alone), _by_key(busy)
    for key in a:
        assert b[key].flops == pytest.approx(a[key].flops)
        assert b[key].eflops < a[key].eflops
    r = runner.invoke(app, ["sweep", "--benchmark", "demo", "--concurrency", "8", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "concurrency" in r.output


def test_cost_sparse_flag_prices_kinetics_budgets():
    args = ["cost", "-m", "qwen3-8b", "-n", "8", "--gen", "32000", "--json"]
    dense = json.loads(runner.invoke(app, args).output)
    block = json.loads(runner.invoke(app, args + ["--sparse", "block:64,size=16,local=128"]).output)
    topk = json.loads(runner.invoke(app, args + ["--sparse", "topk:1024,local=128"]).output)
    assert block["sparse"] == "block:64,size=16,local=128" and block["sparse_kv"] == 1152
    assert topk["sparse_kv"] == 1152
    # Same budget; block top-k pays for scoring its blocks, oracle top-k does not.
    assert topk["eflops"] < block["eflops"] < 0.6 * dense["eflops"]
    r = runner.invoke(app, args + ["--sparse", "topk:64", "--sparse-kv", "64"])
    assert r.exit_code == 2 and "drop --sparse-kv" in r.output
    r = runner.invoke(app, args + ["--sparse", "topk:64,size=16"])
    assert r.exit_code == 2 and "block:K,size=16" in r.output


@pytest.mark.skipif(not GPQA.exists(), reason="shared pools not present")
def test_every_gpqa_pool_model_is_priced(tmp_path):
    # Before the pool models' architectures were shipped, this sweep priced no model but tokens.
    r = runner.invoke(app, ["sweep", "--pool", str(GPQA), "-s", "self_consistency", "--n", "1",
                            "--draws", "10", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "unknown architecture" not in r.output
    cells = read_cells(tmp_path)
    assert len({c.model for c in cells}) == 6
    assert all(c.flops and c.eflops and c.gpu_seconds and c.dollars for c in cells)


def test_memory_check_counts_windows_and_mamba_state_not_full_kv():
    # gpt-oss-20b: 12 full-attention layers hold every position, 12 sliding-window layers at most
    # 128 per sequence. Nemotron-H: 4 attention layers plus a recurrent state per sequence.
    args = ["cost", "--gpu", "all", "-n", "4", "--prompt", "100", "--gen", "1000", "--json", "-m"]
    from tts.cost.architecture import load_architecture

    oss = load_architecture("gpt-oss-20b")
    need = json.loads(runner.invoke(app, [*args, "gpt-oss-20b"]).output)["ranking"][0]["memory_needed_bytes"]
    per_layer = 2 * 8 * 64 * 2
    assert need == oss.params * 2 + 12 * per_layer * (100 + 4 * 1000) + 12 * per_layer * 4 * 128
    nemo = load_architecture("NVIDIA-Nemotron-Nano-9B-v2")
    need = json.loads(runner.invoke(app, [*args, "NVIDIA-Nemotron-Nano-9B-v2"]).output)["ranking"][0][
        "memory_needed_bytes"]
    assert need == nemo.params * 2 + nemo.kv_bytes_per_token * 4100 + 4 * nemo.state_bytes_per_sequence
