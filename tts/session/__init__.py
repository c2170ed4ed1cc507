"""Sessions: a warm engine shared by many solves, with budgets and batched concurrent calls.

A solve's budget is :class:`~tts.budgets.pricing.ComputeBudget`, re-exported here with its error.
"""

import warnings
from typing import Any

from tts.budgets.pricing import BudgetError, ComputeBudget
from tts.session.batching import CallContext, SolveCancelled
from tts.session.session import Session, SessionSolution, chat_prompt

__all__ = ["BudgetError", "CallContext", "ComputeBudget", "Session", "SessionSolution", "SolveCancelled",
           "chat_prompt"]


def __getattr__(name: str) -> Any:
    if name == "SolveBudget":  # the budget type's old second name, kept for one release
        warnings.warn("tts.session.SolveBudget is ComputeBudget under its old name; import "
                      "tts.budgets.pricing.ComputeBudget (or tts.ComputeBudget)", DeprecationWarning, stacklevel=2)
        return ComputeBudget
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
