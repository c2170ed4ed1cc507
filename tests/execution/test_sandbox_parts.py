"""The sandbox's parts, each checked exactly and fast: the verdict read off an exit code, the limits
a program really runs under (it prints them), the output cap's edge, the files beside it, the
messages, and the retries of a sandbox that cannot start (a fake run, no sleeping). The hostile
programs are tests/execution/test_sandbox.py's and test_isolation.py's; these are the milliseconds
to a second the mutation run of tts/execution/sandbox.py (benchmarks/mutation.py) affords per mutant."""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import signal

import pytest

from tts.execution import Execution, Limits, Program, bwrap_path, run_many, run_program, sandbox, uids

needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (apt-get install bubblewrap)")
LIMITS = Limits(wall_seconds=10, cpu_seconds=7, memory_bytes=600 << 20, file_bytes=3 << 20, processes=20,
                output_bytes=1000, open_files=50, disk_bytes=8 << 20)

PRINT_LIMITS = """import json, os, resource
names = ("CPU", "AS", "FSIZE", "NOFILE", "CORE", "NPROC")
print(json.dumps({n: list(resource.getrlimit(getattr(resource, "RLIMIT_" + n))) for n in names}))
print(os.getuid())
"""


# --- the verdict of an exit code --------------------------------------------------------------------

@pytest.mark.parametrize(("code", "stderr", "verdict"), [
    (0, "MemoryError\n", ("ok", "")),
    (1, "Traceback ...\n  x\nMemoryError\n", ("memory", "MemoryError")),
    (1, "Traceback ...\nValueError: boom\n\n  \n", ("error", "ValueError: boom")),
    (3, "", ("error", "exit code 3")),
    (3, " \n", ("error", "exit code 3")),
    (-signal.SIGXCPU, "", ("timeout", "killed at its CPU time limit")),
    (128 + signal.SIGXCPU, "", ("timeout", "killed at its CPU time limit")),
    (-signal.SIGXFSZ, "", ("killed", "killed at its file size limit")),
    (128 + signal.SIGXFSZ, "", ("killed", "killed at its file size limit")),
    (-signal.SIGKILL, "half a line", ("killed", "killed by SIGKILL")),
    (128 + signal.SIGSEGV, "", ("killed", "killed by SIGSEGV")),
    (128, "Error: x", ("error", "Error: x")),  # 128 is an exit code, not a signal
    (129, "", ("killed", "killed by SIGHUP")),
    (-100, "", ("killed", "killed by 100")),  # a number no signal has
])
def test_the_verdict_of_each_exit(code, stderr, verdict):
    assert sandbox._classify(code, stderr) == verdict


# --- the interpreter and the command --------------------------------------------------------------

def test_the_system_python_is_preferred_else_this_installation(monkeypatch, tmp_path):
    exists = os.path.exists
    monkeypatch.setattr(sandbox.os.path, "exists", lambda p: p == "/usr/bin/python3" or exists(p))
    assert sandbox._python() == ("/usr/bin/python3", "/usr")
    prefix = tmp_path / "py"
    (prefix / "bin").mkdir(parents=True)
    monkeypatch.setattr(sandbox.sys, "base_prefix", str(prefix))
    monkeypatch.setattr(sandbox.os.path, "exists", lambda p: p != "/usr/bin/python3" and exists(p))
    monkeypatch.setattr(sandbox.sys, "executable", str(prefix / "bin" / "py-exe"))
    assert sandbox._python() == (str(prefix / "bin" / "py-exe"), str(prefix))  # no pythonX.Y, no python3
    (prefix / "bin" / "python3").touch()
    assert sandbox._python() == (str(prefix / "bin" / "python3"), str(prefix))
    versioned = prefix / "bin" / f"python{sandbox.sys.version_info.major}.{sandbox.sys.version_info.minor}"
    versioned.touch()
    assert sandbox._python() == (str(versioned), str(prefix))


