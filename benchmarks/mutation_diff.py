"""Which functions a change touches, named as mutmut names their mutants, and which tests cover them.

``benchmarks/mutation.py --diff [BASE]`` mutates only what a change touched: the lines ``git diff
-U0`` reports between BASE (its merge base with HEAD, so that commits on BASE since do not count)
and the working tree, mapped to the functions that hold them through Python's ``ast`` line ranges.
mutmut 3 names a mutant ``<module>.x_<function>__mutmut_<i>`` (a method:
``<module>.xǁ<Class>ǁ<method>__mutmut_<i>``) and ``mutmut run`` takes glob patterns of names, so a
changed function becomes the pattern ``<module>.x_<function>__mutmut_*``.

What mutmut never mutates is reported, not hidden: a changed line outside any function (a
constant, a class field), and functions with decorators other than one ``staticmethod`` or
``classmethod`` (``lru_cache``, ``property``: mutmut leaves decorated functions alone).
"""

from __future__ import annotations

import ast
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
_PLAIN_DECORATORS = {"staticmethod", "classmethod"}


@dataclass(frozen=True)
class Function:
    """One function or method as mutmut sees it."""

    module: str
    """Dotted module path, ``tts.eval.report``."""
    mangled: str
    """mutmut's name for it inside the module: ``x_name`` or ``xǁClassǁname``."""
    first: int
    """Its first line (its first decorator's, if any)."""
    last: int
    line: int
    """The line of its ``def``."""
    decorated: bool
    """Decorated other than by one ``staticmethod``/``classmethod``: mutmut does not mutate it."""

    @property
    def pattern(self) -> str:
        """The glob of its mutants' names, for ``mutmut run``."""
        return f"{self.module}.{self.mangled}__mutmut_*"

    @property
    def label(self) -> str:
        """``module.function`` or ``module.Class.method``."""
        name = self.mangled.removeprefix("x_") if self.mangled.startswith("x_") else self.mangled[2:].replace("ǁ", ".")
        return f"{self.module}.{name}"


@dataclass
class Touched:
    """What a diff touched in one source file."""

    path: str
    functions: list[Function] = field(default_factory=list)
    outside: list[int] = field(default_factory=list)
    """Changed lines (of the new file) outside every function."""


def changed_lines(diff: str) -> dict[str, set[int]]:
    """File -> changed line numbers of the new side, from ``git diff -U0`` output.

    A hunk that only deletes lines (``+c,0``) counts the lines on either side of the cut (c and
    c + 1), so that a deleted line marks the function it was deleted from."""
    out: dict[str, set[int]] = {}
    path: str | None = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            target = line[4:].strip()
            path = None if target == "/dev/null" else target.removeprefix("b/")
            if path is not None:
                out.setdefault(path, set())
            continue
        match = _HUNK.match(line)
        if match and path is not None:
            start, count = int(match.group(1)), int(match.group(2) if match.group(2) is not None else 1)
            out[path].update(range(start, start + count) if count else (start, start + 1))
    return out


def functions(source: str, module: str) -> list[Function]:
    """The functions mutmut could mutate in ``source``: top-level functions and the methods of
    top-level classes (a function nested in another is part of the outer one)."""
    found = []

    def add(node: ast.FunctionDef | ast.AsyncFunctionDef, mangled: str) -> None:
        plain = len(node.decorator_list) == 1 and isinstance(node.decorator_list[0], ast.Name) and (
            node.decorator_list[0].id in _PLAIN_DECORATORS)
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        found.append(Function(module, mangled, first, node.end_lineno or node.lineno, node.lineno,
                              bool(node.decorator_list) and not plain))

    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(node, f"x_{node.name}")
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    add(item, f"xǁ{node.name}ǁ{item.name}")
    return found


def touched(diff: str, root: Path, package: str = "tts") -> list[Touched]:
    """The package's source files a diff changed, each with the functions its changed lines fall in."""
    result = []
    for path, lines in sorted(changed_lines(diff).items()):
        if not (path.startswith(f"{package}/") and path.endswith(".py")) or not (root / path).exists():
            continue
        module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        funcs = functions((root / path).read_text(), module)
        entry = Touched(path)
        for line in sorted(lines):
            hit = [f for f in funcs if f.first <= line <= f.last]
            if not hit:
                entry.outside.append(line)
            elif hit[0] not in entry.functions:
                entry.functions.append(hit[0])
        result.append(entry)
    return result


def base_commit(base: str, root: Path) -> str:
    """The merge base of ``base`` and HEAD: the change is what HEAD and the working tree add to it."""
    return subprocess.run(["git", "merge-base", base, "HEAD"], cwd=root, check=True, capture_output=True,
                          text=True).stdout.strip()


