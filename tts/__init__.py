"""tts: test-time compute scaling for LLMs.

The public API is exported lazily: ``import tts`` imports neither vLLM nor torch, so the CLI and
agents that only need the cost model start fast.

    >>> import tts
    >>> sol = tts.solve("What is 7 + 7?", strategy="self_consistency", n=16)  # doctest: +SKIP
    >>> sol = await tts.asolve("What is 7 + 7?", n=16, budget=4096)          # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "solve": "tts.api",
    "asolve": "tts.api",
    "evaluate": "tts.api",
    "close_engines": "tts.api",
    "Session": "tts.session",
    "ComputeBudget": "tts.budgets.pricing",
    "EnginePool": "tts.backends.engine_pool",
    "Problem": "tts.types",
    "Solution": "tts.types",
    "Usage": "tts.types",
    "Sample": "tts.types",
    "Trace": "tts.types",
    "EvalConfig": "tts.config",
    "prepare_model": "tts.models",
    "tune_gc": "tts.serve.gc_tuning",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tts' has no attribute {name!r}")
