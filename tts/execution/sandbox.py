"""Run model-written Python in a sandbox: a separate process under bubblewrap, never in tts's
process or with its rights.

Each program runs in new namespaces (``bwrap --unshare-all``: no network but its own loopback, its
own process tree, an unprivileged user), sees the system and the Python installation read-only and
nothing of the host's home or the run directory, writes only to throwaway size-capped tmpfs
(its working folder, ``/tmp``, ``/dev/shm``; the sandbox's own ``/`` is remounted read-only), and
starts with an empty environment (no inherited secrets). Its stdin is fed without blocking, so a
program that never reads it cannot stall the run. Resource limits (CPU seconds, address space, file
size, open files) are set before bubblewrap starts and inherited by the program.

The process limit is the sandbox's own, never shared with the sandboxes running beside it (Linux
counts ``RLIMIT_NPROC`` per user): where tts runs as root, each sandbox runs as a user id of its
own (:mod:`tts.execution.uids`); otherwise the limit is set inside the sandbox's new user
namespace, where the kernel (5.14 and later) counts that namespace's processes apart.

A run that ends on its own is waited for; one stopped at its wall clock or output cap has its
sandbox's first process killed, which ends every process of its PID namespace, and bubblewrap
reaps it. Either way the run returns once the namespace is gone (no process outlives its run),
and where tts itself adopts what bubblewrap leaves behind (tts as a container's PID 1), tts reaps
it. bubblewrap reports on a status pipe (``--json-status-fd``) whether it started the program;
one it could not start (a fork that failed on a loaded machine, say) is tried again, then
reported as ``sandbox_failed``, never as the program's verdict.

Where bubblewrap is missing, :func:`run_program` refuses with the command that installs it; a
caller opts out of the sandbox only by name, ``unsafe_no_sandbox=True`` (same limits, no isolation).
"""

from __future__ import annotations

import logging
import os
import random
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tts import tracing
from tts.execution import uids
from tts.execution.bwrap_status import BwrapStatus

logger = logging.getLogger(__name__)

Status = Literal["ok", "error", "timeout", "memory", "output_limit", "killed", "sandbox_failed"]

START_ATTEMPTS = 4
"""Times a sandbox that cannot start is tried before the run is reported ``sandbox_failed``."""


class SandboxUnavailableError(RuntimeError):
    """bubblewrap is not installed, and the caller did not opt in to unsandboxed runs."""


@dataclass(frozen=True)
class Limits:
    """What one program may use.

    Args:
        wall_seconds: Wall-clock time before the whole run is killed.
        cpu_seconds: CPU time (RLIMIT_CPU).
        memory_bytes: Address space (RLIMIT_AS).
        file_bytes: Largest file it may write (RLIMIT_FSIZE).
        processes: Processes and threads of one sandbox (RLIMIT_NPROC, counted per sandbox:
            each has its own user id where tts is root, its own user namespace otherwise).
        output_bytes: Bytes of stdout and of stderr kept; more ends the run.
        open_files: File descriptors (RLIMIT_NOFILE).
        disk_bytes: Size of each writable folder in the sandbox (its working folder, ``/tmp``,
            ``/dev/shm``: memory-backed tmpfs, so without a cap many small files would fill the
            host's memory; RLIMIT_FSIZE bounds only one file).
    """

    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 1 << 30
    file_bytes: int = 16 << 20
    processes: int = 256
    output_bytes: int = 1 << 20
    open_files: int = 64
    disk_bytes: int = 64 << 20


@dataclass(frozen=True)
class Execution:
    """How one program ran.

    Args:
        status: ``ok`` (exit 0), ``error`` (another exit code; ``error`` holds the traceback's last
            line), ``timeout``, ``memory`` (MemoryError), ``output_limit`` or ``killed`` (a signal):
            the program's verdict. ``sandbox_failed``: the sandbox could not run the program
            (bubblewrap could not set up, a fork failed), even after ``START_ATTEMPTS`` tries; it
            says nothing of the program, and ``error`` says why in one line.
        exit_code: The process's exit code (negative: the signal that ended it), None if killed by us.
        stdout, stderr: What it wrote, up to the output cap.
        error: One line saying what went wrong ("" when ok).
        wall_seconds: How long it ran.
        sandboxed: False only for runs the caller opted out of the sandbox for.
    """

    status: Status
    exit_code: int | None
    stdout: str
    stderr: str
    error: str = ""
    wall_seconds: float = 0.0
    sandboxed: bool = True


