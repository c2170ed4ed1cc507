"""One typed row of ``results.jsonl``: a graded Solution of one (problem, strategy config).

Rows are written by the runner and the allocated runs, read back on resume, by reports, the
ledger and the sample-pool reader. A frozen model with a schema version in ``run.json`` means a
reader either gets exactly these fields or a message that says which field of which line is off,
instead of a ``KeyError`` deep in a report.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tts.types import Usage

SCHEMA_VERSION = 2
"""Version of the row format, recorded in ``run.json``. 1 = untyped rows (before this model);
2 = this model (allocated rows keep their settings in ``allocation``, not in ``strategy``). Fields
added since are optional (``grade_reason``, ``grading_seconds``): rows without them read as None,
so older runs of version 2 still read and resume."""

OutcomeName = Literal["correct", "wrong", "no_answer", "ungraded"]


class ResultRow(BaseModel):
    """A graded solution of one problem under one strategy config.

    ``strategy`` is the dump of a valid strategy config (``kind`` + its fields); under budget
    allocation ``strategy.n`` is the samples the problem actually got and the allocator's
    settings are in ``allocation``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    problem_id: str
    config: str
    """Label of the strategy config (``self_consistency@16``, ``allocated-online@4e4tokens``); keys resume."""
    strategy: dict[str, Any]
    """The strategy config as a dict; validated against the strategy registry."""
    model: str
    backend: str
    answer: str | None
    gold: str | None
    outcome: OutcomeName
    correct: bool
    coverage: bool
    """Some sample of the trace was graded correct (pass@n)."""
    confidence: float = Field(ge=0.0, le=1.0)
    usage: Usage
    trace: dict[str, Any]
    """The Solution's trace as JSON; each sample carries its graded ``outcome``."""
    allocation: dict[str, Any] | None = None
    """Allocated runs: mode, budget, unit, GPU and the allocator's settings."""
    budget_spent: float | None = None
    """Allocated runs: what this problem cost, in the budget's unit."""
    grade_reason: str | None = None
    """Why the grader did not count the answer correct, in one line, where it says (code answers:
    the sandbox's status and error, ``timeout: ran past 5 s``, ``error: AssertionError``;
    ``sandbox_failed: ...`` with outcome ``ungraded``: the machine could not run the check, no
    verdict; math: why a check gave no verdict). None when correct, without an answer, or where
    the reason goes without saying (a math answer that is not equal to the gold)."""
    grading_seconds: float | None = Field(None, ge=0.0)
    """Wall seconds of the answer's check, where the grader times it (code: the check program in the
    sandbox; math: math-verify in its worker, 0 for a string match; a check shared by several rows,
    as a ladder's n share samples, counts for each). None without an answer, and in older rows."""
    metadata: dict[str, str | int | float | bool] = Field(default_factory=dict)
    """The problem's short metadata (numbers, flags and strings up to 40 characters: chains' ``k``,
    MATH-500's ``level`` and ``subject``), so results break down by difficulty (``tts plot --by``)."""

    @field_validator("strategy")
    @classmethod
    def _valid_strategy_config(cls, v: dict[str, Any]) -> dict[str, Any]:
        from tts.config import parse_strategy_config

        return parse_strategy_config(v).model_dump(mode="json")

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready dict written to ``results.jsonl``."""
        return self.model_dump(mode="json")
