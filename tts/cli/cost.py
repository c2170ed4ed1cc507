"""``tts cost``: price a strategy's generation on a GPU before running it; ``tts cost calibrate``.

Examples:
    tts cost --model Qwen/Qwen3-8B --gpu h100 --strategy self_consistency -n 32 --gen 8000
    tts cost -m qwen3-0.6b -m qwen3-8b -m qwen3-32b --gpu b200 -n 8 --gen 16000
    tts cost -m qwen3-8b --gpu all -n 16 --gen 4000 --max-seconds 60 --price h100=2.10
    tts cost -m qwen3-8b -n 8 --gen 32000 --sparse block:64,size=16,local=128
    tts cost -m meta-llama/Llama-3.1-70B-Instruct --gpu h100 --tp 2 --quantization awq
    tts cost -m qwen3-8b --spec-acceptance 0.7 --spec-tokens 4 --spec-draft qwen3-0.6b
    tts cost calibrate --engine --model HuggingFaceTB/SmolLM2-135M-Instruct

Library imports (numpy, scipy) happen inside the commands so that ``tts --help`` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(help="Price generation in FLOPs, bytes, Kinetics eFLOPs and roofline seconds.")


def _si(x: float, unit: str = "") -> str:
    for factor, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"),
                           (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.3g}{prefix}{unit}"
    return f"{x:.3g}{unit}"


def _seconds(x: float) -> str:
    return f"{x * 1e3:.3g}ms" if x < 1 else f"{x:.4g}s" if x < 600 else f"{x / 60:.4g}min"


def _console() -> Any:
    """A rich console; wide when writing to a pipe or file so that tables never wrap."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=200)


