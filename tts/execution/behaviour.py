"""What programs do on inputs: one sandboxed probe per program, and a behaviour key to vote with.

Two programs are the same answer by execution when they return the same values (``repr``) or
raise the same exception type on every input (Li et al., 2022, AlphaCode, Sec. 4.5: clustering
by outputs on the same inputs; Shi et al., 2022, MBR-exec, with inputs from the problem's
description). The inputs here are the calls shown in the problem's docstring
(:func:`tts.execution.programs.doctest_examples`); where the docstring also states the value a
call should return, the probe says whether the program returns it (the problem's *public tests*).

A program that does not get as far as printing its results (a syntax error, a crash while it is
defined, a time-out, a memory or output limit) has no behaviour: it votes for nothing, and why is
kept (``error``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from tts.execution.programs import Example, probe_program, read_probe
from tts.execution.sandbox import Limits, Program, run_many

PROBE_LIMITS = Limits(wall_seconds=10.0, cpu_seconds=5, memory_bytes=1 << 30, output_bytes=1 << 20)
"""Limits of one probe: docstring examples are small inputs."""


@dataclass(frozen=True)
class Behaviour:
    """What one program did on the examples.

    Args:
        outputs: Per example, the ``repr`` of the value returned or ``"!ExceptionName"``; None when
            the program did not get to run the examples.
        passed: Per example, whether it returned the stated value (None where none is stated).
        seconds: Wall seconds of the probe.
        error: Why there are no outputs ("" when there are).
    """

    outputs: tuple[str, ...] | None
    passed: tuple[bool | None, ...] = ()
    seconds: float = 0.0
    error: str = ""

    @property
    def key(self) -> str | None:
        """The vote key: the outputs as one string; None when the program has no behaviour."""
        return None if self.outputs is None else json.dumps(self.outputs)

    @property
    def passes_public(self) -> bool:
        """Whether it returned every stated value (vacuously true when none is stated)."""
        return self.outputs is not None and all(ok is not False for ok in self.passed)


@dataclass(frozen=True)
class Probe:
    """One program to probe: the problem's ``prompt`` and ``entry_point``, the answer's ``code``,
    the ``examples`` to run."""

    prompt: str
    entry_point: str
    code: str
    examples: tuple[Example, ...]


def probe_many(probes: Sequence[Probe], limits: Limits = PROBE_LIMITS, workers: int = 4,
               unsafe_no_sandbox: bool = False) -> list[Behaviour]:
    """Run every probe in its own sandbox, ``workers`` at once; one Behaviour per probe, in order.

    Raises:
        tts.execution.sandbox.SandboxUnavailableError: bubblewrap is missing and the caller did not
            opt out by name.
    """
    programs = [Program(probe_program(p.prompt, p.code, p.entry_point, list(p.examples))) for p in probes]
    runs = run_many(programs, limits, workers=workers, unsafe_no_sandbox=unsafe_no_sandbox)
    out = []
    for probe, run in zip(probes, runs, strict=True):
        rows = read_probe(run.stdout) if run.status == "ok" else None
        if rows is None or len(rows) != len(probe.examples):
            why = f"sandbox_failed: {run.error}" if run.status == "sandbox_failed" else run.error  # not the program's doing
            out.append(Behaviour(None, (), run.wall_seconds, why or f"{run.status}: the probe printed nothing"))
            continue
        out.append(Behaviour(tuple(o for o, _ in rows), tuple(ok for _, ok in rows), run.wall_seconds))
    return out
