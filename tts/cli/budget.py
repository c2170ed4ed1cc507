"""`tts budget ...`: replay the compute allocator on a sample pool.

Heavy modules (numpy, scipy, the pool reader) are imported inside the commands so that
`tts --help` stays fast.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer

app = typer.Typer(help="Compute budgets: allocate samples across problems and replay the savings.",
                  no_args_is_help=True)


class ModeChoice(str, Enum):
    offline = "offline"
    online = "online"
    both = "both"


@app.callback()
def _group() -> None:
    """Compute budgets: allocate samples across problems and replay the savings."""


def _parse_target(target: str) -> int:
    strategy, _, n = target.partition("@")
    if strategy != "self_consistency" or not n.isdigit() or int(n) < 1:
        raise typer.BadParameter(
            f"{target!r}: write the uniform baseline as self_consistency@N with N >= 1, "
            "e.g. self_consistency@64", param_hint="--target")
    return int(n)


def _fmt_iv(iv, fmt: str) -> str:
    if iv is None:
        return "not reached"
    return f"{format(iv.mean, fmt)} [{format(iv.lo, fmt)}-{format(iv.hi, fmt)}]"


def _tokens_iv(iv) -> str:
    """42776507 [42512137, 42962753] -> 42.8M [42.5-43.0]: fits an 80-column table."""
    if iv is None:
        return "not reached"
    top = max(abs(iv.mean), abs(iv.hi))
    div, unit = next(((d, u) for d, u in ((1e9, "G"), (1e6, "M"), (1e3, "k")) if top >= d), (1.0, ""))
    return f"{iv.mean / div:.1f}{unit} [{iv.lo / div:.1f}-{iv.hi / div:.1f}]"


@app.command()
def simulate(
    pool: Path = typer.Option(..., "--pool", help="Sample pool (.jsonl or .jsonl.gz), or a `tts eval` run "
                              "directory / its results.jsonl.", exists=True),
    model: str | None = typer.Option(None, "--model", help="Model in the pool (default: the first; 'all': "
                                     "every model, one table each, worst online ratio first)."),
    target: str = typer.Option("self_consistency@64", "--target",
                               help="Uniform baseline, run on every problem."),
    orderings: int = typer.Option(20, "--orderings", min=2, help="Random sample orderings to replay."),
    seed: int = typer.Option(0, "--seed", help="Seed for orderings, folds and bootstrap."),
    mode: ModeChoice = typer.Option(ModeChoice.both, "--mode", help="Allocator mode(s) to replay."),
    pilot: int = typer.Option(4, "--pilot", min=1, help="Offline: pilot samples per problem."),
    folds: int = typer.Option(5, "--folds", min=2, help="Cross-fitting folds for curves and bins."),
    confidence: float | None = typer.Option(None, "--confidence",
                                            help="Online: the stopping confidence (default 0.95; same as "
                                                 "--set allocation.confidence=...)."),
    rule: str | None = typer.Option(None, "--rule",
                                    help="Online stopping rule: horizon (default: the leader holds up to --n-max "
                                         "samples with probability --confidence), beta or dirichlet (Aggarwal et "
                                         "al.'s Beta and Dirichlet criteria), window (ESC: the last `window` answers "
                                         "agree) or exact (stop only when the leader cannot be overtaken); same as "
                                         "--set allocation.rule=..."),
    settings: list[str] | None = typer.Option(None, "--set",
                                              help="Repeatable allocation.KEY=VALUE: a setting of the online rule, "
                                                   "spelled as on tts eval --allocate: rule, confidence, escalate, "
                                                   "prior, window, length_weight, confirm_window, give_up_after, "
                                                   "give_up_share, ladder (0.97/0.99), top_k; e.g. --set "
                                                   "allocation.rule=dirichlet --set allocation.confirm_window=4."),
    n_max: int | None = typer.Option(None, "--n-max", min=1,
                                     help="Most samples per problem (default: offline, the pool's; online, the "
                                          "target's n, as tts eval --allocate --n-max defaults to 64)."),
    chunk: int = typer.Option(4, "--chunk", min=1, help="Online: samples per problem per round (as tts eval --chunk)."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", min=1,
                                          help="Online: the run's generation limit, which bounds a sample's "
                                               "worst-case cost (default: the pool's longest sample)."),
    tolerance: float = typer.Option(0.0, "--tolerance", min=0.0,
                                    help="Match uniform accuracy up to this many accuracy points."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    strategies: str | None = typer.Option(None, "--strategies",
                                          help="Also replay allocation across selection rules, comma-separated: vote "
                                               "(= self_consistency), best_of_n and weighted_vote (need pool scores), "
                                               "shortest (needs token counts); JSON key 'strategies'."),
    budget_unit: str = typer.Option("tokens", "--budget-unit",
                                    help="--strategies: cost unit, tokens, eflops, gpu_seconds, dollars (priced on --gpu "
                                         "with the pool model's architecture) or samples (pools without token counts)."),
    gpu: str = typer.Option("h100", "--gpu", help="--strategies: GPU that prices eflops / gpu_seconds / dollars."),
) -> None:
    """Replay uniform self-consistency and the allocator on a sample pool, at matched accuracy.

    Every allocator decision uses only run-time information (answers, token counts, scores) and
    curves fitted on other problems (cross-fitting); `correct` only grades the outcome. The online
    mode replays the rule `tts eval --allocate` runs, with the same --chunk.
    """
    from rich.console import Console

    from tts.benchmarks.pool import PoolError
    from tts.budgets.replay.simulate import SimulateConfig

    err = Console(stderr=True)
    online = _online_settings(settings or [], rule, confidence, chunk, n_max or 64)
    target_n = _parse_target(target)
    rules = _parse_strategies(strategies)
    modes = ("offline", "online") if mode is ModeChoice.both else (mode.value,)
    try:
        every = model == "all"
        sample_pool, model, note = _load_model_pool(pool, None if every else model, err, quiet=every)
        cfg = SimulateConfig(target_n=target_n, modes=modes, orderings=orderings, seed=seed,
                             folds=folds, pilot=pilot, chunk=chunk, max_tokens=max_tokens,
                             tolerance=tolerance, max_n=n_max, **online)
        if every:
            if rules is not None:
                raise ValueError("--model all replays the allocator against uniform only; drop --strategies "
                                 "or name one --model")
            _simulate_all(sample_pool, cfg, as_json, target, orderings)
            return
        result, cross = _replay(sample_pool[model], model, cfg, rules, budget_unit, gpu)
    except (PoolError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    _report_simulation(result, cross, model, note, as_json, target, orderings, tolerance)


def _report_simulation(result, cross, model: str, note: str, as_json: bool, target: str, orderings: int,
                       tolerance: float) -> None:
    """One model's replay as a JSON object (``--json``) or as the tables (cross-strategy first)."""
    if as_json:
        out = result.to_json() if result is not None else {"model": model}
        out["note"] = note
        if cross is not None:
            out["strategies"] = cross.to_json()
        typer.echo(json.dumps(out))
        return
    if cross is not None:
        _print_cross(cross)
    if result is not None:
        _print_simulation(result, model, target, orderings, tolerance)


