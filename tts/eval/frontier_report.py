"""The compute-optimal frontier's result: per model and budget, the cross-fitted per-bin choice
against the best single config, as JSON, terminal lines and a report section.

:mod:`tts.eval.frontier` computes it; this module only holds and presents it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TITLE = "Compute-optimal (per difficulty bin)"


@dataclass(frozen=True)
class BinChoice:
    """One difficulty bin of one budget (0 = easiest), for display.

    Folds fit their own edges, so the bins shown are those of all problems (the "in hindsight"
    edges); each problem in it keeps the choice its own fold's fit gave it (cross-fitted).
    """

    bin: int
    problems: int
    low: float
    high: float
    """Lowest and highest difficulty score (agreement) of the bin's problems."""
    choice: str
    """The config most of the bin's problems were given by their fold."""
    given: int
    """How many of the bin's problems were given it."""
    accuracy: float
    """Cross-fitted accuracy of the bin's problems under their fold's choice."""
    single_accuracy: float
    """The same problems under their fold's best single config."""
    hindsight_choice: str
    """The config best on this bin's problems themselves (oracle, for reference)."""


@dataclass(frozen=True)
class BudgetRow:
    """The compute-optimal result of one (model, budget level)."""

    model: str
    axis: str
    budget: float
    """n (``axis="n"``) or the cost level (at most this much per problem)."""
    candidates: tuple[str, ...]
    problems: int
    compute_optimal: float
    """Cross-fitted: each held-out problem scored with its bin's choice."""
    single: float
    """Cross-fitted: each held-out problem scored with the config best on the other folds."""
    single_choice: str
    """The config most folds chose as the best single one."""
    gain: float
    gain_low: float
    gain_high: float
    """95% paired bootstrap interval of the gain over problems."""
    oracle_single: float
    """Best single config in hindsight (chosen on all problems): a reference, not achievable."""
    oracle_single_choice: str
    oracle_per_bin: float
    """Bins and choices fitted and scored on all problems: a reference, not achievable."""
    cost: float | None
    """Cost axes: mean cost per problem the compute-optimal choices spend (at most ``budget``)."""
    bins: tuple[BinChoice, ...]
    fold_edges: tuple[tuple[float, ...], ...]
    """Per fold: the bin edges fitted on the other folds."""
    fold_choices: tuple[dict[int, str], ...]
    """Per fold: bin -> chosen config."""
    fold_single: tuple[str, ...]
    """Per fold: the best single config on the other folds."""


@dataclass
class FrontierReport:
    """Every model's rows, with the settings and notes that qualify them."""

    rows: list[BudgetRow]
    settings: dict[str, Any]
    difficulty_source: str
    notes: list[str] = field(default_factory=list)
    single_strategy: dict[str, str] = field(default_factory=dict)
    """model -> its only strategy, where the sweep gives nothing to choose between."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``compute_optimal.json``)."""
        return {"title": TITLE, "settings": self.settings, "difficulty_source": self.difficulty_source,
                "notes": self.notes, "single_strategy": self.single_strategy,
                "rows": [asdict(r) for r in self.rows]}

    def write_json(self, path: str | Path) -> Path:
        """Write :meth:`to_json` to ``path``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2), encoding="utf-8")
        return path

    def summary_lines(self) -> list[str]:
        """One line per model for the terminal."""
        alone: dict[str, list[str]] = {}
        for model, strategy in self.single_strategy.items():
            alone.setdefault(strategy, []).append(model)
        lines = [f"compute-optimal: one strategy ({s}) for {len(ms)} model{'s' if len(ms) > 1 else ''}, nothing to "
                 "choose between" for s, ms in alone.items()]
        by_model: dict[str, list[BudgetRow]] = {}
        for r in self.rows:
            by_model.setdefault(r.model, []).append(r)
        for model, rows in by_model.items():
            parts = [f"{_budget(r)} {r.compute_optimal:.3f} vs {r.single:.3f} "
                     f"({r.gain:+.3f} [{r.gain_low:+.3f}, {r.gain_high:+.3f}])" for r in rows]
            lines.append(f"compute-optimal {model} (per-bin vs best single, cross-fitted): " + "; ".join(parts))
        if not lines:
            lines.append("compute-optimal: " + (self.notes[-1] if self.notes else "no rows"))
        return lines

    def section(self) -> Any:
        """The report's section (:class:`tts.eval.plots.Section`)."""
        from tts.eval.plots import Section

        alone: dict[str, list[str]] = {}
        for model, strategy in self.single_strategy.items():
            alone.setdefault(strategy, []).append(model)
        lines = [f"{', '.join(models)}: the sweep has one strategy ({strategy}) at every budget, so there is nothing "
                 "to choose between; sweep several strategies to see a compute-optimal gain."
                 for strategy, models in alone.items()]
        notes = [*lines, *self.notes] if not self.rows else [*self.notes, *lines]
        summary = [{
            "model": r.model, "budget": _budget(r), "configs": str(len(r.candidates)),
            "compute-optimal (cross-fitted)": f"{r.compute_optimal:.3f}",
            "best single (cross-fitted)": f"{r.single:.3f} ({r.single_choice})",
            "gain [95% CI]": f"{r.gain:+.3f} [{r.gain_low:+.3f}, {r.gain_high:+.3f}]",
            "best single in hindsight (oracle)": f"{r.oracle_single:.3f} ({r.oracle_single_choice})",
            "per bin in hindsight (oracle)": f"{r.oracle_per_bin:.3f}",
        } for r in self.rows]
        per_bin = [{
            "model": r.model, "budget": _budget(r), "bin": str(b.bin + 1),
            "agreement": f"{b.low:.2f}" if b.low == b.high else f"{b.low:.2f}–{b.high:.2f}", "problems": str(b.problems),
            "cross-fitted choice (problems)": f"{b.choice} ({b.given}/{b.problems})",
            "accuracy": f"{b.accuracy:.3f}", "best single there": f"{b.single_accuracy:.3f}",
            "best there in hindsight (oracle)": b.hindsight_choice,
        } for r in self.rows for b in r.bins]
        tables = [("Per budget", summary), ("Choice per bin (1 = easiest)", per_bin)] if self.rows else []
        return Section(TITLE, notes, tables)


def _budget(row: BudgetRow) -> str:
    return f"n={row.budget:g}" if row.axis == "n" else f"{row.axis} ≤ {row.budget:.4g}"
