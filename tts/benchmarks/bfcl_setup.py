"""What the BFCL loader (:mod:`tts.benchmarks.bfcl`) and its grader (:mod:`tts.benchmarks.bfcl_grading`)
share: bfcl-eval's environment (where its Python and its data are, and the error that says how to
make it) and the one category rule both read. Here, below both, so that neither imports the other
at module level (the loader hands out the grader; the grader needs none of the loader).
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from tts.benchmarks.datasets import DatasetError

ENV_PYTHON = "TTS_BFCL_PYTHON"
"""The environment variable naming the Python of the environment where bfcl-eval is installed."""
VENV_DIR = ".venv-bfcl"
"""The environment ``make bfcl-env`` builds."""


class BFCLSetupError(DatasetError):
    """bfcl-eval's environment cannot be found or used; the message says how to make it."""


def is_irrelevance(category: str) -> bool:
    """Whether the right reply calls no tool (BFCL's ``irrelevance`` and ``live_irrelevance``)."""
    return "irrelevance" in category


def _default_pythons() -> list[Path]:
    source_root = Path(__file__).resolve().parents[2]
    return [source_root / VENV_DIR / "bin" / "python", Path.cwd() / VENV_DIR / "bin" / "python"]


def bfcl_python() -> Path:
    """The Python of bfcl-eval's environment: ``$TTS_BFCL_PYTHON``, else ``.venv-bfcl/bin/python``
    beside tts's source tree, else in the current directory.

    Raises:
        BFCLSetupError: None of them exists.
    """
    env = os.environ.get(ENV_PYTHON)
    if env:
        path = Path(env).expanduser()
        if not path.exists():
            raise BFCLSetupError(f"${ENV_PYTHON}={env} does not exist; point it at the python of an environment "
                                 "where bfcl-eval is installed, or unset it and run `make bfcl-env`.")
        return path
    for path in _default_pythons():
        if path.exists():
            return path
    raise BFCLSetupError(
        "the BFCL benchmark needs bfcl-eval in an environment of its own: run `make bfcl-env` in tts's "
        f"source tree (it builds {VENV_DIR}), or set ${ENV_PYTHON} to the python of an environment where "
        "bfcl-eval is installed.")


@functools.lru_cache(maxsize=8)
def _package_dir(python: str) -> Path:
    # find_spec locates the package without importing it (its import pulls every model handler).
    code = ("import importlib.util as u; s = u.find_spec('bfcl_eval'); "
            "print(s.submodule_search_locations[0] if s else '')")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BFCLSetupError(f"{python} could not be run to find bfcl-eval ({exc}); rebuild the environment "
                             "with `make bfcl-env` or fix $TTS_BFCL_PYTHON.") from exc
    found = out.stdout.strip()
    if not found:
        raise BFCLSetupError(f"bfcl-eval is not installed for {python}; run `make bfcl-env` (or "
                             "`pip install --no-deps bfcl-eval` there with envs/bfcl-requirements.txt).")
    return Path(found)


def data_dir(python: Path | None = None) -> Path:
    """bfcl-eval's data folder (``bfcl_eval/data``) in its environment."""
    return _package_dir(str(python or bfcl_python())) / "data"
