"""``tts eval``: run strategies on a benchmark, grade, store, report."""

from __future__ import annotations

import hashlib
import math
import json
from pathlib import Path
from typing import Any, Callable

import typer

from tts.cli.errors import fail, user_errors
from tts.cli.stopped import RunProgress, said_on_stop

_DEFAULT_N = [8]


def _config_from_options(opts: dict[str, Any], config_file: Path | None) -> Any:
    """Merge a YAML config file (if any) with the options given on the command line."""
    import yaml

    from tts.config import EvalConfig
    from tts.registry import BACKENDS, BENCHMARKS, STRATEGIES

    base: dict[str, Any] = {}
    if config_file is not None:
        if not config_file.is_file():
            raise fail(f"Config file {config_file} does not exist.")
        try:
            base = yaml.safe_load(config_file.read_text()) or {}
        except yaml.YAMLError as exc:
            raise fail(f"{config_file} is not valid YAML: {exc}") from None
        if not isinstance(base, dict):
            raise fail(f"{config_file} must hold a mapping of EvalConfig fields.")
    data = dict(base.get("data", {}))
    for key, name in (("benchmark", "benchmark"), ("path", "data"), ("limit", "limit"), ("id_field", "id_field"),
                      ("question_field", "question_field"), ("answer_field", "answer_field")):
        if opts[name] is not None:
            data[key] = opts[name]
    data_options = [(path[1], value) for path, value in _parse_settings(opts.get("settings") or []) if path[0] == "data"]
    if data_options:
        data["options"] = {**data.get("options", {}), **dict(data_options)}
    if "benchmark" in data:
        BENCHMARKS.check(data["benchmark"])
    if data.get("path") and "benchmark" not in data:
        data["benchmark"] = "jsonl"
    backend = dict(base.get("backend", {}))
    if opts["backend"] is not None:
        if backend.get("kind") != opts["backend"]:
            backend = {k: v for k, v in backend.items() if k == "model"}
        backend["kind"] = opts["backend"]
    backend.setdefault("kind", "vllm")
    BACKENDS.check(backend["kind"])
    if opts["model"] is not None:
        backend["model"] = opts["model"]
    backend = _backend_settings(backend, opts.get("settings") or [])
    if opts["base_url"] is not None:
        if backend["kind"] not in ("openai", "litellm"):
            raise fail("--base-url only applies to --backend openai (and litellm, as its api_base).")
        backend["base_url" if backend["kind"] == "openai" else "api_base"] = opts["base_url"]
    sampling = dict(base.get("sampling", {}))
    for key in ("temperature", "max_tokens"):
        if opts[key] is not None:
            sampling[key] = opts[key]
    strategies = base.get("strategies")
    graphs = _graph_strategies(opts.get("graph") or [])
    if opts["strategy"] or opts["n"] or (strategies is None and not graphs):
        names = opts["strategy"] or sorted({s["kind"] for s in strategies or []}) or ["self_consistency"]
        ns = opts["n"] or sorted({s.get("n", 8) for s in strategies or []}) or _DEFAULT_N
        for name in names:
            STRATEGIES.check(name)
        for n in ns:
            if n < 1:
                raise fail(f"-n must be at least 1 (got {n}): it is the number of samples per problem.")
        # A strategy's other settings from the YAML file survive a ladder given on the command line.
        knobs = {s["kind"]: {k: v for k, v in s.items() if k != "n"} for s in strategies or []}
        strategies = [{**knobs.get(name, {}), "kind": name, "n": n} for name in names for n in ns]
    strategies = _auto_strategy(strategies or [], opts)
    strategies = _apply_strategy_flags(strategies, opts) + graphs
    merged = {**base, "data": data, "backend": backend, "sampling": sampling, "strategies": strategies}
    for key in ("batch_size", "seed"):
        if opts[key] is not None:
            merged[key] = opts[key]
    if opts.get("deterministic"):
        merged["deterministic"] = True
    allocation = _allocation_from_options(opts, base.get("allocation"))
    if allocation is not None:
        merged["allocation"] = allocation
    cfg = EvalConfig.model_validate(merged)
    _check_online_rule(cfg)
    return cfg


def _graph_strategies(files: list[Path]) -> list[dict[str, Any]]:
    """``--graph FILE``: one ``graph`` strategy per collaboration-graph file (validated here, so a
    bad graph is refused in one line naming its node)."""
    from tts.graphs.graph import load_graph_file

    return [{"kind": "graph", "graph": load_graph_file(f).model_dump(mode="json")} for f in files]


