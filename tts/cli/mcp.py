"""``tts mcp``: test-time strategies as a Model Context Protocol tool (``solve``) for any agent.

Its flags are ``tts serve``'s where they mean the same thing (backend, model, strategy allow-list,
verifiers, calibrations, caps), so an operator who knows one knows the other.

Examples:
    tts mcp --backend scripted                   # stdio, the deterministic test backend (no engine)
    tts mcp                                      # stdio, the embedded small model on vLLM
    tts mcp --transport http --port 8765         # streamable HTTP at http://127.0.0.1:8765/mcp
    tts mcp --backend openai --base-url http://127.0.0.1:8001/v1 --model Qwen/Qwen3-8B --allow-strategy beam
"""

from __future__ import annotations

import signal
import sys
from typing import Annotated, Literal

import typer

from tts.cli import serve as shared  # the options and steps tts mcp shares with tts serve
from tts.cli.errors import user_errors
from tts.cli.stopped import exit_on_signal


def mcp_command(
    transport: Annotated[Literal["stdio", "http"], typer.Option(help="stdio (the client starts this command) or "
                                                                "http (streamable HTTP at http://HOST:PORT/mcp).")
                         ] = "stdio",
    backend: shared.Backend = "vllm",
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model of the backend. Default: "
                                              "smollm2-135m.")] = None,
    base_url: shared.BaseUrl = None,
    upstream_timeout: shared.UpstreamTimeout = 120.0,
    upstream_retries: shared.UpstreamRetries = 2,
    upstream_deadline: shared.UpstreamDeadline = 180.0,
    upstream_concurrency: shared.UpstreamConcurrency = 256,
    host: shared.Host = "127.0.0.1",
    port: shared.Port = 8000,
    strategy: Annotated[str | None, typer.Option(help="Strategy of calls that name none (sc-8, beam-4x8, ...). "
                                                 "Default: sc-8, or the first --allow-strategy when sc-8 is not "
                                                 "allowed.")] = None,
    api_key: Annotated[str | None, typer.Option(help=f"http: require 'Authorization: Bearer KEY' (default: "
                                                f"${shared.API_KEY_ENV} when set). stdio needs none: only the client "
                                                "that started the process can reach it.")] = None,
    max_concurrent: shared.MaxConcurrent = 256,
    max_samples: shared.MaxSamples = 64,
    max_tokens: shared.MaxTokens = 4096,
    default_max_tokens: shared.DefaultMaxTokens = 512,
    max_budget_tokens: shared.MaxBudgetTokens = 1_000_000,
    max_body_bytes: shared.MaxBodyBytes = 1 << 20,
    batch_window: shared.BatchWindow = 0.01,
    gpu: shared.Gpu = "h100",
    price_as: shared.PriceAs = None,
    calibration: shared.Calibration = None,
    verifier: shared.Verifier = None,
    allow_strategy: shared.AllowStrategy = None,
    allow_code_execution: shared.AllowCodeExecution = False,
    prompt: shared.Prompt = "plain",
    stop: shared.DefaultStop = None,
    accuracy: shared.Accuracy = 0.6,
    seed: shared.Seed = 0,
    max_model_len: shared.MaxModelLen = 2048,
    kv_cache_gib: shared.KvCacheGib = None,
    engine: shared.EngineSetting = None,
) -> None:
    """Serve test-time strategies as an MCP tool, solve(question, strategy, n, budget) -> answer, confidence,
    cost, over stdio or streamable HTTP. Clients choose only among what these flags allow."""
    from tts.serve import ServeConfig
    from tts.serve.mcp import create_mcp_server, http_app, stdout_to_stderr

    key = shared.api_key_or_env(api_key)
    with user_errors():
        if strategy is None:
            strategy = "sc-8" if not allow_strategy or "self_consistency" in allow_strategy else allow_strategy[0]
        verifiers, calibrations, stop_settings = shared.checked_resources(strategy, verifier, calibration,
                                                                          allow_strategy, stop)
        if transport == "http":
            shared.check_listen(host, port)
        signal.signal(signal.SIGTERM, exit_on_signal)  # run_then_close shuts the engine down
        # Over stdio, stdout carries the protocol: the engine, its workers and early log lines go elsewhere.
        with stdout_to_stderr():
            generator, session, name = shared.open_session(
                backend, model, base_url, {"timeout": upstream_timeout, "max_retries": upstream_retries,
                                           "deadline": upstream_deadline, "concurrency": upstream_concurrency},
                shared.engine_flags(accuracy, seed, max_model_len, kv_cache_gib, engine),
                {"max_tokens": default_max_tokens, "batch_window": batch_window, "gpu": gpu, "price_as": price_as,
                 "max_workers": max(max_concurrent, 8)}, calibrations)
            config = ServeConfig(model=name, default_strategy=strategy, stop=stop_settings, api_key=key,
                                 max_samples=max_samples, max_tokens=max_tokens, max_budget_tokens=max_budget_tokens,
                                 max_concurrent=max_concurrent, verifiers=verifiers, calibrations=calibrations,
                                 strategies=tuple(allow_strategy) if allow_strategy else None, prompt=prompt,
                                 allow_code_execution=allow_code_execution)
            server = shared.close_on_failure(generator, session, lambda: create_mcp_server(session, config))
    if transport == "stdio":
        typer.echo(f"tts mcp: tool 'solve' on {name} over stdio", err=True)
        shared.run_then_close(generator, session, lambda: server.run("stdio"))
        return
    import uvicorn

    app = http_app(server, host=host, api_key=key, max_body_bytes=max_body_bytes)
    typer.echo(f"tts mcp: tool 'solve' on {name} at http://{host}:{port}/mcp (auth {'on' if key else 'off'})", err=True)
    sys.setswitchinterval(0.001)  # as tts serve: the event loop shares the GIL with the solves' threads
    shared.run_then_close(generator, session, lambda: uvicorn.run(app, host=host, port=port, log_level="warning",
                                                           access_log=False, timeout_graceful_shutdown=10))