def git_diff(base: str, root: Path, package: str = "tts") -> str:
    """``git diff -U0`` of the package between ``base``'s merge base and the working tree."""
    return subprocess.run(["git", "diff", "-U0", "--no-color", "--no-ext-diff", base_commit(base, root), "--",
                           package], cwd=root, check=True, capture_output=True, text=True).stdout


def default_base(root: Path) -> str:
    """``origin/main`` where the checkout has it, else ``main``."""
    known = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "origin/main"], cwd=root,
                           capture_output=True, text=True)
    return "origin/main" if known.returncode == 0 else "main"


def tests_importing(module: str, root: Path) -> list[str]:
    """Test files that import ``module`` (``tts.eval.report``): ``import tts.eval.report``, ``from
    tts.eval.report import ...`` or ``from tts.eval import report``; for modules the script's
    ``MODULES`` does not list."""
    package, _, name = module.rpartition(".")
    wanted = re.compile(rf"^\s*(?:from {re.escape(module)} import|import {re.escape(module)}\b|"
                        rf"from {re.escape(package)} import .*\b{re.escape(name)}\b)", re.MULTILINE)
    return sorted(str(p.relative_to(root)) for p in (root / "tests").rglob("test_*.py") if wanted.search(p.read_text()))


def mutant_functions(mutated: str) -> dict[str, list[str]]:
    """mutmut's mutated copy of a file -> the source lines of each function variant it holds
    (``x_f__mutmut_orig``, ``x_f__mutmut_1``, ...; methods ``xǁClassǁf__mutmut_1``)."""
    lines = mutated.splitlines()
    out = {}
    nodes: list[ast.stmt] = []
    for node in ast.parse(mutated).body:
        nodes.extend(node.body if isinstance(node, ast.ClassDef) else [node])
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "__mutmut_" in node.name:
            out[node.name] = lines[node.lineno - 1:node.end_lineno]
    return out


def _body(lines: list[str]) -> list[str]:
    return lines[1:]  # the def line carries the variant's own name; a changed signature shows below


def mutant_offset(orig: list[str], mutant: list[str]) -> int:
    """Lines from the function's ``def`` to the first line a mutant changes (0: the signature)."""
    if orig[0].split("(", 1)[-1] != mutant[0].split("(", 1)[-1]:
        return 0
    for i, (a, b) in enumerate(zip(_body(orig), _body(mutant)), start=1):
        if a != b:
            return i
    return min(len(orig), len(mutant))


def mutant_diff(orig: list[str], mutant: list[str], path: str) -> str:
    """The mutant's change as a unified diff (the lines as ``mutmut show`` prints them)."""
    import difflib

    head = orig[0].split("(", 1)[0]
    mangled = head.split()[-1]
    plain = mangled.removesuffix("__mutmut_orig")
    plain = plain[2:] if plain.startswith("x_") else plain.rsplit("ǁ", 1)[-1]
    named = [head.replace(mangled, plain) + "(" + orig[0].split("(", 1)[-1], *orig[1:]]
    renamed = [head.replace(mangled, plain) + "(" + mutant[0].split("(", 1)[-1], *mutant[1:]]
    return "\n".join(difflib.unified_diff(named, renamed, path, path, n=3, lineterm=""))


def select_mutants(touched_files: list[Touched], changed: dict[str, set[int]], work: Path,
                   whole: bool = False) -> dict[str, str]:
    """Mutant name -> its diff, for the mutants of the touched functions whose change falls on a
    changed line (every mutant of those functions with ``whole``)."""
    chosen = {}
    for entry in touched_files:
        mutated = work / "mutants" / entry.path
        if not mutated.exists():
            continue
        variants = mutant_functions(mutated.read_text())
        for f in entry.functions:
            if f.decorated:
                continue
            orig = variants.get(f"{f.mangled}__mutmut_orig")
            if orig is None:
                continue
            for name, lines in variants.items():
                stem, _, number = name.rpartition("__mutmut_")
                if stem != f.mangled or not number.isdigit():
                    continue
                if whole or f.line + mutant_offset(orig, lines) in changed[entry.path]:
                    chosen[f"{f.module}.{name}"] = mutant_diff(orig, lines, entry.path)
    return chosen


def all_mutant_diffs(work: Path, paths: list[str]) -> dict[str, str]:
    """Mutant name -> its diff, for every mutant mutmut wrote of the files ``paths`` (``tts/x/y.py``),
    read from its mutated copies: one file read instead of one ``mutmut show`` (seconds) per mutant."""
    out = {}
    for path in paths:
        mutated = work / "mutants" / path
        if not mutated.exists():
            continue
        module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        variants = mutant_functions(mutated.read_text())
        for name, lines in variants.items():
            stem, _, number = name.rpartition("__mutmut_")
            orig = variants.get(f"{stem}__mutmut_orig")
            if number.isdigit() and orig is not None:
                out[f"{module}.{name}"] = mutant_diff(orig, lines, path)
    return out