_STRATEGY_FLAGS = (("verifier", "verifier", "--verifier"), ("beam_width", "beam_width", "--beam-width"),
                   ("max_depth", "max_depth", "--max-depth"))


def _verifier_from_flag(value: str) -> str | dict[str, Any]:
    """``--verifier NAME`` or ``NAME:MODEL`` (``prm:/models/Qwen2.5-Math-PRM-7B``): the model of a
    verifier that runs one."""
    from tts.registry import VERIFIERS

    name, sep, model = value.partition(":")
    VERIFIERS.check(name)
    if not sep:
        return name
    if "model" not in VERIFIERS.load(name).config_class.model_fields:
        raise fail(f"--verifier {value}: the {name} verifier runs no model of its own, so it takes no ':MODEL'; "
                   f"give --verifier {name}.")
    if not model:
        raise fail(f"--verifier {value}: name the model after the colon ({name}:PATH_OR_HUB_ID).")
    return {"kind": name, "model": model}


_BACKEND_MAPPINGS = ("engine_args", "lora", "speculative_config")
"""Backend settings that are mappings: ``--set backend.engine_args.KEY=VALUE`` sets one key of them."""


def _backend_settings(backend: dict[str, Any], items: list[str]) -> dict[str, Any]:
    """``backend`` with the ``--set backend.KEY=VALUE`` (and ``backend.MAPPING.KEY=VALUE``) items
    applied; the backend's config checks the names and values."""
    out = dict(backend)
    for path, value in _parse_settings(items):
        if path[0] != "backend":
            continue
        if len(path) == 2:
            out[path[1]] = value
        else:
            out[path[1]] = {**(out.get(path[1]) or {}), path[2]: value}
    return out


def _parse_settings(items: list[str]) -> list[tuple[list[str], Any]]:
    """``--set KEY=VALUE`` items as (dotted path, YAML-parsed value)."""
    import yaml

    out = []
    for item in items:
        key, sep, raw = item.partition("=")
        path = key.strip().split(".")
        nested = len(path) == 3 and path[0] == "backend" and path[1] in _BACKEND_MAPPINGS
        if not sep or not all(path) or (len(path) > 2 and not nested) or (
                len(path) == 2 and path[0] not in ("verifier", "data", "allocation", "stop", "backend")):
            raise fail(f"--set {item!r}: write KEY=VALUE for a strategy setting (--set balance_temperature=0.1), "
                       "verifier.KEY=VALUE for a verifier setting (--set verifier.aggregation=last), "
                       "stop=RULE or stop.KEY=VALUE for a per-request stop (--set stop=horizon --set stop.wave=8), "
                       "data.KEY=VALUE for a benchmark option (--set data.steps=6 on chains), "
                       "allocation.KEY=VALUE for a setting of --allocate's online rule (--set allocation.rule=dirichlet) "
                       "or backend.KEY=VALUE for a backend setting (--set backend.tensor_parallel_size=2, "
                       "--set backend.engine_args.max_num_batched_tokens=8192, --set backend.lora.judge=DIR).")
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        out.append((path, value))
    return out


def _apply_strategy_flags(strategies: list[dict[str, Any]], opts: dict[str, Any]) -> list[dict[str, Any]]:
    """Set each strategy knob given as a flag on every strategy whose config has that setting.

    Named flags (``--beam-width``) and ``--set KEY=VALUE`` work alike; ``--set verifier.KEY=VALUE``
    sets a setting of the verifier of every strategy that has one. A setting that no configured
    strategy takes is refused (it would be silently ignored); a value the setting refuses is
    reported by the config's own validation.
    """
    from tts.registry import STRATEGIES, VERIFIERS

    out = [dict(s) for s in strategies]
    settings: list[tuple[list[str], Any, str]] = []
    for field, key, flag in _STRATEGY_FLAGS:
        value = opts.get(key)
        if value is not None:
            if field == "verifier":
                value = _verifier_from_flag(value)
            settings.append(([field], value, flag))
    settings += [(path, value, f"--set {'.'.join(path)}") for path, value in _parse_settings(opts.get("settings") or [])
                 if len(path) == 1 or path[0] not in ("data", "allocation", "backend")]  # taken by their sections

    def fields(kind: str) -> dict[str, Any]:
        return STRATEGIES.load(kind).config_class.model_fields

    for path, value, flag in settings:
        field = path[0]
        takers = [s for s in out if field in fields(s["kind"])]
        if not takers:
            able = [n for n in STRATEGIES.names() if field in fields(n)]
            raise fail(f"{flag} applies to {', '.join(able) or 'no registered strategy'}; none of the strategies "
                       f"given ({', '.join(sorted({s['kind'] for s in out}))}) has that setting.")
        for s in takers:
            if len(path) == 1:
                s[field] = {**s[field], "rule": value} if field == "stop" and isinstance(s.get(field), dict) else value
                continue
            if field == "stop":  # stop.KEY=VALUE: one setting of the per-request stop (default rule: horizon)
                current_stop = s.get("stop")
                s["stop"] = {**({"rule": current_stop} if isinstance(current_stop, str) else current_stop or {}),
                             path[1]: value}
                continue
            current = s.get("verifier", fields(s["kind"])["verifier"].default)
            if current is None:
                raise fail(f"{flag}: {s['kind']} has no verifier to set it on; choose one with --verifier.")
            verifier = {"kind": current} if isinstance(current, str) else dict(current)
            if path[1] not in VERIFIERS.load(verifier["kind"]).config_class.model_fields:
                known = ", ".join(k for k in VERIFIERS.load(verifier["kind"]).config_class.model_fields if k != "kind")
                raise fail(f"{flag}: the {verifier['kind']} verifier has no setting {path[1]!r}; it has: {known}.")
            s["verifier"] = {**verifier, path[1]: value}
    return out


