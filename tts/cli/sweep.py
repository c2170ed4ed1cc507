"""``tts sweep`` (a grid of strategies x n x models, from a sample pool or live) and ``tts plot`` (its figures).

Examples:
    tts sweep --pool ../shared/data/pools/math500_reasoning_models.jsonl.gz -s self_consistency --n 1,4,16,80 --out runs/sw
    tts sweep --benchmark demo --limit 20 -s self_consistency -s best_of_n --n 1,4,16 --out runs/live
    tts sweep --benchmark math500 -m MODEL_A -m MODEL_B --seeds 3 --n 1,4,16 --ray auto --out /shared/runs/sw
    tts plot runs/sw
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tts.cli.errors import fail, user_errors
from tts.cli.stopped import RunProgress, said_on_stop


def _numbers(values: list[str] | None, flag: str = "--n") -> list[int] | None:
    """``--n 1,4,16`` and ``--n 1 --n 4`` alike."""
    if not values:
        return None
    out = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                out.append(int(part))
            except ValueError:
                raise fail(f"{flag} {value!r}: write whole numbers separated by commas, e.g. {flag} 1,4,16,64") from None
    return out


def _pairs(items: list[str] | None, flag: str, example: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise fail(f"{flag} {item!r}: write NAME=VALUE, e.g. {flag} {example}")
        out[key.strip()] = value.strip()
    return out


def _spec(opts: dict[str, Any], config: Path | None) -> Any:
    import yaml

    from tts.eval.sweep import SweepSpec

    base: dict[str, Any] = {}
    if config is not None:
        if not config.is_file():
            raise fail(f"sweep file {config} does not exist")
        try:
            base = yaml.safe_load(config.read_text()) or {}
        except yaml.YAMLError as exc:
            raise fail(f"sweep file {config} is not valid YAML ({str(exc).splitlines()[0]})") from None
        if not isinstance(base, dict):
            raise fail(f"sweep file {config} must be a mapping of settings (strategies:, n:, pool:, ...)")
    spec: dict[str, Any] = dict(base)
    if opts["strategy"]:
        knobs = {s["kind"]: s for s in (SweepSpec._names_to_mappings(base.get("strategies")) or [])
                 if isinstance(s, dict) and "kind" in s}
        spec["strategies"] = [knobs.get(name, {"kind": name}) for name in opts["strategy"]]
    for key in ("n", "models", "pool", "seeds", "draws", "gpu", "prompt_tokens", "lengths", "sparse",
                "concurrency"):
        if opts.get(key) not in (None, [], ""):
            spec[key] = opts[key]
    if opts["prices"] is not None or opts["price"]:
        from tts.cost.prices import load_prices, parse_prices

        prices = dict(base.get("prices") or {})
        if opts["prices"] is not None:
            prices.update(load_prices(opts["prices"]))
        prices.update(parse_prices(opts["price"] or []))
        spec["prices"] = prices
    if opts["arch"]:
        spec["arch"] = {**(base.get("arch") or {}), **_pairs(opts["arch"], "--arch", "EXAONE-Deep-32B=qwen2.5-32b")}
    live = dict(base.get("eval") or {})
    if opts["benchmark"] or opts["limit"]:
        data = dict(live.get("data") or {})
        if opts["benchmark"]:
            data["benchmark"] = opts["benchmark"]
        if opts["limit"]:
            data["limit"] = opts["limit"]
        live["data"] = data
    if opts["backend"]:
        live["backend"] = {**(live.get("backend") or {}), "kind": opts["backend"]}
    if opts["max_tokens"]:
        live["sampling"] = {**(live.get("sampling") or {}), "max_tokens": opts["max_tokens"]}
    if live:
        if spec.get("pool"):
            raise fail("--benchmark, --limit, --backend and --max-tokens are live settings; a --pool sweep "
                       "replays the pool's samples. Drop them or drop --pool.")
        spec["eval"] = live
    try:
        return SweepSpec.model_validate(spec)
    except ValueError as exc:
        from tts.cli.errors import format_error

        raise fail(format_error(exc)) from None


def sweep_command(
    pool: str | None = typer.Option(None, "--pool", help="A sample-pool file or a past `tts eval` run dir; without it the grid runs live."),
    strategy: list[str] | None = typer.Option(None, "--strategy", "-s", help="Repeatable; a registered strategy."),
    n: list[str] | None = typer.Option(None, "--n", "-n", help="Sample counts: --n 1,4,16,80 (or repeat the flag)."),
    model: list[str] | None = typer.Option(None, "--model", "-m", help="Repeatable. Pool: its models to sweep (default all). Live: models to run."),
    seeds: int | None = typer.Option(None, "--seeds", min=1, help="Repeat every cell with seeds 0..K-1 and report the spread."),
    draws: int | None = typer.Option(None, "--draws", min=10, help="Bootstrap draws of pool estimates without an exact form (default 1000)."),
    gpu: str | None = typer.Option(None, "--gpu", help="GPU kind every cell is priced on (default h100)."),
    price: list[str] | None = typer.Option(None, "--price", help="Repeatable KIND=USD_PER_HOUR over the built-in price table."),
    prices: Path | None = typer.Option(None, "--prices", help="YAML/JSON file of KIND: USD_PER_HOUR."),
    arch: list[str] | None = typer.Option(None, "--arch", help="Repeatable POOL_MODEL=ARCH to price a pool model (e.g. gpt-oss-20b=path/config.json)."),
    prompt_tokens: int | None = typer.Option(None, "--prompt-tokens", min=0, help="Pool: prompt tokens priced per problem (default 0)."),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1, help="Pool: price each decode step as one of a serving engine's CONCURRENCY sequences, sharing its weight read (default: a problem's samples run alone)."),
    sparse: str | None = typer.Option(None, "--sparse", help="Price the cells as if the engine ran sparse attention (Kinetics): topk:K[,local=W] or block:K,size=S[,local=W]; accuracy stays the dense one."),
    lengths: list[str] | None = typer.Option(None, "--lengths", help="Pool: length budgets, e.g. --lengths 2000,4000,8000: every cell replayed as if each generation had been capped there (a longer one is cut off before its answer)."),
    benchmark: str | None = typer.Option(None, "--benchmark", "-b", help="Live: benchmark (default demo)."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Live: first K problems."),
    backend: str | None = typer.Option(None, "--backend", help="Live: vllm (default), openai or scripted."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", min=1, help="Live: max generated tokens per sample."),
    out: Path = typer.Option(..., "--out", "-o", help="Sweep directory; re-run to resume (done cells are kept)."),
    config: Path | None = typer.Option(None, "--config", "-c", help="YAML sweep file with the same keys (flags override it)."),
    ray: str | None = typer.Option(None, "--ray", help="Run on Ray: `local` starts Ray on this machine; `auto` or HOST:PORT joins a running cluster, whose nodes must all see --out, the pool or data and tts at the same paths (a shared filesystem)."),
    workers: int | None = typer.Option(None, "--workers", min=1, help="With --ray: worker actors, each holding one engine (default: one per GPU; vLLM without GPUs: one per node; else one per CPU)."),
) -> None:
    """Sweep strategies x n x models; every cell gets accuracy [95% CI], pass@n, tokens, FLOPs, seconds and dollars."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from tts.eval.sweep import SweepError, cells_saved, run_sweep

    opts = dict(pool=pool, strategy=strategy, n=_numbers(n), models=model, seeds=seeds, draws=draws, gpu=gpu,
                price=price, prices=prices, arch=arch, prompt_tokens=prompt_tokens, lengths=_numbers(lengths, "--lengths"),
                sparse=sparse, concurrency=concurrency,
                benchmark=benchmark, limit=limit,
                backend=backend, max_tokens=max_tokens)
    if workers is not None and ray is None:
        raise fail("--workers sets how many Ray workers run the sweep; add --ray local (this machine) or --ray auto")
    told = RunProgress(out=out, unit="cells")
    with user_errors(), said_on_stop(told):
        spec = _spec(opts, config)
        told.saved = lambda: cells_saved(spec, out)
        try:
            with Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("cells"),
                          TimeElapsedColumn(), transient=True) as bar:
                task = bar.add_task("cells", total=None)

                def shown(done: int, total: int) -> None:
                    told(done, total)
                    bar.update(task, completed=done, total=total)

                if ray is None:
                    result = run_sweep(spec, out, progress=shown)
                else:
                    from tts.eval.distributed import run_sweep_ray

                    result = run_sweep_ray(spec, out, address=ray, num_workers=workers, progress=shown)
        except SweepError as exc:
            raise fail(str(exc)) from None
    _print_cells(result, Console())