@app.callback(invoke_without_command=True)
def cost(
    ctx: typer.Context,
    model: Annotated[list[str] | None, typer.Option(
        "--model", "-m", help="HF id, shipped alias (qwen3-8b) or path/to/config.json; repeat "
        "to compare models.")] = None,
    gpu: Annotated[str, typer.Option(help="Device: h100, h100-pcie, h200, b200, a100-40gb, "
                                     "a100-80gb, l40s, rtx-4090, cpu (calibrated), or 'all' to "
                                     "rank every GPU kind by dollars per problem.")] = "h100",
    strategy: Annotated[str, typer.Option(help="A registered strategy that can predict its requests "
                                          "(self_consistency, best_of_n, weighted_vote, ...).")
                        ] = "self_consistency",
    n: Annotated[int, typer.Option("-n", "--n", min=1, help="Samples per prompt.")] = 1,
    prompt: Annotated[int, typer.Option(min=0, help="Prompt tokens.")] = 200,
    gen: Annotated[int, typer.Option(min=0, help="Generated tokens per sample.")] = 8000,
    cached: Annotated[int, typer.Option(min=0, help="Prompt tokens already in the prefix cache.")
                      ] = 0,
    sparse: Annotated[str | None, typer.Option(
        "--sparse", metavar="SPEC", help="Sparse attention as Kinetics prices it: topk:K[,local=W] "
        "(K + W positions per token, selection free) or block:K,size=S[,local=W] (K blocks of S "
        "plus W local positions, plus scoring every block each step).")] = None,
    sparse_kv: Annotated[int | None, typer.Option(
        "--sparse-kv", min=1, help="Sparse attention KV budget B (positions per token).")] = None,
    sparse_block: Annotated[int | None, typer.Option(
        min=1, help="Block size for block top-k sparse attention (needs --sparse-kv).")] = None,
    concurrency: Annotated[int | None, typer.Option(
        min=1, help="Sequences in flight sharing each weight read (default: this request's).")
                           ] = None,
    dtype_bytes: Annotated[int | None, typer.Option(
        min=1, help="Override bytes per weight/KV element (default: the config's dtype).")] = None,
    tp: Annotated[int, typer.Option("--tp", min=1, help="Tensor-parallel GPUs per replica: FLOPs and weight "
                                    "reads per GPU over it, plus the all-reduces; GPU-seconds and dollars "
                                    "times it.")] = 1,
    quantization: Annotated[str | None, typer.Option(
        help="Weight quantization as vLLM names it: fp8, int8 (1 byte a weight), awq, gptq (4 bits + "
        "scales).")] = None,
    spec_acceptance: Annotated[float | None, typer.Option(
        "--spec-acceptance", min=0.0, max=0.999, help="Speculative decoding: the chance a draft token is "
        "accepted (Leviathan et al. 2023).")] = None,
    spec_tokens: Annotated[int, typer.Option("--spec-tokens", min=1, help="Speculative decoding: draft tokens "
                                             "per target forward.")] = 4,
    spec_draft: Annotated[str | None, typer.Option(
        "--spec-draft", metavar="MODEL", help="Speculative decoding: the draft model (default: none, as "
        "n-gram lookup).")] = None,
    max_seconds: Annotated[float | None, typer.Option(
        "--max-seconds", help="With --gpu all: latency bound in predicted seconds per problem; "
        "names the cheapest GPU kind that meets it.")] = None,
    price: Annotated[list[str] | None, typer.Option(
        "--price", metavar="KIND=USD", help="Your price for a GPU kind in US dollars per "
        "GPU-hour, e.g. --price h100=2.10; repeat for more kinds (wins over --prices).")] = None,
    prices_file: Annotated[Path | None, typer.Option(
        "--prices", metavar="FILE", help="YAML/JSON file mapping GPU kind to US dollars per "
        "GPU-hour (e.g. 'h100: 2.10'), overriding the built-in approximate list prices.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")
                       ] = False,
) -> None:
    """Cost of N samples of GEN tokens on one prompt, per model, on one device or on every one."""
    if ctx.invoked_subcommand is not None:
        return
    if not model:
        raise typer.BadParameter("pass at least one --model (e.g. --model Qwen/Qwen3-8B)",
                                 param_hint="--model")
    planned = _planner(strategy)
    if cached > prompt:
        raise typer.BadParameter(f"--cached {cached} exceeds --prompt {prompt}",
                                 param_hint="--cached")
    rank_all = gpu.strip().lower() == "all"
    _check_max_seconds(max_seconds, rank_all, gpu)
    overrides, prices, kinds = _price_list(prices_file, price, gpu, rank_all)
    deployment = _deployment(tp, quantization, spec_acceptance, spec_tokens, spec_draft)
    archs, devices, setting = _models_and_devices(model, kinds, dtype_bytes, sparse, sparse_kv,
                                                  sparse_block, deployment)
    if setting is not None:
        sparse_kv = setting.budget

    shapes = planned(n, prompt, gen, cached)
    plan = {"strategy": strategy, "n": n, "prompt_tokens": prompt, "gen_tokens": gen,
            "sparse_kv": sparse_kv, "sparse": setting.label if setting else None, "tensor_parallel": tp,
            "quantization": quantization, "spec_acceptance": spec_acceptance,
            "spec_tokens": spec_tokens if spec_acceptance is not None else None, "spec_draft": spec_draft}
    priced = _pricer(shapes, prices, concurrency, setting, sparse_kv, sparse_block, deployment)
    if rank_all:
        reports = [_rank_gpus(arch, devices, priced, shapes, plan, overrides, concurrency,
                              max_seconds) for arch in archs]
        _show(reports, as_json, ranking=True)
        return

    hardware = devices[0]
    rows = [_cost_row(arch, hardware, plan, priced, overrides) for arch in archs]
    _show(rows, as_json, ranking=False)


def _show(reports: list[dict[str, Any]], as_json: bool, ranking: bool) -> None:
    """Print per-model reports: as JSON (one object for one model, else a list), or as tables (one
    GPU ranking per model for ``--gpu all``, else one table of every model on the device)."""
    if as_json:
        typer.echo(json.dumps(reports if len(reports) > 1 else reports[0], indent=2))
    elif ranking:
        for report in reports:
            _print_ranking(report)
    else:
        _print_rows(reports, reports[0]["hardware"], reports[0]["ridge"])