_ALLOCATION_FLAGS = (("mode", "allocate_mode", "--allocate-mode"), ("budget", "budget", "--budget"),
                     ("unit", "budget_unit", "--budget-unit"), ("n_max", "n_max", "--n-max"),
                     ("chunk", "chunk", "--chunk"), ("calibration", "calibration", "--calibration"),
                     ("pilot", "pilot", "--pilot"))


def _allocation_from_options(opts: dict[str, Any], section: Any) -> dict[str, Any] | None:
    """The ``allocation`` settings: the YAML section overridden by the flags given, or None.

    ``--allocate``, ``--budget`` or a YAML ``allocation:`` section make the run allocated;
    allocation flags without one of them, and ``--strategy`` / ``-n`` with one, are refused
    (they would be silently ignored). AllocationConfig validates the result.
    """
    if opts.get("strategy") and "auto" in opts["strategy"]:
        return None  # --strategy auto spends --budget itself (see _auto_strategy)
    given = {key: opts[name] for key, name, _ in _ALLOCATION_FLAGS if opts.get(name) is not None}
    rule = _rule_settings(opts.get("settings") or [])
    if section is not None and not isinstance(section, dict):
        raise fail("The allocation section of the config file must be a mapping of AllocationConfig fields.")
    if not (opts.get("allocate") or "budget" in given or section is not None):
        if given or rule:
            flags = [flag for key, _, flag in _ALLOCATION_FLAGS if key in given] + [f"--set allocation.{k}" for k in rule]
            raise fail(f"{', '.join(flags)} only appl{'ies' if len(flags) == 1 else 'y'} with --allocate (and --budget); "
                       "add --allocate or drop them.")
        return None
    if opts["strategy"] and set(opts["strategy"]) != {"self_consistency"}:
        raise fail("--allocate runs self_consistency (it chooses how many samples each problem gets); "
                   "drop --strategy, or drop --allocate to compare strategies at a fixed n.")
    if opts["n"]:
        raise fail("--allocate chooses n per problem; drop -n and cap it with --n-max instead.")
    allocation = {**(section or {}), **given, **rule}
    if opts.get("gpu"):
        allocation["gpu"] = opts["gpu"]
    if "budget" not in allocation:
        raise fail("--allocate needs --budget (a positive number in --budget-unit), or budget: in the "
                   "allocation section of the config file.")
    return allocation


def _rule_settings(items: list[str]) -> dict[str, Any]:
    """``--set allocation.KEY=VALUE``: the online rule's settings (:mod:`tts.cli.rule_settings`),
    an unknown KEY refused with the valid ones."""
    from tts.cli.rule_settings import rule_setting

    out: dict[str, Any] = {}
    for path, value in _parse_settings(items):
        if path[0] == "allocation" and len(path) == 2:
            try:
                key, out_value = rule_setting(path[1], value, f"allocation.{path[1]}")
            except ValueError as exc:
                raise fail(str(exc)) from None
            out[key] = out_value
    return out


def _check_online_rule(cfg: Any) -> None:
    """Refuse, before any engine starts, a combination of online-rule settings the rule cannot
    run (e.g. allocation.confirm_window with rule window): the message names the setting."""
    if cfg.allocation is None or cfg.allocation.mode != "online":
        return
    from tts.eval.allocated import online_policy

    try:
        online_policy(cfg.allocation)
    except ValueError as exc:
        raise fail(f"allocation: {exc}") from None


