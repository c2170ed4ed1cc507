"""The ``chain`` verifier: each worked step of a ``chains`` problem checked against its question.

The arithmetic tool sees only whether a stated equality holds, so a step that applies the wrong
operation correctly ("2. 8 * 2 = 16" where the question says "Triple it"), skips an operation or
answers before the chain is done passes it; on SmolLM2-135M those are most of the mistakes. This
tool reads the chain from the question (never the gold answer:
:func:`tts.benchmarks.chains.parse_question`) and scores step i 1.0 when it is the question's i-th
operation applied to the value the chain has reached, with the right result, and 0.0 otherwise;
the answer line scores 1.0 when it comes after the last operation and states the value reached,
0.0 otherwise. It is a perfect process verifier on chains, the ceiling of what a PRM could give a
search there, and with ``noise`` (each step's score flipped with that probability, seeded, as the
arithmetic tool's knob) an imperfect one of chosen quality. Questions that are not chains score
``neutral`` at every step.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, ClassVar, Literal

from pydantic import Field

from tts.answers import extract_answer
from tts.answers.exact import NotPlainArithmetic, exact_value
from tts.benchmarks.chains import parse_question
from tts.config import VerifierConfigBase
from tts.verifiers.base import VerifierScore, VerifyItem, aggregate, noise_flips

_STEP = re.compile(r"^\s*(\d+)\.\s*(-?\d+(?:\.\d+)?)\s*([-+*/])\s*(\d+)\s*=\s*(-?\d+(?:\.\d+)?)\s*\.?\s*$")


class ChainCheckConfig(VerifierConfigBase):
    """Check each step of a chain against the question's operations (no model, no cost)."""

    kind: Literal["chain"] = "chain"
    aggregation: Literal["last", "min", "prod", "mean"] = "min"
    """One wrong step makes the chain wrong; "last" scores a solution by its latest step."""
    neutral: float = Field(0.5, ge=0.0, le=1.0)
    """Score of every step of a question that is not a chain."""
    noise: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that a step's score is flipped (1 <-> 0), seeded per (problem, solution so far)."""
    noise_seed: int = 0
    """Seed of the noise."""


def _value(text: str) -> Fraction | None:
    try:
        return exact_value(text)
    except (NotPlainArithmetic, ValueError, ZeroDivisionError):
        return None


class ChainCheckVerifier:
    """Scores chain steps by the question's operations; see the module docstring.

    Example:
        >>> from tts.types import Problem
        >>> q = "Start with 7.\\n1. Add 5.\\n2. Double it.\\nWhat is the result?"
        >>> v = ChainCheckVerifier()
        >>> v.score([VerifyItem(Problem("p", q), ("1. 7 + 5 = 12", "2. 12 * 3 = 36"))])[0].step_scores
        (1.0, 0.0)
    """

    name: ClassVar[str] = "chain"
    config_class: ClassVar[type[ChainCheckConfig]] = ChainCheckConfig
    step_verifier: ClassVar[bool] = True
    """It checks each step: whole solutions reach it cut into steps."""

    def __init__(self, config: ChainCheckConfig | None = None) -> None:
        self.config = config or ChainCheckConfig()

    @classmethod
    def from_config(cls, config: ChainCheckConfig, generator: Any = None) -> ChainCheckVerifier:
        """Build from a config; the generator is not used (the tool needs no model)."""
        return cls(config)

    def _step_scores(self, item: VerifyItem) -> tuple[float, ...]:
        chain = parse_question(item.problem.question)
        if chain is None:
            return tuple(self.config.neutral for _ in item.steps)
        start, ops = chain
        value, done, scores = Fraction(start), 0, []
        for text in item.steps:
            step = _STEP.match(text)
            if step is not None:
                index, left, sign, operand, right = step.groups()
                op = f"{sign} {operand}"
                ok = (done < len(ops) and int(index) == done + 1 and op == ops[done]
                      and _value(left) == value and _value(right) == _value(f"{value} {op}"))
                if ok:
                    value = _value(f"{value} {op}") or Fraction(0)
                scores.append(1.0 if ok else 0.0)
                done += 1
                continue
            answer = extract_answer(text)
            scores.append(1.0 if answer is not None and done == len(ops) and _value(answer) == value else 0.0)
        return tuple(scores)

    def _score_one(self, item: VerifyItem) -> VerifierScore:
        c = self.config
        steps = [1.0 - s if noise_flips(c.noise_seed, item, at, c.noise) else s
                 for at, s in enumerate(self._step_scores(item))]
        return VerifierScore(tuple(steps), aggregate(steps, c.aggregation) if steps else c.neutral)

    def score(self, items: Sequence[VerifyItem]) -> list[VerifierScore]:
        """One score per item, in order; no usage (a tool, not a model)."""
        return [self._score_one(item) for item in items]

    def close(self) -> None:
        """Nothing to release."""