def _planner(strategy: str) -> Any:
    """The strategy's ``planned_requests`` (request shapes from n, prompt and generation lengths);
    a strategy that cannot predict its requests before running is refused with what to do instead."""
    from tts.registry import STRATEGIES, UnknownNameError

    try:
        strategy_class = STRATEGIES.load(strategy)
    except UnknownNameError as exc:
        raise typer.BadParameter(str(exc), param_hint="--strategy") from None
    planned = getattr(strategy_class, "planned_requests", None)
    if planned is None:
        raise typer.BadParameter(f"strategy {strategy!r} cannot predict its requests before running; price a "
                                 "past run instead (`tts eval` prints its cost)", param_hint="--strategy")
    return planned


def _check_max_seconds(max_seconds: float | None, rank_all: bool, gpu: str) -> None:
    """``--max-seconds`` picks among all GPU kinds, so it needs ``--gpu all`` and a positive bound."""
    from tts.cli.errors import fail

    if max_seconds is not None and not rank_all:
        raise fail(f"--max-seconds picks the cheapest of all GPU kinds; add --gpu all (or drop "
                   f"--max-seconds and read the seconds for --gpu {gpu})")
    if max_seconds is not None and not max_seconds > 0:
        raise fail(f"--max-seconds must be > 0 seconds per problem, got {max_seconds:g}")


def _price_list(prices_file: Path | None, price: list[str] | None, gpu: str,
                rank_all: bool) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """The user's price overrides (``--prices`` file, then ``--price``), the full price table with
    them applied, and the GPU kinds to price (every kind for ``--gpu all``)."""
    from tts.cost.hardware import HARDWARE
    from tts.cost.prices import (
        PriceError,
        gpu_kind,
        load_prices,
        parse_prices,
        price_table,
    )
    from tts.cli.errors import fail

    try:
        overrides = load_prices(prices_file) if prices_file is not None else {}
        overrides.update(parse_prices(price or []))
        prices = price_table(overrides)
        kinds = list(HARDWARE) if rank_all else [gpu_kind(gpu)]
    except PriceError as exc:
        unknown_gpu = str(exc).startswith("unknown GPU")
        raise fail(f"--gpu {gpu}: {exc}, or all to rank every kind" if unknown_gpu else str(exc)
                   ) from None
    return overrides, prices, kinds


def _deployment(tp: int, quantization: str | None, acceptance: float | None, tokens: int,
                draft: str | None) -> dict[str, Any]:
    """The CostModel's deployment settings of ``--tp``, ``--quantization`` and ``--spec-*``
    (:mod:`tts.cost.deployment`); each is checked here, before anything is printed."""
    from tts.cost.architecture import load_architecture
    from tts.cost.deployment import Speculation, weight_bytes_per_param
    from tts.cli.errors import fail

    if acceptance is None and draft is not None:
        raise fail("--spec-draft needs --spec-acceptance (the chance the target accepts a draft token)")
    try:
        weight_bytes_per_param(quantization, 2)
        speculation = None if acceptance is None else Speculation(
            acceptance, tokens, load_architecture(draft) if draft is not None else None)
    except ValueError as exc:
        raise fail(str(exc)) from None
    return {"tensor_parallel": tp, "quantization": quantization, "speculation": speculation}


def _models_and_devices(model: list[str], kinds: list[str], dtype_bytes: int | None,
                        sparse: str | None, sparse_kv: int | None,
                        sparse_block: int | None, deployment: dict[str, Any]) -> tuple[list[Any], list[Any], Any]:
    """The architectures of ``model``, the devices of ``kinds`` and the ``--sparse`` setting (or
    None); every flag is checked here, by building one cost model, before anything is printed."""
    from tts.cost.architecture import load_architecture
    from tts.cost.cost_model import CostModel, SparseAttention
    from tts.cost.hardware import get_hardware
    from tts.cli.errors import fail

    try:
        archs = [load_architecture(m, dtype_bytes=dtype_bytes) for m in model]
        devices = [get_hardware(k) for k in kinds]
        if sparse is not None and (sparse_kv is not None or sparse_block is not None):
            raise ValueError("--sparse sets the KV budget and block size itself; drop --sparse-kv "
                             "and --sparse-block")
        setting = SparseAttention.parse(sparse) if sparse is not None else None
        # Checks the sparse-attention flags before anything is printed.
        for device in devices:
            CostModel(archs[0], device, sparse_kv_budget=sparse_kv, sparse_block=sparse_block,
                      sparse=setting, **deployment)
    except ValueError as exc:
        raise fail(str(exc)) from None
    return archs, devices, setting


