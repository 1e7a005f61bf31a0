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

Once :attr:`SpecSource.watched` (an inotify watch calls :meth:`SpecSource.note` with every
entry that changed, and :meth:`SpecSource.note_all` when it cannot tell), a reading after the
first looks only at the files noted and at the records: the same before-and-after stamps, of
those files alone, so it costs with the change and not with the number of files. A writer in
this process hands over what it has just written (:meth:`SpecSource.give`): that file is taken
as the spec given, not read, parsed, validated or hashed again, and the watch's event for it then
finds its stamp unchanged.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cdi_plugin.cdi.model import Spec
from cdi_plugin.errors import SpecLoadError
from cdi_plugin.store.files import SPEC_SUFFIXES, open_spec_dir, read_spec_bytes
from cdi_plugin.store.ownership import RECORD_NAME, OwnedFile, digest, read_record
from cdi_plugin.store.registry import Snapshot, SpecRegistry, Stat, file_stat

FileStamp = tuple[str, Stat | None]  # name, (inode, size, mtime, ctime)
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
    """Every spec file and the record in ``directory`` (directories named like specs left out)."""
    out: list[FileStamp] = []
    try:
        fd = open_spec_dir(directory)  # a directory that is a symbolic link holds no specs
    except OSError:
        return ()
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                name = entry.name
                if not (name.endswith(_SUFFIXES) or name == RECORD_NAME):
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        continue
                    st = entry.stat()
                except OSError:
                    out.append((name, None))
                    continue
                out.append((name, (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)))
    except OSError:
        return ()
    finally:
        os.close(fd)
    out.sort()
    return tuple(out)


def _stamps(dirs: Sequence[Path]) -> tuple[Stamp, ...]:
    return tuple(_stamp(d) for d in dirs)


def _named_stamps(dirs: Sequence[Path], names: Sequence[Iterable[str]]) -> tuple[Stamp, ...]:
    """The stamps of the named entries only (None: gone)."""
    return tuple(
        tuple((name, file_stat(directory / name)) for name in sorted(batch))
        for directory, batch in zip(dirs, names, strict=True)
    )


def _record_stat(stamp: Stamp) -> Stat | None:
    return next((st for name, st in stamp if name == RECORD_NAME), None)


@dataclass(frozen=True, slots=True)
class Reading:
    """The spec directories at one moment, with what cdi-gen's records say of them."""

    snapshot: Snapshot
    #: Kinds whose file cdi-gen wrote and nobody changed since.
    owned: frozenset[str]
    #: Kinds any record names, whether or not the file still is what cdi-gen wrote.
    recorded: frozenset[str]


#: (directory index, file name) -> (the file's stat, its SHA-256; None: written by this process
#: and handed over with :meth:`SpecSource.give`, so its record owns it).
Digests = dict[tuple[int, str], tuple[Stat | None, str | None]]


