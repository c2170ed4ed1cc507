"""Figures and a self-contained HTML report of a sweep: accuracy against every cost axis.

For each cost axis the sweep priced (tokens, eFLOPs, GPU-seconds, dollars, all per problem), one
figure: accuracy against cost on a log axis, one line per (model, strategy config) with its 95% interval
as a band, the Pareto frontier across all of them drawn as a step line and listed in the report,
and each curve's saturation point (:func:`tts.eval.sweep.saturation`) marked with a ring. Each
figure is written as PNG and SVG; ``report.html`` embeds the SVGs and the tables, so it opens
offline and can be mailed as one file.
"""

from __future__ import annotations

import html
import io
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tts.eval.labels import natural_key
from tts.eval.sweep import COST_AXES, CurvePoint, pareto_front, saturation, within_noise

AXIS_LABELS = {
    "tokens": "generated tokens per problem",
    "eflops": "eFLOPs per problem (FLOPs + memory traffic, Kinetics)",
    "flops": "FLOPs per problem",
    "gpu_seconds": "predicted GPU-seconds per problem",
    "dollars": "US dollars per problem",
}
PLOTTED_AXES = ("tokens", "eflops", "gpu_seconds", "dollars")


@dataclass(frozen=True)
class Figure:
    """One written figure: its axis and the files."""

    axis: str
    png: Path
    svg: Path


@dataclass(frozen=True)
class Section:
    """An extra part of the report (e.g. :mod:`tts.eval.frontier`'s table): a heading, notes and titled tables."""

    title: str
    notes: Sequence[str] = ()
    tables: Sequence[tuple[str, Sequence[dict[str, str]]]] = ()


def _curves(points: Sequence[CurvePoint]) -> dict[tuple[str, str], list[CurvePoint]]:
    curves: dict[tuple[str, str], list[CurvePoint]] = {}
    for p in points:
        curves.setdefault((p.model, p.line), []).append(p)
    return curves


