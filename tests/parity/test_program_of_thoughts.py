"""Parity: Program of Thoughts with self-consistency (program_vote).

Reference, transcribed as a small function (our words, our code): Chen et al. (2022), "Program of
Thoughts Prompting: Disentangling Computation from Reasoning for Numerical Reasoning Tasks"
(arXiv:2211.12588), Sec. 2: each sampled program is executed by a Python interpreter and its result
is the sample's answer; PoT+SC returns the most frequent executed answer (samples whose program
fails give none). PAL (Gao et al., 2022, arXiv:2211.10435) is the same rule at n = 1.

tts reads the answer from the last printed line (PoT reads a variable ``ans``, PAL calls
``solution()``); the programs here print their answer, so both readings agree. Ties go to the
answer seen first, as ``Counter.most_common`` orders them.
"""

from __future__ import annotations

import contextlib
import io
import random
from collections import Counter

import pytest

from tts.answers import answer_keys
from tts.backends.function import FunctionGenerator
from tts.execution.sandbox import bwrap_path
from tts.prompts import MATH_PROMPT, chat_prompt
from tts.search.sampling.program_vote import ProgramVote, ProgramVoteConfig
from tts.types import Problem

PINNED = {"strategy:program_vote"}

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (make install)")


def pot_sc(programs: list[str]) -> str | None:
    """The paper's rule: execute each program (these are the test's own, trusted), majority of the
    results; a program that raises gives no answer."""
    results = []
    for code in programs:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(code, {})  # noqa: S102 - the test's own programs
        except Exception:  # noqa: BLE001 - a failing program is no answer
            continue
        lines = [x.strip() for x in out.getvalue().splitlines() if x.strip()]
        if lines:
            results.append(lines[-1])
    if not results:
        return None
    return Counter(results).most_common(1)[0][0]


def _programs(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        kind = rng.random()
        a, b = rng.randint(1, 4), rng.randint(1, 3)
        if kind < 0.15:
            out.append(f"x = {a}\nraise RuntimeError('slip')")
        elif kind < 0.3:
            out.append(f"total = {a}\nfor _ in range({b}):\n    total += 1\nprint('working')\nprint(total)")
        else:
            out.append(f"print({a} + {b})")
    return out


@pytest.mark.parametrize("seed", range(6))
def test_program_vote_returns_the_majority_of_executed_answers(seed):
    rng = random.Random(seed)
    programs = _programs(rng, 7)
    gen = FunctionGenerator(lambda req: [f"Let me compute.\n```python\n{p}\n```" for p in programs])
    [sol] = ProgramVote(ProgramVoteConfig(n=len(programs)), gen, chat_prompt(MATH_PROMPT)).solve(
        [Problem("p", "q", "0")])
    expected = pot_sc(programs)
    if expected is None:
        assert sol.answer is None
    else:
        assert answer_keys([sol.answer])[0] == answer_keys([expected])[0]