def test_the_process_limit_inside_is_the_programs_plus_the_namespaces_first(monkeypatch):
    limits = Limits(processes=20)
    monkeypatch.setattr(sandbox, "PRLIMIT", "/usr/bin/prlimit")
    monkeypatch.setattr(sandbox.resource, "getrlimit", lambda which: (5, resource.RLIM_INFINITY))
    assert sandbox._started_inside("/py", limits) == ["/usr/bin/prlimit", "--nproc=21", "--", "/py", "-I", "-S",
                                                      "-B", "main.py"]
    monkeypatch.setattr(sandbox.resource, "getrlimit", lambda which: (5, 15))  # never above tts's own hard limit
    assert sandbox._started_inside("/py", limits)[1] == "--nproc=15"
    monkeypatch.setattr(sandbox.resource, "getrlimit", lambda which: (5, 21))
    assert sandbox._started_inside("/py", limits)[1] == "--nproc=21"
    monkeypatch.setattr(sandbox, "PRLIMIT", None)
    assert sandbox._started_inside("/py", limits) == ["/py", "-I", "-S", "-B", "-c", sandbox._NPROC_INSIDE, "21"]


def test_the_command_binds_each_file_read_only_and_remounts_the_root_last(monkeypatch):
    monkeypatch.setattr(sandbox, "_python", lambda: ("/opt/py/bin/python3", "/opt/py"))
    cmd = sandbox._bwrap_command("/bin/bwrap", "/w", ["main.py", "data.txt"], LIMITS, 7, limit_inside=False)
    size = str(8 << 20)
    assert cmd[:17] == ["/bin/bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--json-status-fd", "7",
                        "--proc", "/proc", "--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm",
                        "--remount-ro", "/dev", "--size"]
    assert cmd[cmd.index("/opt/py") - 1] == "--ro-bind" and cmd.count("/opt/py") == 2  # not under /usr: bound
    tail = cmd[cmd.index("/sandbox") - 3:]
    assert tail == ["--size", size, "--tmpfs", "/sandbox", "--ro-bind", "/w/main.py", "/sandbox/main.py",
                    "--ro-bind", "/w/data.txt", "/sandbox/data.txt", "--remount-ro", "/", "--chdir", "/sandbox",
                    "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/sandbox",
                    "--setenv", "PYTHONHASHSEED", "0", "/opt/py/bin/python3", "-I", "-S", "-B", "main.py"]
    assert cmd[cmd.index("/tmp") - 3:cmd.index("/tmp") + 1] == ["--size", size, "--tmpfs", "/tmp"]
    monkeypatch.setattr(sandbox, "_python", lambda: ("/usr/local/py/bin/python3", "/usr/local/py"))
    under_usr = sandbox._bwrap_command("/bin/bwrap", "/w", ["main.py"], LIMITS, 7, limit_inside=False)
    assert "/usr/local/py" not in under_usr  # /usr is bound already
    for path in ("/usr", "/bin", "/lib", "/etc/alternatives"):
        if os.path.exists(path):
            assert cmd[cmd.index(path) - 1:cmd.index(path) + 2] == ["--ro-bind", path, path]
    monkeypatch.setattr(sandbox, "_python", lambda: ("/usr/bin/python3", "/usr"))
    inside = sandbox._bwrap_command("/bin/bwrap", "/w", ["main.py"], LIMITS, 7, limit_inside=True)
    assert inside[-len(sandbox._started_inside("/py", LIMITS)):] == sandbox._started_inside("/usr/bin/python3", LIMITS)


# --- what a program runs under ----------------------------------------------------------------------

def _limits_seen(uid: int | None = None, **kw) -> dict[str, list[int]]:
    """The limits the program saw; it ran as ``uid`` (None: any user but root)."""
    r = run_program(PRINT_LIMITS, dataclasses.replace(LIMITS, output_bytes=1 << 16), **kw)
    assert r.status == "ok", r.stderr
    limits, seen_uid = r.stdout.splitlines()
    assert int(seen_uid) == uid if uid is not None else int(seen_uid) != 0
    return json.loads(limits)


def _expected(nproc: int) -> dict[str, list[int]]:
    return {"CPU": [7, 8], "AS": [600 << 20] * 2, "FSIZE": [3 << 20] * 2, "NOFILE": [50, 50], "CORE": [0, 0],
            "NPROC": [nproc, nproc]}


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0 or not uids.available(), reason="a sandbox user id of its own is root's")
def test_as_root_a_program_runs_under_every_limit_with_its_own_process_count():
    # its own user id: the program's 20 processes and bubblewrap's 2
    assert _limits_seen() == _expected(22)


