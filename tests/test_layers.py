"""The package's layers import only downward (docs/architecture.md, "The layers"), checked on every module.

A module may import its own layer and any layer below it, at module level or inside a function;
an import that runs upward means the imported thing is in the wrong place. ``cost`` (the Kinetics
cost model) sits below the backends: it reads only model shapes, hardware tables and usage.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.reads_source

PACKAGE = Path(__file__).resolve().parents[1] / "tts"

# Highest first, as in docs/architecture.md's table (checked below); modules at the package's top level count as their own layer.
LAYERS = [
    "cli", "view", "serve", "api", "session", "eval", "graphs", "budgets", "search", "verifiers",
    "benchmarks", "execution", "prompts", "backends", "cost", "config", "models", "model_parts", "hub", "registry",
    "paths", "answers", "tracing", "types",
]


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "tts" else None


def _imports(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
    return found


def test_every_subpackage_and_top_level_module_has_a_layer():
    names = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert names - set(LAYERS) == set(), "add the new part of tts to LAYERS (and to docs/architecture.md's table)"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_runs_upward(path: Path):
    own = _layer(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
    upward = []
    for module, line in _imports(path):
        target = _layer(module)
        if target is None or own is None or target == own:
            continue
        if LAYERS.index(target) < LAYERS.index(own):
            upward.append(f"line {line}: {module} ({target} is above {own})")
    assert upward == []


def test_the_architecture_page_lists_the_layers_in_this_order():
    """docs/architecture.md is where a newcomer reads the layers: its table must be this list."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    table = page.split("## The layers", 1)[1].split("\n## ", 1)[0]
    listed = [line.split("`")[1] for line in table.splitlines() if line.startswith("| `")]
    assert listed == LAYERS


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_two_modules_import_each_other():
    """A circle (a imports b, b imports a, at module level or inside a function) means the part both
    need is in the wrong place: move it into a module below both. A package and its own
    ``__init__`` are one unit and not counted."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges = set()
    for name, path in modules.items():
        for module, _ in _imports(path):
            if module in modules and module != name:
                edges.add((name, module))
    circles = sorted({tuple(sorted((a, b))) for a, b in edges if (b, a) in edges
                      and not (a.startswith(b + ".") or b.startswith(a + "."))})
    assert circles == []