def _pricer(shapes: list[Any], prices: dict[str, float], concurrency: int | None, setting: Any,
            sparse_kv: int | None, sparse_block: int | None, deployment: dict[str, Any]) -> Any:
    """``priced(arch, device) -> (cost, $/GPU-hour or None, $ or None)``: the planned requests'
    cost on one device under the sparse-attention flags, and its dollars where a price is known."""
    from tts.cost.cost_model import CostModel

    def priced(arch: Any, device: Any) -> tuple[Any, float | None, float | None]:
        if setting is not None:
            cm = CostModel(arch, device, sparse=setting, **deployment)
        else:
            cm = CostModel(arch, device, sparse_kv_budget=sparse_kv, sparse_block=sparse_block, **deployment)
        c = _plan_cost(cm, shapes, concurrency)
        usd_h = prices.get(device.name.lower())
        return c, usd_h, None if usd_h is None else c.gpu_seconds / 3600.0 * usd_h

    return priced


def _cost_row(arch: Any, hardware: Any, plan: dict[str, Any], priced: Any,
              overrides: dict[str, float]) -> dict[str, Any]:
    """One model's cost on one device: the fields of ``--json`` and of the printed table."""
    c, usd_h, usd = priced(arch, hardware)
    return {
        "model": arch.name, "params": arch.params, "active_params": arch.active_params,
        "hardware": hardware.name, "ridge": hardware.ridge, **plan,
        "flops": c.flops, "bytes": c.bytes, "eflops": c.eflops, "seconds": c.seconds,
        "gpu_seconds": c.gpu_seconds,
        "param_flops": c.param_flops, "attention_flops": c.attention_flops,
        "weight_bytes": c.weight_bytes, "kv_bytes": c.kv_bytes, "dominant": c.dominant,
        "attention_share": c.attention_share, "eflops_per_token": c.eflops_per_token,
        "usd_per_gpu_hour": usd_h, "dollars": usd,
        "price_source": _price_source(hardware.name.lower(), overrides),
    }


# vLLM's default gpu_memory_utilization: the share of GPU memory it takes for weights and KV cache.
_MEMORY_UTILIZATION = 0.9


def _plan_cost(cm: Any, shapes: list[Any], concurrency: int | None) -> Any:
    from tts.cost.cost_model import Cost

    return Cost.total([cm.cost_request(sh.prompt_tokens, list(sh.completion_tokens),
                                       cached_prompt_tokens=sh.cached_prompt_tokens,
                                       concurrency=concurrency)
                       for sh in shapes])


def _memory_needed(arch: Any, shapes: list[Any], prompt: int, n: int, gen: int,
                   quantization: str | None = None) -> float:
    """Weights plus the KV cache of one problem with all its samples at full length at once.

    Full-attention layers hold every position; a sliding-window layer holds at most its window per
    sequence; a hybrid model adds each sequence's recurrent (Mamba) state.
    """
    kv_tokens = max([prompt + n * gen] + [sh.prompt_tokens + sum(sh.completion_tokens)
                                          for sh in shapes])
    sequences = max([n] + [len(sh.completion_tokens) for sh in shapes])
    cache = 0.0
    for _, kvb, window in arch.attention_groups():
        cache += kvb * (kv_tokens if window is None else sequences * min(window, prompt + gen))
    from tts.cost.deployment import weight_bytes_per_param

    # Quantization packs the matmul weights; an untied input embedding table stays at the dtype.
    table = 0 if arch.tie_word_embeddings else arch.embedding_params
    weights = (arch.params - table) * weight_bytes_per_param(quantization, arch.dtype_bytes) + table * arch.dtype_bytes
    return float(weights + cache + arch.state_bytes_per_sequence * sequences)


def _price_source(key: str, overrides: dict[str, float]) -> str:
    from tts.cost.prices import DEFAULT_PRICES

    if key in overrides:
        return "user"
    return DEFAULT_PRICES[key].source if key in DEFAULT_PRICES else ""