@needs_bwrap
def test_without_a_user_id_of_its_own_the_process_limit_is_set_inside(monkeypatch):
    monkeypatch.setattr(uids, "available", lambda: False)  # root's fallback (as nobody), or not root
    nobody = sandbox.NOBODY if os.geteuid() == 0 else None
    assert _limits_seen(nobody) == _expected(21)  # the program's 20 and the namespace's first process
    monkeypatch.setattr(sandbox, "PRLIMIT", None)
    assert _limits_seen(nobody) == _expected(21)


def test_unsandboxed_a_program_runs_under_the_same_limits():
    # as root, a user id of its own: the limit is set before it starts, with no bubblewrap processes
    nproc = 20 if os.geteuid() == 0 and uids.available() else resource.getrlimit(resource.RLIMIT_NPROC)[0]
    assert _limits_seen(unsafe_no_sandbox=True) == _expected(nproc)


# --- output, files, messages -----------------------------------------------------------------------

@needs_bwrap
def test_output_up_to_the_cap_is_kept_and_one_byte_more_ends_the_run():
    r = run_program("import sys\nsys.stdout.write('x' * 1000)", LIMITS)
    assert (r.status, r.stdout, r.exit_code) == ("ok", "x" * 1000, 0)
    r = run_program("import sys, time\nsys.stdout.write('x' * 1001)\nsys.stdout.flush()\ntime.sleep(5)", LIMITS)
    assert (r.status, r.stdout, r.exit_code, r.error) == ("output_limit", "x" * 1000, None, "wrote more than 1000 bytes")
    r = run_program("import sys, time\nsys.stderr.write('e' * 1001)\nsys.stderr.flush()\ntime.sleep(5)", LIMITS)
    assert (r.status, r.stderr) == ("output_limit", "e" * 1000)


@needs_bwrap
def test_a_timeout_says_the_wall_limit_and_keeps_what_was_printed():
    r = run_program("import time\nprint('started', flush=True)\ntime.sleep(30)", dataclasses.replace(LIMITS, wall_seconds=0.5))
    assert (r.status, r.exit_code, r.stdout, r.error, r.sandboxed) == ("timeout", None, "started\n", "ran past 0.5 s", True)
    assert 0.5 <= r.wall_seconds < 3


@needs_bwrap
def test_files_are_placed_beside_the_program_under_their_own_names_and_stdin_is_read():
    program = Program("import sys\nprint(open('data.txt').read(), open('b.txt').read(), sys.stdin.read())",
                      stdin="from stdin", files={"data.txt": "beside", "../../b.txt": "named b.txt"})
    r = run_program(program, LIMITS)
    assert (r.status, r.stdout) == ("ok", "beside named b.txt from stdin\n")


def test_an_error_has_its_last_line_its_exit_code_and_the_time_it_took():
    r = run_program("import sys\nprint('out')\nsys.exit('the reason')", LIMITS, unsafe_no_sandbox=True)
    assert (r.status, r.exit_code, r.stdout, r.stderr, r.error, r.sandboxed) == (
        "error", 1, "out\n", "the reason\n", "the reason", False)
    assert 0 < r.wall_seconds < 5


# --- a sandbox that cannot start ----------------------------------------------------------------------

class _FakeRuns:
    """``_run_once`` failing to start the first ``fails`` times, then running (recorded)."""

    def __init__(self, fails: int, error: type[Exception] = sandbox._NotStarted) -> None:
        self.fails, self.error, self.calls = fails, error, []

    def __call__(self, program, limits, bwrap, uid, own_uid):
        self.calls.append((program, limits, bwrap, uid, own_uid))
        if len(self.calls) <= self.fails:
            raise self.error("bwrap: Can't fork" if self.error is sandbox._NotStarted else "no room")
        return Execution("ok", 0, program.source, "")


