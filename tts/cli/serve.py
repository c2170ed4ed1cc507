"""``tts serve``: an OpenAI-compatible server whose model names choose a test-time strategy.

Examples:
    tts serve                                   # the embedded small model on vLLM, port 8000
    tts serve --backend openai --base-url http://127.0.0.1:8001/v1 --model Qwen/Qwen3-8B
    tts serve --backend scripted --port 8123    # the deterministic test backend (no engine)
    TTS_API_KEY=secret tts serve --max-concurrent 64
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import typer

from tts.cli.errors import fail, user_errors
from tts.cli.stopped import exit_on_signal

API_KEY_ENV = "TTS_API_KEY"


def engine_settings(items: list[str] | None) -> dict[str, Any]:
    """``--engine KEY=VALUE`` items as vLLM backend settings: ``tensor_parallel_size=2``,
    ``quantization=awq``, ``lora.judge=DIR``, ``engine_args.max_num_batched_tokens=8192`` (values read
    as YAML). The backend config checks the names and values.

    Raises:
        BackendError: An item that is not KEY=VALUE or nests deeper than MAPPING.KEY.
    """
    import yaml

    from tts.backends.base import BackendError

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        path = key.strip().split(".")
        if not sep or not all(path) or len(path) > 2:
            raise BackendError(f"--engine {item!r}: write KEY=VALUE for a vLLM backend setting (--engine "
                               "tensor_parallel_size=2) or MAPPING.KEY=VALUE for one key of engine_args, lora or "
                               "speculative_config (--engine engine_args.max_num_batched_tokens=8192)")
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        if len(path) == 1:
            out[path[0]] = value
        else:
            out[path[0]] = {**(out.get(path[0]) or {}), path[1]: value}
    return out


def engine_flags(accuracy: float, seed: int, max_model_len: int, kv_cache_gib: int | None,
                 engine: list[str] | None) -> dict[str, Any]:
    """The engine flags of ``tts serve`` and ``tts mcp`` as :func:`open_session` takes them."""
    return {"accuracy": accuracy, "seed": seed, "max_model_len": max_model_len, "kv_cache_gib": kv_cache_gib,
            "settings": engine_settings(engine)}


def build_generator(backend: str, model: str | None, base_url: str | None, accuracy: float, seed: int,
                    max_model_len: int, kv_cache_gib: int | None, upstream: Mapping[str, Any] | None = None,
                    engine: Mapping[str, Any] | None = None) -> object:
    """The generator ``tts serve`` keeps warm.

    ``scripted`` is the deterministic test backend: with no problems known in advance, every
    question is answered "42" with probability ``accuracy`` (wrong answers 41 and 43, the rest no
    answer), so that clients, limits and load can be exercised without an engine. ``engine``: more
    vLLM backend settings (:func:`engine_settings`), refused on other backends.
    """
    from pydantic import TypeAdapter

    from tts.backends.factory import create_generator
    from tts.config import BackendConfig

    if engine and backend != "vllm":
        from tts.backends.base import BackendError

        raise BackendError(f"--engine sets the in-process vLLM engine; the {backend} backend runs none (drop "
                           "--engine, or use --backend vllm)")
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
    if backend == "openai" and upstream:
        spec.update(upstream)  # timeout, max_retries, deadline, concurrency
    if backend == "litellm":  # LiteLLM's Router bounds each attempt by the timeout; it has no overall deadline
        if base_url:
            spec["api_base"] = base_url
        spec.update({k: v for k, v in (upstream or {}).items() if k != "deadline" and v is not None})
    if backend == "vllm":
        spec.update(max_model_len=max_model_len, seed=seed)
        if kv_cache_gib is not None:
            spec["kv_cache_gib"] = kv_cache_gib
        spec.update(engine or {})
    return create_generator(TypeAdapter(BackendConfig).validate_python(spec), [])


_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def named_settings(values: list[str], flag: str, mapping: bool = False) -> dict[str, Any]:
    """``NAME=VALUE`` options as a dict (``--verifier``, ``--calibration``).

    ``mapping``: VALUE is a kind name or a JSON/YAML mapping with a ``kind`` (a bare NAME is the kind
    named after itself); otherwise VALUE is a path, and a bare PATH is named ``default``.

    Raises:
        ValueError: A malformed value (the message names ``flag``).
    """
    import yaml

    out: dict[str, Any] = {}
    for text in values:
        name, sep, value = text.partition("=")
        if not sep or not _NAME.match(name):
            if sep and not name:
                raise ValueError(f"{flag} {text!r}: write NAME=VALUE with a name before the '='")
            name, value = (text, text) if mapping else ("default", text)
        if not mapping:
            out[name] = value
            continue
        if _NAME.match(value):
            out[name] = {"kind": value}
            continue
        try:
            spec = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ValueError(f"{flag} {name}: the spec is neither a kind nor a JSON/YAML mapping ({exc})") from None
        if not isinstance(spec, dict) or "kind" not in spec:
            raise ValueError(f"{flag} {name}: the spec must be a kind or a mapping with a 'kind', got {value!r}")
        out[name] = spec
    return out


def operator_resources(verifiers: list[str], calibrations: list[str], strategies: list[str],
                       ) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The named verifiers and calibrations of the ``tts serve`` flags, checked before an engine starts.

    Raises:
        ValueError: A malformed flag, a verifier config its kind refuses, or an unknown strategy.
    """
    from tts.config import parse_verifier_config
    from tts.registry import STRATEGIES
    from tts.serve.policy import setting_error

    named = named_settings(verifiers, "--verifier", mapping=True)
    for name, spec in named.items():
        try:
            parse_verifier_config(spec)
        except ValueError as exc:
            raise ValueError(f"--verifier {name}: {setting_error(exc)}") from None
    for kind in strategies:
        STRATEGIES.check(kind)
    return named, named_settings(calibrations, "--calibration")


