"""Grader, the fast way: every path of the grading loop, with forked instead of spawned workers.

tests/benchmarks/test_grading.py runs the real spawn workers (seconds each, math-verify imported
fresh). Here the same Grader code runs with the multiprocessing context swapped for "fork" (the
child starts in milliseconds with everything already imported), and the functions that run inside
a worker (``_verify_in_worker``, ``_worker_main``) are also called in this process, so that the
mutation run (benchmarks/mutation.py) can see them. Every check here finishes in well under a
second; the deadlines are fractions of a second.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import signal
import time
from fractions import Fraction
from pathlib import Path

import pytest

from tts.benchmarks import grading
from tts.benchmarks.grading import Grader, Outcome, _verify_in_worker, _worker_main
from tts.types import Problem

# A wall-clock limit per test: a bug that makes the grading loop wait forever fails here (and
# mutmut's own limit counts CPU time, which a waiting loop does not spend).
pytestmark = pytest.mark.timeout(20)

C, W, N, U = Outcome.CORRECT, Outcome.WRONG, Outcome.NO_ANSWER, Outcome.UNGRADED


@pytest.fixture
def forked(monkeypatch):
    """Grader workers forked instead of spawned; fails if the Grader asks for anything but spawn."""
    asked: list[str] = []
    fork = mp.get_context("fork")

    def get_context(method=None):
        asked.append(method)
        assert method == "spawn", f"the Grader must spawn its workers (asked for {method!r})"
        return fork

    monkeypatch.setattr(grading.mp, "get_context", get_context)
    before = set(mp.active_children())  # the session's vLLM engine process, when the whole suite runs
    yield asked
    for child in set(mp.active_children()) - before:  # nothing a test started may outlive it
        child.kill()
        child.join(5)


def _graders() -> list:
    """The grading workers alive now (other multiprocessing children, such as the session's vLLM
    engine when the whole suite runs, are not the Grader's)."""
    return [p for p in mp.active_children() if p.name == "tts-grader"]


# Module-level checks ((gold, answer, timeout) -> equal). Answers are fractions ("1/2"), so the
# verdict is exact Fraction arithmetic, independent of the code under test. Markers in the answer
# inject faults: "hang" sleeps forever, "die" kills the worker, "raise" raises, "pid:<file>"
# appends the worker's pid to a file first.
def _fraction_check(gold: str, answer: str, timeout: int) -> bool:
    if answer.startswith("pid:"):
        path, answer = answer.removeprefix("pid:").split("|", 1)
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")
    if answer == "hang":
        while True:
            time.sleep(1)
    if answer == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if answer == "raise":
        raise ValueError(f"cannot read {gold!r}")
    if answer == "sleep":
        time.sleep(0.5)
        return True
    if answer == "close-pipe":  # the worker's pipe breaks, the worker itself lives on
        os.closerange(3, 4096)
        while True:
            time.sleep(1)
    if answer.startswith("orphan:"):  # a child of the worker keeps its pipes open after it dies
        child = os.fork()
        if child == 0:
            time.sleep(5)
            os._exit(0)
        with open(answer.removeprefix("orphan:"), "a") as f:
            f.write(f"{child}\n")
        os.kill(os.getpid(), signal.SIGKILL)
    if answer.startswith("die-once:"):
        marker = Path(answer.removeprefix("die-once:"))
        if not marker.exists():
            marker.write_text("died")
            os.kill(os.getpid(), signal.SIGKILL)
        return True
    return Fraction(gold) == Fraction(answer)


def _dies_on_warm_up(gold: str, answer: str, timeout: int) -> bool:
    """Kills its worker on the warm-up check ("0" vs "0"): a worker that never becomes ready."""
    if gold == "0" and answer == "0":
        os.kill(os.getpid(), signal.SIGKILL)
    return gold == answer


def _dies_on_some_warm_ups(gold: str, answer: str, timeout: int) -> bool:
    """Workers 1, 2, 4 and 5 die on their warm-up check (counted in the file named by the gold)."""
    if gold == "0" and answer == "0":
        counter = Path(os.environ["TTS_TEST_WARMUPS"])
        with counter.open("a") as f:
            f.write("x")
        if len(counter.read_text()) in (1, 2, 4, 5):
            os.kill(os.getpid(), signal.SIGKILL)
    return gold == answer


def _hangs_on_warm_up(gold: str, answer: str, timeout: int) -> bool:
    if gold == "0" and answer == "0":
        while True:
            time.sleep(1)
    return gold == answer


def _gold_not_answer(gold: str, answer: str, timeout: int) -> bool:
    """Asymmetric: true only when the gold is "g" and the answer "a" (the order must be kept)."""
    return (gold, answer) == ("g", "a")


def _timeout_is_three(gold: str, answer: str, timeout: int) -> bool:
    return timeout == 3


# ----------------------------------------------------------------------------------------------
# _verify_in_worker, called here (it normally runs inside a worker)


def test_verify_agrees_with_math_verify_called_directly():
    from math_verify import parse, verify

    pairs = [("\\frac{1}{2}", "0.5"), ("42", "142"), ("\\sqrt{8}", "2\\sqrt{2}"), ("3", "4"), ("-2", "2"),
             ("x^2", "x\\cdot x"), ("\\pi", "3.14")]
    reference = [bool(verify(parse(f"${g}$"), parse(f"${a}$"))) for g, a in pairs]
    assert reference == [True, False, True, False, False, True, False]  # the reference itself
    assert [_verify_in_worker(g, a, 5) for g, a in pairs] == reference


def test_verify_reads_currency_digit_groups_and_tuples_as_vectors():
    # as_math's rewrites and align_vectors: without them math-verify says "not equal" to each.
    assert _verify_in_worker("5", "\\$5", 5)
    assert _verify_in_worker("1000000", "1\\,000\\,000", 5)
    assert _verify_in_worker("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "(1, 2)", 5)
    assert _verify_in_worker("(1, 2)", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", 5)
    assert not _verify_in_worker("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "(2, 1)", 5)


def test_verify_is_not_equal_when_either_side_does_not_parse():
    assert _verify_in_worker("3", "\\frac{{{", 2) is False
    assert _verify_in_worker("\\frac{{{", "3", 2) is False
    assert _verify_in_worker("", "", 2) is False  # nothing parsed on either side: no verdict of "equal"
    assert _verify_in_worker("5", "", 2) is False
    assert _verify_in_worker("", "5", 2) is False


def test_verify_gold_first():
    # math-verify's verify(gold, target) is not symmetric; the gold goes first, as math-verify
    # called directly in that order says.
    from math_verify import parse, verify

    g, a = "\\{1, 2\\}", "1"
    assert bool(verify(parse(f"${g}$"), parse(f"${a}$"))) == _verify_in_worker(g, a, 5)
    assert bool(verify(parse(f"${a}$"), parse(f"${g}$"))) == _verify_in_worker(a, g, 5)


def test_verify_passes_the_timeout_to_math_verify(monkeypatch):
    import math_verify

    seen: list[tuple[str, object]] = []
    real_parse, real_verify = math_verify.parse, math_verify.verify

    def parse(text, **kwargs):
        seen.append(("parse", kwargs.get("parsing_timeout")))
        return real_parse(text, **kwargs)

    def verify(gold, target, **kwargs):
        seen.append(("verify", kwargs.get("timeout_seconds")))
        return real_verify(gold, target, **kwargs)

    monkeypatch.setattr(math_verify, "parse", parse)
    monkeypatch.setattr(math_verify, "verify", verify)
    assert _verify_in_worker("\\frac{1}{2}", "0.5", 7)
    assert seen == [("parse", 7), ("parse", 7), ("verify", 7)]


def test_verify_swallows_errors_as_not_equal(monkeypatch):
    import math_verify

    def boom(*args, **kwargs):
        raise RuntimeError("sympy exploded")

    monkeypatch.setattr(math_verify, "verify", boom)
    assert _verify_in_worker("1", "1", 5) is False


# ----------------------------------------------------------------------------------------------
# _worker_main, called here in the main thread with the messages queued up front


class _Conn:
    """The worker's end of its pipe: the parent's messages queued up front; EOF after them."""

    def __init__(self, tasks):
        self.tasks, self.sent = list(tasks), []

    def recv(self):
        if not self.tasks:
            raise EOFError
        return self.tasks.pop(0)

    def send(self, message):
        self.sent.append(message)


def _run_worker(tasks, check, timeout=3):
    """Runs the worker loop here; returns what it sent and whether it ignored Ctrl-C meanwhile."""
    conn = _Conn(tasks)
    before = signal.getsignal(signal.SIGINT)
    try:
        _worker_main(conn, check, timeout)
        ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
    return conn.sent, ignored, conn.tasks


def test_worker_says_ready_then_answers_each_check_in_order():
    calls: list[tuple[str, str, int]] = []

    def check(gold, answer, timeout):
        calls.append((gold, answer, timeout))
        if answer == "raise":
            raise ValueError("bad input")
        return Fraction(gold) == Fraction(answer)

    out, ignored, left = _run_worker([("1/2", "2/4"), ("1", "2"), ("3", "raise"), None, ("4", "4")], check,
                                     timeout=9)
    assert out == [("ready", None), ("ok", True), ("ok", False), ("error", "ValueError: bad input")]
    # the warm-up check first, then the tasks as (gold, answer), each with the Grader's timeout
    assert calls == [("0", "0", 9), ("1/2", "2/4", 9), ("1", "2", 9), ("3", "raise", 9)]
    assert ignored, "a worker ignores Ctrl-C: the parent decides"
    assert left == [("4", "4")], "None ends the loop"


def test_worker_verdicts_are_bools_and_the_order_is_gold_then_answer():
    out, _, _ = _run_worker([("g", "a"), ("a", "g"), None], lambda g, a, t: 1 if (g, a) == ("g", "a") else 0)
    assert out == [("ready", None), ("ok", True), ("ok", False)]
    assert all(type(v) is bool for kind, v in out[1:])


def test_worker_is_ready_even_when_the_warm_up_check_raises():
    def check(gold, answer, timeout):
        if (gold, answer) == ("0", "0"):
            raise ImportError("no sympy")
        return True

    out, _, _ = _run_worker([("1", "1"), None], check)
    assert out == [("ready", None), ("ok", True)]


def test_worker_returns_when_the_parent_goes_away():
    out, ignored, _ = _run_worker([("1", "1")], lambda g, a, t: True)  # EOF, not None: no exception
    assert out == [("ready", None), ("ok", True)] and ignored


# ----------------------------------------------------------------------------------------------
# Grader's arguments


def test_grader_arguments():
    with pytest.raises(ValueError, match=r"workers=0: a Grader needs at least 1 worker process"):
        Grader(workers=0)
    with pytest.raises(ValueError, match=r"deadline=0: give a positive number"):
        Grader(deadline=0)
    with pytest.raises(ValueError, match=r"deadline=-1"):
        Grader(deadline=-1)
    assert Grader(workers=1, deadline=0.01).deadline == 0.01
    g = Grader(timeout=4)
    assert (g.timeout, g.workers, g.deadline, g.check) == (4, 1, 17, _verify_in_worker)  # 3 * 4 + 5
    assert Grader().deadline == 20 and Grader().timeout == 5
    with pytest.raises(TypeError, match=r"check <function .*<lambda>.* must be a module-level function: it is "
                                        r"sent to spawned worker processes \("):
        Grader(check=lambda gold, answer, timeout: True)


# ----------------------------------------------------------------------------------------------
# grade_many's bookkeeping, with the worker checks replaced by a table (no process at all)


def _scripted(g: Grader, verdicts: dict[tuple[str, str], bool | None]) -> list[list[tuple[str, str]]]:
    batches: list[list[tuple[str, str]]] = []

    def run_checks(keys):
        batches.append(list(keys))
        return {k: verdicts[k] for k in keys}

    g._run_checks = run_checks
    return batches


def test_no_answer_string_match_and_cache_need_no_check():
    g = Grader()
    batches = _scripted(g, {("1/2", "0.5"): True, ("3", "4"): False, ("hang", "4"): None, ("8", "7"): False})
    pairs = [(None, "7"), ("", "7"), ("  \n", "7"), ("7", "7"), ("\\text{7}.", "7"), ("7.0", "$7$"),
             ("1,000", "1000"), ("1/2", "0.5"), ("3", "4"), ("1/2", "0.5"), ("hang", "4"), ("7", "7 ")]
    assert g.grade_many(pairs) == [N, N, N, C, C, C, C, C, W, C, U, C]
    assert batches == [[("1/2", "0.5"), ("3", "4"), ("hang", "4")]]  # each distinct pair once, in order
    # Second time: verdicts from the cache, the ungraded one remembered; no check runs.
    assert g.grade_many([("3", "4"), ("1/2", "0.5"), ("hang", "4"), ("7", "7")]) == [W, C, U, C]
    assert batches == [[("1/2", "0.5"), ("3", "4"), ("hang", "4")]]
    assert g.grade("8", "7") is W and batches[-1] == [("8", "7")]
    assert g.grade_many([]) == []


def test_an_ungraded_pair_is_not_a_verdict_for_a_new_grader():
    first, second = Grader(), Grader()
    _scripted(first, {("x", "y"): None})
    batches = _scripted(second, {("x", "y"): True})
    assert first.grade("x", "y") is U
    assert second.grade("x", "y") is C and batches == [[("x", "y")]]
    assert first.grade("x", "y") is U


def test_a_pair_the_checks_did_not_return_is_ungraded():
    g = Grader()
    g._run_checks = lambda keys: {}
    assert g.grade_many([("1", "2"), (None, "2")]) == [U, N]


def test_grade_problems_keeps_each_problems_answers_together():
    g = Grader()
    batches = _scripted(g, {("1/2", "0.5"): True, ("2", "0.5"): False, ("4", ""): False})
    problems = [(Problem("a", "q", "0.5"), ["1/2", None, "2"]), (Problem("b", "q", None), ["4"]),
                (Problem("c", "q", "9"), []), (Problem("d", "q", "9"), ("9",))]
    assert g.grade_problems(problems) == [[C, N, W], [W], [], [C]]
    assert batches == [[("1/2", "0.5"), ("2", "0.5"), ("4", "")]]


# ----------------------------------------------------------------------------------------------
# The grading loop with real (forked) worker processes


def test_checks_run_in_workers_with_the_graders_timeout(forked):
    with Grader(timeout=3, check=_timeout_is_three) as g:
        assert g.grade("a", "b") is C
    with Grader(timeout=4, check=_timeout_is_three) as g:
        assert g.grade("a", "b") is W
    with Grader(check=_gold_not_answer) as g:  # the pair is (answer, gold); the check gets (gold, answer)
        assert g.grade_many([("a", "g"), ("g", "a")]) == [C, W]
    assert forked == ["spawn"] * 3


def test_parallel_workers_share_the_checks_and_stop_cleanly(forked, tmp_path):
    pids = tmp_path / "pids"
    pairs = [(f"pid:{pids}|{k}/{2 * k}", "1/2") for k in range(1, 7)] + [(f"pid:{pids}|1/3", "1/2")]
    with Grader(workers=3, check=_fraction_check) as g:
        assert g.grade_many(pairs) == [C] * 6 + [W]
        workers = list(g._workers)
        assert len(workers) == 3 and len(_graders()) == 3
        # daemons: a run that exits without closing its Grader leaves no worker behind
        assert all(p.daemon and p.name == "tts-grader" for p in _graders())
        ran = [int(p) for p in pids.read_text().split()]
        assert len(ran) == 7 and set(ran) <= {w.process.pid for w in workers}
        assert g.grade_many([(f"pid:{pids}|2/3", "1/2")]) == [W]  # the same workers again: none started
        assert len(_graders()) == 3
    # Idle workers are asked to stop (exit 0), not killed (one still starting up is killed: it
    # cannot read the request yet); none is left running.
    assert workers[0].ready
    assert [w.exitcode for w in workers] == [0 if w.ready else -signal.SIGKILL for w in workers]
    for w in workers:  # and their process handles released (a long run replaces many workers)
        with pytest.raises(ValueError, match="process object is closed"):
            w.process.is_alive()
    assert _graders() == []


def test_no_more_workers_than_checks(forked):
    with Grader(workers=4, check=_fraction_check) as g:
        assert g.grade_many([("1/2", "0.5"), ("2", "3")]) == [C, W]
        assert len(_graders()) == 2
        assert g.grade_many([("1/4", "0.25")]) == [C]  # the two already there do it
        assert len(_graders()) == 2


def test_a_hung_check_is_ungraded_at_its_deadline_and_its_worker_replaced(forked, caplog):
    caplog.set_level(logging.DEBUG, logger="tts.benchmarks.grading")
    with Grader(workers=1, deadline=0.3, check=_fraction_check) as g:
        g.grade("1", "1.0 ")  # a string match: no worker yet
        assert g.grade_many([("1/2", "0.5")]) == [C]
        first = g._workers[0].process.pid
        start = time.monotonic()
        assert g.grade_many([("hang", "1"), ("2/4", "0.5"), ("1", "2")]) == [U, C, W]
        elapsed = time.monotonic() - start
        assert 0.3 <= elapsed < 0.9, elapsed  # one deadline, then the others on a fresh worker
        pid = g._workers[0].process.pid
        assert pid != first
        with pytest.raises(ProcessLookupError):
            os.kill(first, 0)  # the hung worker was killed (and reaped)
        start = time.monotonic()
        assert g.grade_many([("hang", "1")]) == [U]  # remembered: no second wait
        assert time.monotonic() - start < 0.2
    assert ("grading 'hang' vs '1' did not finish within 0.3s; its worker was killed and the answer is recorded "
            "as ungraded") in [r.getMessage() for r in caplog.records]
    assert f"grading worker {first} killed after 0.3s on ('hang', '1')" in [r.getMessage() for r in caplog.records]


def test_a_check_that_raises_is_ungraded_and_logged(forked, caplog):
    caplog.set_level(logging.WARNING, logger="tts.benchmarks.grading")
    with Grader(check=_fraction_check) as g:
        assert g.grade_many([("raise", "5"), ("1/5", "0.2")]) == [U, C]
        pid = g._workers[0].process.pid
        assert g.grade("raise", "5") is U
        assert g._workers[0].process.pid == pid  # an exception is no reason to replace the worker
    [record] = [r for r in caplog.records if "raised" in r.getMessage()]
    assert record.getMessage() == "grading 'raise' vs '5' raised ValueError: cannot read '5'; recorded as ungraded"


def test_a_crash_is_retried_once_on_a_fresh_worker_then_ungraded(forked, caplog, tmp_path):
    caplog.set_level(logging.DEBUG, logger="tts.benchmarks.grading")
    pids = tmp_path / "pids"
    with Grader(workers=2, check=_fraction_check) as g:
        assert g.grade_many([("1/3", "2/6"), (f"pid:{pids}|die", "1"), ("3/4", "0.75"), ("1", "2")]) == [C, U, C, W]
        died = [int(p) for p in pids.read_text().split()]
        assert len(died) == 2 and died[0] != died[1]  # tried twice, on two processes
        assert g.grade(f"pid:{pids}|die", "1") is U
        assert len(pids.read_text().split()) == 2  # remembered: not tried a third time
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    culprit = repr(f"pid:{pids}|die")
    assert messages == [f"grading {culprit} vs '1' crashed its worker (exit code -9); retrying once",
                        (f"grading {culprit} vs '1' crashed its worker twice (exit code -9); the answer is "
                         "recorded as ungraded")]
    dropped = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert [f"grading worker {pid} died on ({culprit}, '1')" for pid in died] == dropped


def test_a_crash_that_does_not_recur_is_graded(forked, tmp_path):
    with Grader(check=_fraction_check) as g:
        assert g.grade_many([(f"die-once:{tmp_path / 'marker'}", "1"), ("1", "3")]) == [C, W]


def test_a_worker_killed_while_idle_is_replaced_without_blaming_a_check(forked, caplog):
    caplog.set_level(logging.DEBUG, logger="tts.benchmarks.grading")
    with Grader(workers=2, check=_fraction_check) as g:
        # two checks of 0.5 s: the second goes to the second worker, so both are ready and idle after
        assert g.grade_many([("sleep", "1"), ("sleep", "2")]) == [C, C]
        idle = g._workers[1]
        dead = idle.process.pid
        idle.process.kill()
        idle.process.join(5)
        assert g.grade("1/4", "0.25") is C  # on the live worker; the dead one is noticed and dropped
        assert f"grading worker {dead} died while idle" in [r.getMessage() for r in caplog.records]
        assert dead not in [w.process.pid for w in g._workers]
    with Grader(check=_fraction_check) as g:  # the only worker: found dead when handed a check
        assert g.grade("1/2", "0.5") is C
        w = g._workers[0]
        dead = w.process.pid
        w.process.kill()
        w.process.join(5)
        assert g.grade_many([("1/3", "2/6"), ("1", "3")]) == [C, W]
        assert [x.process.pid for x in g._workers] != [dead] and len(g._workers) == 1
        assert f"grading worker {dead} died while idle" in [r.getMessage() for r in caplog.records]


def test_workers_that_never_start_stop_the_run(forked, caplog):
    caplog.set_level(logging.DEBUG, logger="tts.benchmarks.grading")
    with Grader(check=_dies_on_warm_up) as g, pytest.raises(RuntimeError) as err:
        g.grade("1", "2")
    assert sum(r.getMessage().endswith(" died while starting") for r in caplog.records) == 3
    assert str(err.value).startswith("3 grading workers in a row failed to start (exit code -9); check that ")
    assert "_dies_on_warm_up" in str(err.value) and "import in a fresh Python process" in str(err.value)


def test_a_worker_that_hangs_while_starting_is_replaced_after_the_startup_limit(forked, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="tts.benchmarks.grading")
    monkeypatch.setattr(grading, "_STARTUP_SECONDS", 0.3)
    start = time.monotonic()
    with Grader(check=_hangs_on_warm_up) as g, pytest.raises(RuntimeError, match="3 grading workers in a row"):
        g.grade("1", "2")
    assert 0.9 <= time.monotonic() - start < 5
    assert _graders() == []
    assert sum(r.getMessage().endswith(" did not start") for r in caplog.records) == 3


def test_only_failures_in_a_row_count_against_starting(forked, monkeypatch, tmp_path):
    monkeypatch.setenv("TTS_TEST_WARMUPS", str(tmp_path / "warm-ups"))
    with Grader(check=_dies_on_some_warm_ups) as g:
        assert g.grade("a", "b") is W  # workers 1 and 2 die starting, worker 3 grades
        g._workers[0].process.kill()
        g._workers[0].process.join(5)
        assert g.grade("c", "d") is W  # 4 and 5 die starting: 2 in a row since 3 started, not 4
    assert (tmp_path / "warm-ups").read_text() == "x" * 6


def test_a_crashed_check_is_retried_at_once_on_a_fresh_worker(forked, tmp_path):
    die, slow = tmp_path / "die", tmp_path / "slow"
    with Grader(workers=2, check=_fraction_check) as g:
        assert g.grade_many([("sleep", "1"), ("sleep", "2")]) == [C, C]  # both workers ready, idle
        # the crash on the first worker while the second is busy: a third worker retries it at once
        assert g.grade_many([(f"pid:{die}|die", "1"), (f"pid:{slow}|sleep", "1")]) == [U, C]
    died, slept = die.read_text().split(), slow.read_text().split()
    assert len(died) == 2 and not set(died) & set(slept), "the retry waited for the busy worker"


def test_a_worker_whose_pipe_breaks_is_dead_at_once_not_at_its_deadline(forked, caplog):
    caplog.set_level(logging.WARNING, logger="tts.benchmarks.grading")
    with Grader(deadline=4, check=_fraction_check) as g:
        start = time.monotonic()
        assert g.grade_many([("close-pipe", "1"), ("1/2", "0.5")]) == [U, C]
        assert time.monotonic() - start < 2
    assert any("crashed its worker twice" in r.getMessage() for r in caplog.records)


def test_a_dead_worker_is_noticed_even_while_its_pipe_stays_open(forked, caplog, tmp_path):
    # The worker's child holds the worker's pipe and sentinel open: no EOF, no wake-up. At the
    # deadline the Grader must still see that the worker itself is dead (a crash: retried once),
    # not blame the check for being slow.
    caplog.set_level(logging.WARNING, logger="tts.benchmarks.grading")
    orphans = tmp_path / "orphans"
    try:
        with Grader(deadline=0.4, check=_fraction_check) as g:
            assert g.grade_many([(f"orphan:{orphans}", "1"), ("1/2", "0.5")]) == [U, C]
    finally:
        for pid in orphans.read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    messages = [r.getMessage() for r in caplog.records]
    assert len(orphans.read_text().split()) == 2
    assert any("crashed its worker (exit code -9); retrying once" in m for m in messages)
    assert any("crashed its worker twice" in m for m in messages)
    assert not any("did not finish" in m for m in messages)


def test_close_kills_a_busy_worker(forked):
    g = Grader(check=_fraction_check)
    assert g.grade("2/2", "1") is C
    w = g._workers[0]
    w.assign(("hang", "1"), 60)  # busy: not asked politely, killed
    start = time.monotonic()
    g.close()
    assert time.monotonic() - start < 0.8  # no polite wait (of 1 s) for a worker that cannot read it
    assert w.exitcode == -signal.SIGKILL
    assert g._workers == [] and _graders() == []


def test_close_gives_up_on_a_worker_that_does_not_stop_when_asked(forked):
    g = Grader(check=_fraction_check)
    assert g.grade("2/2", "1") is C
    w = g._workers[0]
    w.conn.send(("1", "hang"))  # the worker is stuck, though the Grader thinks it idle
    time.sleep(0.1)
    start = time.monotonic()
    g.close()
    assert 1 <= time.monotonic() - start < 1.8  # asked, waited 1 s, then killed
    assert w.exitcode == -signal.SIGKILL and _graders() == []
