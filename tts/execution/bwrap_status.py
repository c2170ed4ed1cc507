"""bubblewrap's status pipe (``--json-status-fd``) and the sandbox's first process it names.

Two things only bubblewrap knows, read here: whether it started the program at all (so that a
sandbox that could not start is never taken for the program's failure), and which host process is
PID 1 of the sandbox's namespace (killing it ends every process of the sandbox; and bubblewrap
leaves it behind when it exits, for whoever adopts it to reap).
"""

from __future__ import annotations

import json
import os
import selectors
import signal


class BwrapStatus:
    """What bubblewrap reports on ``--json-status-fd``, one JSON object a line, and the sandbox's
    first process it names.

    ``child-pid`` (the sandbox's first process, PID 1 of its namespace, as the host numbers it)
    comes once that process exists; ``exit-code`` only if its set-up finished and it started the
    program. So a run without ``exit-code`` never ran the program: a sure sign, where bubblewrap's
    exit code (1, as a program's) and its stderr (``bwrap: ...``, which a program can print too)
    are not.

    bubblewrap exits as soon as the program has, leaving its namespace's first process to end
    after it: an orphan, which the host's PID 1 (or the nearest subreaper) adopts. Where that is
    tts itself (tts as a container's entry point) nobody else would reap it, so the process is
    held here (a pidfd, taken while bubblewrap is still its parent, so the number cannot have been
    reused) and reaped by :meth:`reap` if tts adopted it.
    """

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self.read_fd, False)
        self.records: dict[str, object] = {}
        self.first_process = -1  # a pidfd of the sandbox's first process, once known
        self.ended = False  # bubblewrap closed its end
        self._buffer = b""

    def poll(self, launcher: int | None = None) -> dict[str, object]:
        """Read what bubblewrap has written so far; all records seen. With ``launcher`` (bubblewrap's
        pid, not yet reaped), also hold the first process it names."""
        while True:
            try:
                chunk = os.read(self.read_fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                self.ended = True
                break
            self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                self.records.update(record)
        pid = self.records.get("child-pid")
        if launcher is not None and self.first_process < 0 and isinstance(pid, int):
            self.first_process = _hold_child(pid, launcher)
        return self.records

    def kill(self) -> bool:
        """SIGKILL the sandbox's first process (the kernel then kills every process in its PID
        namespace); whether it was held."""
        if self.first_process < 0:
            return False
        try:
            signal.pidfd_send_signal(self.first_process, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return True

    def reap(self, wait: float = 5.0) -> None:
        """Once bubblewrap is reaped: reap its orphaned first process if tts adopted it (else the
        host's PID 1 did, and waiting on it is refused)."""
        if self.first_process < 0:
            return
        with selectors.DefaultSelector() as sel:  # a pidfd reads ready once its process has ended
            sel.register(self.first_process, selectors.EVENT_READ)
            sel.select(timeout=wait)
        try:
            os.waitid(os.P_PIDFD, self.first_process, os.WEXITED | os.WNOHANG)
        except ChildProcessError:
            pass  # not tts's child: its adoptive parent reaps it

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd, self.first_process):
            if fd >= 0:
                os.close(fd)
        self.read_fd = self.write_fd = self.first_process = -1


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])  # after "pid (comm) state"
    except (OSError, IndexError, ValueError):
        return None


def _hold_child(pid: int, launcher: int) -> int:
    """A pidfd of ``pid`` if it is the child of ``launcher`` (checked after the pidfd is open, so it
    names that very process, never a later one with the same number); else -1."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return -1  # already ended and reaped
    if _parent_of(pid) == launcher:
        return fd
    os.close(fd)
    return -1
