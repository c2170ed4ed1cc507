"""The per-level breakdown on hand-made rows and points: the grouping and its numbers, the Markdown
table's exact text, and the figure `tts plot --by` draws, read back from matplotlib's objects (the
figure is kept from ``plt.close`` and nothing is rendered to disk)."""

from __future__ import annotations

import math

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tts.eval.breakdown import BreakdownError, LevelPoint, level_points, levels_markdown, plot_levels  # noqa: E402
from tts.eval.report import wilson_interval  # noqa: E402
from tts.eval.rows import ResultRow  # noqa: E402
from tts.types import Usage  # noqa: E402


GRAPH = {"kind": "graph", "graph": {"name": "g", "nodes": {"g": {"role": "generator"}}}}  # a config without n


def row(pid, config, correct, metadata, n=None, completion=10, prompt=0, cached=0):
    strategy = {"kind": "self_consistency", "n": n} if n is not None else GRAPH
    return ResultRow(problem_id=pid, config=config, strategy=strategy, model="m", backend="scripted", answer="1",
                     gold="1", outcome="correct" if correct else "wrong", correct=correct, coverage=correct,
                     confidence=1.0, usage=Usage(prompt_tokens=prompt, cached_prompt_tokens=cached,
                                                 completion_tokens=completion), trace={}, metadata=metadata)


def test_level_points_group_by_config_and_level_with_exact_counts_and_tokens():
    rows = [
        row("a", "sc@16", True, {"k": 2}, n=16, completion=100, prompt=10),
        row("a", "sc@4", True, {"k": 2}, n=4, completion=10, prompt=20, cached=5),
        row("b", "sc@4", False, {"k": "2"}, n=4, completion=30, prompt=40),  # "2" and 2 are one level
        row("c", "sc@4", True, {"k": 10}, n=4, completion=7, prompt=1),
        row("d", "graph:g", False, {"k": 2}, completion=50),  # no n: 0
        row("e", "sc@4", True, {"start": 3}, n=4),  # no k: left out
    ]
    points = level_points(rows, "k")
    assert [(p.level, p.config) for p in points] == [("2", "graph:g"), ("2", "sc@4"), ("2", "sc@16"), ("10", "sc@4")]
    graph, sc4, sc16, ten = points
    assert (graph.line, graph.n, graph.problems, graph.correct, graph.accuracy) == ("graph:g", 0.0, 1, 0, 0.0)
    assert (sc4.line, sc4.n, sc4.problems, sc4.correct, sc4.accuracy) == ("sc", 4.0, 2, 1, 0.5)
    # generated: (10 + 30) / 2; total: ((10 + 20 - 5) + (30 + 40 - 0)) / 2
    assert (sc4.generated, sc4.total) == (20.0, 47.5)
    # Wilson at 1 of 2: centre 0.5, half-width 1.96 * sqrt(0.125 + 0.2401) / 2.9208 = 0.4055
    assert (sc4.low, sc4.high) == wilson_interval(1, 2) and sc4.low == pytest.approx(0.0945, abs=1e-4)
    assert (sc16.n, sc16.generated, sc16.total, sc16.low, sc16.high) == (16.0, 100.0, 110.0, *wilson_interval(1, 1))
    assert (ten.problems, ten.correct, ten.accuracy, ten.generated, ten.total) == (1, 1, 1.0, 7.0, 8.0)


def test_level_points_name_the_fields_the_rows_do_carry():
    rows = [row("a", "sc@4", True, {"start": 1}, n=4), row("b", "sc@4", True, {"ops": "+"}, n=4)]
    with pytest.raises(BreakdownError) as err:
        level_points(rows, "level")
    assert str(err.value) == "no result row has the metadata field 'level'; the rows carry: ops, start."
    with pytest.raises(BreakdownError) as err:
        level_points([row("a", "sc@4", True, {}, n=4)], "k")
    assert str(err.value) == ("no result row has the metadata field 'k'; the rows carry: none (rows written before "
                              "tts kept problem metadata).")


