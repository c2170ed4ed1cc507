"""Execution feedback for revision chains: Self-Debugging's unit-test feedback (Chen et al., 2023).

Self-Debugging (arXiv:2304.05128, Sec. 3-4) runs the model's code on the unit tests the problem
gives, and when one fails, shows the model the failing test with the real execution result (or
the error) and asks it to fix the code; a program that passes the given tests ends its chain. The
given tests here are the examples of the function's docstring (a call and its stated value,
:func:`tts.execution.programs.doctest_examples`); HumanEval's hidden check program is never run.

Each attempt gets a score, the share of the stated examples its program passes (0 for a reply
without a program or a program that does not run; None for a problem without stated values), so
that ``revision``'s ``accept_score`` (1.0: Self-Debugging's stop rule) and ``select`` work on it,
and a feedback text for the next round (:func:`feedback_text`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tts.execution.behaviour import Behaviour, Probe, probe_many
from tts.execution.programs import Example, doctest_examples


def feedback_text(examples: Sequence[Example], behaviour: Behaviour | None, limit: int = 3) -> str:
    """What the model is told about its previous program ("" when it passed every stated example):
    Self-Debugging's unit-test feedback, up to ``limit`` failing examples with what the program
    really returned or raised."""
    if behaviour is None:
        return "The reply above contains no Python code. Please write the function in a ```python code block."
    if behaviour.outputs is None:
        return f"The code above does not run: {behaviour.error}. Please fix the Python code."
    lines = []
    for example, out, ok in zip(examples, behaviour.outputs, behaviour.passed, strict=True):
        if ok is False:
            real = f"raised {out[1:]}" if out.startswith("!") else f"returned {out}"
            lines.append(f"- `{example.call}` should return `{example.expected}`, but the code {real}.")
    if not lines:
        return ""
    return ("The code above is wrong. Running it on the examples of the docstring:\n" + "\n".join(lines[:limit])
            + "\nPlease fix the Python code.")


def execution_feedback(problems: Sequence[Any], programs: Sequence[tuple[int, str | None]], workers: int = 4,
                       unsafe_no_sandbox: bool = False) -> list[tuple[float | None, str, float]]:
    """For each (problem index, program or None): (score, feedback text, execution seconds), every
    program run in ONE batch of sandboxes.

    Raises:
        ValueError: A problem without ``prompt`` and ``entry_point`` metadata (not a coding problem).
    """
    stated: list[list[Example]] = []
    for p in problems:
        meta = getattr(p, "metadata", None) or {}
        if "prompt" not in meta or "entry_point" not in meta:
            raise ValueError(f"execution feedback runs a coding problem's docstring examples; problem "
                             f"{getattr(p, 'id', p)!r} has no 'prompt' and 'entry_point' metadata (use --benchmark humaneval).")
        stated.append([e for e in doctest_examples(meta["prompt"], meta["entry_point"]) if e.expected])
    jobs = {(i, code): Probe(problems[i].metadata["prompt"], problems[i].metadata["entry_point"], code, tuple(stated[i]))
            for i, code in programs if code is not None and stated[i]}
    ran = dict(zip(jobs, probe_many(list(jobs.values()), workers=workers, unsafe_no_sandbox=unsafe_no_sandbox), strict=True))
    out = []
    for i, code in programs:
        if not stated[i]:
            out.append((None, "", 0.0))
            continue
        behaviour = ran.get((i, code)) if code is not None else None
        passed = sum(ok is True for ok in behaviour.passed) if behaviour is not None and behaviour.outputs else 0
        out.append((passed / len(stated[i]), feedback_text(stated[i], behaviour),
                    behaviour.seconds if behaviour is not None else 0.0))
    return out