def _auto_strategy(strategies: list[dict[str, Any]], opts: dict[str, Any]) -> list[dict[str, Any]]:
    """``--strategy auto``: its settings from --budget (the TOTAL; :func:`auto_per_problem` divides it),
    --budget-unit, --calibration, --escalate, --pilot, --n-max and --gpu; -n does not apply."""
    if not any(s.get("kind") == "auto" for s in strategies):
        if opts.get("escalate"):
            raise fail("--escalate only applies with --strategy auto; add it or drop --escalate.")
        return strategies
    if opts.get("n"):
        raise fail("--strategy auto chooses n per problem; drop -n and cap it with --n-max.")
    if opts.get("allocate"):
        raise fail("--strategy auto allocates the budget itself; drop --allocate.")
    flags = {"budget": "budget", "budget_unit": "budget_unit", "calibration": "calibration", "pilot": "pilot",
             "n_max": "n_max", "gpu": "gpu"}
    out = []
    for s in strategies:
        if s.get("kind") == "auto":
            s = {k: v for k, v in s.items() if k != "n"}
            s.update({key: str(opts[name]) if key == "calibration" else opts[name]
                      for key, name in flags.items() if opts.get(name) is not None})
            if opts.get("escalate"):
                s["escalate"] = [str(p) for p in opts["escalate"]]
            # Checked before the engine starts, from --escalate or the config file's escalate: alike.
            runs = {str(p): Path(str(p).partition("::")[0]) for p in s.get("escalate") or []}  # RUN or RUN::LABEL
            missing = [spec for spec, run in runs.items() if not (run / "results.jsonl").is_file()
                       and not (run.name == "results.jsonl" and run.is_file())]
            if missing:
                where = "--escalate" if opts.get("escalate") else "escalate: (in the config file)"
                raise fail(f"{where} {', '.join(missing)}: no tts eval run there (a directory holding "
                           "results.jsonl); name one run directory per entry.")
            if "budget" not in s or "calibration" not in s:
                raise fail("--strategy auto needs --budget (total, in --budget-unit) and --calibration (a sample pool, "
                           "a past tts eval run or a tts sweep directory of this model on other problems).")
        out.append(s)
    return out


def _round_down(value: float, digits: int = 6) -> float:
    """``value`` cut to ``digits`` significant digits (never rounded up: a budget must not grow)."""
    if value <= 0:
        return value
    step = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    return min(value, float(f"{math.floor(value / step) * step:.{digits}g}"))


def auto_per_problem(cfg: Any, n_problems: int, batch_size_given: bool) -> Any:
    """The config with each auto strategy's total budget divided over ``n_problems`` and, unless
    --batch-size was given, every problem in one batch (so one plan spans them all)."""
    from tts.config import EvalConfig

    if not any(s.kind == "auto" for s in cfg.strategies) or n_problems == 0:
        return cfg
    data = cfg.model_dump(mode="json")
    # Rounded down to 6 significant digits: the budget is part of the config's label (and of the table).
    data["strategies"] = [{**s, "budget": _round_down(s["budget"] / n_problems)} if s["kind"] == "auto" else s
                          for s in data["strategies"]]
    if not batch_size_given:
        data["batch_size"] = max(cfg.batch_size, n_problems)
    return EvalConfig.model_validate(data)


def _engine_log(cfg: Any, run_dir: Path) -> Any:
    """Engine start-up noise goes to RUN/engine.log (one line says so); errors stay on the terminal."""
    from tts.backends.engine_log import ENGINE_LOG, engine_log

    if cfg.backend.kind == "vllm":
        typer.echo(f"vLLM engine messages go to {run_dir / ENGINE_LOG}")
    return engine_log(run_dir / ENGINE_LOG)


def default_out(config: Any) -> Path:
    """``runs/<benchmark>-<model>-<hash>``: the same command maps to the same directory (resume)."""
    key = config.model_dump(mode="json", exclude={"out", "batch_size"})
    key["data"].pop("limit", None)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]
    model = Path(str(config.backend.model)).name.replace("/", "_")
    return Path("runs") / f"{config.data.benchmark}-{model}-{digest}"