# --- options shared by tts serve and tts mcp -------------------------------------------------------
# One definition each, so that the two commands' flags mean the same thing.

Backend = Annotated[str, typer.Option(help="vllm (the engine in this process), openai (an OpenAI-compatible "
                                      "server behind tts), litellm (a hosted provider through LiteLLM: --model "
                                      "anthropic/...) or scripted (deterministic test backend).")]
BaseUrl = Annotated[str | None, typer.Option(help="openai backend: upstream URL up to /v1 (litellm: the provider's "
                                             "api_base).")]
UpstreamTimeout = Annotated[float, typer.Option(min=0.001, help="openai backend: seconds to wait for one answer "
                                                "of the upstream.")]
UpstreamRetries = Annotated[int, typer.Option(min=0, max=20, help="openai backend: retries of a failed upstream "
                                              "request (429, 5xx, timeouts, dropped connections).")]
UpstreamDeadline = Annotated[float, typer.Option(min=0.001, help="openai backend: seconds one upstream request may "
                                                 "take in all, retries included.")]
UpstreamConcurrency = Annotated[int, typer.Option(min=1, help="openai backend: upstream requests in flight at once "
                                                  "(the upstream queues the rest itself).")]
ApiKey = Annotated[str | None, typer.Option(help=f"Require 'Authorization: Bearer KEY' over HTTP (default: "
                                            f"${API_KEY_ENV} when set).")]
MaxConcurrent = Annotated[int, typer.Option(min=1, help="Requests (tool calls) solved at once; more are refused "
                                            "(HTTP 429).")]
MaxSamples = Annotated[int, typer.Option(min=1, help="Largest strategy n per solve.")]
MaxTokens = Annotated[int, typer.Option(min=1, help="Largest max_tokens per sample.")]
DefaultMaxTokens = Annotated[int, typer.Option(min=1, help="max_tokens of requests that give none.")]
MaxBudgetTokens = Annotated[int, typer.Option(min=1, help="Most generated tokens (worst case) one request may "
                                              "spend; budgets in other units are converted.")]
MaxBodyBytes = Annotated[int, typer.Option(min=1024, help="Largest HTTP request body.")]
BodyTimeout = Annotated[float, typer.Option(min=0.001, help="Seconds a client has to send its request body; slower "
                                            "uploads get 408.")]
Docs = Annotated[bool, typer.Option(help="Serve the OpenAPI schema at /openapi.json (behind the API key when there is "
                                    "one) and, without a key, its page at /docs.")]
BatchWindow = Annotated[float, typer.Option(min=0.0, help="Seconds an engine call waits for concurrent requests "
                                            "to join.")]
Gpu = Annotated[str, typer.Option(help="GPU that prices eFLOPs, seconds and dollars in answers.")]
PriceAs = Annotated[str | None, typer.Option(help="Model architecture that prices usage (default: the backend's "
                                             "model; none for scripted, which runs no model).")]