def _online_settings(items: list[str], rule: str | None, confidence: float | None, chunk: int,
                     n_max: int) -> dict:
    """The online rule's settings from ``--set allocation.KEY=VALUE``, ``--rule`` and ``--confidence``,
    checked as a live run checks them (an unknown key, a rule a pool cannot replay, or a combination
    the rule refuses is a usage error naming what to change)."""
    from typing import get_args

    from pydantic import ValidationError

    from tts.budgets.online import OnlinePolicy
    from tts.cli.rule_settings import parse_rule_settings
    from tts.config import AllocationConfig

    try:
        out = parse_rule_settings(items)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--set") from None
    for key, flag, value in (("rule", "--rule", rule), ("confidence", "--confidence", confidence)):
        if value is None:
            continue
        if key in out and out[key] != value:
            raise typer.BadParameter(f"{flag} {value} and --set allocation.{key}={out[key]} disagree; give one",
                                     param_hint=flag)
        out[key] = value
    rules = get_args(AllocationConfig.model_fields["rule"].annotation)
    if out.get("rule", "horizon") not in rules:
        raise typer.BadParameter(f"unknown rule {out['rule']!r}; choose {', '.join(rules)} (the 'rate' rule needs a "
                                 "rate model in Python: see tts.budgets.rate_models)", param_hint="--rule")
    try:
        AllocationConfig(budget=1.0, **out)  # types and ranges, as tts eval --allocate checks them
        OnlinePolicy(n_max=n_max, chunk=chunk, **{k: tuple(v) if k == "ladder" and v else v for k, v in out.items()})
    except ValidationError as exc:
        problems = "; ".join(f"allocation.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise typer.BadParameter(problems, param_hint="--set") from None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--set") from None
    return out


