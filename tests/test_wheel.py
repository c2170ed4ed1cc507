"""The built wheel works on its own: outside the checkout, its commands run and its data files load.

The wheel is built from a copy of the package's sources (no stale ``build/`` folder of the checkout
can add to it) and installed into a fresh virtual environment. The dependencies come from this
interpreter's site-packages through a plain ``.pth`` line: that adds the folder to ``sys.path``
without running its ``.pth`` files, so the checkout's editable install of tts is not seen, and
``import tts`` can only find the wheel's copy (asserted below).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DIST = PYPROJECT["project"]["name"]
SCRIPTS = sorted(PYPROJECT["project"]["scripts"])


def _run(cmd: list[str], cwd: Path, timeout: float = 240) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the fresh environment's bin folder, an empty working directory outside the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "tts", src / "tts", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    # This environment's setuptools builds it, with no download, when it reads pyproject.toml's
    # license string (setuptools 77); an older one leaves the build to pip's isolated environment.
    try:
        import setuptools

        isolation = [] if int(setuptools.__version__.split(".")[0]) < 77 else ["--no-build-isolation"]
    except ImportError:
        isolation = []
    _run([*pip, "wheel", "--no-deps", *isolation, "-q", "-w", str(dist), str(src)], cwd=tmp)
    wheels = list(dist.glob("*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == [DIST.replace("-", "_")]

    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    vpy = venv / "bin" / "python"
    _run([*pip, "--python", str(vpy), "install", "--no-deps", "-q", str(wheels[0])], cwd=tmp)
    purelib = _run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp).strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib) / "_tts_wheel_check_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    work = tmp / "work"
    work.mkdir()
    return venv / "bin", work


def test_import_finds_the_wheel_and_its_data(wheel_env: tuple[Path, Path]) -> None:
    bin_dir, work = wheel_env
    code = ("import pathlib, tts; p = pathlib.Path(tts.__file__).parent; "
            "print(p); print(len(list(p.glob('**/data/*.json'))))")
    where, shipped = _run([str(bin_dir / "python"), "-c", code], cwd=work).split()
    assert Path(where).is_relative_to(bin_dir.parent), f"tts imported from {where}, not the wheel"
    assert int(shipped) == len(list((ROOT / "tts").glob("**/data/*.json"))) > 0


def test_both_commands_answer_help(wheel_env: tuple[Path, Path]) -> None:
    bin_dir, work = wheel_env
    assert {"tts", DIST} <= set(SCRIPTS)
    for script in SCRIPTS:
        out = _run([str(bin_dir / script), "--help"], cwd=work)
        assert f"Usage: {script}" in out and "eval" in out


def test_eval_and_cost_run_from_the_wheel(wheel_env: tuple[Path, Path]) -> None:
    bin_dir, work = wheel_env
    out = _run([str(bin_dir / "tts"), "eval", "--backend", "scripted", "--benchmark", "demo", "--limit", "3",
                "--out", str(work / "run")], cwd=work)
    assert "self_consistency" in out
    assert (work / "run").is_dir()
    # The architecture tables are package data: pricing a shipped model reads them.
    cost = json.loads(_run([str(bin_dir / DIST), "cost", "--model", "Qwen/Qwen3-8B", "--json"], cwd=work))
    assert cost["params"] == 8190735360


def test_run_manifest_names_the_wheel_version(wheel_env: tuple[Path, Path]) -> None:
    bin_dir, work = wheel_env
    out = _run([str(bin_dir / "python"), "-c", "from tts.eval.store import _versions; print(_versions().get('tts'))"],
               cwd=work)
    assert out.strip() == PYPROJECT["project"]["version"]
