"""Draw docs/figures/chains_n16_by_k.png from the per-k table in docs/chains.md.

The chains study's own figure (``tts plot --by k`` over every run) put 16 configs in one panel per
k, their intervals on top of each other. This one draws what the text claims: at n = 16, each rule
against the checked weighted vote (the dashed line, its 95% interval shaded), with and without
noise in the checker, one row per rule and one panel per chain length k.

It reads the numbers from the table in docs/chains.md (the study's run folders are not kept), so
the figure and the table cannot disagree: every interval is recomputed from the accuracy at 50
problems with ``tts.eval.report.wilson_interval`` and checked against the table's printed one.

    python scripts/chains_figure.py [--doc docs/chains.md] [--out docs/figures/chains_n16_by_k.png]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from tts.eval.report import wilson_interval

PROBLEMS_PER_K = 50
KS = (1, 2, 4, 6)
# (table name, label): whole-sample rules first, then the step-wise searches; all at n = 16.
RULES = (
    ("SC@16", "self-consistency (no verifier)"),
    ("WV@16 chain", "weighted vote"),
    ("BoN@16 chain", "best-of-N"),
    ("beam@16 chain", "beam"),
    ("REBASE@16 chain", "REBASE"),
    ("DVTS@16 chain", "DVTS"),
    ("PF@16 chain", "particle filtering"),
    ("lookahead@16 chain", "lookahead"),
)
REFERENCE = "WV@16 chain"
_CELL = re.compile(r"^\s*([0-9.]+) \[([0-9.]+)-([0-9.]+)\]\s*$")


def read_table(doc: Path) -> dict[str, list[float]]:
    """Accuracy per k for every row of the first per-k table (name -> [k=1, k=2, k=4, k=6])."""
    rows: dict[str, list[float]] = {}
    in_table = False
    for line in doc.read_text().splitlines():
        if line.startswith("| config | k = 1 | k = 2 | k = 4 | k = 6 |"):
            if rows:
                break  # the first table only (the n = 64 subset has 25 problems per k)
            in_table = True
            continue
        if not in_table:
            continue
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0].startswith("---"):
            continue
        accuracies = []
        for cell in cells[1:5]:
            match = _CELL.match(cell.replace("**", ""))
            if match is None:
                raise SystemExit(f"{doc}: cannot read the cell {cell!r} of the row {cells[0]!r}")
            accuracy, low, high = (float(g) for g in match.groups())
            check_low, check_high = wilson_interval(round(accuracy * PROBLEMS_PER_K), PROBLEMS_PER_K)
            if abs(check_low - low) > 0.006 or abs(check_high - high) > 0.006:
                raise SystemExit(
                    f"{doc}: {cells[0]!r} prints [{low}-{high}] for {accuracy}, but {PROBLEMS_PER_K} "
                    f"problems give [{check_low:.2f}-{check_high:.2f}]"
                )
            accuracies.append(accuracy)
        rows[cells[0]] = accuracies
    missing = [name for name, _ in RULES if name not in rows]
    if missing:
        raise SystemExit(f"{doc}: the per-k table has no row {missing}")
    return rows


def draw(rows: dict[str, list[float]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(KS), figsize=(13, 4.6), sharey=True)
    ys = list(range(len(RULES)))[::-1]
    for panel, (ax, k) in enumerate(zip(axes, KS)):
        ref = rows[REFERENCE][panel]
        ref_low, ref_high = wilson_interval(round(ref * PROBLEMS_PER_K), PROBLEMS_PER_K)
        ax.axvspan(ref_low, ref_high, color="0.9", zorder=0)
        ax.axvline(ref, color="0.4", linestyle="--", linewidth=1, zorder=1)
        for y, (name, _) in zip(ys, RULES):
            for noisy, offset, style in ((False, 0.15, "o"), (True, -0.15, "s")):
                key = f"{name} p.3" if noisy else name
                if key not in rows:
                    continue  # self-consistency has no verifier, so no noisy variant
                accuracy = rows[key][panel]
                low, high = wilson_interval(round(accuracy * PROBLEMS_PER_K), PROBLEMS_PER_K)
                color = "tab:orange" if noisy else "tab:blue"
                ax.errorbar(
                    accuracy, y + offset, xerr=[[accuracy - low], [high - accuracy]], fmt=style,
                    color=color, markerfacecolor="white" if noisy else color, capsize=2, markersize=5,
                    zorder=2,
                )
        ax.axhline(len(RULES) - 3.5, color="0.7", linewidth=0.8)  # sampling above, searches below
        ax.set_title(f"k = {k}  ({PROBLEMS_PER_K} problems)")
        ax.set_xlim(-0.02, 1.0)
        ax.set_xlabel("accuracy (95% CI)")
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(ys, [label for _, label in RULES])
    handles = [
        plt.Line2D([], [], marker="o", color="tab:blue", linestyle="", label="chain checker, exact"),
        plt.Line2D([], [], marker="s", color="tab:orange", markerfacecolor="white", linestyle="",
                   label="chain checker, noise 0.3"),
        plt.Line2D([], [], color="0.4", linestyle="--", label="weighted vote, exact (shaded: its 95% CI)"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False)
    fig.suptitle(
        "chains, SmolLM2-135M, n = 16 samples or beams: whole-sample rules (top) and step-wise "
        "searches (bottom) by chain length k"
    )
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=140)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", type=Path, default=Path("docs/chains.md"))
    parser.add_argument("--out", type=Path, default=Path("docs/figures/chains_n16_by_k.png"))
    args = parser.parse_args()
    draw(read_table(args.doc), args.out)


if __name__ == "__main__":
    main()
