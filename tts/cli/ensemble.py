"""`tts budget ensemble`: a weighted vote over several models' samples, weights from a MILP.

Heavy modules (numpy, scipy, the pool reader) are imported inside the command so that
`tts --help` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer


def _parse_ns(text: str) -> list[int]:
    try:
        ns = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        ns = []
    if not ns or ns[0] < 1:
        raise typer.BadParameter(f"{text!r}: give samples per model as a comma list of integers >= 1, e.g. 1,4,16,64",
                                 param_hint="--n")
    return ns


def ensemble_command(
    pool: Path = typer.Option(..., "--pool", help="Sample pool (.jsonl or .jsonl.gz) with two or more models.",
                              exists=True),
    models: str | None = typer.Option(None, "--models", help="Comma list of models (default: every model)."),
    n: str = typer.Option("1,4,16,64", "--n", help="Samples per model to evaluate, comma list."),
    folds: int = typer.Option(5, "--folds", min=2, help="Cross-fitting folds: weights come from the other folds."),
    orderings: int = typer.Option(20, "--orderings", min=1, help="Random sample orderings per evaluation."),
    seed: int = typer.Option(0, "--seed", help="Seed for folds, orderings and bootstrap."),
    margin: float = typer.Option(1e-3, "--margin", min=0.0, help="MILP: least winning margin of the right answer."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Vote over several models' samples with per-model weights from a mixed-integer program.

    The weights (Best-of-Infinity, Komiyama et al. 2025) maximise the dev problems a weighted
    vote solves; every fold of problems gets weights fitted on the other folds, and only then is
    graded. The table compares the ensemble with each single model at the same samples per model,
    with paired 95% bootstrap intervals over problems.
    """
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from tts.benchmarks.pool import PoolError, load_pool
    from tts.budgets.ensemble import EnsembleError, align, cross_fit, evaluate

    err = Console(stderr=True)
    ns = _parse_ns(n)
    try:
        sample_pool = load_pool(pool)
        names = [m.strip() for m in models.split(",")] if models else list(sample_pool.models)
        missing = [m for m in names if m not in sample_pool.by_model]
        if missing:
            raise EnsembleError(f"model(s) {', '.join(missing)} not in {pool}; choose from {list(sample_pool.models)}")
        data = align([sample_pool[m] for m in names])
        weights, _ = cross_fit(data, folds=folds, seed=seed, margin=margin)
        result = evaluate(data, weights, ns, orderings=orderings, seed=seed)
    except (PoolError, EnsembleError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps({"pool": str(pool), "n_problems": len(data.problem_ids), "folds": folds,
                               "orderings": orderings, **result.to_json()}))
        return
    console = Console()
    w = result.weights.mean(axis=0)
    console.print(f"{len(data.problem_ids)} problems, {len(names)} models; mean cross-fitted weights: "
                  + ", ".join(f"{m} {x:.2f}" for m, x in zip(names, w)))
    for k in ns:
        table = Table(title=f"{k} sample(s) per model: held-out accuracy, ensemble minus model (95% paired "
                            "bootstrap over problems)", box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("system", no_wrap=True)
        table.add_column("accuracy", justify="right")
        table.add_column("ensemble - it", justify="right")
        table.add_column("tokens/problem", justify="right")
        for s, (mean, lo, hi) in result.acc[k].items():
            g = result.gap[k].get(s)
            table.add_row(s, f"{mean:.4f} [{lo:.4f}, {hi:.4f}]",
                          "" if g is None else f"{g[0]:+.4f} [{g[1]:+.4f}, {g[2]:+.4f}]",
                          f"{result.tokens[k][s]:,.0f}")
        console.print(table)
        beaten = [s for s, g in result.gap[k].items() if g[1] > 0]
        best = max((s for s in result.acc[k] if s != "ensemble"), key=lambda s: result.acc[k][s][0])
        console.print(f"beats {len(beaten)} of {len(names)} models with intervals above 0; best single model: "
                      f"{best} ({result.acc[k][best][0]:.4f})")
    console.print("Weights are fitted on the other folds' grades only; a problem's own `correct` only grades it.")