@dataclass(frozen=True)
class Program:
    """A program to run: its source, what it reads on stdin, and files placed beside it."""

    source: str
    stdin: str = ""
    files: dict[str, str] = field(default_factory=dict)


def bwrap_path() -> str | None:
    """The bubblewrap binary, or None."""
    return shutil.which("bwrap")


def _python() -> tuple[str, str]:
    """(the interpreter, the installation folder to show the sandbox read-only): the system's
    Python 3 when there is one (under /usr, readable by the sandbox's unprivileged user), else
    this interpreter's installation."""
    if os.path.exists("/usr/bin/python3"):
        return "/usr/bin/python3", "/usr"
    prefix = os.path.realpath(sys.base_prefix)
    for name in (f"python{sys.version_info.major}.{sys.version_info.minor}", "python3"):
        exe = os.path.join(prefix, "bin", name)
        if os.path.exists(exe):
            return exe, prefix
    return os.path.realpath(sys.executable), prefix


_BWRAP_PROCESSES = 2
"""bubblewrap's own processes in a sandbox: the launcher and the PID namespace's first process."""

PRLIMIT = shutil.which("prlimit", path="/usr/bin:/bin")
"""util-linux's ``prlimit``, seen in the sandbox (``/usr`` and ``/bin`` are), or None."""

_NPROC_INSIDE = ("import os, resource, sys\n"
                 "n = int(sys.argv[1])\n"
                 "resource.setrlimit(resource.RLIMIT_NPROC, (n, n))\n"
                 "os.execv(sys.executable, [sys.executable, '-I', '-S', '-B', 'main.py'])\n")
"""What sets the limit inside where there is no ``prlimit`` (a second interpreter start: 20-50 ms
a run, where ``prlimit`` takes about 2)."""


def _started_inside(python: str, limits: Limits) -> list[str]:
    """The program's command where tts is not root: the process limit is set inside the sandbox,
    once bubblewrap has made its user namespace (set before, it would count all of the caller's
    processes on the machine), then the program starts. ``processes`` + 1: the namespace's first
    process (bubblewrap's) counts too; never above the hard limit tts itself has."""
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    n = limits.processes + 1 if hard == resource.RLIM_INFINITY else min(limits.processes + 1, hard)
    if PRLIMIT is not None:
        return [PRLIMIT, f"--nproc={n}", "--", python, "-I", "-S", "-B", "main.py"]
    return [python, "-I", "-S", "-B", "-c", _NPROC_INSIDE, str(n)]


def _bwrap_command(bwrap: str, workdir: str, names: Sequence[str], limits: Limits, status_fd: int,
                   limit_inside: bool) -> list[str]:
    """bubblewrap's command line: the program's files are bound read-only into a size-capped tmpfs
    (its working folder and home); ``/tmp`` and ``/dev/shm`` are size-capped tmpfs too, and ``/dev``
    and the sandbox's own ``/`` (bubblewrap's uncapped tmpfs) are remounted read-only once every
    mount is in place. ``status_fd`` receives bubblewrap's JSON status; ``limit_inside`` sets the
    process limit inside (:func:`_started_inside`)."""
    python, prefix = _python()
    size = str(limits.disk_bytes)
    cmd = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--json-status-fd", str(status_fd),
           "--proc", "/proc", "--dev", "/dev",
           "--size", size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev", "--size", size, "--tmpfs", "/tmp"]
    for path in ("/usr", "/bin", "/lib", "/lib64", "/etc/alternatives"):
        if os.path.exists(path):
            cmd += ["--ro-bind", path, path]
    if not prefix.startswith("/usr/"):
        cmd += ["--ro-bind", prefix, prefix]
    cmd += ["--size", size, "--tmpfs", "/sandbox"]
    for name in names:
        cmd += ["--ro-bind", os.path.join(workdir, name), f"/sandbox/{name}"]
    cmd += ["--remount-ro", "/",  # last: bubblewrap makes mount points in / until here
            "--chdir", "/sandbox", "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/sandbox", "--setenv", "PYTHONHASHSEED", "0"]
    return [*cmd, *(_started_inside(python, limits) if limit_inside else [python, "-I", "-S", "-B", "main.py"])]