class SpecSource:
    def __init__(self, dirs: Sequence[Path]) -> None:
        self.dirs = tuple(dirs)
        self._registry = SpecRegistry(self.dirs)
        self._index: dict[Path, list[int]] = {}
        for i, d in enumerate(self.dirs):
            self._index.setdefault(Path(os.path.abspath(d)), []).append(i)
        self._stamps: tuple[Stamp, ...] | None = None
        self._snapshot: Snapshot | None = None
        self._lock = threading.Lock()
        self._dir_stamps: tuple[DirStamp, ...] | None = None
        self._digests: Digests = {}
        self._records: dict[int, tuple[Stat | None, dict[str, OwnedFile]]] = {}
        # What changed since the reading under way began: set on the event loop, taken by a reading.
        self._marks = threading.Lock()
        self._dirty: list[set[str]] = [set() for _ in self.dirs]
        self._everything = True
        self._given: dict[tuple[int, str], Spec | None] = {}
        #: The links and files spec files that are symbolic links go through -> (directory index, link name).
        self._linked: dict[Path, list[tuple[int, str]]] = {}
        #: True once an inotify watch notes every change (:meth:`note`); readings look only at those.
        self.watched = False
        #: Changes noted so far (a watch event :meth:`note` did not explain calls for a full reading).
        self.noted = 0
        #: The latest consistent reading; None until one was taken.
        self.reading: Reading | None = None
        #: Incremented whenever a new consistent reading was taken because something changed.
        self.generation = 0
        #: Readings given up because the directories kept changing while they were taken.
        self.unsettled = 0

    # -- what changed -----------------------------------------------------------------------------

    def note(self, directory: Path, name: str) -> bool:
        """The entry ``name`` of ``directory`` changed (an inotify event); False when it is neither
        a spec file, a record nor a file a spec file links to, which readings ignore."""
        links = self._linked.get(directory / name, ())
        if not (links or name.endswith(_SUFFIXES) or name == RECORD_NAME):
            return False
        with self._marks:
            for i in self._index.get(directory, ()):
                self._dirty[i].add(name)
            for i, link in links:
                self._dirty[i].add(link)
        self.noted += 1
        return True

    def link_dirs(self) -> frozenset[Path]:
        """The directories holding the files that spec files which are symbolic links point to,
        and every link on the way: a runtime reads those files through those links, whose changes
        the spec directories' watch does not see."""
        return frozenset(target.parent for target in self._linked)

    def note_all(self) -> None:
        """Anything may have changed: the next reading lists every directory."""
        with self._marks:
            self._everything = True

    def give(self, written: Mapping[Path, Spec | None]) -> None:
        """Files this process has just written (atomically, recorded as cdi-gen's): path -> the
        spec written, None for a file removed. The next reading takes them as given."""
        with self._marks:
            for path, spec in written.items():
                for i in self._index.get(Path(os.path.abspath(path.parent)), ()):
                    self._dirty[i].add(path.name)
                    self._given[(i, path.name)] = spec

    def take(self, written: Mapping[Path, Spec | None], stats: Mapping[Path, Stat | None]) -> bool:
        """Apply files this process has just put in place now, on the calling thread (the event
        loop), as :meth:`give` would have the next reading do, but without stat'ing, reading,
        parsing or hashing anything: ``stats`` holds each file's stat just after its rename.

        Only a file of cdi-gen's read before, rewritten with the same kind, is taken so, while no
        reading is under way; otherwise nothing is done and False returned (then :meth:`give`).
        """
        reading = self.reading
        if reading is None or not self.watched or not self._lock.acquire(blocking=False):
            return False
        try:
            taken: dict[tuple[int, str], tuple[Spec, Stat]] = {}
            for path, spec in written.items():
                stat = stats.get(path)
                where = self._index.get(Path(os.path.abspath(path.parent)), ())
                if spec is None or stat is None or spec.kind not in reading.owned or not where:
                    return False
                for i in where:
                    if self._registry.kind_of(i, path.name) != spec.kind:
                        return False
                    taken[(i, path.name)] = (spec, stat)
            snapshot = self._registry.take(taken)
            with self._marks:
                for key in taken:
                    self._given.pop(key, None)  # handed over earlier: this one is newer
            for key, (_, stat) in taken.items():
                self._digests[key] = (stat, None)
            self._snapshot = snapshot
            self._stamps = None
            self.reading = Reading(snapshot, reading.owned, reading.recorded)
            self.generation += 1
            return True
        finally:
            self._lock.release()

    def moved(self) -> bool:
        """True when a directory's entries may have changed since the last reading began (O(1)).

        Directory times have a coarse (jiffy) granularity and a file rewritten in place leaves its
        directory alone, so False is not proof of no change: the inotify watch covers the rest.
        """
        return _dir_stamps(self.dirs) != self._dir_stamps

    # -- reading ----------------------------------------------------------------------------------

    def current(self) -> Snapshot:
        """The snapshot of the directories as they are now; cheap when nothing changed.

        Unwatched, the directories are listed rather than judged by their mtime, which file
        systems keep at a coarse (jiffy) granularity: two entries added within one tick would
        look alike.
        """
        with self._lock:
            with self._marks:
                everything = self._everything or not self.watched or self._snapshot is None
                names, given = self._dirty, self._given
                self._dirty, self._given, self._everything = [set() for _ in self.dirs], {}, False
            settled = False
            try:
                settled = self._read_all(given) if everything else self._read_named(names, given)
            finally:
                if not settled:  # look again next time
                    with self._marks:
                        self._everything = self._everything or everything
                        for batch, again in zip(self._dirty, names, strict=True):
                            batch.update(again)
                        self._given = {**given, **self._given}
            assert self._snapshot is not None
            return self._snapshot

    def _read_all(self, given: Mapping[tuple[int, str], Spec | None]) -> bool:
        dir_stamps = _dir_stamps(self.dirs)
        before = _stamps(self.dirs)
        if self._snapshot is not None and before == self._stamps and not given:
            self._dir_stamps = dir_stamps
            return True
        for _ in range(ATTEMPTS):
            listing = [{n: st for n, st in stamp if n != RECORD_NAME} for stamp in before]
            snapshot = self._registry.refresh(listing, given)
            after = self._commit(snapshot, given, before, lambda: _stamps(self.dirs))
            if after is None:
                self._stamps, self._dir_stamps = before, dir_stamps
                return True
            before = after
        self._stamps = None
        self.unsettled += 1
        return False

    def _read_named(self, names: list[set[str]], given: Mapping[tuple[int, str], Spec | None]) -> bool:
        if not any(names):
            return True
        looked = [batch | {RECORD_NAME} for batch in names]
        before = _named_stamps(self.dirs, looked)
        for _ in range(ATTEMPTS):
            snapshot = self._registry.update(names, given)
            after = self._commit(snapshot, given, before, lambda: _named_stamps(self.dirs, looked))
            if after is None:
                self._stamps = None  # the full listing taken last is stale now
                return True
            before = after
        self.unsettled += 1
        return False

    def _commit(
        self,
        snapshot: Snapshot,
        given: Mapping[tuple[int, str], Spec | None],
        before: tuple[Stamp, ...],
        stamps: Callable[[], tuple[Stamp, ...]],
    ) -> tuple[Stamp, ...] | None:
        """Take the reading if nothing moved while it was taken; else the stamps to start again from."""
        self._snapshot = snapshot
        for key in given:
            self._digests[key] = (self._registry.stat_of(*key), None)
        owned, recorded = self._ownership([_record_stat(s) for s in before])
        after = stamps()
        if after != before:
            return after
        self.reading = Reading(snapshot, owned, recorded)
        self.generation += 1
        linked: dict[Path, list[tuple[int, str]]] = {}
        for (i, link), chain in self._registry.links.items():
            for target in chain:
                linked.setdefault(target, []).append((i, link))
        self._linked = linked
        return None

    def _record(self, index: int, stat: Stat | None) -> dict[str, OwnedFile]:
        cached = self._records.get(index)
        if cached is not None and stat is not None and cached[0] == stat:
            return cached[1]
        record = read_record(self.dirs[index])
        self._records[index] = (stat, record)
        return record

    def _ownership(self, record_stats: Sequence[Stat | None]) -> tuple[frozenset[str], frozenset[str]]:
        """The kinds owned and recorded. A file is hashed only when its stamp is not the one its
        digest was taken at; a file this process wrote and handed over is not hashed at all."""
        owned: set[str] = set()
        recorded: set[str] = set()
        digests: Digests = {}
        for index, stat in enumerate(record_stats):
            for entry in self._record(index, stat).values():
                recorded.add(entry.kind)
                key, now = (index, entry.name), self._registry.stat_of(index, entry.name)
                cached = self._digests.get(key)
                if cached is not None and cached[0] == now and now is not None:
                    sha = cached[1]
                    if sha is None:
                        owned.add(entry.kind)
                        digests[key] = cached
                        continue
                else:
                    try:
                        sha = digest(read_spec_bytes(self.dirs[index] / entry.name))
                    except SpecLoadError:
                        continue
                if now is not None:
                    digests[key] = (now, sha)
                if entry.owns(sha):
                    owned.add(entry.kind)
        self._digests = digests
        return frozenset(owned), frozenset(recorded)