Calibration = Annotated[list[str] | None, typer.Option(help="A calibration requests may name for the auto strategy, "
                                                       "as NAME=PATH (repeatable; a sample pool, past tts eval run "
                                                       "or tts sweep directory of this model); the first is auto's "
                                                       "default. A bare PATH is named 'default'.")]
Verifier = Annotated[list[str] | None, typer.Option(help="A verifier requests may name, as NAME=SPEC (repeatable): "
                                                    "SPEC is a verifier kind or a JSON/YAML mapping, e.g. "
                                                    "prm7b='{\"kind\": \"prm\", \"model\": \"/models/prm\"}'. "
                                                    "arithmetic, judge, logprob and self_certainty are always "
                                                    "offered.")]
KeepAliveTimeout = Annotated[int, typer.Option(min=1, help="Seconds an idle keep-alive connection stays open.")]
DefaultStrategy = Annotated[str, typer.Option(help="Strategy of requests whose model name has none (sc-8, beam-4x8, "
                                                "auto, ...).")]
AllowCodeExecution = Annotated[bool, typer.Option(
    "--allow-code-execution", help="Let requests run strategies that execute model-written programs "
                                   "(program_vote, tir, exec_vote, public_tests, codet, revision with execution "
                                   "feedback), always in the bubblewrap sandbox. Off: a client would choose the code "
                                   "this host runs.")]
Prompt = Annotated[Literal["plain", "math"], typer.Option(
                                     help="Prompt of requests that set no tts.prompt: plain sends the conversation "
                                          "as the client sent it (agents: free text, tool calls, JSON); math asks "
                                          "the last question step by step with the answer in \\boxed{}.")]
RateLimitTokens = Annotated[int | None, typer.Option(min=1, help="Most generated tokens per minute per API key (the "
                                                     "whole server without a key); past it, 429 with Retry-After.")]
DefaultStop = Annotated[str | None, typer.Option(
    "--stop", help="Per-request stop of requests that name none, for the voting strategies: a rule (horizon, beta, "
                   "dirichlet, exact, window) or its settings as JSON/YAML ('{rule: horizon, wave: 8}'); requests "
                   "turn it off with tts.stop false. Default: none (every sample drawn).")]
AllowStrategy = Annotated[list[str] | None, typer.Option(help="A strategy requests may run (repeatable). Default: "
                                                         "every registered one that works with these settings.")]
Accuracy = Annotated[float, typer.Option(min=0.0, max=0.9, help="scripted: chance a sample answers 42.")]
Seed = Annotated[int, typer.Option(help="Run seed (engine seed of vllm and scripted).")]
MaxModelLen = Annotated[int, typer.Option(min=64, help="vllm: longest prompt + completion.")]
KvCacheGib = Annotated[int | None, typer.Option(min=1, help="vllm on CPU: KV-cache GiB.")]
EngineSetting = Annotated[list[str] | None, typer.Option(
    "--engine", metavar="KEY=VALUE", help="vllm: an engine setting (repeatable): tensor_parallel_size=2, "
    "quantization=awq, max_num_seqs=128, lora.judge=DIR, speculative_config.method=ngram, or any vLLM engine "
    "argument as engine_args.NAME=VALUE (docs/install.md, Big models).")]
Host = Annotated[str, typer.Option(help="Interface to listen on over HTTP (127.0.0.1: this machine only).")]
Port = Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on over HTTP.")]


def api_key_or_env(api_key: str | None) -> str | None:
    """``--api-key``, else ``$TTS_API_KEY`` when set."""
    return api_key if api_key is not None else (os.environ.get(API_KEY_ENV) or None)


def stop_flag(value: str | None) -> dict[str, Any] | None:
    """``--stop`` as a stop's settings, checked before an engine starts (one line when refused)."""
    if value is None:
        return None
    import yaml
    from pydantic import ValidationError

    from tts.config import StopConfig
    from tts.config import settings_line

    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        parsed = value
    settings = {"rule": parsed} if isinstance(parsed, str) else parsed
    if not isinstance(settings, dict):
        raise fail(f"--stop {value!r}: give a rule (horizon) or its settings ('{{rule: horizon, wave: 8}}').")
    try:
        StopConfig.model_validate(settings)
    except ValidationError as exc:
        raise fail(f"--stop: {settings_line(exc, 'stop')}") from None
    return settings