def _ledger(result: Any, model: str, gpu: str | None,
            deployment: dict[str, Any] | None = None) -> tuple[dict[str, Any], str | None]:
    """Price the run on ``gpu`` as the model is deployed (``deployment``: tensor parallelism and
    quantization, :func:`tts.cost.deployment.deployment_of`); returns ({}, reason) when the
    model's architecture is unknown or the deployment cannot be priced."""
    if not gpu:
        return {}, None
    from tts.cost.ledger import cost_model_for, price_usages

    try:
        cm = cost_model_for(model, gpu, **(deployment or {}))
        # A request served by another model (a judge, a graph node) is priced on its own architecture.
        return price_usages(((r.config, r.usage) for r in result.rows), cm), None
    except ValueError as exc:
        unknown = str(exc).split(":")[0]
        return {}, (f"(no GPU cost columns: {unknown}; `tts cost --model path/to/config.json` prices a model "
                    "from its config)")


def hosted_dollars(result: Any, model: str) -> str:
    """A hosted model's run in dollars, per strategy config, at LiteLLM's per-token prices (a hosted
    model has no architecture for the GPU cost columns; its provider bills tokens)."""
    from tts.budgets.pricing import Pricer
    from tts.cost.token_prices import token_price

    price = token_price(model)
    if price is None:
        return f"dollars: LiteLLM's table lists no price for {model}"
    pricer = Pricer(model=model, token_price=price)
    spent: dict[str, float] = {}
    for row in result.rows:
        spent[row.config] = spent.get(row.config, 0.0) + pricer.cost(row.usage)["dollars"]
    each = ", ".join(f"{config} ${usd:.4g}" for config, usd in spent.items())
    return (f"dollars at {model}'s per-token prices ({price.source}; cached prompt tokens at its cache-read "
            f"price): {each}")


def _si(x: float) -> str:
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def _reasoning_per_config(result: Any) -> dict[str, int]:
    """Tokens inside thinking sections (Usage.reasoning_tokens) summed per config, over its rows."""
    reasoning: dict[str, int] = {}
    for r in result.rows:
        reasoning[r.config] = reasoning.get(r.config, 0) + r.usage.reasoning_tokens
    return reasoning


def _summary_columns(result: Any, ledger: dict[str, Any], gpu: str | None,
                     wide: bool) -> list[tuple[str, Callable[[Any], str]]]:
    """The table's columns as (header, cell of a ConfigSummary) pairs.

    The default set fits a 100-column terminal at the demo's configs: what a reader needs first
    (strategy, n, accuracy with its interval, pass@n, the no-answer rate, tokens and cost per
    problem, time). ``wide`` (``--wide``) adds FLOPs/pb and eFLOPs/pb. Ungraded, events and
    think/pb appear only when some config has them, in either set: they flag what to look at.
    """
    from tts.eval.labels import config_line

    reasoning = _reasoning_per_config(result)
    cols: list[tuple[str, Callable[[Any], str]]] = [
        ("strategy", lambda s: config_line(s.config)),  # the strategy and its settings, or e.g. "allocated-online"
        ("n", lambda s: f"{s.n:.3g}"),
        ("accuracy [95% CI]", lambda s: f"{s.accuracy:.3f} [{s.accuracy_low:.2f}-{s.accuracy_high:.2f}]"),
        ("pass@n", lambda s: f"{s.coverage:.3f}"),
    ]
    # Small models often stop before an answer; a low accuracy reads differently when most are missing.
    cols.append(("no ans", lambda s: f"{s.no_answer_rate:.2f}"))
    if any(s.ungraded for s in result.summaries):
        cols.append(("ungraded", lambda s: str(s.ungraded)))
    if any(s.events for s in result.summaries):
        cols.append(("events", lambda s: str(sum(s.events.values()))))
    cols.append(("tok/pb", lambda s: f"{s.tokens_per_problem:,.0f}"))
    if any(reasoning.values()):  # a column only when a model thought
        cols.append(("think/pb", lambda s: f"{reasoning.get(s.config, 0) / max(s.problems, 1):,.0f}"))
    if ledger:
        if wide:
            cols += [("FLOPs/pb", lambda s: _si(ledger[s.config].per_problem.flops)),
                     ("eFLOPs/pb", lambda s: _si(ledger[s.config].per_problem.eflops))]
        cols.append((f"{gpu} s/pb", lambda s: f"{ledger[s.config].per_problem.seconds:.3g}"))
    cols.append(("time s", lambda s: f"{s.wall_seconds:,.1f}"))
    if any(s.execution_seconds for s in result.summaries):  # a column only when programs ran
        cols.append(("exec s", lambda s: f"{s.execution_seconds:,.1f}"))
    return cols