def _rank_gpus(arch: Any, devices: list[Any], priced: Any, shapes: list[Any],
               plan: dict[str, Any], overrides: dict[str, float], concurrency: int | None,
               max_seconds: float | None) -> dict[str, Any]:
    """Every GPU kind's seconds and dollars for one problem of ``arch``, cheapest first."""
    from tts.cost.prices import PRICE_BASIS, Quote, rank_by_dollars

    need = _memory_needed(arch, shapes, plan["prompt_tokens"], plan["n"], plan["gen_tokens"], plan["quantization"])
    quotes, usable = [], {}
    gpus = plan["tensor_parallel"]
    for device in devices:
        c, usd_h, _ = priced(arch, device)
        usable[device.name] = _MEMORY_UTILIZATION * device.memory_bytes * gpus
        quotes.append(Quote(device.name, c.seconds, usd_h, need <= usable[device.name], gpus=gpus))
    ranking = rank_by_dollars(quotes, max_seconds)
    return {
        "model": arch.name, **plan, "concurrency": concurrency, "max_seconds": max_seconds,
        "price_basis": PRICE_BASIS if not overrides else f"{PRICE_BASIS}, with your overrides",
        "memory_utilization": _MEMORY_UTILIZATION,
        "ranking": [{
            "gpu": q.kind, "seconds": q.seconds, "usd_per_gpu_hour": q.usd_per_hour,
            "dollars": q.dollars, "memory_needed_bytes": need,
            "memory_usable_bytes": usable[q.kind], "fits": q.fits,
            "meets_max_seconds": None if max_seconds is None else ranking.meets(q),
            "price_source": _price_source(q.kind.lower(), overrides),
        } for q in ranking.quotes],
        "cheapest": ranking.cheapest.kind if ranking.cheapest else None,
        "fastest": ranking.fastest.kind if ranking.fastest else None,
    }


def _dollars(x: float) -> str:
    return f"${x:#.3g}" if x < 1 else f"${x:,.2f}"


def _print_ranking(report: dict[str, Any]) -> None:
    from rich.table import Table

    bound = report["max_seconds"]
    title = (f"{report['model'].rpartition('/')[2]}, {report['strategy']}: n={report['n']}, "
             f"prompt={report['prompt_tokens']}, gen={report['gen_tokens']}") + _deployment_label(report)
    if report["sparse"]:
        title += f", sparse {report['sparse']} (KV budget {report['sparse_kv']})"
    elif report["sparse_kv"]:
        title += f", sparse KV {report['sparse_kv']}"
    yours = any(r["price_source"] == "user" for r in report["ranking"])
    gpus = report.get("tensor_parallel") or 1
    where = "one GPU" if gpus == 1 else f"{gpus} GPUs (tensor parallel; $ counts all {gpus})"
    alone = (f"one problem alone on {where}" if report["concurrency"] is None else
             f"one problem's share of {where} running {report['concurrency']} sequences")
    caption = (f"Cheapest first. $/GPU-h: {report['price_basis']}{' (* yours)' if yours else ''}"
               f"; change with --price KIND=USD or --prices FILE. seconds: roofline, {alone}. "
               f"memory: weights + KV of all samples / {report['memory_utilization']:.0%} of GPU "
               f"memory.")
    table = Table("#", "GPU", title=title, caption=caption, caption_justify="left")
    for header in ("$/GPU-h", "seconds", "$/problem", "memory GB"):
        table.add_column(header, justify="right")
    if bound is not None:
        table.add_column(f"≤{_seconds(bound)}")
    for i, r in enumerate(report["ranking"], 1):
        mem = f"{r['memory_needed_bytes'] / 1e9:.0f}/{r['memory_usable_bytes'] / 1e9:.0f}"
        meets = [] if bound is None else ["yes" if r["meets_max_seconds"] else "no"]
        star = "*" if r["price_source"] == "user" else ""
        style = None if r["fits"] and r["meets_max_seconds"] is not False else "dim"
        table.add_row(str(i), r["gpu"], f"{r['usd_per_gpu_hour']:.2f}{star}",
                      _seconds(r["seconds"]), _dollars(r["dollars"]),
                      mem if r["fits"] else f"{mem} no fit", *meets, style=style)
    console = _console()
    console.print(table)
    rows = {r["gpu"]: r for r in report["ranking"]}

    def said(name: str) -> str:
        r = rows[name]
        return f"{name} ({_seconds(r['seconds'])}, {_dollars(r['dollars'])} per problem)"

    fastest = report["fastest"]
    if fastest is None:
        console.print("No GPU kind holds the weights and one problem's KV cache; lower -n or "
                      "--gen, or use a smaller model.")
    elif bound is None:
        console.print(f"Cheapest: {said(report['cheapest'])}. Fastest: {said(fastest)}.")
    elif report["cheapest"] is not None:
        console.print(f"Cheapest within {_seconds(bound)} per problem: "
                      f"{said(report['cheapest'])}.")
    else:
        console.print(f"No GPU kind meets {_seconds(bound)} per problem; the fastest is "
                      f"{said(fastest)}.")


