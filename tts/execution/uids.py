"""One user id per sandbox running at once, where tts runs as root.

Linux counts the process limit (``RLIMIT_NPROC``) per user. Were every sandbox to run as the same
user (``nobody``), all the sandboxes on the machine would share one count: a fork bomb in one would
leave its neighbours unable to start a process. Root may switch to any user id, so each sandbox
takes a user id of its own from a range no account uses, and its limit counts only its own
processes, on every kernel.

A user id is held with an exclusive ``flock`` on a file named after it, for as long as its sandbox
has a process: so the tts processes on one machine (two evaluations, test workers) never hand out
the same one, and a crashed holder's lock ends with it. Ids are handed out round-robin, so one
just released is the last to be reused.
"""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

FIRST_UID = 0x70000000
"""The first sandbox user id (1879048192): above the ranges Linux distributions give accounts,
system users, ``nobody`` and systemd's containers (524288-1879048191), below systemd's reserved
ranges at 0x7FFE0000."""

COUNT = 4096
"""User ids in the range: more than the sandboxes any one machine runs at once."""

LOCK_FOLDERS = ("/run/tts-sandbox-uids", "/var/lock/tts-sandbox-uids", os.path.join(tempfile.gettempdir(), "tts-sandbox-uids"))
"""Where the lock files live, the first that is (or can be made) a directory owned by root that
no one else may write to (a user who could create files there could hold every id). With none,
ids are held within this process only, and a warning says so."""

logger = logging.getLogger(__name__)


def _mapped(path: str) -> bool:
    """Whether this process's user namespace maps the whole range (``/proc/self/uid_map`` lines:
    first id inside, first id outside, count)."""
    try:
        with open(path) as f:
            extents = [tuple(map(int, line.split())) for line in f if line.strip()]
    except (OSError, ValueError):
        return False
    return any(inside <= FIRST_UID and FIRST_UID + COUNT <= inside + count for inside, _, count in extents)


@functools.cache
def available() -> bool:
    """Whether this process may take the sandbox user ids: it is root and its user namespace maps
    them (a rootless container maps perhaps 65536 ids, and switching to an unmapped one fails)."""
    return os.geteuid() == 0 and _mapped("/proc/self/uid_map") and _mapped("/proc/self/gid_map")


class NoFreeUidError(OSError):
    """Every sandbox user id is in use."""


def _lock_folder() -> str | None:
    for folder in LOCK_FOLDERS:
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            st = os.lstat(folder)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return folder
    return None


_turn = threading.Lock()
_next = int.from_bytes(os.urandom(2), "little") % COUNT  # processes start at different places
_held_here: set[int] = set()  # ids this process holds (all it can know of without a lock folder)
_warned = False


def _try(folder: str | None, slot: int) -> int | None:
    """Take ``slot``: the open lock file (-1 without a folder), or None if it is held."""
    if slot in _held_here:
        return None
    if folder is None:
        return -1
    fd = os.open(os.path.join(folder, str(FIRST_UID + slot)), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextmanager
def sandbox_uid() -> Iterator[int]:
    """Hold a user id no other sandbox on this machine is using, until the block ends.

    Raises:
        NoFreeUidError: all ``COUNT`` ids are held.
    """
    global _next, _warned
    folder = _lock_folder()
    if folder is None and not _warned:
        _warned = True
        logger.warning("no folder for the sandbox uid locks (%s): sandbox user ids are kept apart within this "
                       "process only, not from other tts processes on this machine", ", ".join(LOCK_FOLDERS))
    with _turn:
        for k in range(COUNT):
            slot = (_next + k) % COUNT
            if (fd := _try(folder, slot)) is not None:
                _held_here.add(slot)
                _next = (slot + 1) % COUNT
                break
        else:
            raise NoFreeUidError(f"all {COUNT} sandbox user ids are in use")
    try:
        yield FIRST_UID + slot
    finally:
        with _turn:
            _held_here.discard(slot)
        if fd >= 0:
            os.close(fd)  # releases the lock
