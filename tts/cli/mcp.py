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

import os
import signal
import sys
from typing import Annotated, Literal

import typer

from tts.cli.errors import fail, user_errors
from tts.cli.serve import API_KEY_ENV, _exit_on_signal, build_generator, operator_resources


def mcp_command(
    transport: Annotated[Literal["stdio", "http"], typer.Option(help="stdio (the client starts this command) or "
                                                                "http (streamable HTTP at http://HOST:PORT/mcp).")
                         ] = "stdio",
    backend: Annotated[str, typer.Option(help="vllm (the engine in this process), openai (an OpenAI-compatible "
                                         "server behind tts) or scripted (deterministic test backend).")] = "vllm",
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model of the backend. Default: "
                                              "smollm2-135m.")] = None,
    base_url: Annotated[str | None, typer.Option(help="openai backend: upstream URL up to /v1.")] = None,
    upstream_timeout: Annotated[float, typer.Option(min=0.001, help="openai backend: seconds to wait for one "
                                                    "answer of the upstream.")] = 120.0,
    upstream_retries: Annotated[int, typer.Option(min=0, max=20, help="openai backend: retries of a failed upstream "
                                                  "request.")] = 2,
    upstream_deadline: Annotated[float, typer.Option(min=0.001, help="openai backend: seconds one upstream request "
                                                     "may take in all, retries included.")] = 180.0,
    upstream_concurrency: Annotated[int, typer.Option(min=1, help="openai backend: upstream requests in flight at "
                                                      "once.")] = 256,
    host: Annotated[str, typer.Option(help="http: interface to listen on (127.0.0.1: this machine only).")
                    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="http: port.")] = 8000,
    strategy: Annotated[str | None, typer.Option(help="Strategy of calls that name none (sc-8, beam-4x8, ...). "
                                                 "Default: sc-8, or the first --allow-strategy when sc-8 is not "
                                                 "allowed.")] = None,
    api_key: Annotated[str | None, typer.Option(help=f"http: require 'Authorization: Bearer KEY' (default: "
                                                f"${API_KEY_ENV} when set). stdio needs none: only the client "
                                                "that started the process can reach it.")] = None,
    max_concurrent: Annotated[int, typer.Option(min=1, help="Calls solved at once; more are refused with a "
                                                "tool error.")] = 256,
    max_samples: Annotated[int, typer.Option(min=1, help="Largest strategy n per call.")] = 64,
    max_tokens: Annotated[int, typer.Option(min=1, help="Largest max_tokens per sample.")] = 4096,
    default_max_tokens: Annotated[int, typer.Option(min=1, help="max_tokens of calls that give none.")] = 512,
    max_budget_tokens: Annotated[int, typer.Option(min=1, help="Most generated tokens (worst case) one call may "
                                                   "spend; budgets in other units are converted.")] = 1_000_000,
    max_body_bytes: Annotated[int, typer.Option(min=1024, help="http: largest request body.")] = 1 << 20,
    batch_window: Annotated[float, typer.Option(min=0.0, help="Seconds an engine call waits for concurrent "
                                                "calls to join.")] = 0.01,
    gpu: Annotated[str, typer.Option(help="GPU that prices eFLOPs, seconds and dollars in results.")] = "h100",
    price_as: Annotated[str | None, typer.Option(help="Model architecture that prices usage (default: the backend's "
                                                 "model; smollm2-135m for scripted).")] = None,
    calibration: Annotated[list[str] | None, typer.Option(help="A calibration calls may name for the auto strategy, "
                                                          "as NAME=PATH (repeatable); the first is auto's default.")
                           ] = None,
    verifier: Annotated[list[str] | None, typer.Option(help="A verifier calls may name, as NAME=SPEC (repeatable): "
                                                       "SPEC is a verifier kind or a JSON/YAML mapping. arithmetic, "
                                                       "judge, logprob and self_certainty are always offered.")
                        ] = None,
    allow_strategy: Annotated[list[str] | None, typer.Option(help="A strategy calls may run (repeatable). Default: "
                                                             "every registered one that works with these "
                                                             "settings.")] = None,
    accuracy: Annotated[float, typer.Option(min=0.0, max=0.9, help="scripted: chance a sample answers 42.")] = 0.6,
    seed: Annotated[int, typer.Option(help="Run seed (engine seed of vllm and scripted).")] = 0,
    max_model_len: Annotated[int, typer.Option(min=64, help="vllm: longest prompt + completion.")] = 2048,
    kv_cache_gib: Annotated[int | None, typer.Option(min=1, help="vllm on CPU: KV-cache GiB.")] = None,
) -> None:
    """Serve test-time strategies as an MCP tool, solve(question, strategy, n, budget) -> answer, confidence,
    cost, over stdio or streamable HTTP. Clients choose only among what these flags allow."""
    from tts.models import DEFAULT_MODEL
    from tts.serve import ServeConfig
    from tts.serve.mcp import create_mcp_server, http_app, stdout_to_stderr
    from tts.session import Session

    key = api_key if api_key is not None else (os.environ.get(API_KEY_ENV) or None)
    with user_errors():
        from tts.serve.routing import strategy_spec

        if strategy is None:
            strategy = "sc-8" if not allow_strategy or "self_consistency" in allow_strategy else allow_strategy[0]
        strategy_spec(strategy)  # refuse a bad default before an engine starts
        try:
            verifiers, calibrations = operator_resources(verifier or [], calibration or [], allow_strategy or [])
        except ValueError as exc:
            raise fail(str(exc)) from None
        signal.signal(signal.SIGTERM, _exit_on_signal)  # the finally below shuts the engine down
        # Over stdio, stdout carries the protocol: the engine (and its worker processes) and any log line
        # written before the transport takes stdout over must go elsewhere.
        with stdout_to_stderr():
            generator = build_generator(backend, model, base_url, accuracy, seed, max_model_len, kv_cache_gib,
                                        upstream={"timeout": upstream_timeout, "max_retries": upstream_retries,
                                                  "deadline": upstream_deadline, "concurrency": upstream_concurrency})
            name = model or (DEFAULT_MODEL if backend != "scripted" else "scripted")
            pricing = price_as or (model or DEFAULT_MODEL if backend != "scripted" else DEFAULT_MODEL)
            session = Session(generator=generator, max_tokens=default_max_tokens, batch_window=batch_window, gpu=gpu,
                              price_as=pricing, seed=seed, max_workers=max(max_concurrent, 8),
                              strategy_settings={"auto": {"calibration": next(iter(calibrations.values()))}}
                              if calibrations else None)
            config = ServeConfig(model=name, default_strategy=strategy, api_key=key, max_samples=max_samples,
                                 max_tokens=max_tokens, max_budget_tokens=max_budget_tokens,
                                 max_concurrent=max_concurrent, verifiers=verifiers, calibrations=calibrations,
                                 strategies=tuple(allow_strategy) if allow_strategy else None)
            try:
                server = create_mcp_server(session, config)
            except ValueError as exc:  # an allowed strategy that cannot run with these settings
                session.close()
                generator.close()  # type: ignore[attr-defined]
                raise fail(str(exc)) from None
    try:
        if transport == "stdio":
            typer.echo(f"tts mcp: tool 'solve' on {name} over stdio", err=True)
            server.run("stdio")
        else:
            import uvicorn

            app = http_app(server, host=host, api_key=key, max_body_bytes=max_body_bytes)
            typer.echo(f"tts mcp: tool 'solve' on {name} at http://{host}:{port}/mcp (auth {'on' if key else 'off'})",
                       err=True)
            sys.setswitchinterval(0.001)  # as tts serve: the event loop shares the GIL with the solves' threads
            uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=10)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the shutdown short
        try:
            session.close()
        finally:
            generator.close()  # type: ignore[attr-defined]
