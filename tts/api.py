"""The library entry points an agent calls: :func:`solve` one question, :func:`evaluate` a benchmark.

Engines: :func:`solve` keeps the engine of its last vLLM backend config warm in a module-level
:class:`~tts.backends.engine_pool.EnginePool` of size one, because an agent calls it many times and
each engine start costs tens of seconds. Asking for another vLLM config closes that engine before
the new one starts (memory stays bounded); :func:`close_engines` frees it. Backends that are cheap
to open (OpenAI-compatible servers, scripted) are opened and closed within the call. To manage
engines yourself (two models at once, a server), pass ``generator=``, e.g. from your own pool.

Output: a vLLM engine's start-up noise (the checkpoint-loading bar, Triton and NUMA notices,
warnings of its processes) goes to the ``tts.engine`` logger at INFO, not to the terminal;
``logging.basicConfig(level=logging.INFO)`` shows it. Engines nobody closed are stopped at exit
with enough grace to release their shared memory (see :mod:`tts.backends.engine_log`).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tts.types import Problem, Solution

_POOL: Any = None  # the EnginePool of solve(), created on first use
_POOL_LOCK = threading.Lock()


def _solve_pool() -> Any:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from tts.backends.engine_pool import EnginePool

            _POOL = EnginePool(max_size=1)
        return _POOL


def close_engines() -> None:
    """Shut down the engine that :func:`solve` keeps warm between calls, freeing its memory.

    Harmless when none is open; the next :func:`solve` with a vLLM backend starts a fresh engine.
    """
    if _POOL is not None:
        _POOL.close_all()


def solve(
    question: str | Problem,
    *,
    strategy: str = "self_consistency",
    n: int = 8,
    backend: str | dict[str, Any] = "vllm",
    generator: Any = None,
    temperature: float = 0.7,
    max_tokens: int = 512,
    prompt: Any = None,
    budget: float | None = None,
    budget_unit: str = "tokens",
    calibration: str | Path | None = None,
) -> Solution:
    """Answer one question with a test-time strategy.

    Args:
        question: The question text, or a Problem.
        strategy: Registered strategy name (self_consistency, best_of_n, weighted_vote).
        n: Samples to draw.
        backend: "vllm", "openai", "scripted", or a backend config dict such as
            ``{"kind": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "..."}``.
        generator: A ready Generator (overrides ``backend``); the caller keeps it and closes it.
        temperature, max_tokens: Sampling settings.
        prompt: A PromptTemplate (default: step by step, answer in \\boxed{}).
        budget, budget_unit, calibration: ``strategy="auto"``: the question's budget (tokens,
            eflops, gpu_seconds or dollars) and a calibration source (sample pool, past ``tts eval``
            run or ``tts sweep`` directory of the same model); auto picks the strategy and n, and
            ``trace.notes`` says which and why.

    Returns:
        The Solution: answer, confidence (vote share), usage and trace.

    A vLLM backend's engine stays warm for the next call with the same config (see the module
    docstring); :func:`close_engines` shuts it down.

    Example:
        >>> sol = tts.solve("What is 7 + 7?", n=16)   # doctest: +SKIP
        >>> sol.answer, sol.confidence, sol.usage.completion_tokens
    """
    from pydantic import TypeAdapter

    from tts.backends.factory import create_generator
    from tts.config import BackendConfig, SamplingConfig, StrategyConfig
    from tts.prompts import MATH_PROMPT
    from tts.registry import BACKENDS, STRATEGIES

    problem = question if isinstance(question, Problem) else Problem("q0", question)
    if STRATEGIES.check(strategy) == "auto":
        if budget is None or calibration is None:
            raise ValueError('strategy="auto" needs budget= (in budget_unit) and calibration= (a sample pool, a past '
                             "tts eval run or a tts sweep directory of this model on other problems)")
        spec: dict[str, Any] = {"kind": "auto", "budget": budget, "budget_unit": budget_unit,
                                "calibration": str(calibration)}
    else:
        spec = {"kind": strategy, "n": n}
    strategy_config = TypeAdapter(StrategyConfig).validate_python(spec)
    cls = STRATEGIES.load(strategy)
    owned = None
    if generator is None:
        spec = {"kind": backend} if isinstance(backend, str) else dict(backend)
        backend_config = TypeAdapter(BackendConfig).validate_python(spec)
        if getattr(BACKENDS.load(backend_config.kind), "keep_warm", False):
            generator = _solve_pool().get(backend_config, [problem])
        else:
            generator = owned = create_generator(backend_config, [problem])
    try:
        runner = cls(strategy_config, generator, (prompt or MATH_PROMPT).render,
                     SamplingConfig(temperature=temperature, max_tokens=max_tokens))
        return runner.solve([problem])[0]
    finally:
        if owned is not None:
            owned.close()


def evaluate(config: Any, out: str | Path, **kwargs: Any) -> Any:
    """Run ``tts eval`` from Python: ``config`` is an EvalConfig or a dict of its fields.

    A config with an ``allocation`` section runs budget-allocated self-consistency, as
    ``tts eval --allocate`` does; otherwise every configured strategy runs at its fixed settings.
    """
    from tts.config import EvalConfig

    cfg = config if isinstance(config, EvalConfig) else EvalConfig.model_validate(config)
    if cfg.allocation is not None:
        from tts.eval.allocated import run_allocated_eval

        return run_allocated_eval(cfg, Path(out), **kwargs)
    from tts.eval.runner import run_eval

    return run_eval(cfg, Path(out), **kwargs)