def point(line, n, level, problems=4, correct=2, low=0.1, high=0.9, generated=100.0, total=150.0):
    return LevelPoint(line, f"{line}@{n}", float(n), level, problems, correct, correct / problems, low, high,
                      generated, total)


def test_the_markdown_table_has_one_row_per_point_with_two_decimals_and_thousands():
    points = [point("sc", 4, "2", 8, 3, 0.1234, 0.6789, 1234.4, 20999.5), point("best", 16, "10", 2, 2, 0.3, 1.0, 5.0, 7.0)]
    assert levels_markdown(points, "level") == (
        "| level | config | problems | accuracy [95% CI] | generated tok/pb | total tok/pb |\n"
        "|---|---|---:|---|---:|---:|\n"
        "| 2 | sc@4 | 8 | 0.38 [0.12-0.68] | 1,234 | 21,000 |\n"
        "| 10 | best@16 | 2 | 1.00 [0.30-1.00] | 5 | 7 |\n")


def flat(bars):
    """An error-bar collection's segments as x0, y0, x1, y1, ... in order."""
    return [v for segment in bars.get_segments() for xy in segment.tolist() for v in xy]


def box(fig):
    """Where the panels sit in the figure (left, bottom, right, top), as tight_layout left them."""
    return (fig.subplotpars.left, fig.subplotpars.bottom, fig.subplotpars.right, fig.subplotpars.top)


@pytest.fixture
def drawn(monkeypatch):
    """Runs plot_levels with the figure kept (not closed) and savefig recorded instead of rendered."""
    figures, saved, close = [], [], plt.close
    monkeypatch.setattr(plt, "close", figures.append)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, path, **kw: saved.append((path, kw)))

    def draw(points, by="k", out=None, title="t", **kw):
        paths = plot_levels(points, by, out, title, **kw)
        return paths, figures[-1], saved[-2:]

    yield draw
    for fig in figures:
        close(fig)


def test_the_panels_are_four_to_a_row_in_level_order_each_titled_with_its_problems(drawn, tmp_path):
    points = [point("a", 2, level, problems=3) for level in ("10", "2", "1", "4", "3")] + [point("b", 2, "2", problems=5)]
    with matplotlib.rc_context({"font.size": 20}):  # the figure's own sizes, not the reader's defaults
        paths, fig, saved = drawn(points, by="k/level x", out=tmp_path / "new" / "dir")
    stem = tmp_path / "new" / "dir" / "by_k_level_x_generated"
    assert paths == [stem.with_suffix(".png"), stem.with_suffix(".svg")] and (tmp_path / "new" / "dir").is_dir()
    assert saved == [(stem.with_suffix(".png"), {"dpi": 130}), (stem.with_suffix(".svg"), {})]
    assert tuple(fig.get_size_inches()) == pytest.approx((4.2 * 4, 3.6 * 2 + 0.9))
    axes = fig.axes
    assert len(axes) == 8 and [ax.get_visible() for ax in axes] == [True] * 5 + [False] * 3
    assert [ax.get_title() for ax in axes[:5]] == ["k/level x = 1  (3 problems)", "k/level x = 2  (5 problems)",
                                                 "k/level x = 3  (3 problems)", "k/level x = 4  (3 problems)",
                                                 "k/level x = 10  (3 problems)"]
    assert [ax.get_ylabel() for ax in axes] == ["accuracy (95% CI)", "", "", "", "accuracy (95% CI)", "", "", ""]
    for ax in axes[:5]:
        assert ax.title.get_fontsize() == 10 and ax.get_xscale() == "log" and ax.get_ylim() == (-0.02, 1.02)
        assert ax.get_xlabel() == "generated tokens per problem" and ax.xaxis.label.get_fontsize() == 8
        for kw in (ax.xaxis._major_tick_kw, ax.xaxis._minor_tick_kw):
            assert kw["gridOn"] and kw["grid_alpha"] == 0.3 and kw["labelsize"] == 7
        assert ax.yaxis._major_tick_kw["gridOn"] and ax.yaxis._minor_tick_kw["gridOn"]
        assert "labelsize" not in ax.yaxis._major_tick_kw  # only the cost axis's labels are small
        for formatter in (ax.xaxis.get_major_formatter(), ax.xaxis.get_minor_formatter()):
            assert [formatter(v, 0) for v in (1000, 1500, 999, 0.5, 20000)] == ["1k", "1.5k", "999", "0.5", "20k"]
    assert axes[0].get_shared_y_axes().joined(axes[0], axes[5])
    assert fig._suptitle.get_text() == "t" and fig._suptitle.get_fontsize() == 11


