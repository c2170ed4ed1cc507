"""Results broken down by a difficulty field of the problems: accuracy and tokens per level.

A single accuracy over a benchmark hides what a strategy buys where: on the ``chains`` benchmark
a step-wise search should pay on long chains and cost for nothing on short ones (Snell et al.
2024, sec. 5). :func:`level_points` groups the rows of one or more ``tts eval`` runs by a field
of the problems' metadata (chains' ``k``, MATH-500's ``level``) and by strategy config, with
the accuracy's 95% Wilson interval and the mean generated and total tokens per problem (total =
generated + prompt tokens not served from the prefix cache, what the engine processed).
:func:`plot_levels` draws one panel per level, accuracy against generated tokens, one line per
strategy (its configs' n as the points); :func:`levels_markdown` is the same as a table.
``tts plot RUN... --by k`` writes both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tts.budgets.pricing import Pricer
from tts.eval.labels import config_line, natural_key
from tts.eval.report import wilson_interval
from tts.eval.rows import ResultRow

TOKENS = Pricer("tokens")
"""Prices a usage in processed tokens (generated plus uncached prompt), the ``total`` column."""


class BreakdownError(ValueError):
    """Rows that cannot be broken down as asked (the field is missing); the message says why."""


@dataclass(frozen=True)
class LevelPoint:
    """One strategy config on the problems of one level."""

    line: str
    """The config without its n (one line of the figure)."""
    config: str
    n: float
    level: str
    problems: int
    correct: int
    accuracy: float
    low: float
    high: float
    generated: float
    """Mean generated tokens per problem."""
    total: float
    """Mean generated + uncached prompt tokens per problem."""


def level_points(rows: Iterable[ResultRow], by: str) -> list[LevelPoint]:
    """Accuracy and tokens of every (config, level) among ``rows``, sorted by level then config.

    Raises:
        BreakdownError: No row carries ``by`` in its metadata (names the fields they do carry).
    """
    groups: dict[tuple[str, str], list[ResultRow]] = {}
    seen: set[str] = set()
    for row in rows:
        seen.update(row.metadata)
        if by in row.metadata:
            groups.setdefault((row.config, str(row.metadata[by])), []).append(row)
    if not groups:
        fields = ", ".join(sorted(seen)) or "none (rows written before tts kept problem metadata)"
        raise BreakdownError(f"no result row has the metadata field {by!r}; the rows carry: {fields}.")
    points = []
    for (config, level), members in groups.items():
        correct = sum(r.correct for r in members)
        low, high = wilson_interval(correct, len(members))
        usage = [r.usage for r in members]
        points.append(LevelPoint(
            line=config_line(config), config=config, n=float(members[0].strategy.get("n") or 0), level=level,
            problems=len(members), correct=correct, accuracy=correct / len(members), low=low, high=high,
            generated=sum(u.completion_tokens for u in usage) / len(members),
            total=sum(map(TOKENS.usage, usage)) / len(members)))
    return sorted(points, key=lambda p: (natural_key(p.level), natural_key(p.line), p.n))


def levels_markdown(points: Sequence[LevelPoint], by: str) -> str:
    """A Markdown table: one row per (level, config), accuracy with its interval and tokens."""
    lines = [f"| {by} | config | problems | accuracy [95% CI] | generated tok/pb | total tok/pb |",
             "|---|---|---:|---|---:|---:|"]
    lines += [f"| {p.level} | {p.config} | {p.problems} | {p.accuracy:.2f} [{p.low:.2f}-{p.high:.2f}] | "
              f"{p.generated:,.0f} | {p.total:,.0f} |" for p in points]
    return "\n".join(lines) + "\n"


AXES = {"generated": "generated tokens per problem", "total": "generated + uncached prompt tokens per problem"}


def plot_levels(points: Sequence[LevelPoint], by: str, out: Path, title: str, axis: str = "generated") -> list[Path]:
    """One figure, a panel per level: accuracy (95% interval bars) against ``axis`` tokens per
    problem (``generated`` or ``total``) on a log axis, one line per strategy config; written as
    ``by_<field>_<axis>.png`` and ``.svg`` under ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    if axis not in AXES:
        raise BreakdownError(f"axis {axis!r}: choose one of {', '.join(AXES)}")
    compact = FuncFormatter(lambda v, _: f"{v / 1000:g}k" if v >= 1000 else f"{v:g}")

    levels = sorted({p.level for p in points}, key=natural_key)
    lines = sorted({p.line for p in points}, key=natural_key)
    cols = min(4, len(levels))
    rows = -(-len(levels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows + 0.9), sharey=True, squeeze=False)
    colours = plt.get_cmap("tab10" if len(lines) <= 10 else "tab20")
    markers = "osD^vP*Xh<>"
    for ax, level in zip(axes.flat, levels, strict=False):
        panel_x: list[float] = []
        for i, line in enumerate(lines):
            mine = sorted((p for p in points if p.level == level and p.line == line), key=lambda p: p.n)
            if not mine:
                continue
            xs, ys = [getattr(p, axis) for p in mine], [p.accuracy for p in mine]
            panel_x += [float(x) for x in xs if x and x > 0]
            # Clamped at 0: a Wilson bound can sit a rounding error on the wrong side of an accuracy of 0 or 1.
            err = [[max(0.0, p.accuracy - p.low) for p in mine], [max(0.0, p.high - p.accuracy) for p in mine]]
            ax.errorbar(xs, ys, yerr=err, marker=markers[i % len(markers)], ms=5, lw=1.4, capsize=2,
                        color=colours(i % colours.N), label=line, alpha=0.9)
        problems = max((p.problems for p in points if p.level == level), default=0)
        ax.set_title(f"{by} = {level}  ({problems} problems)", fontsize=10)
        ax.set_xscale("log")
        if panel_x and max(panel_x) < 1.2 * min(panel_x):  # one sample count: matplotlib would span a decade
            ax.set_xlim(min(panel_x) / 1.5, max(panel_x) * 1.5)
        ax.xaxis.set_major_formatter(compact)
        ax.xaxis.set_minor_formatter(compact)
        ax.tick_params(axis="x", which="both", labelsize=7)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3, which="both")
        ax.set_xlabel(AXES[axis], fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy (95% CI)")
    for ax in list(axes.flat)[len(levels):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for ax in list(axes.flat)[1:len(levels)]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    legend_rows = -(-len(labels) // min(4, max(len(labels), 1)))
    fig.tight_layout(rect=(0, 0.04 + 0.035 * legend_rows, 1, 0.97))
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"by_{re.sub(r'[^A-Za-z0-9_-]+', '_', by)}_{axis}"
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    fig.savefig(paths[0], dpi=130)
    fig.savefig(paths[1])
    plt.close(fig)
    return paths
