"""Liveness and readiness: what ``/healthz`` and ``/readyz`` answer (thread-safe)."""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cdi_plugin.wording import file_type

#: ``/healthz`` fails when the event loop has not beaten for this long.
STALE_AFTER = 30.0
#: What readiness waits for until the plugin has first read the spec directories.
STARTING = "start-up (the first read of the spec directories)"


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    detail: str


def _directory_problem(directory: Path) -> str | None:
    """Why ``directory`` is unusable, or None. A directory that does not exist is fine: it is
    watched for. One that was deleted while mounted (``st_nlink`` 0) is not: the container keeps
    the deleted directory until it restarts."""
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{directory}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{directory}: is {file_type(st.st_mode)}, not a directory"
    if st.st_nlink == 0:
        return f"{directory}: deleted on the host while mounted here; a restart mounts the new one"
    try:
        with os.scandir(directory) as entries:
            next(entries, None)
    except OSError as exc:
        return f"{directory}: cannot be listed: {exc.strerror or exc}"
    return None


class Probes:
    """Liveness and readiness state: written from the event loop, read from the server's threads.

    * Liveness: :meth:`beat` was called within ``stale_after`` seconds (the loop runs; it beats
      every :attr:`interval` seconds), every directory of ``dirs`` that exists can be listed, and
      no work given to :meth:`track` has been stalled for longer than ``stale_after``.
    * Readiness: every name given to :meth:`require`, in every group, was :meth:`satisfy`-ed (and
      not unsatisfied since). Nothing required means ready. Each side of ``serve`` (the device
      plugin, the DRA driver) requires its names in a group of its own.
    """

    def __init__(
        self,
        dirs: Sequence[Path] = (),
        *,
        stale_after: float = STALE_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dirs = tuple(dirs)
        self.stale_after = stale_after
        self.clock = clock
        self._lock = threading.Lock()
        self._last_beat = clock()
        self._required: dict[str, tuple[str, ...]] = {}
        self._satisfied: set[str] = set()
        self._why: dict[str, str] = {}
        self._tracked: list[tuple[str, Callable[[], float | None]]] = []

    @property
    def interval(self) -> float:
        """How often the event loop should :meth:`beat`."""
        return self.stale_after / 6

    def beat(self) -> None:
        with self._lock:
            self._last_beat = self.clock()

    def require(self, names: Iterable[str], *, group: str = "") -> None:
        """What readiness waits for in ``group``, replacing what that group waited for before."""
        with self._lock:
            self._required[group] = tuple(sorted(set(names)))

    def track(self, what: str, stalled_since: Callable[[], float | None]) -> None:
        """Fail liveness while ``stalled_since()`` (a time of :attr:`clock`, or None when all is
        well; called from the server's thread) lies more than ``stale_after`` seconds back: work
        that runs off the event loop (a rescan in a worker thread) can stall while the loop beats."""
        with self._lock:
            self._tracked.append((what, stalled_since))

    def satisfy(self, name: str, ok: bool = True, why: str = "") -> None:
        """``name`` is satisfied, or not (``why``, shown in readiness while it is not)."""
        with self._lock:
            if ok:
                self._satisfied.add(name)
                self._why.pop(name, None)
            else:
                self._satisfied.discard(name)
                self._why[name] = why

    def liveness(self) -> Check:
        with self._lock:
            now = self.clock()
            silent = now - self._last_beat
            tracked = list(self._tracked)
        if silent > self.stale_after:
            return Check(False, f"the event loop has not run for {silent:.0f}s")
        for what, stalled_since in tracked:
            since = stalled_since()
            if since is not None and now - since > self.stale_after:
                return Check(False, f"{what} stalled for {now - since:.0f}s")
        problems = [p for p in map(_directory_problem, self.dirs) if p]
        if problems:
            return Check(False, "; ".join(problems))
        return Check(True, "ok")

    def readiness(self) -> Check:
        with self._lock:
            names = [n for group in self._required.values() for n in group]
            waiting = [
                f"{n} ({self._why[n]})" if self._why.get(n) else n for n in names if n not in self._satisfied
            ]
            required = len(names)
        if waiting:
            return Check(False, "waiting for: " + ", ".join(waiting))
        return Check(True, f"ok ({required} ready)" if required else "ok (nothing to serve)")