def test_each_line_keeps_its_marker_colour_and_label_across_panels(drawn, tmp_path):
    points = [point("a", 4, "1", generated=300.0, low=0.2, high=0.8), point("a", 2, "1", generated=100.0),
              point("b", 2, "2", generated=50.0, correct=0, low=2.8e-17, high=0.4),
              point("a", 2, "2", correct=4, low=0.5, high=1.0 - 1e-12, generated=80.0),
              point("c", 8, "3", generated=40.0)]
    _, fig, _ = drawn(points, out=tmp_path)
    tab10 = plt.get_cmap("tab10")
    first, second, third = fig.axes[:3]
    [a1] = first.containers
    line, caps, bars = a1
    assert a1.get_label() == "a" and list(line.get_xdata()) == [100.0, 300.0] and list(line.get_ydata()) == [0.5, 0.5]
    assert (line.get_marker(), line.get_markersize(), line.get_linewidth(), line.get_alpha()) == ("o", 5, 1.4, 0.9)
    assert line.get_color() == tab10(0) and caps[0].get_markersize() == 4  # capsize 2: caps 4 points wide
    assert flat(bars[0]) == pytest.approx([100.0, 0.1, 100.0, 0.9, 300.0, 0.2, 300.0, 0.8])
    a2, b2 = second.containers
    assert (a2.get_label(), b2.get_label()) == ("a", "b")
    assert b2[0].get_marker() == "s" and b2[0].get_color() == tab10(1) and a2[0].get_color() == tab10(0)
    # error bars never cross the point: a lower bound a rounding error above 0, an upper one below 1
    assert flat(b2[2][0]) == [50.0, 0.0, 50.0, 0.4]
    assert flat(a2[2][0]) == [80.0, 0.5, 80.0, 1.0]
    [c3] = third.containers
    assert c3[0].get_marker() == "D" and c3[0].get_color() == tab10(2)
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["a", "b", "c"]
    # each entry is drawn as its line's error bar, in the line's colour
    assert [tuple(h.get_color()[0][:3]) for h in legend.legend_handles] == [tab10(i)[:3] for i in range(3)]
    assert legend._loc == 8 and legend._ncols == 3 and not legend.get_frame_on()  # 8: lower center
    assert all(t.get_fontsize() == 8 for t in legend.get_texts())
    # the panels end above one legend row and below the title
    drawn_box = box(fig)
    fig.tight_layout(rect=(0, 0.04 + 0.035 * 1, 1, 0.97))
    assert drawn_box == pytest.approx(box(fig))


def test_eleven_lines_take_twenty_colours_and_two_legend_rows(drawn, tmp_path):
    names = [f"s{i:02d}" for i in range(11)]
    _, fig, _ = drawn([point(name, 2, "1", generated=10.0 * (i + 1)) for i, name in enumerate(names)], out=tmp_path)
    tab20 = plt.get_cmap("tab20")
    lines = fig.axes[0].containers
    assert [c.get_label() for c in lines] == names
    assert [c[0].get_color() for c in lines] == [tab20(i) for i in range(11)]
    assert [c[0].get_marker() for c in lines] == list("osD^vP*Xh<>")
    assert fig.legends[0]._ncols == 4
    drawn_box = box(fig)
    fig.tight_layout(rect=(0, 0.04 + 0.035 * 3, 1, 0.97))  # 11 labels, 4 to a row: 3 rows
    assert drawn_box == pytest.approx(box(fig))
    _, fig, _ = drawn([point(name, 2, "1") for name in names[:10]], out=tmp_path)
    assert fig.axes[0].containers[9][0].get_color() == plt.get_cmap("tab10")(9)
    assert fig.axes[0].containers[9][0].get_marker() == "<"


