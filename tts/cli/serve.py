"""``tts serve``: an OpenAI-compatible server whose model names choose a test-time strategy.

Examples:
    tts serve                                   # the embedded small model on vLLM, port 8000
    tts serve --backend openai --base-url http://127.0.0.1:8001/v1 --model Qwen/Qwen3-8B
    tts serve --backend scripted --port 8123    # the deterministic test backend (no engine)
    TTS_API_KEY=secret tts serve --max-concurrent 64
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from tts.cli.errors import user_errors

API_KEY_ENV = "TTS_API_KEY"


def build_generator(backend: str, model: str | None, base_url: str | None, accuracy: float, seed: int,
                    max_model_len: int, kv_cache_gib: int | None) -> object:
    """The generator ``tts serve`` keeps warm.

    ``scripted`` is the deterministic test backend: with no problems known in advance, every
    question is answered "42" with probability ``accuracy`` (wrong answers 41 and 43, the rest no
    answer), so that clients, limits and load can be exercised without an engine.
    """
    from pydantic import TypeAdapter

    from tts.backends.factory import create_generator
    from tts.config import BackendConfig

    if backend == "scripted":
        from tts.backends.scripted import ScriptedGenerator

        wrong = max(0.9 - accuracy, 0.0)
        return ScriptedGenerator(default={"42": accuracy, "41": wrong * 0.6, "43": wrong * 0.4}, seed=seed,
                                 model_name=model or "scripted")
    spec: dict[str, object] = {"kind": backend}
    if model:
        spec["model"] = model
    if backend == "openai" and base_url:
        spec["base_url"] = base_url
    if backend == "vllm":
        spec.update(max_model_len=max_model_len, seed=seed)
        if kv_cache_gib is not None:
            spec["kv_cache_gib"] = kv_cache_gib
    return create_generator(TypeAdapter(BackendConfig).validate_python(spec), [])


def serve_command(
    backend: Annotated[str, typer.Option(help="vllm (the engine in this process), openai (an OpenAI-compatible "
                                         "server behind tts) or scripted (deterministic test backend).")] = "vllm",
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model of the backend; also the name clients "
                                              "write after the strategy (sc-16/<model>). Default: smollm2-135m.")] = None,
    served_name: Annotated[str | None, typer.Option(help="Name clients use for the model (default: --model).")] = None,
    base_url: Annotated[str | None, typer.Option(help="openai backend: upstream URL up to /v1.")] = None,
    host: Annotated[str, typer.Option(help="Interface to listen on (127.0.0.1: this machine only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8000,
    strategy: Annotated[str, typer.Option(help="Strategy of requests whose model name has none (sc-8, beam-4x8, "
                                          "auto, ...).")] = "sc-8",
    api_key: Annotated[str | None, typer.Option(help=f"Require 'Authorization: Bearer KEY' on /v1 (default: "
                                                f"${API_KEY_ENV} when set).")] = None,
    max_concurrent: Annotated[int, typer.Option(min=1, help="Requests solved at once; more get 429.")] = 256,
    max_choices: Annotated[int, typer.Option(min=1, help="Largest n (choices) per request.")] = 8,
    max_samples: Annotated[int, typer.Option(min=1, help="Largest strategy n per solve.")] = 64,
    max_tokens: Annotated[int, typer.Option(min=1, help="Largest max_tokens per sample.")] = 4096,
    default_max_tokens: Annotated[int, typer.Option(min=1, help="max_tokens of requests that give none.")] = 512,
    max_budget_tokens: Annotated[int, typer.Option(min=1, help="Most generated tokens (worst case) one request "
                                                   "may spend; budgets in other units are converted.")] = 1_000_000,
    max_body_bytes: Annotated[int, typer.Option(min=1024, help="Largest request body.")] = 1 << 20,
    batch_window: Annotated[float, typer.Option(min=0.0, help="Seconds an engine call waits for concurrent "
                                                "requests to join.")] = 0.01,
    gpu: Annotated[str, typer.Option(help="GPU that prices eFLOPs, seconds and dollars in responses.")] = "h100",
    price_as: Annotated[str | None, typer.Option(help="Model architecture that prices usage (default: the backend's "
                                                 "model; smollm2-135m for scripted).")] = None,
    calibration: Annotated[str | None, typer.Option(help="auto/<model>: calibration source of the auto strategy (a "
                                                    "sample pool, past tts eval run or tts sweep directory of "
                                                    "this model).")] = None,
    accuracy: Annotated[float, typer.Option(min=0.0, max=0.9, help="scripted: chance a sample answers 42.")] = 0.6,
    seed: Annotated[int, typer.Option(help="Run seed (engine seed of vllm and scripted).")] = 0,
    max_model_len: Annotated[int, typer.Option(min=64, help="vllm: longest prompt + completion.")] = 2048,
    kv_cache_gib: Annotated[int | None, typer.Option(min=1, help="vllm on CPU: KV-cache GiB.")] = None,
) -> None:
    """Serve test-time strategies behind an OpenAI-compatible API (/v1/chat/completions, /v1/completions,
    /v1/models, /metrics, /health). The model name chooses the strategy: sc-16/<model>, beam-4x8/<model>."""
    import uvicorn

    from tts.models import DEFAULT_MODEL
    from tts.serve import ServeConfig, create_app
    from tts.session import Session

    key = api_key if api_key is not None else (os.environ.get(API_KEY_ENV) or None)
    with user_errors():
        from tts.serve.routing import strategy_spec

        strategy_spec(strategy)  # refuse a bad default before an engine starts
        generator = build_generator(backend, model, base_url, accuracy, seed, max_model_len, kv_cache_gib)
        name = served_name or model or (DEFAULT_MODEL if backend != "scripted" else "scripted")
        pricing = price_as or (model or DEFAULT_MODEL if backend != "scripted" else DEFAULT_MODEL)
        session = Session(generator=generator, max_tokens=default_max_tokens, batch_window=batch_window, gpu=gpu,
                          price_as=pricing, seed=seed, max_workers=max(max_concurrent, 8) * max_choices,
                          strategy_settings={"auto": {"calibration": calibration}} if calibration else None)
        config = ServeConfig(model=name, default_strategy=strategy, api_key=key, max_body_bytes=max_body_bytes,
                             max_choices=max_choices, max_samples=max_samples, max_tokens=max_tokens,
                             max_budget_tokens=max_budget_tokens, max_concurrent=max_concurrent)
        app = create_app(session, config)
    typer.echo(f"tts serve: {name} on http://{host}:{port}/v1 (strategy by model name, e.g. sc-16/{name}; "
               f"auth {'on' if key else 'off'})", err=True)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        session.close()
        generator.close()  # type: ignore[attr-defined]
