"""Budgets an agent states in tokens, eFLOPs, GPU-seconds or dollars, and what a solve cost in each.

The budget type and the pricer are the package's one of each, :mod:`tts.budgets.pricing`; this
module keeps the names a session (and the server, and MCP clients) always imported from here.
``SolveBudget`` is :class:`~tts.budgets.pricing.ComputeBudget`.

Strategies honour one budget currency: generated tokens at their worst case
(:class:`tts.types.Budget`). A budget in another unit is turned into that currency with the cost
model before the solve runs (:meth:`~tts.budgets.pricing.Pricer.allowance`); after the solve,
:meth:`~tts.budgets.pricing.Pricer.cost` prices what was really spent, in every unit.
"""

from __future__ import annotations

from tts.budgets.pricing import UNITS, BudgetError, ComputeBudget, Pricer

SolveBudget = ComputeBudget
"""The budget of one solve: :class:`~tts.budgets.pricing.ComputeBudget` (the same class)."""

__all__ = ["UNITS", "BudgetError", "ComputeBudget", "Pricer", "SolveBudget"]
