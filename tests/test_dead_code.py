"""No public function of tts that nothing names: dead code costs every reader and rots unseen.

A public top-level function whose name appears nowhere else in tts, the tests, the benchmarks or
the scripts has no caller (names reached through a registry string still appear as that string;
a decorated function, such as a route, is reached through its decorator and not counted).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.reads_source

ROOT = Path(__file__).resolve().parents[1]

KNOWN_UNUSED = {
    # Found by this test when it was written, outside the change that added it; left for its owner.
    ("tts/serve/planning.py", "returns_tool_calls"),
}


def test_every_public_function_is_named_somewhere_else():
    sources = {p: p.read_text(encoding="utf-8") for d in ("tts", "tests", "benchmarks", "scripts")
               for p in (ROOT / d).rglob("*.py")}
    words = Counter(w for text in sources.values() for w in re.findall(r"\b[A-Za-z_]\w*\b", text))
    unused = {(str(p.relative_to(ROOT)), node.name) for p, text in sources.items() if p.is_relative_to(ROOT / "tts")
              for node in ast.parse(text).body
              if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_")
              and not node.decorator_list and words[node.name] == 1}
    assert unused - KNOWN_UNUSED == set(), "remove these, or use them"
