"""The library entry points an agent uses: tts.solve and tts.evaluate."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tts
from tts.backends.scripted import ScriptedGenerator
from tts.registry import UnknownNameError


def test_import_tts_is_light():
    code = "import sys, tts; assert not any(m in sys.modules for m in ('vllm', 'torch', 'pydantic'))"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_solve_returns_the_majority_answer_with_confidence_usage_and_trace():
    gen = ScriptedGenerator({"q0": {"14": 0.6, "13": 0.2}}, seed=1)
    sol = tts.solve("What is 7 + 7?", n=16, generator=gen)
    assert sol.answer == "14" and 0.4 < sol.confidence <= 1
    assert len(sol.trace.samples) == 16 and sol.usage.completion_tokens > 0


def test_solve_with_a_backend_spec_and_other_strategies():
    sol = tts.solve(tts.Problem("p", "What is 2 + 2?", "4"), strategy="best_of_n", n=4,
                    backend={"kind": "scripted", "accuracy": 0.9})
    assert sol.problem_id == "p" and sol.trace.strategy == "best_of_n"
    with pytest.raises(UnknownNameError, match="Unknown strategy"):
        tts.solve("x", strategy="majority", generator=ScriptedGenerator())


def test_evaluate_runs_a_config_dict(tmp_path):
    result = tts.evaluate({"data": {"benchmark": "demo", "limit": 4}, "backend": {"kind": "scripted"},
                           "strategies": [{"kind": "self_consistency", "n": 4}]}, tmp_path)
    assert result.problems == 4 and [s.config for s in result.summaries] == ["self_consistency@4"]
