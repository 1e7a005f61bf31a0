"""The lock that makes scans of one spec directory take turns.

The lock is ``.cdi-gen.lock`` beside the ownership record: a regular file mode 0600 owned by the
writer (root), opened without following links. Only its owner can open it, so no other local user
can hold it (the directory itself, mode 0755, can be opened and ``flock``-ed by anyone). Runtimes
never read it (not ``*.json``/``*.yaml``). The wait is bounded: a process of the owner that holds
it longer than the timeout makes the scan fail with a one-line error instead of hanging, and a
process that is stopping gives up waiting at once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cdi_plugin.errors import SpecWriteError

LOCK_NAME = ".cdi-gen.lock"
#: A scan takes well under a second; another scan holding the lock longer than this is stuck.
DEFAULT_LOCK_TIMEOUT = 30.0
_POLL_FIRST, _POLL_MAX = 0.01, 0.25


class LockTimeoutError(SpecWriteError):
    """The lock was not free within the timeout."""


class LockWaitStopped(LockTimeoutError):
    """The process stopped while it waited for the lock."""


@dataclass(slots=True)
class DirLock:
    path: Path
    held: bool = False  # False: the directory is missing or not writable here, so nothing is written
    waited: float = 0.0  # seconds spent waiting for the lock


def open_lock(directory: Path, name: str = LOCK_NAME) -> int | None:
    """The descriptor of the lock file ``directory/name`` (created mode 0600 if missing; a link,
    or a file that is not a regular file of this user, is refused with SpecWriteError); None when
    the directory is missing or cannot be written."""
    path = directory / name
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(name, flags, 0o600, dir_fd=dfd)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return None  # staging the files fails the same way, with its own message
        raise SpecWriteError(f"{path}: cannot open the lock: {exc.strerror or exc}") from None
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise SpecWriteError(
            f"{path}: not a regular file owned by uid {os.geteuid()}; remove it, nothing was written"
        )
    if st.st_mode & 0o077:
        os.fchmod(fd, 0o600)
    return fd


@contextlib.contextmanager
def locked(
    directory: Path,
    timeout: float = DEFAULT_LOCK_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
    stopping: threading.Event | None = None,
) -> Iterator[DirLock]:
    """Hold the lock of ``directory`` (see the module's docstring) for the ``with`` block.

    Raises :class:`LockTimeoutError` when it is not free within ``timeout`` seconds, and
    :class:`LockWaitStopped` once ``stopping`` is set while it waits. A directory that does not
    exist yet, or that this process may not write, is not locked (``held`` False).
    """
    lock = DirLock(directory / LOCK_NAME)
    fd = open_lock(directory)
    if fd is None:
        yield lock
        return
    try:
        start = clock()
        delay = _POLL_FIRST
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = clock() - start
                if waited >= timeout:
                    raise LockTimeoutError(
                        f"{lock.path}: another scan has held the lock for more than {timeout:g}s; nothing "
                        "was written (--lock-timeout sets how long to wait)"
                    ) from None
                pause = min(delay, timeout - waited)
                if stopping is None:
                    time.sleep(pause)
                elif stopping.wait(pause):
                    raise LockWaitStopped(
                        f"{lock.path}: stopped while another scan held the lock; nothing was written"
                    ) from None
                delay = min(delay * 2, _POLL_MAX)
        lock.held, lock.waited = True, clock() - start
        yield lock
    finally:
        os.close(fd)
