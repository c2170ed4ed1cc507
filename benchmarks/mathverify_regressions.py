"""How often tts's extraction and grading agree with Math-Verify's own regression cases.

Math-Verify's test files list ``(gold, prediction, expected)`` cases, most of them taken from real
model outputs (its ``tests/test_all.py``, ``test_boxed.py``, ``test_numina_cases.py``,
``test_open_thoughts.py``, ``test_yujianll.py``). This script reads those cases from a copy of
the Math-Verify repository (they are not vendored here), runs each prediction through
:func:`tts.answers.extract_answer` and grades the extracted answer against the gold answer with
:class:`tts.benchmarks.grading.Grader` (normalised string match OR math-verify, in worker
processes), exactly as an eval run does; a case agrees when tts's verdict equals ``expected``.
It prints the agreement per test file and overall, and every disagreement.

Cases whose test passes non-default options to ``verify`` (another float precision,
``strict=False``, ``allow_set_relation_comp=True``) test those options, which tts's grader does
not use; they are skipped and counted.

Usage (from the repository root):
    git clone https://github.com/huggingface/Math-Verify /tmp/Math-Verify
    python benchmarks/mathverify_regressions.py --math-verify /tmp/Math-Verify [--show 50]

``--math-verify`` may also be a bare git directory (the file is then read from ``--rev``).
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from tts.answers import extract_answer
from tts.benchmarks.grading import Grader, Outcome

FILES = ("test_all.py", "test_boxed.py", "test_numina_cases.py", "test_open_thoughts.py", "test_yujianll.py")
# verify() options tts's grader uses: math-verify's defaults.
_DEFAULT_OPTIONS = {"precision": 6, "strict": True, "allow_set_relation_comp": False}


class Case(NamedTuple):
    file: str
    test: str
    gold: str
    pred: str
    expected: bool


def read_test_file(root: Path, name: str, rev: str) -> str:
    """The text of ``tests/<name>`` in a work tree, or at ``rev`` in a (bare) git directory."""
    path = root / "tests" / name
    if path.is_file():
        return path.read_text()
    return subprocess.run(["git", f"--git-dir={root}", "show", f"{rev}:tests/{name}"],
                          check=True, capture_output=True, text=True).stdout


def _call_options(func: ast.FunctionDef) -> dict[str, ast.expr]:
    """Keyword arguments the test passes to its comparison helper (``compare_strings``)."""
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "compare_strings":
            return {k.arg: k.value for k in node.keywords if k.arg}
    return {}


def cases_in(source: str, file: str) -> tuple[list[Case], int]:
    """The ``gold, pred, expected`` cases of one test file (parsed, never imported), and how
    many were skipped for testing non-default ``verify`` options."""
    cases, skipped = [], 0
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, ast.FunctionDef):
            continue
        for deco in func.decorator_list:
            if not (isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == "parametrize"):
                continue
            names = [n.strip() for n in ast.literal_eval(deco.args[0]).split(",")]
            if names[:2] != ["gold", "pred"]:
                continue
            fixed = {k: v for k, v in _call_options(func).items() if k in _DEFAULT_OPTIONS}
            for element in deco.args[1].elts:
                try:
                    values = dict(zip(names, ast.literal_eval(element), strict=True))
                except (ValueError, TypeError):
                    skipped += 1
                    continue
                options = {k: values.get(k) for k in _DEFAULT_OPTIONS if k in names}
                for k, node in fixed.items():
                    try:
                        options[k] = ast.literal_eval(node)
                    except ValueError:  # a parameter name, given by the parametrisation
                        options[k] = values.get(node.id) if isinstance(node, ast.Name) else None
                if any(options[k] != _DEFAULT_OPTIONS[k] for k in options):
                    skipped += 1
                    continue
                expected = values.get("expected", values.get("result"))
                cases.append(Case(file, func.name, values["gold"], values["pred"], bool(expected)))
    return cases, skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--math-verify", type=Path, required=True,
                        help="A clone of github.com/huggingface/Math-Verify (work tree or bare git dir).")
    parser.add_argument("--rev", default="HEAD", help="Revision to read in a bare git dir.")
    parser.add_argument("--workers", type=int, default=1, help="Grader worker processes.")
    parser.add_argument("--timeout", type=int, default=5, help="math-verify's time limit per check, seconds.")
    parser.add_argument("--show", type=int, default=100, help="Disagreements printed.")
    args = parser.parse_args()

    cases: list[Case] = []
    skipped = 0
    for name in FILES:
        found, n_skipped = cases_in(read_test_file(args.math_verify, name, args.rev), name)
        cases += found
        skipped += n_skipped
    answers = [extract_answer(c.pred) for c in cases]
    with Grader(timeout=args.timeout, workers=args.workers) as grader:
        outcomes = grader.grade_many([(a, c.gold) for a, c in zip(answers, cases, strict=True)])
    agree = [(o is Outcome.CORRECT) == c.expected for o, c in zip(outcomes, cases, strict=True)]

    print(f"Math-Verify cases: {len(cases)} ({skipped} skipped: non-default verify options)")
    total, hits = Counter(c.file for c in cases), Counter(c.file for c, ok in zip(cases, agree, strict=True) if ok)
    for name in FILES:
        if total[name]:
            print(f"    {name:<24} {hits[name]:>4} / {total[name]:<4} = {hits[name] / total[name]:.3f}")
    print(f"agreement: {sum(agree)} / {len(cases)} = {sum(agree) / len(cases):.3f}")
    misses = [(c, a, o) for c, a, o, ok in zip(cases, answers, outcomes, agree, strict=True) if not ok]
    print(f"\ndisagreements ({len(misses)}; first {min(len(misses), args.show)})")
    for c, a, o in misses[: args.show]:
        print(f"  {c.file}:{c.test} expected {int(c.expected)} tts {o.value}\n"
              f"      gold {c.gold!r}\n      pred {c.pred[-160:]!r}\n      extracted {a!r}")


if __name__ == "__main__":
    main()