NOBODY = 65534
"""Who programs run as where tts is root but may not take sandbox user ids (a rootless container):
the process limit is then set inside each sandbox, as for an ordinary user."""


def _limit(limits: Limits, uid: int | None, nproc: int | None):
    """The child's set-up before bubblewrap starts: its own session, the limits, and where tts is
    root, the user to run as, with the process limit ``nproc`` where that user is the sandbox's
    own (a limit for ``nobody`` here would count all the sandboxes running as ``nobody``)."""
    def apply() -> None:
        os.setsid()
        # CPU: SIGXCPU at the soft limit (the program can be told apart from a crash), SIGKILL 1 s later.
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
        for which, value in ((resource.RLIMIT_AS, limits.memory_bytes), (resource.RLIMIT_FSIZE, limits.file_bytes),
                             (resource.RLIMIT_NOFILE, limits.open_files), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(which, (value, value))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
    return apply


def _feed(sel: selectors.BaseSelector, fd: int, pending: memoryview) -> memoryview:
    """Write what the program's stdin takes now (never blocking: a program that does not read its
    input must not stall the deadline or the reading of its output); closes stdin when all is
    written or the program closed it. What is left to write."""
    try:
        pending = pending[os.write(fd, pending[:65536]):] if pending else pending
    except (BlockingIOError, InterruptedError):
        return pending
    except OSError:  # BrokenPipeError: the program closed its stdin or ended
        pending = pending[:0]
    if not pending:
        sel.unregister(fd)
        os.close(fd)
    return pending


def _read(proc: subprocess.Popen, stdin: bytes, limits: Limits, deadline: float,
          status: BwrapStatus | None) -> tuple[bytes, bytes, str | None]:
    """Feed stdin, read both pipes up to the cap and the deadline, and bubblewrap's status until it
    names the sandbox's first process; the reason to stop early, if any."""
    outputs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    stdin_fd = os.dup(proc.stdin.fileno())  # ours to close once written; Popen's copy is closed now
    proc.stdin.close()
    os.set_blocking(stdin_fd, False)
    pending, stopped = memoryview(stdin), None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        sel.register(stdin_fd, selectors.EVENT_WRITE)
        if status is not None:
            sel.register(status.read_fd, selectors.EVENT_READ)
        open_pipes = 2
        try:
            while open_pipes and stopped is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    stopped = "timeout"
                    break
                for key, _ in sel.select(timeout=left):
                    if key.fd == stdin_fd:
                        pending = _feed(sel, stdin_fd, pending)
                        continue
                    if status is not None and key.fd == status.read_fd:
                        if "child-pid" in status.poll(proc.pid) or status.ended:
                            sel.unregister(key.fd)
                        continue
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        open_pipes -= 1
                        continue
                    buf = outputs[key.fd]
                    buf += chunk
                    if len(buf) > limits.output_bytes:
                        del buf[limits.output_bytes:]
                        stopped = "output_limit"
                        break
        finally:
            if stdin_fd in sel.get_map():
                os.close(stdin_fd)
    return bytes(outputs[proc.stdout.fileno()]), bytes(outputs[proc.stderr.fileno()]), stopped


def _stop(proc: subprocess.Popen, status: BwrapStatus | None) -> None:
    """End a run before its program ended: in a sandbox, kill the namespace's first process and let
    bubblewrap, its parent, reap it and exit; unsandboxed, or if that did not end it, kill the
    launcher's whole process group. Returns once the launcher is reaped."""
    if status is not None:
        give_up = time.monotonic() + 1.0  # the pid is written right after the namespace is made
        while status.first_process < 0 and proc.poll() is None and time.monotonic() < give_up:
            status.poll(proc.pid)
            time.sleep(0.01)
        if status.kill():
            try:  # the kernel ends every process of the namespace first: seconds for a fork bomb on a busy machine
                proc.wait(timeout=60)
                return
            except subprocess.TimeoutExpired:
                pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _classify(code: int, stderr: str) -> tuple[Status, str]:
    last = next((line for line in reversed(stderr.strip().splitlines()) if line.strip()), "")
    if code == 0:
        return "ok", ""
    if "MemoryError" in last:
        return "memory", last
    # A signal ends the program: the process reports -signal, bubblewrap (its parent) 128 + signal.
    sig = -code if code < 0 else code - 128 if code > 128 else 0
    if sig:
        if sig == signal.SIGXCPU:
            return "timeout", "killed at its CPU time limit"
        if sig == signal.SIGXFSZ:
            return "killed", "killed at its file size limit"
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return "killed", f"killed by {name}"
    return "error", last or f"exit code {code}"


class _NotStarted(Exception):
    """The sandbox could not start the program; the message says why in one line."""


def _run_once(program: Program, limits: Limits, bwrap: str | None, uid: int | None, own_uid: bool) -> Execution:
    """One try at running the program (``uid``: the user to run as where tts is root; ``own_uid``:
    that user is this sandbox's alone, so the process limit is set on it before bubblewrap starts,
    else inside the sandbox).

    Raises:
        _NotStarted: bubblewrap or the fork before it failed before the program started.
    """
    status = BwrapStatus() if bwrap is not None else None
    try:
        with tempfile.TemporaryDirectory(prefix="tts-sandbox-") as workdir:
            names = []
            for name, text in {**program.files, "main.py": program.source}.items():
                names.append(Path(name).name)
                Path(workdir, names[-1]).write_text(text)
            if uid is not None:
                os.chmod(workdir, 0o777)  # the program's user may read its files (and, unsandboxed, write beside them)
            if status is not None:
                cmd, env, cwd = _bwrap_command(bwrap, workdir, names, limits, status.write_fd, not own_uid), {}, None
            else:
                cmd, env, cwd = [_python()[0], "-I", "-S", "-B", "main.py"], {"PATH": "/usr/bin:/bin"}, workdir
            nproc = limits.processes + (_BWRAP_PROCESSES if status is not None else 0) if own_uid else None
            start = time.monotonic()
            try:
                proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env=env, cwd=cwd, preexec_fn=_limit(limits, uid, nproc), close_fds=True,  # noqa: PLW1509 - limits must be set in the child
                                        pass_fds=() if status is None else (status.write_fd,))
            except (OSError, subprocess.SubprocessError) as e:  # the fork, the set-up or exec failed
                raise _NotStarted(f"could not start {'bubblewrap' if bwrap else 'python'}: {e}") from None
            if status is not None:
                os.close(status.write_fd)  # bubblewrap holds the only write end now
                status.write_fd = -1
            deadline = start + limits.wall_seconds
            stopped = None
            try:
                out, err, stopped = _read(proc, program.stdin.encode(), limits, deadline, status)
                if status is not None:
                    status.poll(proc.pid)  # bubblewrap is not reaped yet: its child is still its child
                if stopped is None:  # both pipes closed: wait for the end, not past the deadline
                    try:
                        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        stopped = "timeout"
                wall = time.monotonic() - start  # the run's time, not its sandbox's teardown
            finally:
                if proc.poll() is None:
                    _stop(proc, status)
                if status is not None:
                    status.reap()
        started = status is None or "exit-code" in status.poll()
    finally:
        if status is not None:
            status.close()
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    if not started:
        why = next((line for line in reversed(stderr.splitlines()) if line.startswith("bwrap:")), "")
        raise _NotStarted(why or (f"bubblewrap did not start the program within {limits.wall_seconds:g} s" if stopped
                                  else f"bubblewrap exited with {proc.returncode} before starting the program"))
    sandboxed = bwrap is not None
    if stopped == "timeout":
        return Execution("timeout", None, stdout, stderr, f"ran past {limits.wall_seconds:g} s", wall, sandboxed)
    if stopped == "output_limit":
        return Execution("output_limit", None, stdout, stderr, f"wrote more than {limits.output_bytes} bytes", wall,
                         sandboxed)
    code, error = _classify(proc.returncode, stderr)
    return Execution(code, proc.returncode, stdout, stderr, error, wall, sandboxed)


