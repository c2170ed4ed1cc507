"""Run model-written Python in a sandbox: a separate process under bubblewrap, never in tts's
process or with its rights.

Each program runs in new namespaces (``bwrap --unshare-all``: no network but its own loopback, its
own process tree, an unprivileged user), sees the system and the Python installation read-only and
nothing of the host's home or the run directory, writes only to throwaway size-capped tmpfs
(its working folder, ``/tmp``, ``/dev/shm``), and starts with an empty environment (no inherited
secrets). Its stdin is fed without blocking, so a program that never reads it cannot stall the run. Resource limits (CPU seconds, address space, file
size, processes, open files) are set before bubblewrap starts and inherited by the program; a
wall-clock timeout kills the whole process group, and the sandbox's PID namespace dies with it, so
no process outlives its run. Output is read up to a cap, then the run is killed.

Where bubblewrap is missing, :func:`run_program` refuses with the command that installs it; a
caller opts out of the sandbox only by name, ``unsafe_no_sandbox=True`` (same limits, no isolation).
"""

from __future__ import annotations

import os
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

Status = Literal["ok", "error", "timeout", "memory", "output_limit", "killed"]


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
        processes: Processes and threads of the sandbox's user (RLIMIT_NPROC; where tts runs as
            root, programs run as ``nobody`` and the sandboxes running at once share this count).
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
            line), ``timeout``, ``memory`` (MemoryError), ``output_limit`` or ``killed`` (a signal).
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


def _bwrap_command(bwrap: str, workdir: str, names: Sequence[str], limits: Limits) -> list[str]:
    """bubblewrap's command line: the program's files are bound read-only into a size-capped tmpfs
    (its working folder and home); ``/tmp`` and ``/dev/shm`` are size-capped tmpfs too, and the rest
    of ``/dev`` is read-only (bubblewrap's own ``/dev`` is a writable tmpfs without a cap)."""
    python, prefix = _python()
    size = str(limits.disk_bytes)
    cmd = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev",
           "--size", size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev", "--size", size, "--tmpfs", "/tmp"]
    for path in ("/usr", "/bin", "/lib", "/lib64", "/etc/alternatives"):
        if os.path.exists(path):
            cmd += ["--ro-bind", path, path]
    if not prefix.startswith("/usr/"):
        cmd += ["--ro-bind", prefix, prefix]
    cmd += ["--size", size, "--tmpfs", "/sandbox"]
    for name in names:
        cmd += ["--ro-bind", os.path.join(workdir, name), f"/sandbox/{name}"]
    cmd += ["--chdir", "/sandbox", "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/sandbox", "--setenv", "PYTHONHASHSEED", "0"]
    return [*cmd, python, "-I", "-S", "-B", "main.py"]


NOBODY = 65534
"""The user programs run as when tts runs as root: root ignores the process-count limit (a fork
bomb would fill the machine), an unprivileged user does not."""


def _limit(limits: Limits, drop_to_nobody: bool):
    def apply() -> None:
        os.setsid()
        # CPU: SIGXCPU at the soft limit (the program can be told apart from a crash), SIGKILL 1 s later.
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
        for which, value in ((resource.RLIMIT_AS, limits.memory_bytes), (resource.RLIMIT_FSIZE, limits.file_bytes),
                             (resource.RLIMIT_NOFILE, limits.open_files), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(which, (value, value))
        if drop_to_nobody:
            # Counted per user: the sandboxes running at once share it (a non-root caller's own
            # processes would count too, so it is set only where tts runs as root).
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
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


def _read(proc: subprocess.Popen, stdin: bytes, limits: Limits) -> tuple[bytes, bytes, str | None]:
    """Feed stdin, read both pipes up to the cap and the deadline; the reason to stop early, if any."""
    outputs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    stdin_fd = os.dup(proc.stdin.fileno())  # ours to close once written; Popen's copy is closed now
    proc.stdin.close()
    os.set_blocking(stdin_fd, False)
    pending, stopped = memoryview(stdin), None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        sel.register(stdin_fd, selectors.EVENT_WRITE)
        deadline = time.monotonic() + limits.wall_seconds
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


def _kill_group(proc: subprocess.Popen) -> None:
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


def run_program(program: Program | str, limits: Limits | None = None, *, unsafe_no_sandbox: bool = False) -> Execution:
    """Run one program in the sandbox and say how it went (never raises for what the program does).

    ``unsafe_no_sandbox=True`` runs it without bubblewrap's isolation (the limits still apply, and
    the program runs as ``nobody`` where tts is root): for trusted code and for measuring what the
    sandbox costs, never for model-written code on a machine that matters.

    Raises:
        SandboxUnavailableError: bubblewrap is missing and ``unsafe_no_sandbox`` was not given.
    """
    program = Program(program) if isinstance(program, str) else program
    limits = limits or Limits()
    bwrap = None if unsafe_no_sandbox else bwrap_path()
    if bwrap is None and not unsafe_no_sandbox:
        raise SandboxUnavailableError(
            "Running model-written code needs the bubblewrap sandbox, which is not installed: "
            "`apt-get install bubblewrap` (Debian/Ubuntu; `make install` does it as root), or pass "
            "unsafe_no_sandbox=True to run it without isolation at your own risk.")
    with tempfile.TemporaryDirectory(prefix="tts-sandbox-") as workdir:
        drop = os.geteuid() == 0
        names = []
        for name, text in {**program.files, "main.py": program.source}.items():
            names.append(Path(name).name)
            Path(workdir, names[-1]).write_text(text)
        if drop:
            os.chmod(workdir, 0o777)  # the program's user may read its files (and, unsandboxed, write beside them)
        if bwrap is not None:
            cmd, env, cwd = _bwrap_command(bwrap, workdir, names, limits), {}, None
        else:
            cmd, env, cwd = [_python()[0], "-I", "-S", "-B", "main.py"], {"PATH": "/usr/bin:/bin"}, workdir
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, cwd=cwd, preexec_fn=_limit(limits, drop), close_fds=True)  # noqa: PLW1509 - limits must be set in the child
        try:
            out, err, stopped = _read(proc, program.stdin.encode(), limits)
        finally:
            _kill_group(proc)  # the program's whole group: nothing outlives the run
        wall = time.monotonic() - start
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    if stopped == "timeout":
        return Execution("timeout", None, stdout, stderr, f"ran past {limits.wall_seconds:g} s", wall, bwrap is not None)
    if stopped == "output_limit":
        return Execution("output_limit", None, stdout, stderr, f"wrote more than {limits.output_bytes} bytes", wall,
                         bwrap is not None)
    status, error = _classify(proc.returncode, stderr)
    return Execution(status, proc.returncode, stdout, stderr, error, wall, bwrap is not None)


def run_many(programs: Sequence[Program | str], limits: Limits | None = None, *, workers: int = 4,
             unsafe_no_sandbox: bool = False) -> list[Execution]:
    """Run programs in parallel (each in its own sandboxed process), results in input order."""
    if not programs:
        return []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda p: run_program(p, limits, unsafe_no_sandbox=unsafe_no_sandbox), programs))