def checked_resources(strategy: str, verifier: list[str] | None, calibration: list[str] | None,
                      allow_strategy: list[str] | None, stop: str | None = None,
                      ) -> tuple[dict[str, dict[str, Any]], dict[str, str], dict[str, Any] | None]:
    """The operator's flags checked before an engine starts: the default strategy, named verifiers
    and calibrations, allowed strategies (see :func:`operator_resources`) and the default stop
    (:func:`stop_flag`)."""
    from tts.serve.routing import strategy_spec

    strategy_spec(strategy)  # refuse a bad default before an engine starts
    settings = stop_flag(stop)
    try:
        return (*operator_resources(verifier or [], calibration or [], allow_strategy or []), settings)
    except ValueError as exc:
        raise fail(str(exc)) from None


def check_listen(host: str, port: int) -> None:
    """Refuse, in one line and before an engine starts, an address the server could not listen on:
    a port in use, a privileged port, a host that is not this machine's. (uvicorn would find out only
    after the engine's start-up, and end with a log line of its own and exit status 3.)"""
    import errno
    import socket

    if port == 0:  # any free port: nothing to check
        return
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise fail(f"--host {host}: not a name or address of this machine ({exc.strerror}); use 127.0.0.1 "
                   "(this machine only) or 0.0.0.0 (every interface).") from None
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise fail(f"port {port} on {host} is in use (another tts serve, or another server, listens "
                           "there); stop it or choose another port with --port.") from None
            if exc.errno == errno.EACCES:
                raise fail(f"port {port} on {host} needs administrator rights; choose --port 1024 or above.") from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise fail(f"--host {host} is not an address of this machine; use 127.0.0.1 (this machine only) "
                           "or 0.0.0.0 (every interface).") from None
            raise fail(f"cannot listen on {host}:{port}: {exc.strerror}.") from None


def open_session(backend: str, model: str | None, base_url: str | None, upstream: Mapping[str, Any],
                 engine: Mapping[str, Any], session: Mapping[str, Any],
                 calibrations: Mapping[str, str]) -> tuple[Any, Any, str]:
    """(generator, session, served model name) of the flags; ``engine``: accuracy, seed, max_model_len,
    kv_cache_gib; ``session``: the Session's max_tokens, batch_window, gpu, max_workers and ``price_as``."""
    from tts.models import DEFAULT_MODEL
    from tts.session import Session

    generator = build_generator(backend, model, base_url, engine["accuracy"], engine["seed"],
                                engine["max_model_len"], engine["kv_cache_gib"], upstream=upstream,
                                engine=engine.get("settings"))
    name = model or (DEFAULT_MODEL if backend != "scripted" else "scripted")
    # The scripted backend runs no model: its tokens are priced only as a model the operator names.
    pricing = session.get("price_as") or (None if backend == "scripted" else model or DEFAULT_MODEL)
    opened = Session(generator=generator, max_tokens=session["max_tokens"], batch_window=session["batch_window"],
                     gpu=session["gpu"], price_as=pricing, seed=engine["seed"], max_workers=session["max_workers"],
                     strategy_settings={"auto": {"calibration": next(iter(calibrations.values()))}}
                     if calibrations else None)
    return generator, opened, name


def close_on_failure(generator: Any, session: Any, build: Any) -> Any:
    """``build()`` (the app or MCP server); when it refuses the settings, close the engine and fail."""
    try:
        return build()
    except ValueError as exc:  # an allowed strategy that cannot run with these settings
        session.close()
        generator.close()
        raise fail(str(exc)) from None


def run_then_close(generator: Any, session: Any, run: Any) -> None:
    """``run()`` (the server, in the foreground), then shut the session and the engine down, also
    on SIGTERM (see :func:`exit_on_signal`)."""
    try:
        run()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the shutdown short
        try:
            session.close()
        finally:
            generator.close()