def run_program(program: Program | str, limits: Limits | None = None, *, unsafe_no_sandbox: bool = False) -> Execution:
    """Run one program in the sandbox and say how it went (never raises for what the program does,
    nor for a sandbox that cannot start: that is tried again, then reported ``sandbox_failed``).

    ``unsafe_no_sandbox=True`` runs it without bubblewrap's isolation (the limits still apply, and
    the program runs as a user of its own where tts is root): for trusted code and for measuring
    what the sandbox costs, never for model-written code on a machine that matters.

    Raises:
        SandboxUnavailableError: bubblewrap is missing and ``unsafe_no_sandbox`` was not given.
    """
    program = Program(program) if isinstance(program, str) else program
    limits = limits or Limits()
    with tracing.span("tts.sandbox", {"tts.sandbox.wall_limit_s": limits.wall_seconds,
                                      "tts.sandbox.isolated": not unsafe_no_sandbox}) as span:
        execution = _run_program(program, limits, unsafe_no_sandbox)
        tracing.set_attributes(span, {"tts.sandbox.status": execution.status, "tts.sandbox.error": execution.error or None,
                                      "tts.sandbox.exit_code": execution.exit_code,
                                      "tts.sandbox.wall_seconds": execution.wall_seconds})
    return execution


def _run_program(program: Program, limits: Limits, unsafe_no_sandbox: bool) -> Execution:
    bwrap = None if unsafe_no_sandbox else bwrap_path()
    if bwrap is None and not unsafe_no_sandbox:
        raise SandboxUnavailableError(
            "Running model-written code needs the bubblewrap sandbox, which is not installed: "
            "`apt-get install bubblewrap` (Debian/Ubuntu; `make install` does it as root), or pass "
            "unsafe_no_sandbox=True to run it without isolation at your own risk.")
    why = ""
    for attempt in range(START_ATTEMPTS):
        if attempt:
            delay = 0.1 * 3 ** (attempt - 1) * random.uniform(0.5, 1.5)  # noqa: S311 - jitter, not secrecy
            logger.info("sandbox did not start (%s); trying again in %.2f s", why, delay)
            time.sleep(delay)
        try:
            if os.geteuid() != 0:
                return _run_once(program, limits, bwrap, None, own_uid=False)
            if not uids.available():
                return _run_once(program, limits, bwrap, NOBODY, own_uid=False)
            with uids.sandbox_uid() as uid:  # held until every process of the run is reaped
                return _run_once(program, limits, bwrap, uid, own_uid=True)
        except _NotStarted as e:
            why = str(e)
        except OSError as e:  # no free sandbox user, no room for the program's files
            why = f"could not prepare the sandbox: {e}"
    logger.warning("sandbox could not run a program after %d tries: %s", START_ATTEMPTS, why)
    return Execution("sandbox_failed", None, "", "", why, 0.0, bwrap is not None)


def run_many(programs: Sequence[Program | str], limits: Limits | None = None, *, workers: int = 4,
             unsafe_no_sandbox: bool = False) -> list[Execution]:
    """Run programs in parallel (each in its own sandboxed process), results in input order. A
    program whose sandbox could not start is ``sandbox_failed`` in its place; the others still run."""
    if not programs:
        return []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        runs = [tracing.carry(run_program) for _ in programs]  # each thread continues the caller's span
        return list(pool.map(lambda run, p: run(p, limits, unsafe_no_sandbox=unsafe_no_sandbox), runs, programs))