@pytest.fixture
def delays(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(sandbox.time, "sleep", slept.append)
    monkeypatch.setattr(sandbox.random, "uniform", lambda a, b: (a + b) / 2)
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/bin/bwrap")
    return slept


def test_a_start_that_fails_is_tried_again_after_growing_delays(monkeypatch, delays):
    fake = _FakeRuns(fails=2)
    monkeypatch.setattr(sandbox, "_run_once", fake)
    r = run_program("print(1)")
    assert (r.status, r.stdout) == ("ok", "print(1)") and len(fake.calls) == 3
    assert delays == pytest.approx([0.1, 0.3])
    program, limits, bwrap, _, _ = fake.calls[0]
    assert (program, limits, bwrap) == (Program("print(1)"), Limits(), "/bin/bwrap")


def test_a_sandbox_that_never_starts_is_sandbox_failed_with_the_last_reason(monkeypatch, delays, caplog):
    fake = _FakeRuns(fails=99)
    monkeypatch.setattr(sandbox, "_run_once", fake)
    r = run_program(Program("print(1)"), LIMITS)
    assert r == Execution("sandbox_failed", None, "", "", "bwrap: Can't fork", 0.0, True)
    assert len(fake.calls) == sandbox.START_ATTEMPTS == 4 and delays == pytest.approx([0.1, 0.3, 0.9])
    assert "sandbox could not run a program after 4 tries: bwrap: Can't fork" in caplog.text
    fake = _FakeRuns(fails=99, error=OSError)  # no room for its files, no free sandbox user id
    monkeypatch.setattr(sandbox, "_run_once", fake)
    r = run_program("print(1)", LIMITS, unsafe_no_sandbox=True)
    assert (r.status, r.error, r.sandboxed) == ("sandbox_failed", "could not prepare the sandbox: no room", False)


def test_who_a_program_runs_as(monkeypatch, delays):
    fake = _FakeRuns(fails=0)
    monkeypatch.setattr(sandbox, "_run_once", fake)
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    run_program("a", LIMITS)
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)
    monkeypatch.setattr(uids, "available", lambda: False)
    run_program("b", LIMITS)
    monkeypatch.setattr(uids, "available", lambda: True)
    run_program("c", LIMITS)
    assert [c[2:] for c in fake.calls[:2]] == [("/bin/bwrap", None, False), ("/bin/bwrap", 65534, False)]
    assert fake.calls[2][3] >= uids.FIRST_UID and fake.calls[2][4] is True  # a user id of its own


def test_run_many_keeps_the_order_with_any_worker_count(monkeypatch, delays):
    fake = _FakeRuns(fails=0)
    monkeypatch.setattr(sandbox, "_run_once", fake)
    assert run_many([]) == []
    assert [r.stdout for r in run_many(["a", "b", "c"], LIMITS, workers=0)] == ["a", "b", "c"]
    assert {c[1] for c in fake.calls} == {LIMITS} and {c[2] for c in fake.calls} == {"/bin/bwrap"}  # sandboxed
    assert [r.stdout for r in run_many([Program("d"), "e"], workers=2, unsafe_no_sandbox=True)] == ["d", "e"]
    assert fake.calls[-1][2] is None and fake.calls[-1][1] == Limits()


def test_run_many_runs_at_most_workers_programs_at_once(monkeypatch, delays):
    import threading

    lock, running, most = threading.Lock(), [0], [0]

    def run(program, limits, bwrap, uid, own_uid):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        threading.Event().wait(0.1)
        with lock:
            running[0] -= 1
        return Execution("ok", 0, program.source, "")

    monkeypatch.setattr(sandbox, "_run_once", run)
    for workers, expected in ((0, 1), (1, 1), (3, 3)):
        most[0] = 0
        assert [r.stdout for r in run_many([str(i) for i in range(6)], LIMITS, workers=workers)] == [str(i) for i in range(6)]
        assert most[0] == expected, workers
    most[0] = 0
    run_many([str(i) for i in range(6)], LIMITS)  # 4 by default
    assert most[0] == 4


# --- ending a run early (_stop), on fakes --------------------------------------------------------------

class _FakeLauncher:
    """bubblewrap's process as _stop sees it: running until killed (or ``ended``); records the waits."""

    def __init__(self, ended: bool = False) -> None:
        self.pid, self.ended, self.waits = 4321, ended, []

    def poll(self):
        return 0 if self.ended else None

    def wait(self, timeout=None):
        self.waits.append(timeout)
        return 0


class _FakeStatus:
    """bubblewrap's status pipe: names the first process at the ``names_at``-th poll (never: None)."""

    def __init__(self, names_at: int | None, first_process: int = -1) -> None:
        self.names_at, self.first_process, self.polls, self.kills = names_at, first_process, [], 0

    def poll(self, launcher=None):
        self.polls.append(launcher)
        if self.names_at is not None and len(self.polls) >= self.names_at:
            self.first_process = 9
        return {}

    def kill(self):
        self.kills += 1
        return self.first_process >= 0


