"""benchmarks/mutation_diff.py: a change's lines -> the functions (and mutants) `mutation.py --diff` mutates."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("mutation_diff", ROOT / "benchmarks" / "mutation_diff.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_diff"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


md = _load()

SOURCE = '''"""A module."""
import functools

LIMIT = 3


def top(x):
    def inner(y):
        return y + 1
    return inner(x) * 2


class Box:
    size: int = 2

    def grow(self, k):
        return self.size + k

    @staticmethod
    def make():
        return Box()

    @property
    def double(self):
        return self.size * 2


@functools.lru_cache
def cached(x):
    return x


async def later(x):
    return x
'''

DIFF = """diff --git a/tts/m.py b/tts/m.py
--- a/tts/m.py
+++ b/tts/m.py
@@ -4 +4 @@ import functools
-LIMIT = 2
+LIMIT = 3
@@ -9,0 +10 @@ def top(x):
+    # why
@@ -17 +17,2 @@ class Box:
-        return self.size
+        return self.size + k
@@ -31,2 +30,0 @@ def cached(x):
-    x = x
-    y = x
diff --git a/tts/gone.py b/tts/gone.py
--- a/tts/gone.py
+++ /dev/null
@@ -1,2 +0,0 @@
-a = 1
-b = 2
diff --git a/tests/test_m.py b/tests/test_m.py
--- a/tests/test_m.py
+++ b/tests/test_m.py
@@ -1 +1 @@
-x
+y
"""


def test_changed_lines_of_the_new_side_and_a_deletion_marks_both_sides_of_the_cut():
    lines = md.changed_lines(DIFF)
    assert lines == {"tts/m.py": {4, 10, 17, 18, 30, 31}, "tests/test_m.py": {1}}


def test_functions_as_mutmut_names_them_nested_ones_inside_their_outer_function():
    found = {f.mangled: f for f in md.functions(SOURCE, "tts.m")}
    assert list(found) == ["x_top", "xǁBoxǁgrow", "xǁBoxǁmake", "xǁBoxǁdouble", "x_cached", "x_later"]
    assert (found["x_top"].first, found["x_top"].last) == (7, 10)  # inner() is part of top()
    assert (found["xǁBoxǁmake"].first, found["xǁBoxǁmake"].line) == (19, 20)
    assert [m for m, f in found.items() if f.decorated] == ["xǁBoxǁdouble", "x_cached"]  # staticmethod is mutated
    assert found["xǁBoxǁgrow"].pattern == "tts.m.xǁBoxǁgrow__mutmut_*"
    assert found["xǁBoxǁgrow"].label == "tts.m.Box.grow"


def test_touched_maps_lines_to_functions_and_reports_the_rest(tmp_path):
    (tmp_path / "tts").mkdir()
    (tmp_path / "tts" / "m.py").write_text(SOURCE)
    (entry,) = md.touched(DIFF, tmp_path)  # tests/ and a deleted file are not mutated
    assert entry.path == "tts/m.py"
    assert [f.mangled for f in entry.functions] == ["x_top", "xǁBoxǁgrow", "x_cached"]
    assert entry.outside == [4, 18, 31]  # the constant, and blank lines after grow and cached


def test_only_the_mutants_on_changed_lines_are_chosen_with_their_diffs(tmp_path):
    (tmp_path / "tts").mkdir()
    (tmp_path / "tts" / "m.py").write_text(SOURCE)
    entry = md.Touched("tts/m.py", [f for f in md.functions(SOURCE, "tts.m") if f.mangled == "x_top"])
    mutated = tmp_path / "mutants" / "tts" / "m.py"
    mutated.parent.mkdir(parents=True)
    orig = "def x_top__mutmut_orig(x):\n    def inner(y):\n        return y + 1\n    return inner(x) * 2\n"
    on_line_10 = orig.replace("__mutmut_orig", "__mutmut_1").replace("* 2", "* 3")
    on_line_9 = orig.replace("__mutmut_orig", "__mutmut_2").replace("y + 1", "y - 1")
    signature = orig.replace("__mutmut_orig(x)", "__mutmut_3(x=None)")
    mutated.write_text(orig + "\n" + on_line_10 + "\n" + on_line_9 + "\n" + signature)
    chosen = md.select_mutants([entry], {"tts/m.py": {10}}, tmp_path)
    assert list(chosen) == ["tts.m.x_top__mutmut_1"]
    assert "-    return inner(x) * 2\n+    return inner(x) * 3" in chosen["tts.m.x_top__mutmut_1"]
    assert list(md.select_mutants([entry], {"tts/m.py": {7}}, tmp_path)) == ["tts.m.x_top__mutmut_3"]
    assert len(md.select_mutants([entry], {"tts/m.py": set()}, tmp_path, whole=True)) == 3


def test_the_diff_is_taken_from_the_merge_base_to_the_working_tree(tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]

    def run(*args):
        subprocess.run([*git, *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "tts").mkdir()
    path = tmp_path / "tts" / "m.py"
    path.write_text(SOURCE)
    run("init", "-q")
    run("add", ".")
    run("commit", "-qm", "base")
    run("checkout", "-qb", "work")
    path.write_text(SOURCE.replace("return self.size + k", "return self.size - k"))
    run("commit", "-qam", "grow")
    run("checkout", "-q", "main")
    (tmp_path / "tts" / "other.py").write_text("def f():\n    return 1\n")  # on main after the branch point
    run("add", ".")
    run("commit", "-qm", "main moves on")
    run("checkout", "-q", "work")
    path.write_text(path.read_text().replace("return x\n\n\nasync", "return -x\n\n\nasync"))  # not committed
    assert md.default_base(tmp_path) == "main"
    (entry,) = md.touched(md.git_diff("main", tmp_path), tmp_path)
    assert [f.mangled for f in entry.functions] == ["xǁBoxǁgrow", "x_cached"]


def test_tests_importing_finds_every_import_form(tmp_path):
    (tmp_path / "tests" / "a").mkdir(parents=True)
    forms = {"test_1.py": "from tts.eval.report import summarize\n", "test_2.py": "import tts.eval.report as r\n",
             "test_3.py": "from tts.eval import labels, report\n", "test_4.py": "from tts.eval.reporting import x\n",
             "helper.py": "from tts.eval.report import summarize\n"}
    for name, text in forms.items():
        (tmp_path / "tests" / "a" / name).write_text(text)
    assert md.tests_importing("tts.eval.report", tmp_path) == [
        "tests/a/test_1.py", "tests/a/test_2.py", "tests/a/test_3.py"]


@pytest.mark.parametrize("hunk", ["@@ -1 +1 @@", "@@ -1,0 +2 @@", "@@ -3,2 +5,3 @@ def f():"])
def test_every_hunk_header_form_is_read(hunk):
    assert md.changed_lines(f"+++ b/tts/x.py\n{hunk}\n")["tts/x.py"]


def test_mutants_killed_by_a_timeout_are_counted_killed_and_named(tmp_path, monkeypatch, capsys):
    """A timeout counts as a kill, but a test that is merely slow (a fixture rebuilt for every mutant)
    times out on any mutant: the run names those mutants so that a reader can tell."""
    spec = importlib.util.spec_from_file_location("mutation", ROOT / "benchmarks" / "mutation.py")
    mutation = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "mutation", mutation)
    spec.loader.exec_module(mutation)
    listing = "    tts.a.x_f__mutmut_1: killed\n    tts.a.x_f__mutmut_2: timeout\n    tts.a.x_f__mutmut_3: survived\n"

    def fake_mutmut(work, *args, timeout=None):
        return subprocess.CompletedProcess(args, 0, stdout=listing if args[0] == "results" else "", stderr="")

    monkeypatch.setattr(mutation, "_mutmut", fake_mutmut)
    only = {f"tts.a.x_f__mutmut_{k}": "-    return 1\n+    return 2\n" for k in (1, 2, 3)}
    result = mutation.run_mutants(tmp_path, mutation.Result("a"), 60, {}, only)
    assert (result.mutants, result.killed, result.survived) == (3, 2, ["tts.a.x_f__mutmut_3"])
    assert result.timed_out == ["tts.a.x_f__mutmut_2"]
    mutation._say_timeouts(result, sys.stdout)
    assert capsys.readouterr().out == ("# 1 counted killed by a timeout (check that the tests are not just slow): "
                                       "tts.a.x_f__mutmut_2\n")


def test_an_equivalent_names_a_deleting_mutants_deleted_line():
    spec = importlib.util.spec_from_file_location("mutation", ROOT / "benchmarks" / "mutation.py")
    mutation = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutation", mutation)
    spec.loader.exec_module(mutation)
    assert mutation._changed_lines("--- a\n+++ b\n-    x = 1\n+    x = 2\n") == ["x = 2"]
    assert mutation._changed_lines("--- a\n+++ b\n     f(\n-        n=1,\n     )\n") == ["n=1,"]


def test_equivalents_listed_under_old_numbers_match_the_same_changes_after_a_renumbering(tmp_path, monkeypatch, capsys):
    """An edit to a function renumbers its mutants: entries listed under the old numbers still
    explain the survivors making their changes while the function has exactly as many such
    mutants as entries; a change made by more mutants than are listed stays a survivor."""
    spec = importlib.util.spec_from_file_location("mutation", ROOT / "benchmarks" / "mutation.py")
    mutation = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "mutation", mutation)
    spec.loader.exec_module(mutation)
    # After the edit: 5 and 9 set the reason to None (listed as 3 and 7), 6 drops strict (listed as
    # 4), 8 makes a change listed once but now made twice (by 2 and 8), 10 was never listed.
    new = {1: "x = 1", 2: "y = None", 5: "reason = None", 6: "zip(a, b)", 8: "y = None", 9: "reason = None",
           10: "z = 0"}
    diffs = {f"tts.a.x_f__mutmut_{k}": f"-    old\n+    {change}\n" for k, change in new.items()}
    listing = "".join(f"    {name}: {'killed' if name.endswith('_1') else 'survived'}\n" for name in diffs)

    def fake_mutmut(work, *args, timeout=None):
        return subprocess.CompletedProcess(args, 0, stdout=listing if args[0] == "results" else "", stderr="")

    monkeypatch.setattr(mutation, "_mutmut", fake_mutmut)
    monkeypatch.setattr(mutation, "_diffs", lambda work, files: diffs)
    known = {f"tts.a.x_f__mutmut_{k}": [{"change": change, "reason": "r"}]
             for k, change in {3: "reason = None", 7: "reason = None", 4: "zip(a, b)", 2: "y = None"}.items()}
    known["tts.a.x_g__mutmut_10"] = [{"change": "z = 0", "reason": "another function's"}]
    result = mutation.run_mutants(tmp_path, mutation.Result("a"), 60, known, files=["tts/a.py"])
    assert sorted(result.equivalent) == ["tts.a.x_f__mutmut_2", "tts.a.x_f__mutmut_5", "tts.a.x_f__mutmut_6",
                                         "tts.a.x_f__mutmut_9"]
    assert result.renumbered == ["tts.a.x_f__mutmut_5", "tts.a.x_f__mutmut_6", "tts.a.x_f__mutmut_9"]
    assert result.survived == ["tts.a.x_f__mutmut_8", "tts.a.x_f__mutmut_10"]
    mutation._say_timeouts(result, sys.stdout)
    assert capsys.readouterr().out == (
        "# 3 matched listed equivalents under other numbers of the same function (rename those entries): "
        "tts.a.x_f__mutmut_5 tts.a.x_f__mutmut_6 tts.a.x_f__mutmut_9\n")
    # With `only` (a --diff run: the diffs of the changed lines' mutants only) nothing is matched so.
    assert mutation.run_mutants(tmp_path, mutation.Result("a"), 60, known, only=diffs).renumbered == []
