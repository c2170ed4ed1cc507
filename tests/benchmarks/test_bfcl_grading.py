"""The BFCL grader's own rules, around a fake checker worker (a Python script speaking the worker's
protocol; BFCL's real checker is tests/benchmarks/test_bfcl.py's, where bfcl-eval's environment is
built): what is sent per answer, what needs no worker, the cache, a worker that dies, stalls, says
less than asked or cannot start. A fraction of a second a test, without bfcl-eval."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from tts.benchmarks import bfcl_grading
from tts.benchmarks.bfcl_grading import BFCLGrader, BFCLSetupError, decoded_calls
from tts.benchmarks.grading import Outcome
from tts.types import Problem

FAKE_WORKER = r"""
import json, os, sys, time
mode = os.environ.get("FAKE_BFCL", "")
log = os.environ.get("FAKE_BFCL_LOG")
if mode == "fatal":
    print(json.dumps({"fatal": "importing bfcl_eval failed: no module"}), flush=True)
    sys.exit(0)
if mode == "silent":
    sys.stderr.buffer.write(b"bfcl crashed at start \xff\n")
    sys.exit(3)
if mode == "long":
    sys.stderr.write("A" * 200 + "B" * 800 + "\n")
    sys.exit(3)
if mode == "not ready":
    print(json.dumps({"ready": False}), flush=True)
    sys.exit(0)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    items = json.loads(line)["items"]
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(items) + "\n")
    results = []
    for item in items:
        name = next(iter(item["calls"][0]))
        if name == "die":
            sys.exit(1)
        if name == "hang":
            time.sleep(1.5)
        if name == "short":
            continue
        if name == "crash":
            results.append({"valid": None, "error": "checker crashed"})
        elif name == "bare":  # BFCL's record without its error list
            results.append({"valid": False})
        elif name == "big":  # a reply line longer than a pipe's 64 KiB: read in several chunks
            results.append({"valid": False, "error": ["x" * 200000]})
        else:
            results.append({"valid": name == "right", "error": [] if name == "right" else ["wrong " + name]})
    print(json.dumps({"results": results}), flush=True)
