"""Results broken down by a difficulty field: rows keep the problems' short metadata, and
``tts plot RUN... --by k`` gives per-level accuracy with intervals and tokens, as a table and figures."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tts.cli.app import app
from tts.config import EvalConfig
from tts.eval.breakdown import BreakdownError, level_points, levels_markdown
from tts.eval.labels import config_line, natural_key
from tts.eval.report import wilson_interval
from tts.eval.rows import ResultRow
from tts.eval.runner import run_eval


def _run(tmp_path, strategies, limit=16):
    cfg = EvalConfig.model_validate({"data": {"benchmark": "chains", "limit": limit}, "backend": {"kind": "scripted"},
                                     "strategies": strategies})
    run_eval(cfg, tmp_path)
    return [ResultRow.model_validate_json(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]


def test_rows_keep_short_metadata_and_leave_long_text_out(tmp_path):
    rows = _run(tmp_path, [{"kind": "self_consistency", "n": 2}], limit=8)
    assert [r.metadata["k"] for r in rows] == list(range(1, 9))
    assert all(set(r.metadata) == {"k", "start", "ops"} for r in rows)
    from tts.eval.runner import short_metadata
    from tts.types import Problem

    kept = short_metadata(Problem("p", "q", "1", {"level": 3, "subject": "Algebra", "solution": "x" * 500, "ok": True}))
    assert kept == {"level": 3, "subject": "Algebra", "ok": True}


def test_level_points_count_each_level_and_config_with_their_interval_and_tokens(tmp_path):
    rows = _run(tmp_path, [{"kind": "self_consistency", "n": 2}, {"kind": "self_consistency", "n": 4}])
    points = level_points(rows, "k")
    assert len(points) == 8 * 2 and [p.level for p in points[:2]] == ["1", "1"]
    for p in points:
        mine = [r for r in rows if r.config == p.config and str(r.metadata["k"]) == p.level]
        assert p.problems == len(mine) == 2 and p.correct == sum(r.correct for r in mine)
        assert (p.low, p.high) == wilson_interval(p.correct, p.problems)
        assert p.generated == sum(r.usage.completion_tokens for r in mine) / 2
        assert p.total == sum(r.usage.completion_tokens + r.usage.prompt_tokens - r.usage.cached_prompt_tokens
                              for r in mine) / 2
        assert p.line == "self_consistency" and p.n in (2, 4)
    table = levels_markdown(points, "k")
    assert table.count("\n") == 2 + len(points) and "| 8 | self_consistency@4 |" in table
    with pytest.raises(BreakdownError, match="no result row has the metadata field 'level'; the rows carry: k, ops, start"):
        level_points(rows, "level")


def test_config_line_drops_only_the_n():
    assert config_line("best_of_n@16,verifier=arithmetic") == "best_of_n,verifier=arithmetic"
    assert config_line("self_consistency@4") == "self_consistency"
    assert config_line("allocated-online") == "allocated-online"
    assert config_line("self_consistency@16 [sample]") == "self_consistency [sample]"


def test_names_sort_with_their_numbers_read_as_numbers():
    levels = ["level 10", "level 2", "level 1"]
    assert sorted(levels, key=natural_key) == ["level 1", "level 2", "level 10"]
    configs = ["sc@8,max_tokens=16000", "sc@8,max_tokens=4000", "sc@16,max_tokens=4000"]
    assert sorted(configs, key=natural_key) == ["sc@8,max_tokens=4000", "sc@8,max_tokens=16000", "sc@16,max_tokens=4000"]
    # Several texts (a plot's model and strategy) sort as one name, the first text first.
    pairs = [("m10", "sc@2"), ("m2", "sc@16"), ("m2", "sc@4")]
    assert sorted(pairs, key=lambda kv: natural_key(*kv)) == [("m2", "sc@4"), ("m2", "sc@16"), ("m10", "sc@2")]


def test_tts_plot_by_k_writes_figures_and_a_table_over_several_runs(tmp_path):
    _run(tmp_path / "a", [{"kind": "self_consistency", "n": 2}])
    _run(tmp_path / "b", [{"kind": "best_of_n", "n": 2, "verifier": "arithmetic"}])
    r = CliRunner().invoke(app, ["plot", str(tmp_path / "a"), str(tmp_path / "b"), "--by", "k", "--out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    for name in ("by_k_generated.png", "by_k_generated.svg", "by_k_total.png", "by_k_total.svg"):
        assert (tmp_path / "p" / name).stat().st_size > 1000
    table = (tmp_path / "p" / "by_k.md").read_text()
    assert "self_consistency@2" in table and "best_of_n@2,verifier=arithmetic" in table
    missing = CliRunner().invoke(app, ["plot", str(tmp_path / "a"), "--by", "level"])
    assert missing.exit_code != 0 and "no result row has the metadata field 'level'" in missing.output
    not_eval = CliRunner().invoke(app, ["plot", str(tmp_path), "--by", "k"])
    assert not_eval.exit_code != 0 and "not a `tts eval` run directory" in not_eval.output
    _run(tmp_path / "c", [{"kind": "self_consistency", "n": 2}])  # the same config in a second run
    r = CliRunner().invoke(app, ["plot", str(tmp_path / "a"), str(tmp_path / "c"), "--by", "k", "--out", str(tmp_path / "q"),
                                 "--only", "self_consistency"])
    assert r.exit_code == 0, r.output
    table = (tmp_path / "q" / "by_k.md").read_text()
    assert "self_consistency@2 [a]" in table and "self_consistency@2 [c]" in table and "best_of_n" not in table
    none = CliRunner().invoke(app, ["plot", str(tmp_path / "a"), "--by", "k", "--only", "beam"])
    assert none.exit_code != 0 and "no config label contains that" in none.output
    two_sweeps = CliRunner().invoke(app, ["plot", str(tmp_path / "a"), str(tmp_path / "b")])
    assert two_sweeps.exit_code != 0 and "give one sweep directory" in two_sweeps.output


def test_a_level_where_every_config_scores_zero_or_one_still_plots(tmp_path):
    from tts.eval.breakdown import LevelPoint, plot_levels

    # 0 of 11: the Wilson lower bound used to come out 2.8e-17, above the accuracy, and matplotlib refused it.
    assert wilson_interval(0, 11)[0] == 0.0 and wilson_interval(11, 11)[1] == 1.0
    points = [LevelPoint("a", "a@1", 1.0, "1", 11, c, c / 11, 2.8e-17 if c == 0 else 0.7, 1.0, 10.0 * (i + 1),
                         20.0 * (i + 1)) for i, c in enumerate((0, 11))]
    png, svg = plot_levels(points, "k", tmp_path, "edge")
    assert png.stat().st_size > 1000 and svg.is_file()


def test_a_run_of_one_sample_count_is_drawn_around_its_point(tmp_path, monkeypatch):
    """One n per line (every point at one cost): the log axis spans its neighbourhood, not a decade."""
    from matplotlib.figure import Figure

    from tts.eval.breakdown import LevelPoint, plot_levels

    limits = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **kw: (limits.append(fig.axes[0].get_xlim()),
                                                                  save(fig, *a, **kw)))
    points = [LevelPoint("a", "a@64", 64.0, "1", 25, 20, 0.8, 0.6, 0.9, 1532.0, 1658.0)]
    plot_levels(points, "k", tmp_path, "one n")
    low, high = limits[0]
    assert 1532.0 / 2 < low < 1532.0 < high < 1532.0 * 2