def plot_axis(points: Sequence[CurvePoint], axis: str, title: str, gain: float = 0.01):  # noqa: ANN201 - a matplotlib Figure
    """The accuracy-vs-cost figure of one axis (a matplotlib Figure), or None if nothing is priced on it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    priced = [p for p in points if p.costs.get(axis)]
    if not priced:
        return None
    curves = _curves(priced)
    several_models = len({m for m, _ in curves}) > 1
    fig, ax = plt.subplots(figsize=(8.5, 5.2), dpi=110)
    colors = itertools.cycle(plt.rcParams["axes.prop_cycle"].by_key()["color"])
    markers = itertools.cycle("osD^vP*X")
    for (model, strategy), curve in sorted(curves.items(), key=lambda kv: natural_key(*kv[0])):
        curve = sorted(curve, key=lambda p: p.costs[axis])
        color, marker = next(colors), next(markers)
        x = [p.costs[axis] for p in curve]
        label = f"{model} · {strategy}" if several_models else strategy
        ax.plot(x, [p.accuracy for p in curve], marker=marker, color=color, label=label, lw=1.6, ms=5)
        ax.fill_between(x, [p.low for p in curve], [p.high for p in curve], color=color, alpha=0.07, lw=0)
        sat = saturation(curve, axis, gain)
        if sat is not None:
            ax.plot([sat.costs[axis]], [sat.accuracy], marker="o", ms=13, mfc="none", mec=color, mew=1.6)
    front = pareto_front(priced, axis)
    if len(front) > 1:
        ax.step([p.costs[axis] for p in front], [p.accuracy for p in front], where="post", color="black",
                lw=1.0, ls="--", label="Pareto frontier", zorder=5)
    ax.set_xscale("log")
    ax.set_xlabel(AXIS_LABELS.get(axis, axis) + " (log scale)")
    ax.set_ylabel("accuracy (95% interval shaded)")
    ax.set_title(title, fontsize=11)
    ax.grid(True, which="both", alpha=0.25)
    handles, labels = ax.get_legend_handles_labels()
    handles.append(plt.Line2D([], [], marker="o", ms=11, mfc="none", mec="grey", ls=""))
    labels.append(f"saturation: doubling buys < {gain:.0%}")
    ax.legend(handles, labels, fontsize=8, loc="lower right", framealpha=0.9)
    fig.tight_layout()
    return fig


def write_figures(points: Sequence[CurvePoint], out: Path, title: str, gain: float = 0.01) -> list[Figure]:
    """Write ``accuracy_vs_<axis>.png`` and ``.svg`` for every priced axis into ``out``."""
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    figures = []
    for axis in PLOTTED_AXES:
        fig = plot_axis(points, axis, title, gain)
        if fig is None:
            continue
        png, svg = out / f"accuracy_vs_{axis}.png", out / f"accuracy_vs_{axis}.svg"
        fig.savefig(png)
        fig.savefig(svg)
        plt.close(fig)
        figures.append(Figure(axis, png, svg))
    return figures


def _fmt(value: float | None, axis: str) -> str:
    if value is None:
        return "–"
    if axis == "dollars":
        return f"${value:.4g}"
    if abs(value) >= 1e4:
        return f"{value:.3g}"
    return f"{value:,.4g}"


def frontier_rows(points: Sequence[CurvePoint], axis: str) -> list[dict[str, str]]:
    """The Pareto frontier of one axis as table rows (cheapest first), each step marked if within noise."""
    front = pareto_front(points, axis)
    rows = []
    for prev, p in zip([None, *front], front, strict=False):
        rows.append({
            axis: _fmt(p.costs[axis], axis), "model": p.model, "config": p.config,
            "accuracy": f"{p.accuracy:.3f} [{p.low:.3f}-{p.high:.3f}]",
            "gain over previous": "" if prev is None else
            f"+{p.accuracy - prev.accuracy:.3f}" + (" (within noise)" if within_noise(p, prev) else ""),
        })
    return rows


def _table(rows: Sequence[dict[str, str]]) -> str:
    if not rows:
        return "<p>(nothing priced on this axis)</p>"
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r.values()) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def cell_rows(points: Sequence[CurvePoint]) -> list[dict[str, str]]:
    """Every (model, config) with accuracy, interval, seed spread and costs, as table rows."""
    rows = []
    for p in points:
        row = {"model": p.model, "config": p.config, "n": str(p.n),
               "accuracy [95% CI]": f"{p.accuracy:.3f} [{p.low:.3f}-{p.high:.3f}]",
               "seed sd": "" if p.seed_sd is None else f"{p.seed_sd:.3f}"}
        row.update({axis: _fmt(p.costs.get(axis), axis) for axis in COST_AXES if axis != "flops"})
        rows.append(row)
    return rows


def write_report(points: Sequence[CurvePoint], figures: Sequence[Figure], out: Path, title: str,
                 notes: Sequence[str] = (), sections: Sequence[Section] = ()) -> Path:
    """One self-contained ``report.html`` (inline SVG figures and tables; no network needed).

    ``sections`` go after the figures, before the table of all cells.
    """
    parts = [f"<h1>{html.escape(title)}</h1>"]
    parts += [f"<p class='note'>{html.escape(n)}</p>" for n in notes]
    for fig in figures:
        svg = fig.svg.read_text(encoding="utf-8")
        svg = svg[svg.find("<svg"):]  # drop the XML prolog: the SVG is inlined in HTML
        parts.append(f"<h2>Accuracy against {html.escape(AXIS_LABELS.get(fig.axis, fig.axis))}</h2>")
        parts.append(f"<div class='fig'>{svg}</div>")
        parts.append("<h3>Pareto frontier</h3>" + _table(frontier_rows(points, fig.axis)))
    for sec in sections:
        parts.append(f"<h2>{html.escape(sec.title)}</h2>")
        parts += [f"<p class='note'>{html.escape(n)}</p>" for n in sec.notes]
        parts += [f"<h3>{html.escape(name)}</h3>" + _table(rows) for name, rows in sec.tables if rows]
    parts.append("<h2>All cells</h2>" + _table(cell_rows(points)))
    style = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
             "table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}"
             "td:nth-child(-n+2){text-align:left}.fig svg{max-width:100%;height:auto}.note{color:#555}")
    buf = io.StringIO()
    buf.write(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
              f"<style>{style}</style></head><body>")
    buf.write("\n".join(parts))
    buf.write("</body></html>\n")
    path = out / "report.html"
    path.write_text(buf.getvalue(), encoding="utf-8")
    return path