@pytest.fixture
def clock(monkeypatch):
    """A clock that moves 0.25 s at each sleep (a loaded machine), and what was slept and killed."""
    now, slept, killed = [100.0], [], []

    def sleep(seconds):
        slept.append(seconds)
        assert len(slept) < 50, "the wait for the first process never gives up"
        now[0] += 0.25

    monkeypatch.setattr(sandbox.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(sandbox.time, "sleep", sleep)
    monkeypatch.setattr(sandbox.os, "killpg", lambda pid, sig: killed.append((pid, sig)))
    return slept, killed


def test_a_stop_kills_the_first_process_once_bubblewrap_names_it_and_waits_for_bubblewrap(clock):
    slept, killed = clock
    proc, status = _FakeLauncher(), _FakeStatus(names_at=3)
    sandbox._stop(proc, status)
    assert status.polls == [4321, 4321, 4321]  # as bubblewrap's child, until named
    assert slept == [0.01, 0.01, 0.01] and status.kills == 1
    assert proc.waits == [60] and killed == []  # bubblewrap reaps the namespace; no group kill


def test_a_stop_waits_a_second_for_the_first_process_then_kills_the_launchers_group(clock):
    slept, killed = clock
    proc, status = _FakeLauncher(), _FakeStatus(names_at=None)
    sandbox._stop(proc, status)
    assert len(status.polls) == 4  # at 0, 0.25, 0.5 and 0.75 s: the second is up at 1.0
    assert killed == [(4321, signal.SIGKILL)] and proc.waits == [None]


def test_a_stop_does_not_wait_for_a_first_process_already_held_or_a_launcher_that_ended(clock):
    slept, killed = clock
    for status, proc in ((_FakeStatus(names_at=None, first_process=0), _FakeLauncher()),
                         (_FakeStatus(names_at=None), _FakeLauncher(ended=True))):
        sandbox._stop(proc, status)
        assert status.polls == [] and slept == []
    assert status.kills == 1 and killed == [(4321, signal.SIGKILL)]  # the second: nothing held to kill


def test_an_unsandboxed_stop_kills_the_programs_whole_process_group():
    # the program's child holds the output pipes open; only the group kill ends the run at its wall clock
    program = "import subprocess, time\nsubprocess.Popen(['sleep', '30'])\nprint('started', flush=True)\ntime.sleep(30)"
    r = run_program(program, dataclasses.replace(LIMITS, wall_seconds=0.5), unsafe_no_sandbox=True)
    assert (r.status, r.stdout, r.error, r.sandboxed) == ("timeout", "started\n", "ran past 0.5 s", False)
    assert r.wall_seconds < 3


# --- stdin fed without blocking (_feed, _read) ----------------------------------------------------------

def _pipe_to_feed():
    import selectors

    r, w = os.pipe()
    os.set_blocking(w, False)
    sel = selectors.DefaultSelector()
    sel.register(w, selectors.EVENT_WRITE)
    return r, w, sel


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_feeding_stdin_writes_what_the_pipe_takes_keeps_the_rest_and_closes_it_once_written():
    r, w, sel = _pipe_to_feed()
    data = bytes(range(256)) * 1024  # 256 KiB: more than a pipe holds
    left = sandbox._feed(sel, w, memoryview(data))
    written = len(data) - len(left)
    assert 0 < written < len(data) and bytes(left) == data[written:] and w in sel.get_map()
    assert sandbox._feed(sel, w, left) is left  # the pipe is full: nothing written, nothing lost
    got = b""
    while left:
        got += os.read(r, 1 << 20)
        left = sandbox._feed(sel, w, left)
    assert bytes(left) == b"" and w not in sel.get_map() and _closed(w)  # all written: stdin closed
    while chunk := os.read(r, 1 << 20):
        got += chunk
    assert got == data
    os.close(r)


def test_feeding_a_stdin_the_program_closed_drops_the_rest_and_closes_it():
    r, w, sel = _pipe_to_feed()
    os.close(r)  # the program closed its stdin, or ended
    left = sandbox._feed(sel, w, memoryview(b"never read"))
    assert isinstance(left, memoryview) and bytes(left) == b""
    assert w not in sel.get_map() and _closed(w)
    r, w, sel = _pipe_to_feed()
    assert bytes(sandbox._feed(sel, w, memoryview(b""))) == b"" and _closed(w)  # no stdin: closed at once
    os.close(r)


def test_a_program_that_reads_a_little_of_a_large_stdin_and_sleeps_is_still_stopped_at_the_wall_clock():
    # it frees room in the pipe, so stdin is writable again; a blocking write of the rest would wait for
    # the program (5 s) instead of the 1 s deadline
    program = Program("import os, time\nos.read(0, 8192)\ntime.sleep(5)", stdin="x" * (1 << 20))
    r = run_program(program, dataclasses.replace(LIMITS, wall_seconds=1), unsafe_no_sandbox=True)
    assert r.status == "timeout" and r.wall_seconds < 2.5


@needs_bwrap
def test_the_sandboxs_first_process_is_held_while_bubblewrap_runs(monkeypatch):
    # held (a pidfd) from bubblewrap's first report, so that tts can reap it if it adopts it; once
    # the program has ended and bubblewrap exited, the process is no longer bubblewrap's child
    seen = []

    class Recording(sandbox.BwrapStatus):
        def reap(self, wait=5.0):
            seen.append(self.first_process >= 0)
            super().reap(wait)

    monkeypatch.setattr(sandbox, "BwrapStatus", Recording)
    r = run_program("print('hi')", LIMITS)
    assert (r.status, r.stdout, seen) == ("ok", "hi\n", [True])


# --- what an unsandboxed run still keeps from the host ------------------------------------------------

def test_unsandboxed_a_program_sees_only_path_in_its_environment_and_no_site_packages(monkeypatch):
    monkeypatch.setenv("TTS_HOST_SECRET", "do-not-show")
    source = ("import json, os, sys\n"
              "print(json.dumps([dict(os.environ), sys.flags.isolated, sys.flags.no_site, sys.dont_write_bytecode,\n"
              "                  'site' in sys.modules, os.path.basename(os.getcwd())]))\n")
    r = run_program(source, LIMITS, unsafe_no_sandbox=True)
    env, isolated, no_site, no_bytecode, site, cwd = json.loads(r.stdout)
    env.pop("LC_CTYPE", None)  # set by Python itself at start-up under the C locale (PEP 538)
    assert env == {"PATH": "/usr/bin:/bin"}
    assert (isolated, no_site, no_bytecode, site) == (1, 1, True, False)
    assert cwd.startswith("tts-sandbox-")  # the program's folder, findable if a crash left it behind


def test_unsandboxed_a_program_inherits_no_descriptor_of_the_caller():
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)  # what a careless caller might leave open to children
    try:
        source = f"import os\ntry:\n    os.fstat({write_end})\n    print('open')\nexcept OSError:\n    print('closed')\n"
        r = run_program(source, LIMITS, unsafe_no_sandbox=True)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert (r.status, r.stdout) == ("ok", "closed\n")


