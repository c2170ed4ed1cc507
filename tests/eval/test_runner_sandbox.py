"""The eval runner and the sandbox (issue 48): HumanEval's grading option reaches the benchmark
object that grades, and a run that would execute code without bubblewrap stops before generating."""

from __future__ import annotations

import pytest

from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.humaneval import HumanEvalBenchmark
from tts.config import EvalConfig
from tts.eval.runner import load_problems, run_eval
from tts.execution import sandbox
from tts.execution.sandbox import SandboxUnavailableError


def _config(strategy: str = "self_consistency", **options):
    return EvalConfig.model_validate({
        "data": {"benchmark": "humaneval", "limit": 2, "options": options},
        "strategies": [{"kind": strategy, "n": 2}],
        "backend": {"kind": "scripted"},
    })


def test_grading_options_reach_the_grader_when_the_problems_were_loaded_by_the_caller():
    problems = HumanEvalBenchmark().load(limit=2)  # as the CLI does: load first, then run_eval(problems=...)
    bench, given = load_problems(_config(unsafe_no_sandbox="true"), problems)
    assert given == problems
    assert bench.grader(5).unsafe_no_sandbox is True
    bench, _ = load_problems(_config(), problems)
    assert bench.grader(5).unsafe_no_sandbox is False


def test_without_bubblewrap_run_eval_refuses_before_generating(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    problems = HumanEvalBenchmark().load(limit=2)
    for strategy in ("self_consistency", "exec_vote"):
        gen = RecordingGenerator(ScriptedGenerator.for_problems(problems, seed=0))
        with pytest.raises(SandboxUnavailableError, match=r"humaneval's grading .*apt-get install bubblewrap"):
            run_eval(_config(strategy), tmp_path / strategy, generator=gen, problems=problems)
        assert gen.requests == []