def summary_table(result: Any, model: str = "", gpu: str | None = None, wide: bool = False,
                  deployment: dict[str, Any] | None = None) -> tuple[Any, list[str]]:
    """The results table (a rich Table) and the notes that explain its columns, to print below it.

    With ``gpu``, each config's usage is priced by the cost model (predicted GPU-seconds per
    problem; with ``wide`` also FLOPs and eFLOPs), next to the elapsed time measured here.
    """
    from rich.table import Table

    ledger, why = _ledger(result, model, gpu, deployment)
    columns = _summary_columns(result, ledger, gpu, wide)
    table = Table(title=f"{result.problems} problems -> {result.out}", min_width=60)
    for header, _ in columns:
        table.add_column(header, justify="left" if header == "strategy" else "right")
    for s in result.summaries:
        table.add_row(*(cell(s) for _, cell in columns))
    headers = {header for header, _ in columns}
    timed = ("time s: elapsed seconds of this config's engine and verifier calls, over every session of the run, "
             "each call's time shared among its problems by generated tokens (a smaller n that reuses a larger n's "
             "samples gets its samples' share).")
    priced = f"{gpu} s: roofline seconds predicted by the cost model; " if ledger else ""
    notes = ["pass@n: a correct answer among the n samples (coverage); no ans: share of problems whose answer could "
             f"not be read; /pb: per problem; tok: prompt and generated tokens; {priced}{timed}"]
    if "exec s" in headers:
        notes.append("exec s: seconds model-written programs ran in the sandbox (summed over problems; a program "
                     "shared by several n counts for each), apart from the engine's time s.")
    if "think/pb" in headers:
        notes.append("think: of the generated tokens, those inside thinking sections (<think>...</think>, as the "
                     "backend's reasoning parser or delimiter split them); the rest of tok/pb is prompt and answer "
                     "tokens.")
    if not wide and ledger:
        notes.append("--wide adds FLOPs/pb and eFLOPs/pb.")
    if why:
        notes.append(why)
    return table, notes


def print_summary(result: Any, model: str = "", gpu: str | None = None, wide: bool = False,
                  deployment: dict[str, Any] | None = None) -> None:
    """Print the results table (:func:`summary_table`), its notes, and what needs a reader's eye:
    events the strategies kept, ungraded answers, resumed problems."""
    from rich.console import Console

    table, notes = summary_table(result, model, gpu, wide, deployment)
    console = Console()
    if not console.is_terminal:  # a log file or CI: do not squeeze the table into 80 columns
        console = Console(width=140)
    console.print(table)
    for note in notes:
        console.print(note)
    for s in result.summaries:
        if s.events:
            console.print(f"events in {s.config}: " + ", ".join(f"{k} {v}" for k, v in s.events.items())
                          + " (counts the strategy kept as it ran: fallbacks it took, stops, resamples; "
                          "`tts show RUN PROBLEM` shows where)")
    if any(s.ungraded for s in result.summaries):
        console.print("ungraded: answers without a verdict (their check timed out or crashed the grader, or the "
                      "sandbox could not run it); counted as not correct, never as wrong (see the warnings above, "
                      "and raise grading_timeout if they are slow, not stuck).")
    infra = sum(1 for r in result.rows if (r.grade_reason or "").startswith("sandbox_failed"))
    if infra:
        console.print(f"sandbox failures: {infra} answer(s) could not be run by the sandbox (the machine, not the "
                      "program): recorded ungraded, never wrong, with the sandbox's reason (`tts show RUN PROBLEM`).")
    if result.skipped:
        console.print(f"resumed: {result.skipped} problems were already done in {result.out}")
    console.print(f"wall time of this invocation: {result.wall_seconds:.1f} s")


def _run_fixed(cfg: Any, run_dir: Path, problems: list[Any], told: RunProgress) -> Any:
    """Run every configured strategy at its fixed n over ``problems`` under an eval progress bar
    (``told`` hears the progress too, for the line a stopped run ends with)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from tts.budgets.allocator import AllocationError, BudgetError
    from tts.eval.runner import run_eval

    with _engine_log(cfg, run_dir), Progress(TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(),
                                             TimeElapsedColumn(), TimeRemainingColumn(), transient=False) as bar:
        task = bar.add_task("eval", total=len(problems))

        def progress(done: int, total: int) -> None:
            told(done, total)
            bar.update(task, completed=done, total=total)

        try:
            return run_eval(cfg, run_dir, problems=problems, progress=progress)
        except (AllocationError, BudgetError) as exc:  # --strategy auto: budget or calibration it cannot use
            raise fail(str(exc)) from None


def _run_allocated(cfg: Any, run_dir: Path, problems: list[Any]) -> Any:
    """Run self-consistency under the allocation's total budget, with a budget-spent progress bar."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from tts.eval.allocated import AllocationError, BudgetError, run_allocated_eval

    with _engine_log(cfg, run_dir), Progress(TextColumn("[bold]budget spent"), BarColumn(),
                                             TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn()) as bar:
        task = bar.add_task("alloc", total=cfg.allocation.budget)
        try:
            return run_allocated_eval(cfg, run_dir, problems=problems,
                                      progress=lambda spent, total: bar.update(task, completed=spent))
        except (AllocationError, BudgetError) as exc:
            raise fail(str(exc)) from None


