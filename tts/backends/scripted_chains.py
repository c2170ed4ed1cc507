"""The scripted backend as a chain model: problems that are chains of operations (metadata
``start`` and ``ops``, as the ``chains`` benchmark's) are worked out step by step, not drawn.

One numbered equation per step ("2. 12 * 2 = 24"), steps separated by blank lines, then "The
answer is N." Each step slips with probability ``1 - step_accuracy``, half the time by misstating
the result (a false equality, which the arithmetic verifier catches) and half by applying the
wrong operation correctly (a true equality carrying a wrong value, which it does not); the value a
slip leaves is carried on. A partial solution is continued from its last stated value, so a
step-wise search really branches and a step verifier really prunes, as on the real model.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from fractions import Fraction

from tts.backends.base import Completion, GenerationRequest
from tts.backends.scripted_sampling import cut, token_logprobs, top_logprobs

STEP_SEPARATOR = "\n\n"
"""What the scripted model writes between the steps of a solution."""
CHAIN_STEP = re.compile(r"=\s*(-?\d+(?:\.\d+)?)\s*(?:\n|$)")
"""The value a chain step states (the right side of its equation, at the end of its line)."""
CHAIN_ANSWER = re.compile(r"[Tt]he answer is (-?\d+(?:\.\d+)?)")


def apply_op(value: Fraction, op: str) -> Fraction:
    """``value`` after an arithmetic suffix ("+ 5", "* 2", "/ 2")."""
    sign, operand = op.split()
    a = Fraction(operand)
    return {"+": value + a, "-": value - a, "*": value * a, "/": value / a}[sign]


def number_text(value: Fraction) -> str:
    """A chain value as a model writes it: "12", "3.5" (a slip can make a half of an odd number)."""
    return str(value.numerator) if value.denominator == 1 else format(float(value), "g")


def chain_sample(req: GenerationRequest, start: int, ops: Sequence[str], step_accuracy: float,
                 returns_logprobs: bool, rng: random.Random) -> Completion:
    """A chain worked out from where the request's partial solution left it (module docstring)."""
    done = CHAIN_STEP.findall(req.continuation)
    steps: list[str] = []
    slipped = False
    stated = CHAIN_ANSWER.findall(req.continuation)
    if stated:  # asked again after the answer line (an answer phase after thinking): restate it
        steps = [f"The answer is {stated[-1]}."]
    else:
        value = Fraction(done[-1]) if done else Fraction(start)
        for op in ops[len(done):]:
            right = apply_op(value, op)
            if rng.random() < step_accuracy:
                new, said = right, right
            elif rng.random() < 0.5:  # misstated result: a false equality
                new = said = right + rng.choice((-2, -1, 1, 2))
                slipped = True
            else:  # another operation, applied correctly: a true equality, a wrong value
                op = rng.choice([o for o in ("+ 1", "+ 2", "- 1", "* 2", "+ 3") if o != op])
                new = said = apply_op(value, op)
                slipped = True
            steps.append(f"{len(done) + len(steps) + 1}. {number_text(value)} {op} = {number_text(said)}")
            value = new
        steps.append(f"The answer is {number_text(value)}.")
    # What of the separator the partial solution still lacks (all of it, or the held-back rest).
    held = next((k for k in range(len(STEP_SEPARATOR), 0, -1) if req.continuation.endswith(STEP_SEPARATOR[:k])), 0)
    lead = STEP_SEPARATOR[held:] if req.continuation and steps else ""
    text = lead + STEP_SEPARATOR.join(steps)
    text, stopped = cut(text, req.stop)
    pieces = re.findall(r"\s*\S+|\s+$", text) or [text]
    finish, eos = ("stop", not stopped)
    if len(pieces) > req.max_tokens:
        pieces, finish, eos = pieces[: req.max_tokens], "length", False
        text = "".join(pieces)
    tokens = max(1, len(pieces))
    mean_lp = -rng.uniform(0.05, 0.4) - (0.25 if slipped else 0.0)  # slips are less confident
    token_lps = token_logprobs(mean_lp, tokens, rng)
    logprobs = req.logprobs and returns_logprobs
    k = req.top_logprobs
    top = top_logprobs(token_lps, k) if k and returns_logprobs else None
    return Completion(text=text, completion_tokens=tokens, mean_logprob=mean_lp if logprobs else None,
                      finish_reason=finish, token_logprobs=token_lps if logprobs else None, ended_by_eos=eos,
                      token_top_logprobs=top)
