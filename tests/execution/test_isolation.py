"""Sandboxes against each other (issue 48): one program's processes, files or leftovers never
change how a neighbour running at the same time is graded, a sandbox that cannot start says so
instead of passing for the program's verdict, and tts reaps every process it starts."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tts.execution import Execution, Limits, bwrap_path, run_many, run_program
from tts.execution import sandbox
from tts.execution.sandbox import START_ATTEMPTS

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (apt-get install bubblewrap)")

LIMITS = Limits(wall_seconds=8, cpu_seconds=3, memory_bytes=512 << 20, file_bytes=1 << 20, output_bytes=1 << 16)
"""The hostile programs run to their wall clock; 8 s leaves the good ones room to start on a loaded 2-core machine."""
GOOD = [f"print({i} * {i})" for i in range(32)]
FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
SLEEPING_CHILDREN = """import os, time
for _ in range(244):
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
print('started 244', flush=True)
time.sleep(30)
"""


def _verdicts(runs: list[Execution]) -> list[tuple[str, str, int | None, str]]:
    return [(r.status, r.stdout, r.exit_code, r.error) for r in runs]


@pytest.fixture(scope="module")
def good_alone() -> list[tuple[str, str, int | None, str]]:
    """The 32 good programs' verdicts with nothing else running."""
    runs = run_many(GOOD, LIMITS, workers=8)
    assert [(r.status, r.stdout) for r in runs] == [("ok", f"{i * i}\n") for i in range(32)]
    return _verdicts(runs)


@pytest.mark.parametrize(("hostile", "its_output"), [(FORK_BOMB, ""), (SLEEPING_CHILDREN, "started 244\n")],
                         ids=["fork_bomb", "244_sleeping_children"])
def test_a_hostile_program_does_not_change_its_neighbours_grades(hostile, its_output, good_alone):
    """The hostile program runs first and for its whole wall time, while the 32 good programs run
    beside it in the other workers: every good one is graded exactly as it is alone."""
    start = time.monotonic()
    runs = run_many([hostile, *GOOD], LIMITS, workers=8)
    assert runs[0].status in ("timeout", "killed") and runs[0].stdout == its_output
    assert _verdicts(runs[1:]) == good_alone, [r.error for r in runs[1:] if r.status != "ok"]
    assert time.monotonic() - start < LIMITS.wall_seconds + 20


def test_256_programs_at_64_workers_all_run():
    limits = dataclasses.replace(LIMITS, wall_seconds=60)  # they must run, however long 64 at once take to start
    runs = run_many(["import time\ntime.sleep(0.5)\nprint('slept')"] * 256, limits, workers=64)
    assert [(r.status, r.stdout) for r in runs] == [("ok", "slept\n")] * 256, \
        sorted({r.error for r in runs if r.status != "ok"})


def test_64_sandboxes_at_once_each_with_children_all_run():
    """64 sandboxes at once, each with bubblewrap's processes, the program and 4 children (over 400
    processes in all, well within each one's own budget): none is refused a process."""
    source = textwrap.dedent("""\
        import os, time
        for _ in range(4):
            if os.fork() == 0:
                time.sleep(2)
                os._exit(0)
        time.sleep(2)
        for _ in range(4):
            os.wait()
        print('slept')
        """)
    runs = run_many([source] * 64, dataclasses.replace(LIMITS, wall_seconds=60), workers=64)
    assert [(r.status, r.stdout) for r in runs] == [("ok", "slept\n")] * 64, \
        sorted({r.error for r in runs if r.status != "ok"})


@pytest.mark.parametrize("path", ["/x", "/etc/x", "/sandbox-sibling/x"])
def test_only_the_capped_folders_are_writable(path):
    source = textwrap.dedent(f"""\
        import errno, os
        try:
            os.makedirs(os.path.dirname({path!r}), exist_ok=True)
            open({path!r}, 'w').write('x')
            print('written')
        except OSError as e:
            print(errno.errorcode[e.errno])
        """)
    r = run_program(source, LIMITS)
    assert (r.status, r.stdout) == ("ok", "EROFS\n"), r.stderr


def test_tmp_stops_at_the_disk_cap():
    source = textwrap.dedent("""\
        import errno
        try:
            for i in range(64):
                open(f'/tmp/f{i}', 'wb').write(b'x' * (1 << 20))
            print('unbounded')
        except OSError as e:
            print(errno.errorcode[e.errno], i)
        """)
    r = run_program(source, Limits(wall_seconds=5, file_bytes=2 << 20, disk_bytes=4 << 20))
    assert (r.status, r.stdout) == ("ok", "ENOSPC 4\n"), r.stderr