def _compact(x: float) -> str:
    """5349 -> 5.3k, 427954 -> 428k, 1.2e6 -> 1.2M."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            v = x / div
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return f"{x:.0f}"


def _print_cells(result: Any, console: Any) -> None:
    from rich import box
    from rich.table import Table

    from tts.eval.sweep import curve_points

    points = curve_points(result.cells)
    seeds = any(p.seed_sd is not None for p in points)
    table = Table(title=f"{len(result.cells)} cells -> {result.out}", title_style="bold", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    capped = any(p.max_tokens is not None for p in points)
    table.add_column("model", max_width=10 if capped else 16, overflow="ellipsis", no_wrap=True)
    table.add_column("strategy", min_width=16, overflow="fold")
    for col in (*(["cap"] if capped else []), "n", "acc", "95% CI", *(["seed sd"] if seeds else []), "tok/pb", "$/pb"):
        table.add_column(col, justify="right", no_wrap=True)
    for p in points:
        tokens, usd = p.costs.get("tokens"), p.costs.get("dollars")
        cap = [] if not capped else ["–" if p.max_tokens is None else _compact(p.max_tokens)]
        strategy = p.line.removesuffix(f",max_tokens={p.max_tokens}")
        table.add_row(p.model, strategy, *cap, str(p.n), f"{p.accuracy:.3f}", f"{p.low:.2f}-{p.high:.2f}",
                      *([f"{p.seed_sd:.3f}" if p.seed_sd is not None else ""] if seeds else []),
                      "–" if tokens is None else _compact(tokens), "–" if usd is None else f"{usd:.2g}")
    console.print(table)
    gpu = result.cells[0].gpu if result.cells else ""
    console.print(f"/pb: per problem; $: predicted {gpu} seconds x its price. {result.computed} "
                  f"{'cell' if result.computed == 1 else 'cells'} computed, {result.resumed} resumed.")
    if result.unpriced:
        console.print(f"no FLOPs/seconds/$ for {', '.join(result.unpriced)}: unknown architecture (give --arch "
                      "NAME=ARCH) or no token counts in the pool.")
    console.print(f"plots and an HTML report: tts plot {result.out}")


def _plot_by(runs: list[Path], by: str, out: Path | None, title: str | None, only: list[str] | None = None) -> None:
    """``tts plot RUN... --by FIELD``: the runs' results broken down by a problem metadata field.

    A config that appears in several runs (two draws of self_consistency@16) is kept apart, its
    label suffixed with the run's name; ``only`` keeps the configs whose label contains one of its
    strings."""
    from collections import Counter

    from rich.console import Console

    from tts.eval.breakdown import BreakdownError, level_points, levels_markdown, plot_levels
    from tts.eval.rows import ResultRow

    per_run = []
    for run in runs:
        results = run / "results.jsonl"
        if not results.is_file():
            raise fail(f"{run} is not a `tts eval` run directory (no results.jsonl); --by breaks down eval runs.")
        with user_errors():
            per_run.append([ResultRow.model_validate_json(line) for line in results.read_text().splitlines()
                            if line.strip()])
    seen = Counter(label for rows_of in per_run for label in {r.config for r in rows_of})
    rows = [r.model_copy(update={"config": f"{r.config} [{run.name}]"}) if seen[r.config] > 1 else r
            for run, rows_of in zip(runs, per_run, strict=True) for r in rows_of]
    if only:
        rows = [r for r in rows if any(part in r.config for part in only)]
        if not rows:
            raise fail(f"--only {' '.join(only)}: no config label contains that; labels: "
                       f"{', '.join(sorted(seen))}")
    try:
        points = level_points(rows, by)
    except BreakdownError as exc:
        raise fail(str(exc)) from None
    target = out or runs[0] / "plots"
    title = title or f"accuracy by {by}: {', '.join(r.name for r in runs)}"
    figures = [plot_levels(points, by, target, title, axis) for axis in ("generated", "total")]
    table = target / f"by_{by}.md"
    table.write_text(levels_markdown(points, by))
    console = Console()
    console.print(f"{len(points)} (config, {by}) cells from {len(rows)} results")
    for png, svg in figures:
        console.print(f"figure: {png}  {svg.name}")
    console.print(f"table:  {table}")


def plot_command(
    runs: list[Path] = typer.Argument(..., help="A `tts sweep` directory; with --by, one or more `tts eval` run directories."),
    by: str | None = typer.Option(None, "--by", help="Break eval runs down by a problem metadata field (chains: k; MATH-500: level): one panel per value, accuracy against generated tokens."),
    only: list[str] | None = typer.Option(None, "--only", help="With --by: keep the configs whose label contains this text (repeatable), e.g. --only verifier=chain --only self_consistency."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Where figures go (default RUN/plots)."),
    gain: float = typer.Option(0.01, "--saturation-gain", min=0.0, help="Saturation: the point past which doubling the cost buys less than this accuracy."),
    title: str | None = typer.Option(None, "--title", help="Figure title (default: the sweep's source)."),
    frontier_axis: str = typer.Option("n", "--frontier-axis", help="Budget levels of the compute-optimal frontier: n (configs with the same n compete) or a cost axis (tokens, eflops, flops, gpu_seconds, dollars: configs costing at most each level compete)."),
) -> None:
    """Plot a sweep: accuracy vs tokens, eFLOPs, GPU-seconds and dollars (PNG, SVG) and one HTML report.

    With ``--by FIELD``: eval runs broken down by a difficulty field, a panel per level."""
    import json

    if by is not None:
        return _plot_by(runs, by, out, title, only)
    if only:
        raise fail("--only goes with --by (it picks the configs of a breakdown).")
    if len(runs) != 1:
        raise fail("give one sweep directory (several run directories go with --by FIELD).")
    run = runs[0]

    from rich.console import Console

    from tts.eval.frontier import compute_optimal_for_run
    from tts.eval.plots import write_figures, write_report
    from tts.eval.sweep import COST_AXES, SweepError, curve_points, read_cells

    if frontier_axis not in ("n", *COST_AXES):
        raise fail(f"--frontier-axis {frontier_axis!r}: choose n or one of {', '.join(COST_AXES)}")
    with user_errors():
        try:
            cells = read_cells(run)
        except SweepError as exc:
            raise fail(str(exc)) from None
        if not cells:
            raise fail(f"{run} holds no finished cells yet; run or resume `tts sweep --out {run}`")
        manifest = json.loads((run / "sweep.json").read_text()) if (run / "sweep.json").is_file() else {}
        source = manifest.get("source", "sweep")
        name = Path(source.removeprefix("pool:")).name if source.startswith("pool:") else source
        sparse = manifest.get("spec", {}).get("sparse")
        concurrency = manifest.get("spec", {}).get("concurrency")
        priced_on = (cells[0].gpu + (f", sparse attention {sparse}" if sparse else "")
                     + (f", {concurrency} sequences in flight" if concurrency else ""))
        title = title or f"{name}: accuracy per unit of compute ({priced_on})"
        points = curve_points(cells)
        target = out or run / "plots"
        figures = write_figures(points, target, title, gain)
        notes = [f"Source: {source}. Every accuracy carries a 95% interval over problems; costs are per problem, "
                 f"priced on {priced_on}. Rings mark saturation (doubling the cost buys < {gain:.0%})."]
        optimal = compute_optimal_for_run(run, cells, axis=frontier_axis)
        optimal.write_json(target / "compute_optimal.json")
        report = write_report(points, figures, target, title, notes, sections=[optimal.section()])
    console = Console()
    for fig in figures:
        console.print(f"{fig.axis:>12}: {fig.png}  {fig.svg.name}")
    if not figures:
        console.print("no cost axis is priced in this sweep, so there is nothing to plot against")
    for line in optimal.summary_lines():
        console.print(line, soft_wrap=True)
    console.print(f"report: {report}")