def test_a_panel_of_close_costs_spans_half_again_either_side(drawn, tmp_path):
    _, fig, _ = drawn([point("a", 2, "1", generated=100.0), point("a", 4, "1", generated=119.0),
                       point("b", 2, "1", generated=0.0)], out=tmp_path)
    low, high = fig.axes[0].get_xlim()
    assert low == pytest.approx(100 / 1.5) and high == pytest.approx(119 * 1.5)  # the 0 is not a cost
    _, fig, _ = drawn([point("a", 2, "1", generated=100.0), point("a", 4, "1", generated=120.0)], out=tmp_path)
    low, high = fig.axes[0].get_xlim()
    assert not math.isclose(low, 100 / 1.5) and not math.isclose(high, 120 * 1.5)  # 1.2x apart: left to matplotlib


def test_the_total_axis_draws_the_total_tokens_and_an_unknown_axis_is_refused(drawn, tmp_path):
    paths, fig, _ = drawn([point("a", 2, "1", generated=100.0, total=150.0), point("a", 4, "1", generated=200, total=400)],
                          out=tmp_path, axis="total")
    assert paths[0].name == "by_k_total.png"
    assert list(fig.axes[0].containers[0][0].get_xdata()) == [150.0, 400.0]
    assert fig.axes[0].get_xlabel() == "generated + uncached prompt tokens per problem"
    with pytest.raises(BreakdownError) as err:
        plot_levels([point("a", 2, "1")], "k", tmp_path, "t", axis="tokens")
    assert str(err.value) == "axis 'tokens': choose one of generated, total"


def test_lines_take_markers_and_legend_places_in_natural_order(drawn, tmp_path):
    _, fig, _ = drawn([point("sc@x10", 2, "1"), point("sc@x2", 2, "1", generated=50.0)], out=tmp_path)
    assert [(c.get_label(), c[0].get_marker()) for c in fig.axes[0].containers] == [("sc@x2", "o"), ("sc@x10", "s")]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["sc@x2", "sc@x10"]


def test_a_panel_of_costs_under_one_token_is_still_spanned(drawn, tmp_path):
    _, fig, _ = drawn([point("a", 2, "1", generated=0.5), point("a", 4, "1", generated=0.55)], out=tmp_path)
    low, high = fig.axes[0].get_xlim()
    assert low == pytest.approx(0.5 / 1.5) and high == pytest.approx(0.55 * 1.5)


def test_a_twenty_first_line_starts_the_colours_again(drawn, tmp_path):
    names = [f"s{i:02d}" for i in range(21)]
    _, fig, _ = drawn([point(name, 2, "1", generated=10.0 * (i + 1)) for i, name in enumerate(names)], out=tmp_path)
    tab20 = plt.get_cmap("tab20")
    assert [c[0].get_color() for c in fig.axes[0].containers] == [tab20(i % 20) for i in range(21)]


def test_five_lines_leave_room_for_two_legend_rows_and_capitals_stay_in_the_file_name(drawn, tmp_path):
    paths, fig, _ = drawn([point(f"s{i}", 2, "1", generated=10.0 * (i + 1)) for i in range(5)], by="Level", out=tmp_path)
    assert [p.name for p in paths] == ["by_Level_generated.png", "by_Level_generated.svg"]
    assert fig.legends[0]._ncols == 4
    drawn_box = box(fig)
    fig.tight_layout(rect=(0, 0.04 + 0.035 * 2, 1, 0.97))  # 5 labels, 4 to a row: 2 rows
    assert drawn_box == pytest.approx(box(fig))
