"""The spec directories as the inventory reads them: one consistent reading of the spec files and
of cdi-gen's ownership records, and cheap checks for changes.

:meth:`SpecSource.current` lists the directories and stats the spec files and the records (no
reads); only when one of them changed does it read again: the registry re-reads only the changed
files, then the records, and the files they name that changed are hashed to learn which kinds
are cdi-gen's.

A reading is taken as one moment: the directories are stamped (names, inodes, sizes, times)
before and after it, and it counts only if nothing changed in between, else it is taken again
(at most :data:`ATTEMPTS` times; after that the last consistent reading stays and the next call
tries again). cdi-gen commits its record before it renames a spec file into place, and that record
owns both the old and the new contents (:mod:`cdi_plugin.store.writer`): at every moment the
record on disk owns every file of cdi-gen's as it is on disk. A reading of one moment therefore
never sees a file of cdi-gen's disagree with its record, so the inventory needs no settle timer.

A reading lists the directories and may parse, validate and hash files: callers on an event loop
run :meth:`SpecSource.current` in a worker thread (one at a time: it holds a lock).
:meth:`SpecSource.moved` is the O(1) check between readings: one ``stat`` of each directory,
whose times and inode change when an entry is added, removed or renamed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cdi_plugin.errors import SpecLoadError
from cdi_plugin.store.files import SPEC_SUFFIXES, read_spec_bytes
from cdi_plugin.store.ownership import RECORD_NAME, digest, read_record
from cdi_plugin.store.registry import Snapshot, SpecRegistry

FileStamp = tuple[str, int, int, int, int]  # name, inode, size, mtime, ctime
Stamp = tuple[FileStamp, ...]
DirStamp = tuple[int, int, int] | None
ATTEMPTS = 3
_SUFFIXES = tuple(SPEC_SUFFIXES)


def _dir_stamps(dirs: Sequence[Path]) -> tuple[DirStamp, ...]:
    out: list[DirStamp] = []
    for directory in dirs:
        try:
            st = os.stat(directory)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


def _stamp(directory: Path) -> Stamp:
    out = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                name = entry.name
                if not (name.endswith(_SUFFIXES) or name == RECORD_NAME):
                    continue
                try:
                    st = entry.stat()
                except OSError:
                    continue
                out.append((name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    except OSError:
        return ()
    out.sort()
    return tuple(out)


def _stamps(dirs: Sequence[Path]) -> tuple[Stamp, ...]:
    return tuple(_stamp(d) for d in dirs)


@dataclass(frozen=True, slots=True)
class Reading:
    """The spec directories at one moment, with what cdi-gen's records say of them."""

    snapshot: Snapshot
    #: Kinds whose file cdi-gen wrote and nobody changed since.
    owned: frozenset[str]
    #: Kinds any record names, whether or not the file still is what cdi-gen wrote.
    recorded: frozenset[str]


Digests = dict[tuple[Path, str], tuple[FileStamp, str]]


def _ownership(
    dirs: Sequence[Path], stamps: tuple[Stamp, ...], known: Digests
) -> tuple[frozenset[str], frozenset[str], Digests]:
    """The kinds owned and recorded, and the digests taken; a file whose stamp is the one a
    digest was taken at (in a consistent reading) is not read and hashed again."""
    owned: set[str] = set()
    recorded: set[str] = set()
    digests: Digests = {}
    for directory, stamp in zip(dirs, stamps, strict=True):
        by_name = {entry[0]: entry for entry in stamp}
        for entry in read_record(directory).values():
            recorded.add(entry.kind)
            key, now = (directory, entry.name), by_name.get(entry.name)
            cached = known.get(key)
            try:
                sha = cached[1] if cached is not None and cached[0] == now else None
                if sha is None:
                    sha = digest(read_spec_bytes(directory / entry.name))
            except SpecLoadError:
                continue
            if now is not None:
                digests[key] = (now, sha)
            if entry.owns(sha):
                owned.add(entry.kind)
    return frozenset(owned), frozenset(recorded), digests


class SpecSource:
    def __init__(self, dirs: Sequence[Path]) -> None:
        self.dirs = tuple(dirs)
        self._registry = SpecRegistry(self.dirs)
        self._stamps: tuple[Stamp, ...] | None = None
        self._snapshot: Snapshot | None = None
        self._lock = threading.Lock()
        self._dir_stamps: tuple[DirStamp, ...] | None = None
        self._digests: Digests = {}
        #: The latest consistent reading; None until one was taken.
        self.reading: Reading | None = None
        #: Incremented whenever a new consistent reading was taken because something changed.
        self.generation = 0
        #: Readings given up because the directories kept changing while they were taken.
        self.unsettled = 0

    def moved(self) -> bool:
        """True when a directory's entries may have changed since the last reading began (O(1)).

        Directory times have a coarse (jiffy) granularity and a file rewritten in place leaves its
        directory alone, so False is not proof of no change: the inotify watch covers the rest.
        """
        return _dir_stamps(self.dirs) != self._dir_stamps

    def current(self) -> Snapshot:
        """The snapshot of the directories as they are now; cheap when nothing changed.

        The directories are listed rather than judged by their mtime, which file systems keep
        at a coarse (jiffy) granularity: two entries added within one tick would look alike.
        """
        with self._lock:
            return self._current()

    def _current(self) -> Snapshot:
        dir_stamps = _dir_stamps(self.dirs)
        before = _stamps(self.dirs)
        if self._snapshot is not None and before == self._stamps:
            self._dir_stamps = dir_stamps
            return self._snapshot
        for _ in range(ATTEMPTS):
            snapshot = self._registry.refresh()
            owned, recorded, digests = _ownership(self.dirs, before, self._digests)
            after = _stamps(self.dirs)
            self._snapshot = snapshot
            if after == before:
                self._stamps, self._dir_stamps, self._digests = before, dir_stamps, digests
                self.reading = Reading(snapshot, owned, recorded)
                self.generation += 1
                return snapshot
            before = after
        self._stamps = None  # read again on the next call
        self.unsettled += 1
        assert self._snapshot is not None
        return self._snapshot