def _deployment_label(row: dict[str, Any]) -> str:
    """The deployment settings of a report as a title's tail (empty for one GPU at the dtype)."""
    parts = []
    if row.get("tensor_parallel", 1) > 1:
        parts.append(f"tensor parallel {row['tensor_parallel']}")
    if row.get("quantization"):
        parts.append(f"{row['quantization']} weights")
    if row.get("spec_acceptance") is not None:
        draft = f", draft {row['spec_draft']}" if row.get("spec_draft") else ""
        parts.append(f"speculative k={row['spec_tokens']} a={row['spec_acceptance']:g}{draft}")
    return "".join(f", {p}" for p in parts)


def _print_rows(rows: list[dict[str, Any]], hw_name: str, ridge: float) -> None:
    from rich.table import Table

    first = rows[0]
    title = (f"{first['strategy']}: n={first['n']}, prompt={first['prompt_tokens']}, "
             f"gen={first['gen_tokens']} on {hw_name} (I = {ridge:.4g} FLOP/byte)")
    title += _deployment_label(first)
    if first["sparse"]:
        title += f", sparse {first['sparse']} (KV budget {first['sparse_kv']})"
    elif first["sparse_kv"]:
        title += f", sparse KV budget {first['sparse_kv']}"
    console = _console()
    if len(rows) == 1:
        table = Table("quantity", "value", "breakdown", title=title)
        r = first
        table.add_row("params", _si(r["params"]), f"active {_si(r['active_params'])}")
        table.add_row("FLOPs", _si(r["flops"]), f"params {_si(r['param_flops'])}, "
                      f"attention {_si(r['attention_flops'])}")
        table.add_row("bytes", _si(r["bytes"], "B"), f"weights {_si(r['weight_bytes'], 'B')}, "
                      f"KV {_si(r['kv_bytes'], 'B')}")
        table.add_row("eFLOPs", _si(r["eflops"]), f"attention/KV share {r['attention_share']:.1%}"
                      f", {_si(r['eflops_per_token'])} per generated token")
        table.add_row("seconds", _seconds(r["seconds"]), "roofline, summed over decode steps")
        if r["dollars"] is None:
            table.add_row("dollars", "-", f"no price for {hw_name}; pass --price "
                          f"{hw_name.lower()}=USD_PER_HOUR")
        else:
            basis = "your price" if r["price_source"] == "user" else "approx. list price"
            gpus = f" x {r['tensor_parallel']} GPUs" if r.get("tensor_parallel", 1) > 1 else ""
            table.add_row("dollars", _dollars(r["dollars"]),
                          f"at ${r['usd_per_gpu_hour']:.2f}/GPU-h{gpus} ({basis}; --price to change)")
        table.add_row("dominant", r["dominant"], "compute = FLOPs, memory = I x bytes")
    else:
        table = Table("model", "params", "FLOPs", "bytes", "eFLOPs", "attn/KV", "eFLOP/tok",
                      "seconds", "bound", title=title,
                      caption="attn/KV: share of eFLOPs spent on attention and KV-cache traffic")
        for r in rows:
            params = _si(r["params"])
            if r["active_params"] != r["params"]:
                params += f" ({_si(r['active_params'])})"
            table.add_row(r["model"].rpartition("/")[2], params, _si(r["flops"]),
                          _si(r["bytes"], "B"), _si(r["eflops"]), f"{r['attention_share']:.0%}",
                          _si(r["eflops_per_token"]), _seconds(r["seconds"]), r["dominant"])
    console.print(table)


