"""`tts cost` and `tts cost calibrate` through typer's test runner."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import types

import pytest
from typer.testing import CliRunner

from tts.cost import hardware
from tts.cost.architecture import load_architecture
from tts.cost.calibration import compare_predictions, default_points
from tts.cost.cost_model import CostModel
from tts.cli.cost import _seconds, app
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

    # graph: its requests depend on the graph file, which `tts cost` does not read; auto: on its pilot
    # samples (it spends at most its --budget); ab_mcts: on Thompson draws (widen or deepen, which model)
    file_defined = {"graph", "auto", "ab_mcts"}
    for name in STRATEGIES.names():
        r = runner.invoke(app, ["-m", "qwen3-8b", "--strategy", name, "-n", "4", "--json"])
        if name in file_defined:
            assert r.exit_code == 2 and "cannot predict its requests" in r.output, r.output
            continue
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


# --- cheapest hardware: --gpu all, --max-seconds, --price / --prices ---------------------------

PLAN = ["-m", "qwen3-8b", "--gpu", "all", "-n", "16", "--gen", "4000"]


def _ranking(*extra: str) -> dict:
    r = runner.invoke(app, [*PLAN, "--json", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_gpu_all_ranks_every_kind_by_dollars_per_problem():
    out = _ranking()
    rows = out["ranking"]
    assert {r["gpu"] for r in rows} == {h.name for h in hardware.HARDWARE.values()}
    fits = [r for r in rows if r["fits"]]
    assert [r["dollars"] for r in fits] == sorted(r["dollars"] for r in fits)
    assert all(not r["fits"] for r in rows[len(fits):])  # kinds too small for the plan come last
    for r in rows:
        assert r["dollars"] == pytest.approx(r["seconds"] / 3600 * r["usd_per_gpu_hour"])
    # A 24 GB card cannot hold Qwen3-8B's weights plus 16 x 4000 tokens of KV cache.
    assert next(r for r in rows if r["gpu"] == "RTX-4090")["fits"] is False
    assert out["cheapest"] == fits[0]["gpu"]
    assert out["fastest"] == min(fits, key=lambda r: r["seconds"])["gpu"]
    # The same seconds as pricing that GPU alone.
    h100 = json.loads(runner.invoke(app, ["-m", "qwen3-8b", "-n", "16", "--gen", "4000",
                                          "--gpu", "h100", "--json"]).output)
    row = next(r for r in rows if r["gpu"] == "H100-SXM")
    assert row["seconds"] == pytest.approx(h100["seconds"])
    assert h100["dollars"] == pytest.approx(row["dollars"])


def test_the_latency_bound_names_the_cheapest_kind_that_meets_it():
    free = _ranking()
    cheapest = next(r for r in free["ranking"] if r["gpu"] == free["cheapest"])
    bound = cheapest["seconds"] / 2  # the overall cheapest misses it
    out = _ranking("--max-seconds", str(bound))
    meeting = [r for r in out["ranking"] if r["fits"] and r["seconds"] <= bound]
    assert meeting and out["cheapest"] != free["cheapest"]
    assert out["cheapest"] == min(meeting, key=lambda r: r["dollars"])["gpu"]
    assert [r["meets_max_seconds"] for r in out["ranking"]] == [r in meeting for r in out["ranking"]]
    table = runner.invoke(app, [*PLAN, "--max-seconds", str(bound)])
    assert f"Cheapest within {_seconds(bound)} per problem: {out['cheapest']}" in table.output


def test_an_unreachable_bound_says_so_and_names_the_fastest():
    out = _ranking("--max-seconds", "0.5")
    assert out["cheapest"] is None
    table = runner.invoke(app, [*PLAN, "--max-seconds", "0.5"])
    assert table.exit_code == 0
    assert f"No GPU kind meets 500ms per problem; the fastest is {out['fastest']}" in table.output


def test_a_price_flag_changes_the_answer():
    free = _ranking()
    assert free["cheapest"] != "H200"
    out = _ranking("--price", "h200=0.50")
    assert out["cheapest"] == "H200" and out["ranking"][0]["price_source"] == "user"
    assert "with your overrides" in out["price_basis"]


def test_a_price_file_changes_the_answer_and_flags_win_over_it(tmp_path):
    prices = tmp_path / "prices.yaml"
    prices.write_text("l40s: 0.10\nh100: 0.50\n")
    assert _ranking("--prices", str(prices))["cheapest"] == "L40S"
    assert _ranking("--prices", str(prices), "--price", "l40s=9")["cheapest"] == "H100-SXM"
    table = runner.invoke(app, [*PLAN, "--prices", str(prices)])
    assert "0.10*" in table.output and "(* yours)" in table.output


@pytest.mark.parametrize("args, expected", [
    (["--prices", "PRICES"], "is not valid YAML/JSON"),
    (["--prices", "MISSING"], "cannot read it"),
    (["--price", "v100=2"], "unknown GPU 'v100'"),
    (["--price", "h100"], "KIND=USD_PER_HOUR"),
    (["--price", "h100=$2"], "is not a price"),
    (["--max-seconds", "0"], "--max-seconds must be > 0"),
])
def test_bad_prices_are_one_line_errors_with_exit_code_2(tmp_path, args, expected):
    bad = tmp_path / "prices.yaml"
    bad.write_text("h100: {2.5\n")
    args = [{"PRICES": str(bad), "MISSING": str(tmp_path / "none.yaml")}.get(a, a) for a in args]
    r = runner.invoke(app, [*PLAN, *args])
    assert r.exit_code == 2
    assert expected in r.output and r.output.startswith("error:")
    assert r.output.strip().count("\n") == 0, r.output


def test_unknown_gpu_is_one_line_naming_the_kinds_and_all():
    r = runner.invoke(app, ["-m", "qwen3-8b", "--gpu", "v100"])
    assert r.exit_code == 2 and r.output.strip().count("\n") == 0
    assert "--gpu v100: unknown GPU" in r.output and "L40S" in r.output and "all" in r.output


def test_max_seconds_needs_gpu_all():
    r = runner.invoke(app, ["-m", "qwen3-8b", "--gpu", "h100", "--max-seconds", "10"])
    assert r.exit_code == 2 and "--gpu all" in r.output


def test_the_ranking_table_fits_an_80_column_terminal(monkeypatch):
    from rich.console import Console

    from tts.cli import cost

    monkeypatch.setattr(cost, "_console", lambda: Console(width=80))
    r = runner.invoke(app, [*PLAN, "--max-seconds", "20", "--price", "h100=2.1"])
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80
    for word in ("$/problem", "$/GPU-h", "≤20s", "approximate", "--price", "Cheapest within"):
        assert word in r.output
    assert "A100-80GB" in r.output and "no fit" in r.output


def test_several_models_get_one_ranking_each():
    r = runner.invoke(app, ["-m", "qwen3-0.6b", "-m", "qwen3-32b", "--gpu", "all", "--json"])
    small, large = json.loads(r.output)
    assert small["model"].endswith("0.6B") and large["model"].endswith("32B")
    # 32B weights alone (~66 GB) overflow the 24, 40 and 48 GB cards.
    assert {x["gpu"] for x in large["ranking"] if not x["fits"]} == {"RTX-4090", "A100-40GB", "L40S"}


def test_single_gpu_output_shows_dollars_per_problem():
    r = runner.invoke(app, ["-m", "qwen3-8b", "--gpu", "l40s", "-n", "4", "--json"])
    out = json.loads(r.output)
    assert out["usd_per_gpu_hour"] == 1.09
    assert out["dollars"] == pytest.approx(out["seconds"] / 3600 * 1.09)
    table = runner.invoke(app, ["-m", "qwen3-8b", "--gpu", "l40s", "-n", "4", "--price", "l40s=2"])
    assert "dollars" in table.output and "$2.00/GPU-h (your price" in table.output


def test_the_calibrated_cpu_has_no_default_price(fake_cpu):
    out = json.loads(runner.invoke(app, ["-m", "smollm2-135m", "--gpu", "cpu", "--json"]).output)
    assert out["dollars"] is None
    assert "--price cpu=USD_PER_HOUR" in runner.invoke(app, ["-m", "smollm2-135m", "--gpu", "cpu"]).output
    priced = runner.invoke(app, ["-m", "smollm2-135m", "--gpu", "cpu", "--price", "cpu=0.36", "--json"])
    assert json.loads(priced.output)["dollars"] == pytest.approx(out["seconds"] / 10_000)


def test_lookahead_is_priced_with_its_rollouts():
    beam = json.loads(runner.invoke(app, ["-m", "qwen3-8b", "--strategy", "beam", "-n", "4", "--json"]).output)
    look = json.loads(runner.invoke(app, ["-m", "qwen3-8b", "--strategy", "lookahead", "-n", "4", "--json"]).output)
    # default k = 1: one greedy rollout step behind each of the n candidate steps roughly doubles the work
    assert 1.5 * beam["flops"] < look["flops"] < 3 * beam["flops"]
