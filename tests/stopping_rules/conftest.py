"""The stopping rules that lost (``benchmarks/stopping_rules/``) live beside the benchmark that
measured them, outside the library; their tests import them from there."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
