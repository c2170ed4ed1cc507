"""Kinetics' "model size first" on the shipped pools: the cross-model frontier in FLOPs and eFLOPs.

Kinetics (Sadhukhan et al. 2025) finds that once memory traffic is priced (eFLOPs), the
compute-optimal choice moves to larger models with fewer samples. This replays the MATH-500 and
GPQA-Diamond sample pools with ``tts sweep``'s pool replay (self-consistency at n = 1..64, every
pool model priced on its architecture), takes the Pareto frontier across models and n
(``tts.eval.sweep.pareto_front``) once on FLOPs and once on eFLOPs, and reports where the optimal
(model, n) differs: for each FLOPs-optimal point, the eFLOPs-optimal point reaching at least its
accuracy and the eFLOPs ratio between them (what choosing by FLOPs overpays in eFLOPs).

Three pricing regimes: ``engine`` (a serving engine keeping 256 sequences in flight, so a weight
read is shared by 256 tokens), ``alone`` (a problem's n samples decode alone, sharing only their
own steps' weight reads) and ``weights-free`` (Kinetics' own assumption: weight reads cost nothing,
only FLOPs and KV traffic count; no figure).

Usage:
    python scripts/kinetics_model_size_first.py [--pools ../shared/data/pools] [--out runs/kinetics]
        [--figures docs/figures] [--gpu h100] [--json runs/kinetics/summary.json]

Last, the engine regime is priced again as if the engine ran block top-k sparse attention
(``--sparse``, as ``tts sweep --sparse``), and the dense and sparse eFLOPs frontiers are compared
the same way.

Writes the sweeps under --out, one figure per pool and regime under --figures
(``kinetics_<pool>_<regime>.png``) and prints the tables quoted in docs/budgets.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

POOLS = {"math500": "math500_reasoning_models.jsonl.gz", "gpqa": "gpqa_diamond_reasoning_models.jsonl.gz"}
TITLES = {"math500": "MATH-500", "gpqa": "GPQA-Diamond"}
REGIMES = {"engine": 256, "alone": None, "weights-free": 10**9}
"""Sequences in flight sharing a weight read: a busy engine; a problem alone; Kinetics' own
assumption that weight reads cost nothing (a billion sequences share each read)."""
FIGURES = ("engine", "alone")
NS = [1, 2, 4, 8, 16, 32, 64]


def sweep(pool: Path, out: Path, gpu: str, concurrency: int | None, sparse: str | None = None) -> list[Any]:
    """Self-consistency at every n over every pool model, priced on ``gpu`` (resumes if present)."""
    from tts.eval.sweep import SweepSpec, curve_points, run_sweep

    spec = SweepSpec(pool=str(pool), strategies=["self_consistency"], n=NS, gpu=gpu, concurrency=concurrency,
                     sparse=sparse)
    result = run_sweep(spec, out)
    if result.unpriced:
        raise SystemExit(f"unpriced pool models: {result.unpriced}")
    return curve_points(result.cells)


def choices(points: list[Any], by: str, priced: list[Any], axis: str) -> list[dict[str, Any]]:
    """At every accuracy level of either frontier, the cheapest (model, n) reaching it when costs
    are ``by`` (on ``points``) and when they are ``axis`` (on ``priced``: the same cells, perhaps
    priced another way), and how many times the ``axis`` cost of the first choice exceeds that of
    the second (what choosing by ``by`` overpays when ``axis`` is the real cost)."""
    from tts.eval.sweep import pareto_front

    other = {(p.model, p.n): p for p in priced}
    levels = sorted({p.accuracy for p in pareto_front(points, by)} | {p.accuracy for p in pareto_front(priced, axis)})
    rows = []
    for level in levels:
        f = min((p for p in points if p.accuracy >= level - 1e-12), key=lambda p: (p.costs[by], -p.accuracy))
        e = min((p for p in priced if p.accuracy >= level - 1e-12), key=lambda p: (p.costs[axis], -p.accuracy))
        rows.append({
            "accuracy": level,
            "by_a": f"{f.model}@{f.n}", "by_a_accuracy": f.accuracy,
            "by_b": f"{e.model}@{e.n}", "by_b_accuracy": e.accuracy,
            "ratio": other[(f.model, f.n)].costs[axis] / e.costs[axis],
            "same": (f.model, f.n) == (e.model, e.n),
        })
    return rows


def table(title: str, rows: list[dict[str, Any]], a: str, b: str) -> None:
    """Print one markdown table of :func:`choices`."""
    print(f"\n## {title}")
    print(f"| accuracy >= | optimal by {a} (its accuracy) | optimal by {b} (its accuracy) | "
          f"{b} of the first / of the second |")
    print("|---|---|---|---|")
    for r in rows:
        e = "same" if r["same"] else f"{r['by_b']} ({r['by_b_accuracy']:.3f})"
        print(f"| {r['accuracy']:.3f} | {r['by_a']} ({r['by_a_accuracy']:.3f}) | {e} | {r['ratio']:.2f} |")


def model_table(points: list[Any]) -> None:
    """Per model: what makes its eFLOPs-to-FLOPs ratio (the same at every n here)."""
    from tts.cost.architecture import load_architecture

    print("| model | FLOP params | KV bytes per token | recurrent state per sequence | tokens per sample | "
          "eFLOPs / FLOPs |")
    print("|---|---|---|---|---|---|")
    for m in sorted({p.model for p in points}):
        a = load_architecture(m)
        one = min((p for p in points if p.model == m), key=lambda p: p.n)
        print(f"| {m} | {a.flop_params / 1e9:.2f}B | {a.kv_bytes_per_token / 1e3:.0f} kB | "
              f"{a.state_bytes_per_sequence / 1e6:.0f} MB | {one.costs['tokens'] / one.n:,.0f} | "
              f"{one.costs['eflops'] / one.costs['flops']:.1f} |")


def short(model: str) -> str:
    return (model.replace("-Thinking-2507", "-Thinking").replace("NVIDIA-", "").replace("-reasoning", "-R"))


def figure(points: list[Any], title: str, path: Path) -> None:
    """Two panels, accuracy against FLOPs and against eFLOPs: one line per model over n, the
    cross-model frontier dashed, frontier points labelled with n."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tts.eval.sweep import pareto_front

    models = sorted({p.model for p in points})
    colors = dict(zip(models, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    markers = dict(zip(models, "osD^vP*X", strict=False))
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.6), dpi=130, sharey=True)
    for ax, axis, label in ((axes[0], "flops", "FLOPs per problem"),
                            (axes[1], "eflops", "eFLOPs per problem (FLOPs + I x bytes)")):
        for m in models:
            curve = sorted((p for p in points if p.model == m), key=lambda p: p.n)
            ax.plot([p.costs[axis] for p in curve], [p.accuracy for p in curve], marker=markers[m],
                    color=colors[m], lw=1.4, ms=4.5, label=short(m))
        front = pareto_front(points, axis)
        ax.step([p.costs[axis] for p in front], [p.accuracy for p in front], where="post", color="black",
                lw=1.0, ls="--", label="frontier (all models, n)", zorder=5)
        for p in front:
            ax.annotate(f"{p.n}", (p.costs[axis], p.accuracy), textcoords="offset points", xytext=(-4, 5),
                        fontsize=8, color=colors[p.model], fontweight="bold")
        ax.set_xscale("log")
        ax.set_xlabel(label + " (log scale)", fontsize=10)
        ax.grid(True, which="both", alpha=0.25)
        ax.set_title(f"priced in {'FLOPs' if axis == 'flops' else 'eFLOPs'}", fontsize=10)
    axes[0].set_ylabel("self-consistency accuracy", fontsize=10)
    low = min(p.accuracy for p in points)
    top = max(p.accuracy for p in points)
    axes[0].set_ylim(max(low, top - 0.25) - 0.01, top + 0.01)
    axes[1].legend(fontsize=8, loc="lower right", framealpha=0.92)
    fig.suptitle(title + "  (numbers on the frontier: n samples)", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=Path, default=Path("../shared/data/pools"))
    parser.add_argument("--out", type=Path, default=Path("runs/kinetics"))
    parser.add_argument("--figures", type=Path, default=Path("docs/figures"))
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--sparse", default="block:64,size=16,local=128",
                        help="The sparse-attention what-if priced on the engine regime (tts cost --sparse).")
    parser.add_argument("--json", type=Path, default=None, help="Also write the tables as JSON here.")
    args = parser.parse_args()

    from tts.cost.architecture import load_architecture

    summary: dict[str, Any] = {}
    for key, name in POOLS.items():
        dense_engine: list[Any] = []
        for regime, concurrency in REGIMES.items():
            points = sweep(args.pools / name, args.out / f"{key}-{regime}", args.gpu, concurrency)
            where = f"{args.gpu}, " + {"engine": "256 sequences in flight", "alone": "each problem alone",
                                       "weights-free": "weight reads free"}[regime]
            if regime in FIGURES:
                figure(points, f"{TITLES[key]} pool, self-consistency n = 1..64 ({where})",
                       args.figures / f"kinetics_{key}_{regime}.png")
            if regime == "engine":
                dense_engine = points
                print(f"\n## {TITLES[key]}, {regime} ({where}): per model")
                model_table(points)
            no_moe = [p for p in points if not load_architecture(p.model).is_moe]
            for subset, chosen in (("all models", points), ("no MoE models", no_moe)):
                rows = choices(chosen, "flops", chosen, "eflops")
                summary[f"{key}/{regime}/{subset}"] = rows
                table(f"{TITLES[key]}, {regime} ({where}), {subset}", rows, "FLOPs", "eFLOPs")
        # The sparse what-if: the same cells priced as if the engine ran block top-k attention.
        sparse = sweep(args.pools / name, args.out / f"{key}-engine-sparse", args.gpu, REGIMES["engine"],
                       args.sparse)
        rows = choices(dense_engine, "eflops", sparse, "eflops")
        summary[f"{key}/engine/sparse {args.sparse}"] = rows
        table(f"{TITLES[key]}, engine: dense attention vs sparse {args.sparse}", rows, "dense eFLOPs",
              "sparse eFLOPs")
        print("| model | sparse eFLOPs / dense eFLOPs |\n|---|---|")
        for p in sorted(sparse, key=lambda p: p.model):
            if p.n == 1:
                d = next(q for q in dense_engine if (q.model, q.n) == (p.model, 1))
                print(f"| {p.model} | {p.costs['eflops'] / d.costs['eflops']:.2f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
