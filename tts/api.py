"""The library entry points an agent calls: :func:`solve` one question, :func:`evaluate` a benchmark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tts.types import Problem, Solution

_GENERATORS: dict[str, Any] = {}


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
) -> Solution:
    """Answer one question with a test-time strategy.

    Args:
        question: The question text, or a Problem.
        strategy: Registered strategy name (self_consistency, best_of_n, weighted_vote).
        n: Samples to draw.
        backend: "vllm", "openai", "scripted", or a backend config dict such as
            ``{"kind": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "..."}``.
        generator: A ready Generator (overrides ``backend``).
        temperature, max_tokens: Sampling settings.
        prompt: A PromptTemplate (default: step by step, answer in \\boxed{}).

    Returns:
        The Solution: answer, confidence (vote share), usage and trace.

    Example:
        >>> sol = tts.solve("What is 7 + 7?", n=16)   # doctest: +SKIP
        >>> sol.answer, sol.confidence, sol.usage.completion_tokens
    """
    from pydantic import TypeAdapter

    from tts.backends.factory import create_generator
    from tts.config import BackendConfig, SamplingConfig, StrategyConfig
    from tts.prompts import MATH_PROMPT
    from tts.registry import STRATEGIES

    problem = question if isinstance(question, Problem) else Problem("q0", question)
    strategy_config = TypeAdapter(StrategyConfig).validate_python({"kind": STRATEGIES.check(strategy), "n": n})
    if generator is None:
        spec = {"kind": backend} if isinstance(backend, str) else dict(backend)
        backend_config = TypeAdapter(BackendConfig).validate_python(spec)
        key = backend_config.model_dump_json()
        if key not in _GENERATORS:
            _GENERATORS[key] = create_generator(backend_config, [problem])
        generator = _GENERATORS[key]
    cls = STRATEGIES.load(strategy)
    runner = cls(strategy_config, generator, (prompt or MATH_PROMPT).render,
                 SamplingConfig(temperature=temperature, max_tokens=max_tokens))
    return runner.solve([problem])[0]


def evaluate(config: Any, out: str | Path, **kwargs: Any) -> Any:
    """Run ``tts eval`` from Python: ``config`` is an EvalConfig or a dict of its fields."""
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval

    cfg = config if isinstance(config, EvalConfig) else EvalConfig.model_validate(config)
    return run_eval(cfg, Path(out), **kwargs)