@app.command()
def calibrate(
    engine: Annotated[bool, typer.Option(
        help="Also time real decoding on the vLLM engine and compare with the predictions.")
                      ] = False,
    model: Annotated[str, typer.Option(
        "--model", "-m", help="Model for --engine (HF id, alias or config.json path).")
                     ] = "HuggingFaceTB/SmolLM2-135M-Instruct",
    gpu: Annotated[str, typer.Option(help="Device to predict for with --engine (default: this "
                                     "machine's calibrated CPU).")] = "cpu",
    dtype_bytes: Annotated[int | None, typer.Option(
        min=1, help="Bytes per element the engine runs at (e.g. 4 for float32 on CPU).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")
                       ] = False,
) -> None:
    """Measure this CPU's matmul FLOP/s and memory bandwidth (cached for --gpu cpu)."""
    from tts.cost.hardware import calibrate_cpu

    cpu = calibrate_cpu(refresh=True)
    out: dict[str, Any] = {"cpu": {"peak_flops": cpu.peak_flops, "bandwidth": cpu.bandwidth,
                                   "ridge": cpu.ridge, "source": cpu.source}}
    if engine:
        out["engine"] = _engine_report(model, gpu, dtype_bytes)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    from rich.table import Table

    console = _console()
    table = Table("quantity", "value", title="CPU calibration")
    table.add_row("matmul FLOP/s (float32)", _si(cpu.peak_flops, "FLOP/s"))
    table.add_row("memory bandwidth", _si(cpu.bandwidth, "B/s"))
    table.add_row("ridge I", f"{cpu.ridge:.3g} FLOP/byte")
    console.print(table)
    if engine:
        rep = out["engine"]
        t = Table("n", "gen", "tokens", "predicted", "measured", "measured/predicted",
                  title=f"{rep['model']} on {rep['hardware']}: predicted vs measured decode")
        for p in rep["points"]:
            t.add_row(str(p["n"]), str(p["gen_len"]), str(p["generated_tokens"]),
                      _seconds(p["predicted_seconds"]), _seconds(p["measured_seconds"]),
                      f"{p['measured_seconds'] / p['predicted_seconds']:.3g}"
                      if p["predicted_seconds"] else "-")
        console.print(t)
        console.print(f"Spearman rho = {rep['spearman']:.3f}, median relative error = "
                      f"{rep['median_relative_error']:.1%}, median measured/predicted = "
                      f"{rep['median_ratio']:.3g}; with that factor (leave-one-out) the median error is "
                      f"{rep['scaled_median_relative_error']:.1%}")


def _engine_report(model: str, gpu: str, dtype_bytes: int | None) -> dict[str, Any]:
    import dataclasses

    from tts.cost.architecture import load_architecture
    from tts.cost.calibration import compare_predictions, default_points
    from tts.cost.cost_model import CostModel
    from tts.cost.hardware import get_hardware

    try:
        from tts.backends.vllm_timing import measure_decode
    except ImportError as exc:
        typer.echo(f"--engine needs tts.backends.vllm_timing.measure_decode (the vLLM backend) "
                   f"and vLLM installed: {exc}", err=True)
        raise typer.Exit(1) from None
    try:
        cm = CostModel(load_architecture(model, dtype_bytes=dtype_bytes), get_hardware(gpu))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    with measure_decode(model) as measure:
        report = compare_predictions(default_points(), measure, cm)
    return {"model": cm.arch.name, "hardware": cm.hardware.name,
            "points": [dataclasses.asdict(p) for p in report.points],
            "spearman": report.spearman, "median_relative_error": report.median_relative_error,
            "median_ratio": report.median_ratio,
            "scaled_median_relative_error": report.scaled_median_relative_error}
