"""``tts sweep`` and ``tts plot`` as a user runs them: published figures, resume, errors, live, plots."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tts.cli.app import app
from tts.eval.sweep import (
    CurvePoint,
    pareto_front,
    read_cells,
    saturation,
    within_noise,
)

runner = CliRunner(env={"COLUMNS": "120"})
POOLS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "pools"
QWEN_RM = POOLS / "math_qwen25_rm8.jsonl.gz"
MATH500 = POOLS / "math500_reasoning_models.jsonl.gz"


def _sweep(*args: str):
    return runner.invoke(app, ["sweep", *args])


def _cells(out: Path) -> dict[str, dict]:
    return {c.config: c for c in read_cells(out)}


@pytest.mark.skipif(not QWEN_RM.exists(), reason="shared pools not present")
def test_the_qwen_math_rm_pool_gives_its_published_figures(tmp_path):
    # Qwen2.5-Math's own RM example: mean 0.91, maj@8 0.93, RM@8 0.94, pass@8 0.96.
    r = _sweep("--pool", str(QWEN_RM), "-s", "self_consistency", "-s", "best_of_n", "--n", "1,8",
               "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    cells = _cells(tmp_path)
    assert round(cells["self_consistency@1"].accuracy, 2) == 0.91
    assert round(cells["self_consistency@8"].accuracy + 1e-9, 2) == 0.93  # 0.925 over 1000 draws
    assert round(cells["best_of_n@8"].accuracy, 2) == 0.94
    assert round(cells["best_of_n@8"].pass_at_n, 2) == 0.96
    c = cells["self_consistency@8"]
    assert c.accuracy_low < c.accuracy < c.accuracy_high and c.tokens is None  # this pool records no token counts


@pytest.mark.skipif(not MATH500.exists(), reason="shared pools not present")
def test_maj_at_80_per_model_equals_the_vote_computed_directly_from_the_file(tmp_path):
    r = _sweep("--pool", str(MATH500), "-s", "self_consistency", "--n", "80", "--draws", "10", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    votes: dict[tuple[str, str], dict[str, list[bool]]] = {}
    with gzip.open(MATH500, "rt") as fh:
        for line in fh:
            row = json.loads(line)
            if row["answer"] is not None:
                votes.setdefault((row["model"], row["problem_id"]), {}).setdefault(row["answer"], []).append(
                    bool(row["correct"]))
    direct: dict[str, list[float]] = {}
    problems: dict[str, set[str]] = {}
    with gzip.open(MATH500, "rt") as fh:
        for line in fh:
            row = json.loads(line)
            problems.setdefault(row["model"], set()).add(row["problem_id"])
    for model, ids in problems.items():
        scores = []
        for pid in ids:
            tally = votes.get((model, pid), {})
            if not tally:
                scores.append(0.0)
                continue
            top = max(len(v) for v in tally.values())
            tied = [v for v in tally.values() if len(v) == top]
            scores.append(sum(all(v) for v in tied) / len(tied))  # a tie counts its share of correct answers
        direct[model] = scores
    cells = {c.model: c for c in read_cells(tmp_path)}
    assert set(cells) == set(direct)
    for model, scores in direct.items():
        assert cells[model].accuracy == pytest.approx(np.mean(scores), abs=1e-9), model


def test_a_sweep_prices_every_cell_resumes_and_extends_without_recomputing(small_pool, tmp_path):
    out = tmp_path / "sw"
    r = _sweep("--pool", str(small_pool), "-s", "self_consistency", "-s", "weighted_vote", "--n", "1,4",
               "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "8 cells computed, 0 resumed" in r.output and "mystery-model" in r.output  # no architecture: named
    cells = read_cells(out)
    priced = [c for c in cells if c.model == "Qwen3-8B"]
    assert all(c.eflops > c.flops > 0 and c.dollars > 0 and c.gpu_seconds > 0 for c in priced)
    assert all(c.dollars is None and c.tokens > 0 for c in cells if c.model == "mystery-model")
    four, one = (next(c for c in priced if c.config == f"self_consistency@{n}") for n in (4, 1))
    assert four.tokens == pytest.approx(4 * one.tokens) and four.gpu_seconds > one.gpu_seconds
    # Same grid again: nothing recomputed. A larger grid: only the new cells.
    r = _sweep("--pool", str(small_pool), "-s", "self_consistency", "-s", "weighted_vote", "--n", "1,4",
               "--out", str(out))
    assert "0 cells computed, 8 resumed" in r.output
    r = _sweep("--pool", str(small_pool), "-s", "self_consistency", "-s", "weighted_vote", "--n", "1,4,16",
               "--out", str(out), "--arch", "mystery-model=qwen3-0.6b")
    assert "4 cells computed, 8 resumed" in r.output and len(read_cells(out)) == 12


def test_seeds_report_their_spread(small_pool, tmp_path):
    r = _sweep("--pool", str(small_pool), "-s", "self_consistency", "--n", "4", "--seeds", "3", "--draws", "20",
               "-m", "Qwen3-8B", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "seed sd" in r.output and len(read_cells(tmp_path)) == 3


@pytest.mark.parametrize(("args", "message"), [
    (["-s", "beam"], "cannot be replayed from a sample pool"),
    (["-s", "no_such"], "Unknown strategy"),
    (["--n", "1,x"], "whole numbers"),
    (["--n", "64"], "use n up to 16"),
    (["-m", "nobody"], "is not in pool"),
    (["--gpu", "tpu-v9"], "tpu-v9"),
    (["--price", "h100"], "--price"),
    (["--arch", "Qwen3-8B"], "NAME=VALUE"),
    (["--limit", "3"], "live settings"),
])
def test_bad_input_is_a_one_line_error_with_exit_code_2(small_pool, tmp_path, args, message):
    r = _sweep("--pool", str(small_pool), "--out", str(tmp_path / "x"), *args)
    assert r.exit_code == 2 and message in r.output, r.output
    assert "Traceback" not in r.output


def test_a_malformed_sweep_file_or_pool_is_refused_with_what_to_change(small_pool, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("strategies: [self_consistency\n")
    r = _sweep("--config", str(bad), "--out", str(tmp_path / "a"))
    assert r.exit_code == 2 and "not valid YAML" in r.output
    bad.write_text("pool: x\nn: [1, 4]\nnot_a_setting: 3\n")
    r = _sweep("--config", str(bad), "--out", str(tmp_path / "b"))
    assert r.exit_code == 2 and "not_a_setting" in r.output
    lines = small_pool.read_text().splitlines()
    dup = tmp_path / "dup.jsonl"
    dup.write_text("\n".join(lines + lines[:1]) + "\n")
    r = _sweep("--pool", str(dup), "--out", str(tmp_path / "c"))
    assert r.exit_code == 2 and "duplicate" in r.output.lower()
    missing = tmp_path / "missing.jsonl"
    missing.write_text("\n".join(json.dumps({k: v for k, v in json.loads(x).items() if k != "correct"})
                                 for x in lines) + "\n")
    r = _sweep("--pool", str(missing), "--out", str(tmp_path / "d"))
    assert r.exit_code == 2 and "correct" in r.output


def test_a_live_sweep_on_the_scripted_backend_runs_the_grid_and_resumes(tmp_path):
    args = ["-s", "self_consistency", "-s", "best_of_n", "--n", "1,4", "--backend", "scripted", "--limit", "3",
            "--max-tokens", "64", "--out", str(tmp_path)]
    r = _sweep(*args)
    assert r.exit_code == 0, r.output
    cells = read_cells(tmp_path)
    assert {c.config for c in cells} == {"self_consistency@1", "self_consistency@4", "best_of_n@1", "best_of_n@4"}
    assert all(c.method == "run" and c.problems == 3 and c.tokens > 0 for c in cells)
    assert (tmp_path / "live").is_dir()
    r = _sweep(*args)
    assert "0 cells computed, 4 resumed" in r.output
    # An n added to the grid: only its cells run, in a run directory of their own (the first one holds
    # the other configs, and resuming a run with other configs is refused); then all resume.
    wider = [a if a != "1,4" else "1,4,8" for a in args]
    r = _sweep(*wider)
    assert r.exit_code == 0, r.output
    assert "2 cells computed, 4 resumed" in r.output
    assert {c.config for c in read_cells(tmp_path)} >= {"self_consistency@8", "best_of_n@8"}
    first, added = sorted(p.name for p in (tmp_path / "live").iterdir())
    assert first == "smollm2-135m-seed0" and added.startswith("smollm2-135m-seed0-")
    assert "0 cells computed, 6 resumed" in _sweep(*wider).output


def test_plot_writes_png_svg_and_a_self_contained_html_report(small_pool, tmp_path):
    out = tmp_path / "sw"
    _sweep("--pool", str(small_pool), "-s", "self_consistency", "-s", "best_of_n", "--n", "1,2,4,8,16",
           "--out", str(out))
    r = runner.invoke(app, ["plot", str(out)])
    assert r.exit_code == 0, r.output
    plots = out / "plots"
    for axis in ("tokens", "eflops", "gpu_seconds", "dollars"):
        assert (plots / f"accuracy_vs_{axis}.png").stat().st_size > 10_000
        assert (plots / f"accuracy_vs_{axis}.svg").read_text().count("<path") > 10
    page = (plots / "report.html").read_text()
    assert page.count("<svg") == 4 and "Pareto frontier" in page
    # nothing to fetch: no scripts, stylesheets, images or fonts from elsewhere (XML namespaces are names)
    assert not any(ref in page for ref in ("src=", "<link", "href=\"http", "url(http", "@import"))
    r = runner.invoke(app, ["plot", str(tmp_path / "nothing")])
    assert r.exit_code == 2 and "tts sweep" in r.output


@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")), reason="no headless browser")
def test_the_html_report_renders_in_a_real_browser(small_pool, tmp_path):
    out = tmp_path / "sw"
    _sweep("--pool", str(small_pool), "-s", "self_consistency", "--n", "1,4,16", "--out", str(out))
    runner.invoke(app, ["plot", str(out)])
    shot = tmp_path / "shot.png"
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                    "--window-size=1200,1600", (out / "plots" / "report.html").as_uri()],
                   capture_output=True, timeout=120, check=False)
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.std() > 10  # not a blank page: figure lines and table text


def _point(cost: float, acc: float, lo: float | None = None, hi: float | None = None, name: str = "a") -> CurvePoint:
    return CurvePoint("m", name, f"{name}@{cost:g}", int(cost), acc, acc - 0.01 if lo is None else lo,
                      acc + 0.01 if hi is None else hi, None, {"tokens": cost})


def test_pareto_front_keeps_only_points_no_cheaper_point_beats():
    points = [_point(1, 0.5), _point(2, 0.4), _point(4, 0.7), _point(8, 0.7), _point(16, 0.75)]
    assert [p.costs["tokens"] for p in pareto_front(points, "tokens")] == [1, 4, 16]


def test_saturation_is_the_first_point_where_doubling_buys_less_than_the_gain():
    curve = [_point(1, 0.50), _point(2, 0.60), _point(4, 0.65), _point(8, 0.655), _point(16, 0.66)]
    assert saturation(curve, "tokens", gain=0.01).costs["tokens"] == 4
    assert saturation(curve[:3], "tokens", gain=0.01) is None  # never flattens within its range
    late_riser = [_point(1, 0.50), _point(2, 0.502), _point(4, 0.60), _point(8, 0.603), _point(16, 0.605)]
    assert saturation(late_riser, "tokens", gain=0.01).costs["tokens"] == 4  # a flat start is not saturation
    assert within_noise(_point(1, 0.50, 0.4, 0.6), _point(2, 0.55, 0.45, 0.65))
    assert not within_noise(_point(1, 0.50, 0.45, 0.55), _point(2, 0.70, 0.65, 0.75))


def test_a_live_sweep_without_a_backend_runs_on_vllm_with_the_units_model_and_seed():
    from tts.eval.sweep import SweepSpec, Unit, live_eval_config

    spec = SweepSpec(strategies=["self_consistency"], n=[1, 4], eval={"data": {"benchmark": "demo", "limit": 2}})
    cfg = live_eval_config(spec, Unit("smollm2-135m", 2, ("self_consistency@4",)))
    assert cfg.backend.kind == "vllm" and cfg.backend.model == "smollm2-135m" and cfg.seed == 2
    assert [s.label for s in cfg.strategies] == ["self_consistency@4"]


def test_length_budgets_replay_every_cap_from_one_generation(small_pool, tmp_path):
    # Caps of 150 and 300 tokens on samples of 100-399 tokens: a sample over its cap is cut off
    # before its answer, so it cannot vote, and it costs the cap.
    r = _sweep("--pool", str(small_pool), "-s", "self_consistency", "--n", "1,4", "--lengths", "300,150",
               "-m", "Qwen3-8B", "--draws", "200", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "cap" in r.output and "max_tokens" not in r.output  # the cap has its own column
    cells = _cells(tmp_path)
    assert set(cells) == {f"self_consistency@{n},max_tokens={cap}" for n in (1, 4) for cap in (150, 300)}
    rows = [json.loads(x) for x in small_pool.read_text().splitlines()]
    rows = [x for x in rows if x["model"] == "Qwen3-8B"]
    for cap in (150, 300):
        c1 = cells[f"self_consistency@1,max_tokens={cap}"]
        kept = [x["correct"] and x["num_tokens"] <= cap for x in rows]  # correct and finished within the cap
        assert c1.pass_at_n == pytest.approx(np.mean(kept), abs=1e-9)  # pass@1 is exact
        assert c1.accuracy == pytest.approx(np.mean(kept), abs=0.01)  # the vote of one, over 200 draws
        assert c1.tokens == pytest.approx(np.mean([min(x["num_tokens"], cap) for x in rows]))
        assert c1.events["cut_at_length"] == sum(x["num_tokens"] > cap for x in rows)
        assert c1.max_tokens == cap
    low, high = (cells[f"self_consistency@4,max_tokens={cap}"] for cap in (150, 300))
    assert low.accuracy < high.accuracy and low.tokens < high.tokens
    # The plot draws one line per cap.
    r = runner.invoke(app, ["plot", str(tmp_path)])
    assert r.exit_code == 0, r.output
    svg = (tmp_path / "plots" / "accuracy_vs_tokens.svg").read_text()
    assert "max_tokens=150" in svg and "max_tokens=300" in svg


def test_length_budgets_are_refused_where_they_cannot_be_replayed(small_pool, tmp_path):
    r = _sweep("-s", "self_consistency", "--backend", "scripted", "--lengths", "100", "--out", str(tmp_path / "a"))
    assert r.exit_code == 2 and "--pool" in r.output and "Traceback" not in r.output
    rows = [json.loads(x) for x in small_pool.read_text().splitlines()]
    no_tokens = tmp_path / "no_tokens.jsonl"
    no_tokens.write_text("\n".join(json.dumps({**x, "num_tokens": None}) for x in rows) + "\n")
    r = _sweep("--pool", str(no_tokens), "--lengths", "100", "--out", str(tmp_path / "b"))
    assert r.exit_code == 2 and "num_tokens" in r.output
    r = _sweep("--pool", str(small_pool), "--lengths", "0", "--out", str(tmp_path / "c"))
    assert r.exit_code == 2 and "at least 1" in r.output


def test_two_configs_of_one_strategy_that_differ_in_a_setting_are_two_cells_and_two_lines(tmp_path):
    spec = tmp_path / "grid.yaml"
    spec.write_text("n: [1, 2]\nstrategies: [best_of_n, {kind: best_of_n, verifier: arithmetic}]\n"
                    "eval: {backend: {kind: scripted}, data: {limit: 3}, sampling: {max_tokens: 64}}\n")
    r = _sweep("--config", str(spec), "--out", str(tmp_path / "sw"))
    assert r.exit_code == 0, r.output
    assert "4 cells computed" in r.output
    cells = read_cells(tmp_path / "sw")
    assert {c.config for c in cells} == {"best_of_n@1", "best_of_n@2", "best_of_n@1,verifier=arithmetic",
                                         "best_of_n@2,verifier=arithmetic"}
    from tts.eval.sweep import curve_points

    assert {p.line for p in curve_points(cells)} == {"best_of_n", "best_of_n,verifier=arithmetic"}


def test_a_yaml_grid_lays_out_solutions_by_verifications_for_generative_verification(tmp_path):
    # S x V: n gives S, one strategy entry per V; each (S, V) is its own cell and V its own line.
    spec = tmp_path / "grid.yaml"
    spec.write_text("n: [1, 2]\nstrategies:\n"
                    "  - {kind: generative_verification, verifications: 1, verifier: {kind: judge, max_tokens: 32}}\n"
                    "  - {kind: generative_verification, verifications: 3, verifier: {kind: judge, max_tokens: 32}}\n"
                    "  - self_consistency\n"
                    "eval: {backend: {kind: scripted}, data: {limit: 3}, sampling: {max_tokens: 64}}\n")
    r = _sweep("--config", str(spec), "--out", str(tmp_path / "sw"))
    assert r.exit_code == 0, r.output
    assert "6 cells computed" in r.output
    cells = _cells(tmp_path / "sw")
    gv = "generative_verification@{s},verifications={v},verifier=judge(max_tokens=32)"
    assert set(cells) == {gv.format(s=s, v=v) for s in (1, 2) for v in (1, 3)} | {"self_consistency@1",
                                                                                   "self_consistency@2"}
    for s in (1, 2):  # verifying costs tokens on top of solving, more with every verification
        assert (cells[f"self_consistency@{s}"].tokens < cells[gv.format(s=s, v=1)].tokens
                < cells[gv.format(s=s, v=3)].tokens)
        assert cells[gv.format(s=s, v=3)].n == s
    from tts.eval.sweep import curve_points

    assert {p.line for p in curve_points(list(cells.values()))} == {
        "self_consistency", *(f"generative_verification,verifications={v},verifier=judge(max_tokens=32)" for v in (1, 3))}


def test_plot_fits_the_compute_optimal_frontier_on_a_cost_axis_when_asked(small_pool, tmp_path):
    out = tmp_path / "sw"
    _sweep("--pool", str(small_pool), "-s", "self_consistency", "-s", "best_of_n", "--n", "1,4", "--draws", "50",
           "-m", "Qwen3-8B", "--out", str(out))
    r = runner.invoke(app, ["plot", str(out), "--frontier-axis", "tokens"])
    assert r.exit_code == 0, r.output
    report = json.loads((out / "plots" / "compute_optimal.json").read_text())
    assert report["settings"]["axis"] == "tokens" and "tokens ≤" in r.output
    r = runner.invoke(app, ["plot", str(out), "--frontier-axis", "watts"])
    assert r.exit_code == 2 and "choose n or one of tokens" in r.output


def test_a_live_sweep_resumed_with_another_limit_is_refused_not_summarised_from_other_problems(tmp_path):
    """Issue 48's planted bug at the sweep's level: cells stored by a live sweep of 4 problems are
    not the cells of the same sweep at --limit 2 (nor at --limit 6); the same settings resume."""
    from tts.eval.sweep import SweepError, SweepSpec, run_sweep

    def spec(limit: int) -> SweepSpec:
        return SweepSpec(strategies=["self_consistency"], n=[1, 2], eval={
            "backend": {"kind": "scripted"}, "data": {"benchmark": "demo", "limit": limit},
            "sampling": {"max_tokens": 32}})

    first = run_sweep(spec(4), tmp_path)
    assert sorted((c.config, c.problems) for c in first.cells) == [("self_consistency@1", 4), ("self_consistency@2", 4)]
    for limit in (2, 6):
        with pytest.raises(SweepError, match=r"holds a sweep with eval .*'limit': 4.*, not .*'limit': "
                                             rf"{limit}.*; pass a new --out directory"):
            run_sweep(spec(limit), tmp_path)
    again = run_sweep(spec(4), tmp_path)  # the same settings: resumed
    assert (again.computed, again.resumed) == (0, 2) and {c.problems for c in again.cells} == {4}
    other = run_sweep(spec(2), tmp_path / "new")
    assert {c.problems for c in other.cells} == {2} and all(len(c.per_problem) == 2 for c in other.cells)
