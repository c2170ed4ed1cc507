"""benchmarks/mutation.py --stale: which rows of the mutation table describe code that has changed since."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("mutation_tool", ROOT / "benchmarks" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_tool"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


mutation = _load()

TABLE = """# Mutation

| module | mutants | killed | survived | equivalent | not run | survival % | minutes |
|---|---:|---:|---:|---:|---:|---:|---:|
| answers/keys | 10 | 10 | 0 | 0 | 0 | 0.0 | 1.0 |
| eval/report | 20 | 19 | 1 | 0 | 0 | 5.0 | 2.0 |
"""


def _commit(repo: Path, message: str, **files: str) -> None:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message], cwd=repo, check=True)


def test_a_row_is_stale_once_its_module_changes_after_it_and_fresh_when_rewritten(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _commit(tmp_path, "start", **{"docs/mutation.md": TABLE, "tts/answers/keys.py": "A = 1\n",
                                  "tts/eval/report.py": "B = 1\n"})
    modules = ["answers/keys", "eval/report", "eval/store"]
    assert mutation.stale_rows(modules, root=tmp_path) == {"eval/store": "no row"}

    _commit(tmp_path, "keys: a second constant", **{"tts/answers/keys.py": "A = 1\nC = 2\n"})
    _commit(tmp_path, "docs elsewhere", **{"README.md": "hello\n"})
    stale = mutation.stale_rows(modules, root=tmp_path)
    assert set(stale) == {"answers/keys", "eval/store"}
    assert stale["answers/keys"].endswith("keys: a second constant")

    # Re-measured: the row is written again (here its minutes), and the module is fresh.
    _commit(tmp_path, "table: keys re-run",
            **{"docs/mutation.md": TABLE.replace("| 0.0 | 1.0 |", "| 0.0 | 1.5 |")})
    assert mutation.stale_rows(modules, root=tmp_path) == {"eval/store": "no row"}
    # Another row's edit does not refresh eval/report, which changes now.
    _commit(tmp_path, "report: changed", **{"tts/eval/report.py": "B = 2\n"})
    assert set(mutation.stale_rows(modules, root=tmp_path)) == {"eval/report", "eval/store"}


def test_every_module_the_tool_measures_has_a_row_in_the_table():
    assert "no row" not in mutation.stale_rows(list(mutation.MODULES)).values()


def test_the_row_that_counts_is_the_newest_pass_the_first_in_the_doc(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    older = TABLE.replace("# Mutation", "## An older pass")
    _commit(tmp_path, "start", **{"docs/mutation.md": TABLE + "\n" + older, "tts/answers/keys.py": "A = 1\n",
                                  "tts/eval/report.py": "B = 1\n"})
    _commit(tmp_path, "keys: changed", **{"tts/answers/keys.py": "A = 2\n"})
    # The newest pass (first) re-measures keys; the older pass's row below it is left as it was.
    _commit(tmp_path, "table: keys re-run",
            **{"docs/mutation.md": TABLE.replace("| 0.0 | 1.0 |", "| 0.0 | 1.5 |") + "\n" + older})
    assert mutation.stale_rows(["answers/keys", "eval/report"], root=tmp_path) == {}
    # An edit of only the older pass's row does not make a changed module fresh.
    _commit(tmp_path, "report: changed", **{"tts/eval/report.py": "B = 2\n"})
    _commit(tmp_path, "old table touched", **{"docs/mutation.md": TABLE.replace("| 0.0 | 1.0 |", "| 0.0 | 1.5 |")
                                              + "\n" + older.replace("| 5.0 | 2.0 |", "| 5.0 | 2.5 |")})
    assert set(mutation.stale_rows(["answers/keys", "eval/report"], root=tmp_path)) == {"eval/report"}
