"""The sandbox against the worst programs a model could write: each is contained, ends with a
clear status, leaves no process behind and changes nothing outside its sandbox (issue 35's list)."""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import socket
import tempfile
import threading
import time

import psutil
import pytest

from tts.execution import Limits, Program, SandboxUnavailableError, bwrap_path, run_many, run_program

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (apt-get install bubblewrap)")

SMALL = Limits(wall_seconds=3, cpu_seconds=2, memory_bytes=512 << 20, file_bytes=1 << 20, output_bytes=1 << 16)


@pytest.fixture(autouse=True)
def no_child_process_remains():
    """After every test, no process the test started is left (the sandbox kills its whole tree; a
    leftover would be a program outliving its run). Children that existed before the test (the
    session's shared vLLM engine, when the whole suite runs) are not the test's."""
    me = psutil.Process()
    before = {c.pid for c in me.children(recursive=True)}
    yield
    deadline = time.monotonic() + 3
    while (new := [c for c in me.children(recursive=True) if c.pid not in before]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not new, f"processes left behind: {[c.pid for c in new]}"


def _leftovers(marker: str) -> list[int]:
    """Pids of processes whose command line holds ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


def test_a_normal_program_prints_and_exits_zero():
    r = run_program("print(6 * 7)", SMALL)
    assert (r.status, r.exit_code, r.stdout, r.error, r.sandboxed) == ("ok", 0, "42\n", "", True)


def test_an_infinite_loop_is_stopped_at_its_cpu_limit():
    # A wall limit far above the CPU limit, so that a loaded machine (the CPU shared with other work)
    # still meets the CPU limit first; the wall limit is the next test's.
    limits = dataclasses.replace(SMALL, cpu_seconds=1, wall_seconds=60)
    r = run_program("while True:\n    pass", limits)
    assert r.status == "timeout" and "CPU time limit" in r.error and r.wall_seconds < 30


def test_a_program_that_sleeps_is_stopped_at_its_wall_limit():
    r = run_program("import time\ntime.sleep(100)", SMALL)
    assert r.status == "timeout" and "ran past 3 s" in r.error and r.wall_seconds < SMALL.wall_seconds + 2


def test_a_sleeping_program_is_stopped_at_the_wall_clock_limit():
    r = run_program("import time\ntime.sleep(60)", Limits(wall_seconds=1))
    assert r.status == "timeout" and r.wall_seconds < 2.5


def test_a_fork_bomb_is_contained_and_leaves_no_process():
    bomb = "import os  # fork-bomb-marker\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    start = time.monotonic()
    r = run_program(Program(bomb, files={"fork-bomb-marker.txt": ""}), SMALL)
    # The run returns once the kernel has ended all of the bomb's processes (seconds on a busy machine).
    assert r.status in ("timeout", "killed") and r.wall_seconds < SMALL.wall_seconds + 1
    assert time.monotonic() - start < SMALL.wall_seconds + 5
    # bubblewrap's processes carry the marker (a bound file's name); the namespace's first one ends last.
    assert not _leftovers("fork-bomb-marker")


def test_allocating_50_gb_is_a_memory_error():
    r = run_program("x = bytearray(50 * 10**9)", SMALL)
    assert r.status == "memory" and r.error == "MemoryError"


def test_writing_10_gb_stops_at_the_file_size_limit():
    r = run_program("f = open('big', 'wb')\nfor _ in range(10 * 1024):\n    f.write(b'x' * (1 << 20))", SMALL)
    assert r.status in ("error", "killed") and ("File too large" in r.error or "file size" in r.error)


def test_printing_1_gb_stops_at_the_output_cap():
    r = run_program("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", SMALL)
    assert r.status == "output_limit" and len(r.stdout) <= SMALL.output_bytes


def test_no_network_not_even_the_hosts_loopback():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.settimeout(1.5)
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(_accept(server)), daemon=True)
    thread.start()
    r = run_program(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')", SMALL)
    thread.join(4)
    server.close()
    assert r.status == "error" and "connected" not in r.stdout and accepted == [None]


def _accept(server: socket.socket) -> object:
    try:
        return server.accept()
    except OSError:
        return None


def test_the_host_files_and_environment_are_out_of_reach_and_nothing_leaks_out(tmp_path, monkeypatch):
    # what an earlier run left (a mutation run's mutant that broke the isolation) would fail every later run
    for leftover in ("/tmp/written-inside", "written-inside"):
        with contextlib.suppress(OSError):
            os.remove(leftover)
    secret = tmp_path / "run" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("the run directory")
    monkeypatch.setenv("TTS_SECRET", "do-not-leak")
    program = f"""import os
print(os.path.exists({str(secret)!r}), os.path.exists(os.path.expanduser('~/.ssh')), os.path.exists('/root/.ssh'))
print('TTS_SECRET' in os.environ)
for path in ({str(secret)!r}, {__file__!r}, {os.getcwd()!r}):
    try:
        open(path).read()
        print('read', path)
    except OSError:
        pass
open('/tmp/written-inside', 'w').write('x')
open('written-inside', 'w').write('x')
try:
    open('/usr/evil', 'w')
except OSError as e:
    print('read-only', e.errno)
"""
    r = run_program(program, SMALL)
    assert r.status == "ok", r.stderr
    assert r.stdout.splitlines() == ["False False False", "False", "read-only 30"]
    assert not os.path.exists("/tmp/written-inside") and not os.path.exists("/usr/evil")
    assert not os.path.exists("written-inside") and not glob.glob(os.path.join(tempfile.gettempdir(), "tts-sandbox-*", "written-inside"))


def test_killing_its_parent_harms_nobody_outside():
    r = run_program("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(1, signal.SIGKILL)\nprint('still here')", SMALL)
    # Its parent is the sandbox's own init (PID 1 of its PID namespace), which ignores signals from inside.
    assert (r.status, r.stdout) == ("ok", "still here\n")


def test_a_program_that_never_reads_stdin_still_finishes():
    r = run_program(Program("print('done')", stdin="x" * (1 << 20)), SMALL)
    assert r.status == "ok" and r.stdout == "done\n"


def test_a_program_that_never_reads_a_large_stdin_is_stopped_at_the_wall_clock():
    """stdin is written without blocking: a program sleeping on a full pipe cannot stall the deadline."""
    r = run_program(Program("import time\ntime.sleep(60)", stdin="x" * (1 << 20)), Limits(wall_seconds=1))
    assert r.status == "timeout" and r.wall_seconds < 2.5


def test_output_written_before_reading_a_large_stdin_does_not_deadlock():
    source = "import sys\nsys.stdout.write('y' * 200000)\nsys.stdout.flush()\nprint(len(sys.stdin.read()))"
    r = run_program(Program(source, stdin="x" * (1 << 20)), Limits(wall_seconds=3, output_bytes=1 << 20))
    assert r.status == "ok" and r.stdout.endswith(f"{1 << 20}\n")


def test_many_small_files_stop_at_the_disk_cap_in_every_writable_folder():
    """RLIMIT_FSIZE bounds one file; the tmpfs size bounds them all (else /tmp fills the host's memory)."""
    source = """import errno
for folder in ('.', '/tmp', '/dev/shm'):
    try:
        for i in range(100):
            open(f'{folder}/f{i}', 'wb').write(b'x' * (1 << 20))
        print(folder, 'unbounded')
    except OSError as e:
        print(folder, errno.errorcode[e.errno], i)
try:
    open('/dev/evil', 'w')
except OSError as e:
    print('/dev', errno.errorcode[e.errno])
"""
    r = run_program(source, Limits(wall_seconds=5, file_bytes=2 << 20, disk_bytes=8 << 20))
    assert r.status == "ok", r.stderr
    assert r.stdout.splitlines() == [". ENOSPC 8", "/tmp ENOSPC 8", "/dev/shm ENOSPC 8", "/dev EROFS"]


@pytest.mark.parametrize(("source", "error"), [
    ("def f(:\n    pass", "SyntaxError"),
    ("import no_such_module_anywhere", "ModuleNotFoundError: No module named 'no_such_module_anywhere'"),
    ("raise ValueError('boom')", "ValueError: boom"),
])
def test_errors_are_one_clear_line(source, error):
    r = run_program(source, SMALL)
    assert r.status == "error" and r.error.startswith(error)


def test_run_many_keeps_order_and_a_hung_program_does_not_hold_up_the_others():
    programs = ["while True:\n    pass"] + [f"print({i})" for i in range(8)]
    start = time.monotonic()
    results = run_many(programs, SMALL, workers=4)
    assert [r.stdout for r in results[1:]] == [f"{i}\n" for i in range(8)] and results[0].status == "timeout"
    assert time.monotonic() - start < SMALL.wall_seconds + 2


def test_without_bubblewrap_it_refuses_unless_asked_by_name(monkeypatch):
    monkeypatch.setattr("tts.execution.sandbox.bwrap_path", lambda: None)
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        run_program("print(1)")
    r = run_program("print(1)", SMALL, unsafe_no_sandbox=True)
    assert r.status == "ok" and r.stdout == "1\n" and r.sandboxed is False