REAPER = """
import ctypes, os, sys, time
from tts.execution import Limits, run_many
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER: orphans of tts's runs come here, never reaped
limits = Limits(wall_seconds=1.5, cpu_seconds=1, output_bytes=1 << 12)
programs = ['print(1)', 'raise SystemExit(3)', 'import time\\ntime.sleep(60)', 'while True:\\n    print("x" * 1000)',
            'import os\\nfor _ in range(5):\\n    os.fork() or __import__("time").sleep(60)']
runs = run_many(programs * 4, limits, workers=4)
time.sleep(0.5)
zombies = []
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            status = open(f'/proc/{pid}/status').read()
        except OSError:
            continue
        fields = dict(line.split(':', 1) for line in status.splitlines() if ':' in line)
        if fields['State'].split()[0] == 'Z' and int(fields['PPid']) == os.getpid():
            zombies.append(int(pid))
print(sorted({r.status for r in runs}), len(zombies))
"""


def test_tts_reaps_every_process_it_starts_even_under_a_pid_1_that_never_reaps():
    """tts as a container's entry point: a parent that adopts orphans and never waits on them.
    Runs that end normally, with an error, at the wall clock, at the output cap or with children
    still running leave no zombie behind."""
    out = subprocess.run([sys.executable, "-c", REAPER], capture_output=True, text=True, timeout=120,
                         cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['error', 'ok', 'output_limit', 'timeout'] 0"


def _children_until_refused(processes: int) -> str:
    return textwrap.dedent(f"""\
        import os, time
        n = 0
        try:
            while n < {processes} + 50:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                n += 1
        except OSError:
            pass
        print(n)
        """)


def test_the_process_limit_counts_the_programs_own_processes_only():
    """``processes`` is what the program itself may have (itself and its children), whatever runs
    beside it: two sandboxes at once each get all of theirs."""
    limits = dataclasses.replace(LIMITS, processes=20)
    runs = run_many([_children_until_refused(20)] * 2, limits, workers=2)
    assert [(r.status, r.stdout) for r in runs] == [("ok", "19\n")] * 2, [r.error for r in runs]


NON_ROOT = """
import json, sys
from tts.execution import Limits, run_many, sandbox
bomb, children, processes, prlimit = json.loads(sys.argv[1])
if not prlimit:
    sandbox.PRLIMIT = None
runs = run_many([children] * 2, Limits(wall_seconds=20, processes=processes), workers=2)
if [(r.status, r.stdout) for r in runs] != [("ok", f"{processes - 1}\\n")] * 2:  # no limit: never start the bomb
    sys.exit(f"the process limit does not hold: {[(r.status, r.stdout, r.error) for r in runs]}")
limits = Limits(wall_seconds=8, cpu_seconds=3, memory_bytes=512 << 20)
runs = run_many([bomb] + [f"print({i} * {i})" for i in range(16)], limits, workers=8)
print(json.dumps([(r.status, r.stdout) for r in runs]))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"),
                    reason="needs root to become an unprivileged user (a non-root run of the suite tests that path itself)")
@pytest.mark.parametrize("prlimit", [
    pytest.param(True, marks=pytest.mark.skipif(sandbox.PRLIMIT is None, reason="no prlimit here")), False],
    ids=["prlimit", "python_sets_it"])
def test_where_tts_is_not_root_a_fork_bomb_leaves_its_neighbours_alone_too(prlimit):
    """Not root: no user id of its own per sandbox, so the limit is set inside each sandbox's user
    namespace (by ``prlimit``, or by Python where there is none). tts runs here as ``nobody`` (with
    the system's Python, which that user can read)."""
    root = str(Path(sandbox.__file__).parents[2])  # this checkout: its files are readable by all
    out = subprocess.run(["/usr/bin/python3", "-c", NON_ROOT, json.dumps([FORK_BOMB, _children_until_refused(20), 20, prlimit])],
                         capture_output=True, text=True, timeout=180, user=65534, group=65534, extra_groups=[],
                         cwd="/", env={"PATH": "/usr/bin:/bin", "PYTHONPATH": root})
    assert out.returncode == 0, out.stderr
    runs = json.loads(out.stdout)
    assert runs[0][0] in ("timeout", "killed")
    assert [tuple(r) for r in runs[1:]] == [("ok", f"{i * i}\n") for i in range(16)]


def test_a_sandbox_that_cannot_start_is_tried_again(monkeypatch):
    popen, calls = subprocess.Popen, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) <= 2:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return popen(*args, **kwargs)
    monkeypatch.setattr(sandbox.subprocess, "Popen", flaky)
    r = run_program("print(42)", LIMITS)
    assert (r.status, r.stdout, len(calls)) == ("ok", "42\n", 3)


def test_a_sandbox_that_never_starts_is_sandbox_failed_not_the_programs_error(monkeypatch):
    """The fork before bubblewrap fails every time for the first program: it is ``sandbox_failed``
    with the reason, after every try, and the batch goes on."""
    popen, calls = subprocess.Popen, []

    def failing_first(*args, **kwargs):
        calls.append(1)
        if len(calls) <= START_ATTEMPTS:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return popen(*args, **kwargs)
    monkeypatch.setattr(sandbox.subprocess, "Popen", failing_first)
    first, second = run_many(["print(1)", "print(2)"], LIMITS, workers=1)
    assert (first.status, first.exit_code, first.stdout) == ("sandbox_failed", None, "")
    assert first.error == "could not start bubblewrap: [Errno 11] Resource temporarily unavailable"
    assert (second.status, second.stdout) == ("ok", "2\n")


def test_bubblewraps_own_set_up_failure_is_sandbox_failed_with_its_message(monkeypatch):
    command, calls = sandbox._bwrap_command, []

    def broken(*args, **kwargs):
        calls.append(1)
        bwrap, *rest = command(*args, **kwargs)
        return [bwrap, "--ro-bind", "/no/such/tts/path", "/x", *rest]
    monkeypatch.setattr(sandbox, "_bwrap_command", broken)
    r = run_program("print(1)", LIMITS)
    assert (r.status, r.exit_code, len(calls)) == ("sandbox_failed", None, START_ATTEMPTS)
    assert r.error.startswith("bwrap: Can't find source path /no/such/tts/path")


def test_a_program_that_prints_what_bubblewrap_would_is_still_judged_as_a_program():
    """bubblewrap's status pipe, not its stderr, says whether the program ran: a program cannot
    pass its own failure off as the sandbox's."""
    r = run_program("import sys\nsys.stderr.write(\"bwrap: Can't fork\\n\")\nsys.exit(1)", LIMITS)
    assert (r.status, r.exit_code, r.error) == ("error", 1, "bwrap: Can't fork")


@pytest.mark.skipif(os.geteuid() != 0, reason="sandbox user ids are root's: otherwise each sandbox is its own user namespace")
def test_sandbox_user_ids_are_never_shared_between_threads_or_processes():
    from tts.execution.uids import sandbox_uid
    other = "from tts.execution.uids import sandbox_uid\nwith sandbox_uid() as uid:\n    print(uid)"
    with sandbox_uid() as first, sandbox_uid() as second:
        out = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert len({first, second, int(out.stdout)}) == 3 and min(first, second, int(out.stdout)) >= 0x70000000


@pytest.mark.skipif(os.geteuid() != 0, reason="sandbox user ids are root's")
def test_with_every_sandbox_user_id_held_a_run_is_sandbox_failed(monkeypatch):
    from tts.execution import uids
    monkeypatch.setattr(uids, "COUNT", 1)
    with uids.sandbox_uid():
        r = run_program("print(1)", LIMITS)
    assert (r.status, r.error) == ("sandbox_failed", "could not prepare the sandbox: all 1 sandbox user ids are in use")
    assert run_program("print(1)", LIMITS).stdout == "1\n"


@pytest.mark.parametrize(("uid_map", "mapped"), [("0 0 4294967295\n", True), ("0 100000 65536\n", False),
                                                 ("0 1000 1\n1 100000 65536\n", False), ("", False)])
def test_sandbox_user_ids_are_taken_only_where_the_user_namespace_maps_them(tmp_path, uid_map, mapped):
    from tts.execution import uids
    (tmp_path / "uid_map").write_text(uid_map)
    assert uids._mapped(str(tmp_path / "uid_map")) is mapped


@pytest.mark.skipif(os.geteuid() != 0, reason="root's fallback")
def test_root_that_may_not_take_sandbox_user_ids_runs_as_nobody_with_the_limit_inside(monkeypatch):
    """A rootless container maps too few ids: programs then run as ``nobody``, each sandbox still
    with a budget of its own (set inside its user namespace)."""
    from tts.execution import uids
    monkeypatch.setattr(uids, "available", lambda: False)
    programs = [_children_until_refused(20)] * 2 + ["import os\nprint(os.getuid())"]
    runs = run_many(programs, dataclasses.replace(LIMITS, processes=20), workers=3)
    assert [(r.status, r.stdout) for r in runs] == [("ok", "19\n")] * 2 + [("ok", "65534\n")], [r.error for r in runs]