def _saved_counter(run_dir: Path, problems: list[Any], labels: list[str] | None) -> Callable[[], int]:
    """Counts the problems the run directory holds results of (for every config in ``labels``)."""
    from tts.eval.store import problems_saved

    ids = [p.id for p in problems]
    return lambda: problems_saved(run_dir, ids, labels)


def _run_configured(cfg: Any, out: Path | None, config: Path | None, auto: bool,
                    batch_size_given: bool, told: RunProgress) -> tuple[Any, Any]:
    """Load the problems, settle the run directory and run the eval (allocated or at fixed n);
    returns the config as run and the EvalResult.

    ``--strategy auto`` divides its total budget over the problems first (so the config, and the
    default run directory derived from it, depend on how many there are); an allocated run's
    default directory is named after its mode and budget. ``told`` learns the run directory, the
    problem count and the progress, for the line a stopped run ends with.
    """
    from tts.eval.runner import check_sandbox, load_problems

    run_dir = out or cfg.out or default_out(cfg)
    bench, problems = load_problems(cfg)
    if auto:
        import yaml

        from_file = config is not None and "batch_size" in (yaml.safe_load(config.read_text()) or {})
        cfg = auto_per_problem(cfg, len(problems), batch_size_given or from_file)
        run_dir = out or cfg.out or default_out(cfg)
    alloc = cfg.allocation
    if alloc is not None and not (out or cfg.out):
        run_dir = run_dir.with_name(f"{run_dir.name}-{alloc.mode}-{alloc.budget:g}{alloc.unit}")
    check_sandbox(cfg.strategies if alloc is None else [], bench)  # before a progress bar or an engine
    told.out, told.total = run_dir, len(problems)
    told.saved = _saved_counter(run_dir, problems, None if alloc is not None else [s.label for s in cfg.strategies])
    if alloc is None:
        return cfg, _run_fixed(cfg, run_dir, problems, told)
    return cfg, _run_allocated(cfg, run_dir, problems)


