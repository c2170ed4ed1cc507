"""`tts cost` and `tts cost calibrate` through typer's test runner."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import types

import pytest
from typer.testing import CliRunner

from tts.budgets import hardware
from tts.budgets.calibration import compare_predictions, default_points
from tts.budgets.cost_model import CostModel
from tts.budgets.architecture import load_architecture
from tts.cli.cost import app
from tts.types import RequestShape, Usage

runner = CliRunner()


def test_single_model_table():
    r = runner.invoke(app, ["--model", "Qwen/Qwen3-8B", "--gpu", "h100", "--strategy",
                            "self_consistency", "-n", "32", "--prompt", "200", "--gen", "8000"])
    assert r.exit_code == 0, r.output
    for word in ("FLOPs", "bytes", "eFLOPs", "seconds", "dominant", "memory", "H100-SXM"):
        assert word in r.output


def test_several_models_show_the_kinetics_trend():
    r = runner.invoke(app, ["-m", "qwen3-0.6b", "-m", "qwen3-32b", "--gpu", "b200", "-n", "8",
                            "--gen", "16000", "--json"])
    assert r.exit_code == 0, r.output
    small, large = json.loads(r.output)
    assert small["attention_share"] > 0.5 > large["attention_share"]
    assert small["eflops_per_token"] < large["eflops_per_token"]
    table = runner.invoke(app, ["-m", "qwen3-0.6b", "-m", "qwen3-32b", "--gpu", "b200"])
    assert "Qwen3-0.6B" in table.output and "Qwen3-32B" in table.output
    assert "attn/KV" in table.output


def test_sparse_kv_lowers_eflops():
    args = ["-m", "qwen3-8b", "-n", "8", "--gen", "32000", "--json"]
    dense = json.loads(runner.invoke(app, args).output)
    sparse = json.loads(runner.invoke(app, args + ["--sparse-kv", "1024"]).output)
    assert sparse["eflops"] < dense["eflops"]
    assert sparse["sparse_kv"] == 1024


def test_unknown_gpu_is_a_usage_error():
    r = runner.invoke(app, ["-m", "qwen3-8b", "--gpu", "v100"])
    assert r.exit_code == 2
    assert "unknown GPU" in r.output and "H100-SXM" in r.output


def test_unknown_model_names_config_json(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = runner.invoke(app, ["-m", "nobody/no-such-model"])
    assert r.exit_code == 2
    assert "config.json" in r.output


@pytest.mark.parametrize("args", [["--gen", "-5"], ["--prompt", "-1"], ["-n", "0"],
                                  ["--prompt", "10", "--cached", "20"],
                                  ["--strategy", "no_such_strategy"]])
def test_bad_numbers_are_usage_errors(args):
    r = runner.invoke(app, ["-m", "qwen3-8b", *args])
    assert r.exit_code == 2, r.output


def test_every_registered_sampling_strategy_is_priced_from_its_own_cost_hook():
    from tts.registry import STRATEGIES

    for name in STRATEGIES.names():
        r = runner.invoke(app, ["-m", "qwen3-8b", "--strategy", name, "-n", "4", "--json"])
        assert r.exit_code == 0, r.output
        assert json.loads(r.output)["strategy"] == name


def test_missing_model_is_a_usage_error():
    r = runner.invoke(app, [])
    assert r.exit_code == 2 and "--model" in r.output


@pytest.fixture
def fake_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv("TTS_CACHE", str(tmp_path))
    monkeypatch.setattr(hardware, "_measure_matmul_flops", lambda sizes, repeats: 1.5e11)
    monkeypatch.setattr(hardware, "_measure_bandwidth", lambda nbytes, repeats: 2.5e10)


def test_calibrate_prints_cpu_numbers(fake_cpu):
    r = runner.invoke(app, ["calibrate", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["cpu"]["peak_flops"] == 1.5e11 and out["cpu"]["ridge"] == pytest.approx(6.0)
    assert "FLOP/s" in runner.invoke(app, ["calibrate"]).output


def test_calibrate_engine_without_backend_fails_clearly(fake_cpu, monkeypatch):
    monkeypatch.setitem(sys.modules, "tts.backends.vllm_timing", None)
    r = runner.invoke(app, ["calibrate", "--engine"])
    assert r.exit_code == 1
    assert "measure_decode" in r.output


@contextlib.contextmanager
def _fake_engine(model: str):
    """measure_decode stand-in: 3x slower than the roofline plus a fixed 1 ms start."""
    cm = CostModel(load_architecture(model), hardware.get_hardware("cpu"))

    def measure(n: int, gen_len: int) -> tuple[float, Usage]:
        usage = Usage(shapes=(RequestShape(20, 0, (gen_len,) * n),))
        return 3 * cm.cost_usage(usage).seconds + 1e-3, usage

    yield measure


def test_calibrate_engine_compares_predictions(fake_cpu, monkeypatch):
    module = types.ModuleType("tts.backends.vllm_timing")
    module.measure_decode = _fake_engine
    monkeypatch.setitem(sys.modules, "tts.backends.vllm_timing", module)
    r = runner.invoke(app, ["calibrate", "--engine", "--json"])
    assert r.exit_code == 0, r.output
    engine = json.loads(r.output)["engine"]
    assert len(engine["points"]) >= 12
    assert engine["spearman"] == pytest.approx(1.0)
    assert 2.9 < engine["median_ratio"] < 3.5
    # A constant slowdown is what the efficiency factor absorbs: scaled error far below raw error.
    assert engine["scaled_median_relative_error"] < 0.1 < engine["median_relative_error"]
    assert "Spearman" in runner.invoke(app, ["calibrate", "--engine"]).output


def test_compare_predictions_needs_points(fake_cpu):
    cm = CostModel(load_architecture("smollm2-135m"), hardware.get_hardware("cpu"))
    with pytest.raises(ValueError, match="at least 3"):
        compare_predictions(default_points()[:2], _fake_engine("smollm2-135m"), cm)


def test_importing_the_cli_module_stays_light():
    code = ("import sys, tts.cli.cost; "
            "print(sorted({'numpy', 'scipy', 'tts.budgets'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
