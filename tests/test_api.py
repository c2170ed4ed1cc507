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


class _ClosableScripted(ScriptedGenerator):
    """A scripted generator that records being closed, standing in for a vLLM engine."""

    def __init__(self, config: object) -> None:
        super().__init__({"q0": {"14": 0.8}}, seed=0)
        self.config = config
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_solve_keeps_one_engine_warm_per_config_until_close_engines(monkeypatch):
    from tts.api import close_engines
    from tts.backends.engine_pool import EnginePool

    made: list[_ClosableScripted] = []

    def factory(config, problems):
        made.append(_ClosableScripted(config))
        return made[-1]

    monkeypatch.setattr("tts.api._POOL", EnginePool(max_size=1, factory=factory))
    small = {"kind": "vllm", "max_model_len": 1024}
    assert tts.solve("What is 7 + 7?", n=4, backend=small).answer == "14"
    tts.solve("What is 7 + 7?", n=4, backend=small)
    assert len(made) == 1 and not made[0].closed  # warm across calls
    tts.solve("What is 7 + 7?", n=4, backend={**small, "model": "/models/other"})
    assert len(made) == 2 and made[0].closed and not made[1].closed  # one engine at a time
    close_engines()
    assert made[1].closed
    close_engines()  # twice is harmless
    tts.solve("What is 7 + 7?", n=4, backend=small)
    assert len(made) == 3 and not made[2].closed
    close_engines()


def test_solve_opens_and_closes_cheap_backends_per_call_and_never_closes_a_passed_generator(monkeypatch):
    from tts.backends import scripted

    closed = []
    monkeypatch.setattr(scripted.ScriptedGenerator, "close", lambda self: closed.append(self))
    tts.solve("What is 2 + 2?", n=2, backend="scripted")
    assert len(closed) == 1
    gen = ScriptedGenerator({"q0": {"4": 0.9}})
    tts.solve("What is 2 + 2?", n=2, generator=gen)
    assert len(closed) == 1


def test_evaluate_runs_an_allocation_section_instead_of_ignoring_it(tmp_path):
    spec = {"data": {"benchmark": "demo", "limit": 4}, "backend": {"kind": "scripted"},
            "sampling": {"max_tokens": 48}, "allocation": {"budget": 3000, "n_max": 8}}
    result = tts.evaluate(spec, tmp_path / "a")
    assert {r.config for r in result.rows} == {"allocated-online@3000tokens"}
    assert all(r.allocation is not None and r.budget_spent is not None for r in result.rows)
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval

    with pytest.raises(ValueError, match="allocation section, which run_eval would ignore"):
        run_eval(EvalConfig.model_validate(spec), tmp_path / "b")
