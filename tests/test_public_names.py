"""Each public class name in tts is defined in one module.

Two classes under one name (a graph role ``Generator`` beside the backend protocol ``Generator``)
make a reader, an import and a traceback ambiguous: which one is meant depends on the import line.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import tts

pytestmark = pytest.mark.reads_source

ROOT = Path(tts.__file__).parent

# Names that may still be defined twice, each with the change that removes it (none left: issue 49's
# budget pipeline kept one BudgetError, tts.budgets.pricing's).
ALLOWED_TWICE: set[str] = set()


def _module_classes(path: Path) -> list[str]:
    """Public classes a module defines at its top level (also inside ``if``/``try`` blocks)."""
    names = []
    todo = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            names.append(node.name)
        elif isinstance(node, (ast.If, ast.Try)):
            todo.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            todo.extend(h for handler in getattr(node, "handlers", []) for h in handler.body)
    return names


def test_no_public_class_name_is_defined_in_two_modules():
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        for name in _module_classes(path):
            where[name].append(str(path.relative_to(ROOT.parent)))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1 and name not in ALLOWED_TWICE}
    assert not twice, f"rename one of each (a name that says what it is): {twice}"


def test_the_walk_sees_the_classes_it_checks():
    # The check above is only as good as its walk: it must find classes in nested packages.
    assert "Generator" in _module_classes(ROOT / "backends" / "base.py")
    assert "TreeNode" in _module_classes(ROOT / "search" / "tree" / "tree_search.py")
