"""Watching directories with inotify (asyncinotify), including ones that do not exist yet.

A :class:`DirWatch` follows the entries of a set of directories: files created, deleted, renamed
in or out, and (with ``events=FILES``) closed after writing. A directory that does not exist is
watched through its nearest existing ancestor, so its creation (even ``mkdir -p`` of several
levels) is noticed; one that is removed falls back to its ancestor the same way. A file system
mounted over a watched directory (or unmounted from it) sends that directory no event: the mount
table is followed too, and a directory that is another one now is watched again. Every relevant
event fires :attr:`DirWatch.pulse`; consumers re-read the state they care about (they never rely
on single events), and a queue overflow simply fires the pulse too. No polling.

Two watched paths on one directory (a symbolic link to it, a bind mount) share one inotify watch:
the kernel keeps one per inode and replaces its mask at each ``add_watch``. Each path's watch
asks for what every path on the inode needs, each event is told for every such path, and the
watch is removed only when the last of them goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import select
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

from asyncinotify import Event, Inotify, Mask, Watch

from cdi_plugin.aio.pulse import Pulse
from cdi_plugin.aio.run import cancel_and_wait

log = logging.getLogger(__name__)

#: Entries appearing and disappearing: enough for device nodes and sockets. (Never CLOSE_WRITE on
#: /dev: every write to /dev/null anywhere on the host would wake the watcher.)
ENTRIES = Mask.CREATE | Mask.DELETE | Mask.MOVED_FROM | Mask.MOVED_TO
#: Entries, plus files rewritten in place: for spec files.
FILES = ENTRIES | Mask.CLOSE_WRITE
_SELF_EVENTS = Mask.DELETE_SELF | Mask.MOVE_SELF
_ANCESTOR_MASK = Mask.CREATE | Mask.MOVED_TO | _SELF_EVENTS | Mask.ONLYDIR
#: How a path is resolved, not which events are asked for: kept per path when paths share a watch.
_FLAGS = Mask.ONLYDIR | Mask.DONT_FOLLOW

Relevant = Callable[[Path, str], bool]
#: Marked by the kernel (POLLPRI) whenever a file system is mounted or unmounted in this process's
#: mount namespace.
MOUNTINFO = "/proc/self/mountinfo"


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _is_dir(path: Path, follow: bool = True) -> bool:
    """Whether ``path`` is a directory this process can see: False too below a directory it may
    not search (``Path.is_dir`` raises PermissionError there); without ``follow``, False for a
    symbolic link to one."""
    try:
        return stat.S_ISDIR((os.stat if follow else os.lstat)(path).st_mode)
    except OSError:
        return False


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if _is_dir(candidate):
            return candidate
    return Path("/")


class DirWatch:
    """Use as ``async with DirWatch(dirs) as watch:``; wait with ``watch.pulse``."""

    def __init__(
        self,
        dirs: Iterable[Path],
        *,
        name: str,
        events: Mask = ENTRIES,
        relevant: Relevant | None = None,
        follow_links: bool = True,
    ) -> None:
        """Without ``follow_links``, a directory that is a symbolic link is not watched: its
        parent is, until a directory takes the link's place."""
        self.name = name
        self._follow = follow_links
        self._target_mask = (
            events | _SELF_EVENTS | Mask.ONLYDIR | (Mask.ZERO if follow_links else Mask.DONT_FOLLOW)
        )
        self.pulse = Pulse()
        self._relevant = relevant
        self._targets = {Path(os.path.abspath(d)) for d in dirs}
        self._inotify: Inotify | None = None
        self._watches: dict[Path, Watch] = {}
        self._masks: dict[Path, Mask] = {}
        self._ids: dict[Path, tuple[int, int] | None] = {}  # the directory each watch is on
        self._sharing: dict[int, set[Path]] = {}  # watch descriptor -> the paths watched by it
        #: Watches removed, until the kernel says so (IGNORED): their queued events still count. A
        #: queue overflow loses the IGNORED of a watch removed while the queue was full: forgotten then.
        self._dropped: dict[int, set[Path]] = {}
        self._mounts: tuple[int, select.epoll] | None = None
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> DirWatch:
        self._inotify = Inotify()
        try:
            self._plan()
            self._follow_mounts()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        self._reader = asyncio.create_task(self._read(), name=f"inotify:{self.name}")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._reader is not None:
                await cancel_and_wait(self._reader)
        finally:
            if self._mounts is not None:
                fd, poller = self._mounts
                asyncio.get_running_loop().remove_reader(poller.fileno())
                poller.close()
                os.close(fd)
                self._mounts = None
            if self._inotify is not None:
                self._inotify.close()
            self._watches.clear()
            self._masks.clear()
            self._ids.clear()
            self._sharing.clear()
            self._dropped.clear()

    @property
    def targets(self) -> frozenset[Path]:
        return frozenset(self._targets)

    def unread(self) -> bool:
        """True while the kernel holds events not read yet (a poll of the inotify descriptor)."""
        if self._inotify is None:
            return False
        return bool(select.select([self._inotify.fd], [], [], 0)[0])

    def set_dirs(self, dirs: Iterable[Path]) -> None:
        """Watch these directories from now on (cheap when unchanged)."""
        targets = {Path(os.path.abspath(d)) for d in dirs}
        if targets != self._targets:
            self._targets = targets
            self._plan()

    def _plan(self) -> None:
        """Put the watches where they must be now: on each existing target, else on its nearest
        existing ancestor; repeated while directories appear or vanish under it. A directory that
        exists but cannot be watched (permission denied) is reported once and left unwatched."""
        assert self._inotify is not None
        refused: set[Path] = set()
        for _ in range(32):
            wanted: dict[Path, Mask] = {}
            for target in self._targets:
                if _is_dir(target, self._follow):
                    wanted[target] = wanted.get(target, Mask.ZERO) | self._target_mask
                else:
                    anchor = _nearest_existing(target.parent)
                    wanted[anchor] = wanted.get(anchor, Mask.ZERO) | _ANCESTOR_MASK
            for path in set(self._watches) - set(wanted):
                self._drop(path)
            ids = {path: _identity(path) for path in wanted}
            events: dict[tuple[int, int], Mask] = {}  # what every path on one directory needs
            for path, mask in wanted.items():
                if (key := ids[path]) is not None:
                    events[key] = events.get(key, Mask.ZERO) | (mask & ~_FLAGS)
            for path, own in wanted.items():
                now = ids[path]
                mask = own if now is None else own | events[now]
                if path in refused or (self._masks.get(path) == mask and self._ids.get(path) == now):
                    continue
                if path in self._watches and self._ids.get(path) != now:  # another directory now (a mount)
                    self._drop(path)
                try:
                    watch = self._inotify.add_watch(path, mask)
                    if path in self._watches and self._watches[path] is not watch:
                        self._drop(path)
                    self._watches[path] = watch
                    self._masks[path] = mask
                    self._ids[path] = now
                    self._sharing.setdefault(watch.wd, set()).add(path)
                except OSError as exc:
                    vanished = exc.errno in (errno.ENOENT, errno.ENOTDIR)
                    if not vanished:
                        refused.add(path)
                    log.log(logging.DEBUG if vanished else logging.WARNING, "%s: cannot watch %s: %s",
                            self.name, path, exc.strerror or exc)  # fmt: skip
            if all(_is_dir(t, self._follow) == (t in self._watches) or t in refused for t in self._targets):
                return
        log.warning("%s: directories keep changing while being watched; watching what exists", self.name)

    def _drop(self, path: Path) -> None:
        """Stop watching ``path``; its inotify watch goes with the last path that shares it."""
        assert self._inotify is not None
        watch = self._watches.pop(path)
        self._masks.pop(path, None)
        self._ids.pop(path, None)
        sharing = self._sharing.get(watch.wd, set())
        sharing.discard(path)
        if not sharing:
            self._sharing.pop(watch.wd, None)
            with contextlib.suppress(OSError):
                self._inotify.rm_watch(watch)
                self._dropped.setdefault(watch.wd, set()).add(path)

    def _follow_mounts(self) -> None:
        try:
            fd = os.open(MOUNTINFO, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            log.debug("%s: cannot follow mounts: %s", self.name, exc.strerror or exc)
            return
        try:
            poller = select.epoll()
        except OSError as exc:  # out of descriptors: the directories are watched all the same
            os.close(fd)
            log.warning("%s: cannot follow mounts: %s", self.name, exc.strerror or exc)
            return
        poller.register(fd, select.EPOLLPRI | select.EPOLLERR)
        self._mounts = (fd, poller)
        asyncio.get_running_loop().add_reader(poller.fileno(), self._mounted)

    def _mounted(self) -> None:
        """The mount table changed: a watched directory that is another one now is watched again,
        and consumers look again."""
        assert self._mounts is not None
        self._mounts[1].poll(0)  # reported once per change
        if any(self._ids.get(path) != _identity(path) for path in self._watches):
            self._plan()
            self.pulse.fire()

    async def _read(self) -> None:
        assert self._inotify is not None
        async for event in self._inotify:
            try:
                if self._handle(event):
                    self.pulse.fire()
            except Exception:
                log.exception("%s: cannot handle %r; looking again", self.name, event)
                self.pulse.fire()

    def _handle(self, event: Event) -> bool:
        """Handle one event; True when consumers should look again."""
        mask = event.mask
        watch = event.watch
        paths: list[Path] = []
        if watch is not None:
            paths = sorted(self._sharing.get(watch.wd) or self._dropped.get(watch.wd) or ())
        if Mask.Q_OVERFLOW in mask:  # all is looked at again; a removed watch's IGNORED may be lost
            self._dropped.clear()
            self._replan()
            return True
        if Mask.IGNORED in mask:  # the kernel dropped the watch: every path on it lost it
            for path in paths:
                if self._watches.get(path) is watch:
                    self._watches.pop(path)
                    self._masks.pop(path, None)
                    self._ids.pop(path, None)
            if watch is not None:
                self._sharing.pop(watch.wd, None)
                self._dropped.pop(watch.wd, None)
            return self._replan() or any(path in self._targets for path in paths)
        if not paths:
            return False
        if mask & _SELF_EVENTS:
            self._replan()
            return True
        name = str(event.name) if event.name is not None else ""
        look = False
        for path in paths:
            if path not in self._targets or (Mask.ISDIR in mask and self._under_target(path / name)):
                look = self._replan() or look
            if path in self._targets and (self._relevant is None or self._relevant(path, name)):
                look = True
        return look

    def _replan(self) -> bool:
        """Re-plan the watches; True if a target directory is watched now that was not before."""
        before = {t for t in self._targets if t in self._watches}
        self._plan()
        return any(t in self._watches and t not in before for t in self._targets)

    def _under_target(self, path: Path) -> bool:
        return any(t == path or path in t.parents for t in self._targets)
