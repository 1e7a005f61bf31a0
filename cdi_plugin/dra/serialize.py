"""``<plugins>/<driver>/serialize.lock``: Prepare and Unprepare of every instance of the driver on
the node take turns (two instances run side by side during an update).

The lock is ``flock`` on a regular file of its own (mode 0600, never followed through a link,
never removed: a lock file that is unlinked while held no longer excludes anyone, so a holder
that finds it gone fails its call); the kernel releases it when its holder ends, however it
ends. It is taken without blocking the event loop: a busy lock is tried again after a few
milliseconds, at most :data:`LOCK_TIMEOUT` seconds, less than the kubelet waits for a call
(45 s), so that a holder that hangs fails the call in one line instead of stalling it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from cdi_plugin.errors import CdiPluginError, SpecWriteError
from cdi_plugin.store.dirlock import open_lock

log = logging.getLogger(__name__)

LOCK_NAME = "serialize.lock"
LOCK_TIMEOUT = 30.0
_POLL_FIRST, _POLL_MAX = 0.001, 0.05


class SerializeError(CdiPluginError):
    """The lock shared with the other instances of the driver could not be taken."""


class Serializer:
    """The lock file ``path``; :meth:`hold` holds it for an ``async with`` block."""

    def __init__(self, path: Path, timeout: float = LOCK_TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout

    def _open(self) -> int:
        try:
            fd = open_lock(self.path.parent, self.path.name)
            if fd is None:  # no directory (wiped with the kubelet's), or not writable here
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = open_lock(self.path.parent, self.path.name)
        except SpecWriteError as exc:
            raise SerializeError(str(exc)) from None
        except OSError as exc:
            raise SerializeError(f"{self.path}: {exc.strerror or exc}") from None
        if fd is None:
            raise SerializeError(f"{self.path}: cannot be created or opened for writing here")
        return fd

    def _current(self, fd: int) -> bool:
        """Whether ``fd`` is still the file at :attr:`path` (not one unlinked meanwhile)."""
        try:
            st, now = os.fstat(fd), os.lstat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)

    @contextlib.asynccontextmanager
    async def hold(self, until: float | None = None) -> AsyncIterator[Callable[[], None]]:
        """Hold the lock; SerializeError when it cannot be opened or is still held by another
        process after :attr:`timeout` seconds, or at ``until`` (event loop time) if sooner.
        The file may be removed or replaced meanwhile (a wiped directory), and whoever opens the
        new one takes the lock beside this holder: the function the block gets raises
        SerializeError then (call it before a change is written), and so does the block's end
        (what it changed must not be answered as done)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + self.timeout if until is None else min(start + self.timeout, until)
        delay = _POLL_FIRST
        fd = self._open()
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if delay == _POLL_FIRST:
                        log.debug("waiting for %s: another instance of the driver holds it", self.path)
                else:
                    if self._current(fd):
                        break
                    os.close(fd)  # the file was removed or replaced: lock the one there now
                    fd = -1
                    fd = self._open()
                if loop.time() >= deadline:
                    raise SerializeError(
                        f"{self.path}: held by another instance of the driver for more than "
                        f"{max(0.0, deadline - start):.3g}s"
                    )
                await asyncio.sleep(min(delay, deadline - loop.time()))
                delay = min(delay * 2, _POLL_MAX)

            def still_held() -> None:
                if not self._current(fd):  # whoever opened the new file took the lock beside us
                    raise SerializeError(
                        f"{self.path}: removed or replaced while this call held it, so another call "
                        "may have run beside it (the kubelet calls again)"
                    )

            yield still_held
            still_held()
        finally:
            if fd >= 0:
                os.close(fd)