def serve_command(
    backend: Backend = "vllm",
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model of the backend; also the name clients "
                                              "write after the strategy (sc-16/<model>). Default: smollm2-135m.")] = None,
    served_name: Annotated[str | None, typer.Option(help="Name clients use for the model (default: --model).")] = None,
    base_url: BaseUrl = None,
    upstream_timeout: UpstreamTimeout = 120.0,
    upstream_retries: UpstreamRetries = 2,
    upstream_deadline: UpstreamDeadline = 180.0,
    upstream_concurrency: UpstreamConcurrency = 256,
    host: Host = "127.0.0.1",
    port: Port = 8000,
    strategy: DefaultStrategy = "sc-8",
    api_key: ApiKey = None,
    max_concurrent: MaxConcurrent = 256,
    max_choices: Annotated[int, typer.Option(min=1, help="Largest n (choices) per request.")] = 8,
    max_samples: MaxSamples = 64,
    max_tokens: MaxTokens = 4096,
    default_max_tokens: DefaultMaxTokens = 512,
    max_budget_tokens: MaxBudgetTokens = 1_000_000,
    rate_limit_tokens: RateLimitTokens = None,
    max_body_bytes: MaxBodyBytes = 1 << 20,
    batch_window: BatchWindow = 0.01,
    gpu: Gpu = "h100",
    price_as: PriceAs = None,
    calibration: Calibration = None,
    verifier: Verifier = None,
    allow_strategy: AllowStrategy = None,
    allow_code_execution: AllowCodeExecution = False,
    prompt: Prompt = "plain",
    stop: DefaultStop = None,
    body_timeout: BodyTimeout = 30.0,
    keep_alive_timeout: KeepAliveTimeout = 5,
    max_connections: Annotated[int | None, typer.Option(min=1, help="Most open connections and requests at once; "
                                                        "past it, new requests get 503 (default: no limit, "
                                                        "--max-concurrent still applies).")] = None,
    docs: Docs = True,
    accuracy: Accuracy = 0.6,
    seed: Seed = 0,
    max_model_len: MaxModelLen = 2048,
    kv_cache_gib: KvCacheGib = None,
    engine: EngineSetting = None,
) -> None:
    """Serve test-time strategies behind an OpenAI-compatible API (/v1/chat/completions, /v1/completions,
    /v1/models, /metrics, /health). The model name chooses the strategy: sc-16/<model>, beam-4x8/<model>."""
    import uvicorn

    from tts.serve import ServeConfig, create_app

    key = api_key_or_env(api_key)
    with user_errors():
        verifiers, calibrations, stop_settings = checked_resources(strategy, verifier, calibration, allow_strategy, stop)
        check_listen(host, port)
        signal.signal(signal.SIGTERM, exit_on_signal)  # run_then_close shuts the engine down
        generator, session, name = open_session(
            backend, model, base_url, {"timeout": upstream_timeout, "max_retries": upstream_retries,
                                       "deadline": upstream_deadline, "concurrency": upstream_concurrency},
            engine_flags(accuracy, seed, max_model_len, kv_cache_gib, engine),
            {"max_tokens": default_max_tokens, "batch_window": batch_window, "gpu": gpu, "price_as": price_as,
             "max_workers": max(max_concurrent, 8) * max_choices}, calibrations)
        name = served_name or name
        config = ServeConfig(model=name, default_strategy=strategy, stop=stop_settings, api_key=key,
                             max_body_bytes=max_body_bytes, max_choices=max_choices, max_samples=max_samples,
                             max_tokens=max_tokens, max_budget_tokens=max_budget_tokens, max_concurrent=max_concurrent,
                             rate_limit_tokens=rate_limit_tokens, body_timeout=body_timeout,
                             strategies=tuple(allow_strategy) if allow_strategy else None, verifiers=verifiers,
                             calibrations=calibrations, prompt=prompt, allow_code_execution=allow_code_execution,
                             docs=docs)
        app = close_on_failure(generator, session, lambda: create_app(session, config))
    typer.echo(f"tts serve: {name} on http://{host}:{port}/v1 (strategy by model name, e.g. sc-16/{name}; "
               f"auth {'on' if key else 'off'})", err=True)
    # uvicorn handles SIGINT and SIGTERM itself (a graceful shutdown), then raises the signal again under the
    # handler that was there before: SIGTERM's default would end the process before run_then_close's finally,
    # orphaning vLLM's engine process, so exit_on_signal raises SystemExit. The event loop shares the GIL with
    # the solves' threads: at the default 5 ms switch interval it waits up to 5 ms for each turn, and HTTP
    # throughput fell to ~0.6x of in-process solving on the scripted backend; at 1 ms it answers on time.
    sys.setswitchinterval(0.001)
    run_then_close(generator, session, lambda: uvicorn.run(
        app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=10,
        timeout_keep_alive=keep_alive_timeout, limit_concurrency=max_connections))