def eval_command(
    benchmark: str | None = typer.Option(None, "--benchmark", "-b", help="demo, chains, stories, math500, aime2024, aime2025, amc2023, gsm8k, humaneval, jsonl, bfcl:<category> (bfcl:simple, bfcl:live_multiple, ...; needs `make bfcl-env`)."),
    strategy: list[str] | None = typer.Option(None, "--strategy", "-s", help="Repeatable; a registered strategy (`tts strategies` lists them)."),
    n: list[int] | None = typer.Option(None, "-n", help="Samples (search: candidates) per problem; repeat for a ladder (-n 1 -n 4 -n 16)."),
    verifier: str | None = typer.Option(None, "--verifier", help="Verifier of search and verifier-scored strategies (arithmetic, logprob, judge, prm, ...)."),
    beam_width: int | None = typer.Option(None, "--beam-width", min=1, help="Search: children of each kept node (M); n/M nodes are kept per step."),
    max_depth: int | None = typer.Option(None, "--max-depth", min=1, help="Search: most steps before an answer is forced."),
    settings: list[str] | None = typer.Option(None, "--set", help="Repeatable KEY=VALUE: any strategy setting (balance_temperature=0.1, select=verifier), verifier.KEY=VALUE (verifier.aggregation=last), data.KEY=VALUE (a benchmark option: data.steps=6 on chains) or, with --allocate, allocation.KEY=VALUE (the online rule: rule, confidence, escalate, prior, window, length_weight, confirm_window, give_up_after, give_up_share, ladder, top_k; e.g. allocation.rule=dirichlet); `tts strategies` lists the strategy settings."),
    model: str | None = typer.Option(None, "--model", "-m", help="smollm2-135m (default), a local model dir, a .gguf file or a hub id."),
    backend: str | None = typer.Option(None, "--backend", help="vllm (default), openai, litellm "
                                                 "(--model provider/model: anthropic/..., gemini/...) or scripted."),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible server URL (with --backend openai)."),
    data: Path | None = typer.Option(None, "--data", help="Local JSONL/Parquet/HF-dataset dir instead of the hub copy."),
    id_field: str | None = typer.Option(None, "--id-field", help="Field with the problem id."),
    question_field: str | None = typer.Option(None, "--question-field", help="Field with the question."),
    answer_field: str | None = typer.Option(None, "--answer-field", help="Field with the gold answer."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Use the first K problems."),
    temperature: float | None = typer.Option(None, "--temperature", help="Sampling temperature."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", help="Max generated tokens per sample."),
    batch_size: int | None = typer.Option(None, "--batch-size", help="Problems per engine call."),
    seed: int | None = typer.Option(None, "--seed", help="Run seed."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Run directory (default runs/<benchmark>-<model>-<hash>); re-run to resume."),
    config: Path | None = typer.Option(None, "--config", "-c", help="YAML file with the same settings (flags override it)."),
    gpu: str | None = typer.Option(None, "--gpu", help="Price the run's usage (and --budget-unit eflops / gpu_seconds) on this GPU: h100 (default), h200, a100-80gb, ...; '' to skip the cost columns."),
    allocate: bool = typer.Option(False, "--allocate", help="Self-consistency under one total --budget instead of a fixed n per problem."),
    allocate_mode: str | None = typer.Option(None, "--allocate-mode", help="online (default: adaptive stopping) or offline (pilot + plan from --calibration)."),
    calibration: Path | None = typer.Option(None, "--calibration", help="--allocate-mode offline / --strategy auto: a past run dir of this model, a sample-pool file (auto: or a tts sweep dir)."),
    pilot: int | None = typer.Option(None, "--pilot", help="--allocate-mode offline: pilot samples per problem (default 4)."),
    chunk: int | None = typer.Option(None, "--chunk", help="--allocate online: samples per problem per round (default 4)."),
    budget: float | None = typer.Option(None, "--budget", help="Total budget for --allocate or --strategy auto, e.g. 2e6 (implies --allocate unless --strategy auto)."),
    budget_unit: str | None = typer.Option(None, "--budget-unit", help="tokens (default), eflops or gpu_seconds (priced on --gpu); --strategy auto also takes dollars."),
    n_max: int | None = typer.Option(None, "--n-max", help="Most samples one problem may get under --allocate (default 64)."),
    escalate: list[Path] | None = typer.Option(None, "--escalate", help="Repeatable; --strategy auto: a past tts eval run of search strategies (rebase, beam, ...) on the calibration problems; each of its configs becomes an option after the pilot, per difficulty bin."),
    graph: list[Path] | None = typer.Option(None, "--graph", help="Repeatable; a collaboration-graph YAML file (examples/graphs/) run as a strategy, beside any --strategy."),
    deterministic: bool = typer.Option(False, "--deterministic", help="Reproducible run ('Give Me FP32'): float32, per-request seeds, fixed batches; slower."),
    wide: bool = typer.Option(False, "--wide", help="Also show FLOPs/pb and eFLOPs/pb (the default table fits 100 columns)."),
) -> None:
    """Evaluate strategies on a benchmark; results go to OUT/results.jsonl, resumable."""
    opts = dict(benchmark=benchmark, strategy=strategy, n=n, model=model, backend=backend, base_url=base_url,
                data=data, id_field=id_field, question_field=question_field, answer_field=answer_field,
                limit=limit, temperature=temperature, max_tokens=max_tokens, batch_size=batch_size, seed=seed,
                gpu=gpu, allocate=allocate, allocate_mode=allocate_mode, calibration=calibration, pilot=pilot,
                chunk=chunk, budget=budget, budget_unit=budget_unit, n_max=n_max, escalate=escalate, verifier=verifier, beam_width=beam_width,
                max_depth=max_depth, settings=settings, deterministic=deterministic, graph=graph)
    told = RunProgress()
    with user_errors(), said_on_stop(told):
        cfg = _config_from_options(opts, config)
        cfg, result = _run_configured(cfg, out, config, bool(strategy and "auto" in strategy), batch_size is not None,
                                      told)
    if gpu is None:  # the default: the allocation's GPU, else h100
        gpu = cfg.allocation.gpu if cfg.allocation is not None else "h100"
    from tts.cost.deployment import deployment_of

    print_summary(result, cfg.backend.model, gpu or None, wide=wide, deployment=deployment_of(cfg.backend))
    if cfg.backend.kind == "litellm":
        print(hosted_dollars(result, cfg.backend.model))