# --- a program that closes its output and keeps running ---------------------------------------------

def _running(marker: str) -> list[int]:
    """Processes whose command line names ``marker`` (bubblewrap's carry its bound files' names)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("unsafe", [False, True])
def test_a_program_that_closes_its_output_and_sleeps_is_a_timeout_and_is_ended(unsafe):
    if not unsafe and bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    marker = f"closes-its-output-{os.getpid()}-{unsafe}"
    source = (f"import os, sys, time  # {marker}\nsys.stderr.write('bye\\n')\nsys.stderr.flush()\n"
              "os.close(1)\nos.close(2)\ntime.sleep(60)\n")
    r = run_program(Program(source, files={f"{marker}.txt": ""}), dataclasses.replace(LIMITS, wall_seconds=1),
                    unsafe_no_sandbox=unsafe)
    assert (r.status, r.exit_code, r.stderr, r.error, r.sandboxed) == ("timeout", None, "bye\n", "ran past 1 s", not unsafe)
    assert 1 <= r.wall_seconds < 3
    assert _running(marker) == []  # nothing of it is left running


def test_after_its_output_closes_a_program_is_waited_for_only_until_the_deadline(monkeypatch):
    """Both pipes closed, the program still running: the wait is what is left of the wall time,
    never more (a wait of at least a second would report a 0.5 s limit a second late)."""
    waits = []

    class Recording(sandbox.subprocess.Popen):
        def wait(self, timeout=None):
            waits.append(timeout)
            return super().wait(timeout=timeout)

    monkeypatch.setattr(sandbox.subprocess, "Popen", Recording)
    source = "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(30)\n"
    r = run_program(source, dataclasses.replace(LIMITS, wall_seconds=0.5), unsafe_no_sandbox=True)
    assert (r.status, r.error) == ("timeout", "ran past 0.5 s")
    assert waits and waits[0] is not None and 0.0 <= waits[0] <= 0.5  # the first: the one before the deadline


def test_output_past_the_cap_records_the_time_and_whether_it_was_sandboxed():
    r = run_program("import sys, time\nsys.stdout.write('x' * 1001)\nsys.stdout.flush()\ntime.sleep(5)", LIMITS,
                    unsafe_no_sandbox=True)
    assert (r.status, r.sandboxed) == ("output_limit", False) and 0 < r.wall_seconds < 3


def test_output_that_is_not_utf8_is_replaced_not_refused():
    r = run_program("import sys\nsys.stdout.buffer.write(b'a\\xffb')\nsys.stderr.buffer.write(b'\\xfe')", LIMITS,
                    unsafe_no_sandbox=True)
    assert (r.status, r.stdout, r.stderr) == ("ok", "a\ufffdb", "\ufffd")


# --- why a sandbox did not start ------------------------------------------------------------------------

def _fake_bwrap(tmp_path, body: str) -> str:
    path = tmp_path / "bwrap"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(("body", "why"), [
    ("echo 'some warning' >&2; echo 'bwrap: first' >&2; echo 'bwrap: Creating new namespace failed' >&2; exit 1",
     "bwrap: Creating new namespace failed"),
    ("echo 'not a bwrap line' >&2; exit 3", "bubblewrap exited with 3 before starting the program"),
    ("exec sleep 30", "bubblewrap did not start the program within 0.5 s"),
])
def test_a_bubblewrap_that_never_starts_the_program_says_why_in_one_line(tmp_path, body, why):
    fake = _fake_bwrap(tmp_path, body)
    with pytest.raises(sandbox._NotStarted) as caught:
        sandbox._run_once(Program("print(1)"), dataclasses.replace(LIMITS, wall_seconds=0.5), fake, None, own_uid=False)
    assert str(caught.value) == why


@pytest.mark.parametrize(("unsafe", "what"), [(False, "bubblewrap"), (True, "python")])
def test_a_launcher_that_cannot_be_started_is_named(monkeypatch, unsafe, what):
    def no_fork(*args, **kwargs):
        raise BlockingIOError(11, "Resource temporarily unavailable")
    monkeypatch.setattr(sandbox.subprocess, "Popen", no_fork)
    with pytest.raises(sandbox._NotStarted) as caught:
        sandbox._run_once(Program("print(1)"), LIMITS, None if unsafe else "/usr/bin/bwrap", None, own_uid=False)
    assert str(caught.value) == f"could not start {what}: [Errno 11] Resource temporarily unavailable"


def test_without_bubblewrap_the_refusal_says_what_to_install_or_pass(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    with pytest.raises(sandbox.SandboxUnavailableError) as caught:
        run_program("print(1)", LIMITS)
    assert str(caught.value) == (
        "Running model-written code needs the bubblewrap sandbox, which is not installed: "
        "`apt-get install bubblewrap` (Debian/Ubuntu; `make install` does it as root), or pass "
        "unsafe_no_sandbox=True to run it without isolation at your own risk.")


def test_each_retry_is_logged_with_its_reason_and_jittered_delay(monkeypatch, delays, caplog):
    monkeypatch.setattr(sandbox.random, "uniform", lambda a, b: a)  # the shortest jitter: half the base delay
    fake = _FakeRuns(fails=99)
    monkeypatch.setattr(sandbox, "_run_once", fake)
    with caplog.at_level("INFO", logger=sandbox.__name__):
        run_program("print(1)", LIMITS)
    assert delays == pytest.approx([0.05, 0.15, 0.45])
    assert [r.getMessage() for r in caplog.records] == [
        "sandbox did not start (bwrap: Can't fork); trying again in 0.05 s",
        "sandbox did not start (bwrap: Can't fork); trying again in 0.15 s",
        "sandbox did not start (bwrap: Can't fork); trying again in 0.45 s",
        "sandbox could not run a program after 4 tries: bwrap: Can't fork"]


def test_a_program_run_where_tts_is_not_root_gets_its_limits(monkeypatch, delays):
    fake = _FakeRuns(fails=0)
    monkeypatch.setattr(sandbox, "_run_once", fake)
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    run_program("a", LIMITS)
    assert fake.calls == [(Program("a"), LIMITS, "/bin/bwrap", None, False)]