"""


def _call(name: str, **args) -> str:
    return json.dumps([{"name": name, "arguments": args}])


def _problem(pid: str = "simple_0", category: str = "simple_python", **meta) -> Problem:
    return Problem(pid, "q", metadata={"category": category, "bfcl_functions": [{"name": "f"}],
                                       "bfcl_ground_truth": [{"f": {"x": [1]}}], **meta})


@pytest.fixture
def worker(tmp_path, monkeypatch):
    """Returns the log of what the fake worker was asked, one request per line."""
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    monkeypatch.setattr(bfcl_grading, "WORKER", script)
    log = tmp_path / "asked.jsonl"
    monkeypatch.setenv("FAKE_BFCL_LOG", str(log))
    monkeypatch.delenv("FAKE_BFCL", raising=False)

    def asked() -> list[list[dict]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return asked


def _grader(**kw) -> BFCLGrader:
    return BFCLGrader(python=Path(sys.executable), **kw)


def test_decoded_calls_are_bfcls_name_to_arguments_maps():
    two = json.dumps([{"name": "a.b", "arguments": {"x": 1}}, {"name": "c", "arguments": {}}])
    assert decoded_calls(two) == [{"a.b": {"x": 1}}, {"c": {}}]
    assert decoded_calls("The answer is 5.") is None and decoded_calls(None) is None and decoded_calls("[]") is None


def test_each_answer_is_sent_as_bfcls_runner_feeds_its_checker_and_graded(worker):
    p = _problem(language="java")
    with _grader() as grader:
        graded = grader.grade_problems([(p, [_call("right", x=1), _call("wrong", x=2), "text", None, _call("right", x=1)])])
    assert graded == [[Outcome.CORRECT, Outcome.WRONG, Outcome.NO_ANSWER, Outcome.NO_ANSWER, Outcome.CORRECT]]
    [request] = worker()
    assert request == [  # one item per distinct call list; none for text
        {"category": "simple_python", "language": "java", "functions": [{"name": "f"}],
         "ground_truth": [{"f": {"x": [1]}}], "calls": [{"right": {"x": 1}}]},
        {"category": "simple_python", "language": "java", "functions": [{"name": "f"}],
         "ground_truth": [{"f": {"x": [1]}}], "calls": [{"wrong": {"x": 2}}]}]
    assert grader.last_errors == {("simple_0", _call("wrong", x=2)): ["wrong wrong"]}
    assert grader._worker is None  # closed with the context


def test_the_language_defaults_to_python_and_verdicts_are_cached_per_problem(worker):
    p, q = _problem("a", bfcl_ground_truth=None), _problem("b")
    with _grader() as grader:
        assert grader.grade_problem(p, [_call("right")]) == [Outcome.CORRECT]
        assert grader.grade_problems([(p, [_call("right"), _call("wrong")]), (q, [_call("right")])]) == [
            [Outcome.CORRECT, Outcome.WRONG], [Outcome.CORRECT]]
        assert grader.grade_problems([(p, [_call("wrong")])]) == [[Outcome.WRONG]]  # cached: not asked again
    first, second = worker()
    assert first[0]["language"] == "python" and first[0]["ground_truth"] is None
    assert [i["calls"] for i in second] == [[{"wrong": {}}], [{"right": {}}]]
    assert len(worker()) == 2


def test_irrelevance_is_right_without_a_call_and_asked_with_one(worker):
    p = _problem("irr", "live_irrelevance")
    with _grader() as grader:
        assert grader.grade_problem(p, ["No tool fits.", None, "[]", _call("wrong")]) == [
            Outcome.CORRECT, Outcome.CORRECT, Outcome.CORRECT, Outcome.WRONG]
    assert [i["category"] for i in worker()[0]] == ["live_irrelevance"]


def test_a_checker_failure_on_one_answer_is_ungraded_and_asked_again(worker, caplog):
    p = _problem()
    with _grader() as grader, caplog.at_level(logging.WARNING):
        assert grader.grade_problem(p, [_call("crash"), _call("right")]) == [Outcome.UNGRADED, Outcome.CORRECT]
        assert grader.grade_problem(p, [_call("crash")]) == [Outcome.UNGRADED]
    assert len(worker()) == 2 and grader.last_errors == {}
    assert [r.getMessage() for r in caplog.records] == ["BFCL's checker failed on an answer (checker crashed); "
                                                        "recorded as ungraded"] * 2  # not for the right one


def test_a_wrong_answer_without_an_error_record_keeps_an_empty_one(worker):
    with _grader() as grader:
        assert grader.grade_problem(_problem(), [_call("bare")]) == [Outcome.WRONG]
    assert grader.last_errors == {("simple_0", _call("bare")): []}


@pytest.mark.parametrize("name", ["die", "short"])
def test_a_worker_that_dies_or_answers_short_leaves_the_batch_ungraded_and_is_replaced(worker, name, caplog):
    p = _problem()
    with _grader() as grader, caplog.at_level(logging.WARNING):
        assert grader.grade_problem(p, [_call("right"), _call(name)]) == [Outcome.UNGRADED, Outcome.UNGRADED]
        assert grader._worker is None
        assert grader.grade_problem(p, [_call("right")]) == [Outcome.CORRECT]  # a fresh worker; nothing was cached
    [message] = [r.getMessage() for r in caplog.records if "died" in r.getMessage()]
    assert message.startswith("BFCL's checker died or missed its 300s deadline on 2 answers (")
    assert message.endswith("); they are recorded as ungraded") and "(None)" not in message


def test_a_reply_longer_than_a_pipe_read_and_a_short_deadline_met(worker):
    with _grader(deadline=0.8) as grader:  # under a second is a deadline too
        assert grader.grade_problem(_problem(), [_call("big")]) == [Outcome.WRONG]
        assert grader.grade_problem(_problem(), [_call("right")]) == [Outcome.CORRECT]
    assert grader.last_errors == {("simple_0", _call("big")): ["x" * 200000]}


def test_a_worker_past_its_deadline_is_killed(worker):
    with _grader(deadline=0.3) as grader:
        assert grader.grade_problem(_problem(), [_call("hang")]) == [Outcome.UNGRADED]
        assert grader._worker is None


@pytest.mark.parametrize(("mode", "says"), [
    ("fatal", "importing bfcl_eval failed: no module"),
    ("silent", "it did not start (bfcl crashed at start \ufffd)"),
    ("long", "it did not start (" + "B" * 800 + ")"),  # the end of its stderr
    ("not ready", "it did not start (exit code"),
])
def test_a_worker_that_cannot_start_says_how_to_fix_it(worker, monkeypatch, mode, says):
    monkeypatch.setenv("FAKE_BFCL", mode)
    with pytest.raises(BFCLSetupError) as info, _grader() as grader:
        grader.grade_problem(_problem(), [_call("right")])
    message = str(info.value)
    assert message.startswith(f"BFCL's checker could not run with {sys.executable}: {says}")
    assert message.endswith("Rebuild its environment with `make bfcl-env` (or fix $TTS_BFCL_PYTHON).")


def test_what_is_not_a_bfcl_problem_or_a_gold_string_is_refused(worker):
    grader = _grader()
    for meta in ({"bfcl_functions": []}, {"category": 3, "bfcl_functions": []}, {"category": "simple_python"}, None):
        with pytest.raises(ValueError, match=r"^problem 'x' is not a BFCL problem \(its metadata has no category and "
                                             r"bfcl_functions\); grade it with the benchmark it was loaded from.$"):
            grader.grade_problems([(Problem("x", "q", metadata=meta), ["text"])])
    with pytest.raises(TypeError, match=r"^BFCL answers are graded against their problem \(functions, possible "
                                        r"answers\): call grade_problems\(\[\(problem, answers\), \.\.\.\]\) "
                                        r"instead of grade_many\.$"):
        grader.grade_many([("a", "b")])
    with pytest.raises(ValueError, match=r"^deadline=0: give a positive number of seconds$"):
        BFCLGrader(deadline=0)
    assert BFCLGrader(timeout=9, deadline=1).timeout == 9 and worker() == []
    assert (BFCLGrader().timeout, BFCLGrader().deadline) == (5, 300.0)  # the default grader's timeout


class _Pipe:
    def __init__(self, log: list, name: str) -> None:
        self.log, self.name = log, name

    def close(self) -> None:
        self.log.append(f"{self.name}.close")


class _Process:
    """A worker process that ignores a closed input (``hangs``) or exits on it."""

    def __init__(self, log: list, hangs: bool, stdout: bool = True) -> None:
        self.log, self.hangs = log, hangs
        self.stdin = _Pipe(log, "stdin")
        self.stdout = _Pipe(log, "stdout") if stdout else None

    def wait(self, timeout=None):
        self.log.append(("wait", timeout))
        if self.hangs and "kill" not in self.log:
            import subprocess

            raise subprocess.TimeoutExpired("worker", timeout)
        return 0

    def kill(self) -> None:
        self.log.append("kill")


@pytest.mark.parametrize(("hangs", "stdout", "calls"), [
    (False, True, ["stdin.close", ("wait", 5), "stdout.close", "stderr.close"]),
    (True, True, ["stdin.close", ("wait", 5), "kill", ("wait", 5), "stdout.close", "stderr.close"]),
    (False, False, ["stdin.close", ("wait", 5), "stderr.close"]),
])
def test_stopping_the_worker_closes_its_input_waits_5_s_then_kills_and_closes_its_pipes(hangs, stdout, calls):
    log: list = []
    worker = bfcl_grading._Worker.__new__(bfcl_grading._Worker)
    worker.process, worker.stderr = _Process(log, hangs, stdout), _Pipe(log, "stderr")
    worker.stop()
    assert log == calls
