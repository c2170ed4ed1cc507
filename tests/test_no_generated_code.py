"""tts runs no code it writes itself: no ``exec``/``eval`` of generated source anywhere in the
package (a reader sees every function as it runs). The one place with ``exec(`` in its text is
the sandbox's program templates (tts/execution/programs.py), where it is part of the program a
sandboxed interpreter runs, a string, never called by tts."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.reads_source

PACKAGE = Path(__file__).resolve().parents[1] / "tts"
TEMPLATES = {"execution/programs.py"}
"""Files whose text may hold ``exec(``: inside the programs they send to the sandbox."""


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_but_the_sandbox_templates_has_exec_in_its_text():
    found = [f"{path.relative_to(PACKAGE)}:{number}" for path in _modules()
             if str(path.relative_to(PACKAGE)) not in TEMPLATES
             for number, line in enumerate(path.read_text().splitlines(), 1) if "exec(" in line]
    assert not found, f"exec( outside the sandbox's program templates: {found}"


def test_no_module_calls_exec_or_eval_and_the_templates_hold_it_only_in_strings():
    calls = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("exec", "eval"):
                calls.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not calls, f"exec/eval called in tts: {calls}"
    assert all("exec(" in (PACKAGE / name).read_text() for name in TEMPLATES)  # the allow-list is not stale
