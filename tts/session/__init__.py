"""Sessions: a warm engine shared by many solves, with budgets and batched concurrent calls."""

from tts.session.batching import CallContext, SolveCancelled
from tts.session.budget import BudgetError, SolveBudget
from tts.session.session import Session, SessionSolution, chat_prompt

__all__ = ["BudgetError", "CallContext", "Session", "SessionSolution", "SolveBudget", "SolveCancelled", "chat_prompt"]
