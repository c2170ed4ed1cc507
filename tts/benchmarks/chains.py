"""The built-in ``chains`` benchmark: chains of k small operations on a running value, k = 1..8.

"Start with 7. 1. Add 5. 2. Double it. 3. Take away 3. What is the result?" (one operation per
line). A problem of k operations
needs k dependent steps, each one small enough for the embedded SmolLM2-135M to get right most
of the time, so the chance of a whole chain right falls with k about geometrically. That gives
what the ``demo`` benchmark lacks: difficulty that a step-wise search can act on. A step
verifier sees each step on its own, so pruning a wrong step early should pay more the longer the
chain (Snell et al. 2024, "Scaling LLM Test-Time Compute Optimally...", sec. 5: search helps most
on hard problems at small budgets, best-of-N on easy ones).

The few-shot prompt writes exactly one equation per step, numbered as the operations are
("2. 12 * 2 = 24"), steps separated by a blank line (the step separator of the step-wise search
space, :data:`tts.search.base.STEP_SEPARATOR`), ending "The answer is N." The numbering was
chosen on the model: with the operations as plain sentences and unnumbered steps SmolLM2-135M
was right on 30% of one-step chains (it kept adding steps), numbered 45%, word-problem chains in
the demo's style 5% (64 problems, 8 samples each, temperature 0.7). A problem's metadata holds ``k`` (its number of operations), ``start`` and
``ops``: the operations as arithmetic suffixes ("+ 5;* 2;- 3"), which
:func:`tts.answers.exact.exact_value` evaluates, and which survive a JSONL round trip.

Options (``--set data.KEY=VALUE`` or ``data: {options: {...}}`` in a YAML config):

* ``steps``: the chain lengths, one int or a list; problems cycle through them in order, so
  ``--limit`` keeps the mix balanced (default 1..8);
* ``seed``: the generator's seed (default 0); calibration sets use another seed than the test set.

Operations keep the running value a whole number from 0 to 60: "Add a" (a = 1..9), "Take away a"
(never below 0), "Double it" and "Triple it" (only while the result stays <= 60), "Halve it"
(only for an even value). Numbers stay small because the model's single-step accuracy falls
fast with larger operands.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from tts.answers.exact import exact_value
from tts.benchmarks.datasets import Benchmark, DatasetError
from tts.prompts import PromptTemplate
from tts.types import Problem

MAX_VALUE = 60
"""The running value never leaves 0..MAX_VALUE."""
LEVELS = tuple(range(1, 9))
"""The default chain lengths."""
STEP_SEPARATOR = "\n\n"
"""Between the steps of a worked solution: the step-wise search's default separator (the search
layer sits above this one, so the value is restated here; a test pins them equal)."""


def _solution(start: int, ops: Sequence[str]) -> str:
    """The worked solution of a chain: one numbered equation per step, then the answer line."""
    lines, value = [], start
    for i, op in enumerate(ops, start=1):
        new = int(exact_value(f"{value} {op}"))
        lines.append(f"{i}. {value} {op} = {new}")
        value = new
    return STEP_SEPARATOR.join([*lines, f"The answer is {value}."])


_EXAMPLES = ((4, ("+ 3",)), (7, ("+ 5", "* 2", "- 3")), (9, ("- 4", "* 3", "- 7", "/ 2", "+ 6")),
             (6, ("/ 2", "+ 8")))
_PHRASES = {"+": "Add {a}.", "-": "Take away {a}.", "*2": "Double it.", "*3": "Triple it.", "/2": "Halve it."}


def _phrase(op: str) -> str:
    sign, a = op.split()
    return _PHRASES[sign + a] if sign in "*/" else _PHRASES[sign].format(a=a)


def question(start: int, ops: Sequence[str]) -> str:
    """The question of a chain: "Start with 7.", the operations numbered one per line, "What is the result?"."""
    return "\n".join([f"Start with {start}.", *(f"{i}. {_phrase(op)}" for i, op in enumerate(ops, start=1)),
                      "What is the result?"])


_START = re.compile(r"^Start with (\d+)\.$")
_OP_LINE = re.compile(r"^(\d+)\. (.+)$")
_FROM_PHRASE = {"Double it.": "* 2", "Triple it.": "* 3", "Halve it.": "/ 2"}
_FROM_WORDS = ((re.compile(r"^Add (\d+)\.$"), "+"), (re.compile(r"^Take away (\d+)\.$"), "-"))


def parse_question(text: str) -> tuple[int, tuple[str, ...]] | None:
    """The start value and operations of a chain question (:func:`question`'s inverse), or None
    when ``text`` is not one."""
    lines = [line.strip() for line in text.strip().splitlines()]
    start = _START.match(lines[0]) if lines else None
    if start is None or len(lines) < 3 or lines[-1] != "What is the result?":
        return None
    ops = []
    for i, line in enumerate(lines[1:-1], start=1):
        m = _OP_LINE.match(line)
        if m is None or int(m.group(1)) != i:
            return None
        phrase = m.group(2)
        op = _FROM_PHRASE.get(phrase) or next((f"{sign} {w.group(1)}" for pattern, sign in _FROM_WORDS
                                               if (w := pattern.match(phrase))), None)
        if op is None:
            return None
        ops.append(op)
    return int(start.group(1)), tuple(ops)


CHAINS_PROMPT = PromptTemplate(
    few_shot=tuple((question(start, ops), _solution(start, ops)) for start, ops in _EXAMPLES),
)


def _next_op(value: int, rng: random.Random) -> str:
    """A random operation that keeps the running value in 0..MAX_VALUE."""
    choices = [f"+ {a}" for a in range(1, 10) if value + a <= MAX_VALUE]
    choices += [f"- {a}" for a in range(1, 10) if value - a >= 0]
    choices += [f"* {m}" for m in (2, 3) if 1 < value and value * m <= MAX_VALUE]
    choices += ["/ 2"] if value % 2 == 0 and value > 0 else []
    # Additions and subtractions are most of a chain; products and halves one step in three.
    weights = [1.0 if c[0] in "+-" else 3.0 for c in choices]
    return rng.choices(choices, weights=weights)[0]


def generate_problems(count: int, seed: int = 0, steps: Sequence[int] = LEVELS) -> list[Problem]:
    """``count`` chains cycling through the lengths ``steps``; the same on every machine."""
    rng = random.Random(seed)
    problems = []
    for i in range(count):
        k = steps[i % len(steps)]
        start = rng.randint(2, 9)
        ops, value = [], start
        for _ in range(k):
            op = _next_op(value, rng)
            ops.append(op)
            value = int(exact_value(f"{value} {op}"))
        problems.append(Problem(f"chains-{seed}-{i:04d}", question(start, ops), str(value),
                                {"k": k, "start": start, "ops": ";".join(ops)}))
    return problems


def _steps(value: Any) -> tuple[int, ...]:
    values = value if isinstance(value, (list, tuple)) else [value]
    try:
        out = tuple(int(v) for v in values)
    except (TypeError, ValueError):
        out = ()
    if not out or any(k < 1 or k > 32 or str(k) != str(v).strip() for k, v in zip(out, values, strict=True)):
        raise DatasetError(f"chains option steps={value!r}: give chain lengths from 1 to 32, one number or a "
                           "list (--set data.steps=6, --set 'data.steps=[1,4,8]').")
    return out


class ChainsBenchmark(Benchmark):
    """Built-in, deterministic, offline: 400 chains by default, 50 of each length 1..8."""

    name = "chains"
    size: ClassVar[int] = 400
    prompt = CHAINS_PROMPT
    option_names: ClassVar[tuple[str, ...]] = ("steps", "seed")

    def load(self, path: Path | None = None, limit: int | None = None, *fields: Any, **options: Any) -> list[Problem]:
        """The chains; ``path`` (a JSONL file in the same format) overrides them.

        Args:
            path: A JSONL file of problems in this format instead of the generated ones.
            limit: Keep the first ``limit`` chains (the lengths stay balanced).
            options: ``steps`` (int or list of ints) and ``seed`` (int); see the module docstring.
        """
        self.check_options(options)
        if path is not None:
            return super().load(path, limit, *fields)
        if limit is not None and limit < 1:
            raise DatasetError(f"--limit must be at least 1, got {limit}")
        steps = _steps(options["steps"]) if "steps" in options else LEVELS
        seed = options.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise DatasetError(f"chains option seed={seed!r}: give a whole number (--set data.seed=1).")
        return generate_problems(limit or self.size, seed=seed, steps=steps)