def _simulate_all(sample_pool, cfg, as_json: bool, target: str, orderings: int) -> None:
    """``--model all``: every model of the pool replayed with the same settings, one row each, the
    worst first (by the last mode's token ratio; never matched = worst), then the median and worst
    ratios. Oracle: the consistency oracle at any n and at whole chunks (a bound, not an allocator)."""
    from rich.console import Console

    from tts.budgets.replay.simulate import simulate as run_simulation

    results = [run_simulation(sample_pool[m], cfg) for m in sample_pool.models]
    key = cfg.modes[-1]

    def ratio(r) -> float:
        iv = r.modes[key].token_ratio
        return 0.0 if iv is None else iv.mean

    results.sort(key=ratio)
    if as_json:
        typer.echo(json.dumps({"models": [r.to_json() for r in results]}))
        return
    from rich import box
    from rich.table import Table

    table = Table(title=f"{key} allocator vs uniform {target}, {orderings} orderings, 95% intervals, worst first",
                  box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in ("model", "uniform acc", "saved (x), to match", "acc change, same tokens", "oracle (x)",
                "oracle, chunks"):
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for r in results:
        m = r.modes[key]
        table.add_row(r.model, f"{r.uniform_acc.mean:.3f}", _fmt_iv(m.token_ratio, ".2f"),
                      _fmt_iv(m.acc_change, "+.3f"), _fmt_iv(r.oracle_ratio, ".2f"), f"{r.oracle_ratio_chunk.mean:.2f}")
    Console(width=140).print(table)
    ratios = [ratio(r) for r in results]
    worst = results[0]
    delta = min(r.modes[key].acc_change.mean for r in results)
    Console(width=140).print(f"{key} over {len(results)} models: token ratio median {_median(ratios):.2f}, worst "
                    f"{ratios[0]:.2f} ({worst.model}); worst accuracy change {delta:+.4f}; consistency oracle "
                    f"median {_median([r.oracle_ratio.mean for r in results]):.2f}")


def _median(values: list[float]) -> float:
    v = sorted(values)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2.0


def _replay(model_pool, model: str, cfg, rules: tuple[str, ...] | None, budget_unit: str, gpu: str) -> tuple:
    """The replays to run: uniform vs the allocator (None when a pool without token counts is only
    replayed across strategies) and, with ``rules``, the cross-strategy replay (else None), the
    latter at the same target, orderings, seed, folds, pilot and tolerance."""
    from tts.budgets.replay.simulate import simulate as run_simulation

    result = run_simulation(model_pool, cfg) if model_pool.has_tokens or rules is None else None
    cross = None
    if rules is not None:
        from tts.budgets.cross_allocator import make_pricer
        from tts.budgets.replay.cross_strategy import CrossConfig, cross_replay

        pricer = make_pricer(budget_unit, model, gpu)
        cross = cross_replay(model_pool, CrossConfig(rules=rules, target_n=cfg.target_n, orderings=cfg.orderings,
                                                     seed=cfg.seed, folds=cfg.folds, pilot=cfg.pilot,
                                                     tolerance=cfg.tolerance), pricer)
    return result, cross


def _parse_strategies(strategies: str | None) -> tuple[str, ...] | None:
    """``--strategies``: the selection rules to replay allocation across, or None when not given."""
    if strategies is None:
        return None
    from tts.budgets.strategy_curves import UnknownRuleError, parse_rules

    try:
        return parse_rules(strategies)
    except UnknownRuleError as exc:
        raise typer.BadParameter(str(exc), param_hint="--strategies") from None


def _load_model_pool(pool: Path, model: str | None, err, quiet: bool = False) -> tuple:
    """The sample pool (a pool file, or a `tts eval` run read as one), the model to replay and a note
    (printed to ``err`` too) when no --model was given and the pool has several.

    Raises:
        PoolError: The pool cannot be read.
        ValueError: ``model`` is not in the pool.
    """
    from tts.benchmarks.pool import load_pool

    if pool.is_dir() or pool.name == "results.jsonl":
        from tts.benchmarks.results_pool import load_results_as_pool

        sample_pool = load_results_as_pool(pool)
    else:
        sample_pool = load_pool(pool)
    note = None
    if model is None:
        model = sample_pool.models[0]
        if len(sample_pool.models) > 1 and not quiet:
            note = (f"no --model given: using the first model, {model!r} "
                    f"(the pool has {len(sample_pool.models)}: {', '.join(sample_pool.models)})")
            err.print(f"[yellow]{note}[/yellow]")
    if model not in sample_pool.by_model:
        raise ValueError(f"model {model!r} is not in {pool}; choose one of {list(sample_pool.models)}")
    return sample_pool, model, note


def _print_simulation(result, model: str, target: str, orderings: int, tolerance: float) -> None:
    """The replay as a table: uniform against each allocator mode, to match its accuracy and at its tokens."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{model}: uniform {target} vs the allocator, {orderings} orderings, 95% intervals",
                  box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True, min_width=17)
    table.add_column("accuracy", justify="right", no_wrap=True, min_width=19)
    table.add_column("saved (x)", justify="right", no_wrap=True, min_width=16)
    table.add_row("uniform", _tokens_iv(result.uniform_tokens), _fmt_iv(result.uniform_acc, ".3f"), "1")
    for name, m in result.modes.items():
        ratio = _fmt_iv(m.token_ratio, ".2f")
        table.add_row(f"{name}, to match", _tokens_iv(m.tokens_to_match),
                      f">= {result.uniform_acc.mean - tolerance:.3f}", ratio)
        change = "" if m.acc_change is None else f"change {_fmt_iv(m.acc_change, '+.3f')}"
        table.add_row(f"{name}, same tokens", _tokens_iv(m.tokens_at_uniform_budget),
                      _fmt_iv(m.acc_at_uniform_tokens, ".3f"), change)
    if result.oracle_ratio is not None:
        table.add_row("consistency oracle (bound)", "", "= uniform", _fmt_iv(result.oracle_ratio, ".2f"))
        table.add_row("oracle, whole chunks", "", "= uniform", _fmt_iv(result.oracle_ratio_chunk, ".2f"))
    Console().print(table)
    Console().print("to match: tokens the allocator needs to reach uniform's accuracy (saved = uniform / "
                    "these); same tokens: its accuracy on uniform's token budget (change: minus uniform's, per "
                    "ordering). Oracle: stops where the running majority never changes again (reads the future; "
                    "a bound, not an allocator).")
    Console().print("Decisions use answers, token counts and curves fitted on other problems only; "
                    "the pool's `correct` field only grades the outcome.")


def _print_cross(cross) -> None:
    """The cross-strategy replay as a table: each allocator against the best single rule."""
    from rich.console import Console
    from rich.table import Table

    u = cross.uniform[cross.best_single]
    table = Table(title=f"{cross.model}: strategies {', '.join(cross.rules)} vs the best single one "
                        f"({cross.best_single}@{cross.target_n}), cost in {cross.unit}")
    for col in ("", "cost", "accuracy", "saved (x)"):
        table.add_column(col, justify="left" if not col else "right")
    table.add_row(f"uniform {cross.best_single}@{cross.target_n}", f"{u['cost'].mean:.4g}", _fmt_iv(u["acc"], ".3f"), "1")
    for name, m in cross.allocators.items():
        label = "allocator, all strategies" if name == "cross" else f"allocator, {name} only"
        table.add_row(f"{label}, same cost", f"{m.tokens_at_uniform_budget.mean:.4g}",
                      _fmt_iv(m.acc_at_uniform_tokens, ".3f"), _fmt_iv(m.token_ratio, ".2f"))
    Console().print(table)
    Console().print("saved: best single strategy's cost / the cost at which the allocator first matches its accuracy. "
                    "Rules chosen at that cost: " + ", ".join(f"{r} {s:.0%}" for r, s in cross.chosen.items()))


from tts.cli.ensemble import ensemble_command  # noqa: E402  (a sibling command module; typer only)

app.command("ensemble")(ensemble_command)
