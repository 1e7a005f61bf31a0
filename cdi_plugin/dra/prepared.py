"""The prepared claims on disk, ``<plugins>/<driver>/prepared.json``, so that a restart of the
driver or of the kubelet loses none (the document: :mod:`cdi_plugin.dra.preparedstate`).

* A change is durable before it is answered, once per call whatever the number of claims it
  changes: the new document goes into the file's older slot in place and is fdatasynced
  (:mod:`cdi_plugin.store.slotfile`; a write cut short leaves the record before it); only then
  does memory change. A write that fails leaves both as they were (:class:`StateWriteError`),
  but for a file written whole whose directory cannot be synced: the file then holds the new
  record, which the next call reads (:meth:`PreparedClaims.reload`) before changing anything. A
  caller cancelled meanwhile does not stop the write half-way, and returns only once it has ended
  (memory following the file): a caller holding the node's lock keeps it until no write of its
  own is left for another instance to run into.
* The file is read with the project's bounded reader: a regular file (no symbolic link, FIFO or
  device) of at most :data:`MAX_STATE_BYTES`, never blocking, then checked field by field. A file
  that cannot be used is never overwritten: :attr:`PreparedClaims.problem` says why, and nothing
  is prepared or released until it is repaired or moved away (it is read again at each call); so
  is a record older than the one this process last read or wrote (a copy put back: :func:`_older`).
  A plain JSON file (as written before slots) is read, and replaced by a slot file at the first
  change.
* :meth:`PreparedClaims.restore` writes the claims again when the file is gone (the kubelet wiped
  its directory, or a file refused was moved away).
* The file last read or written is kept open. Removed with its directory, it still holds the last
  record any instance wrote in place, which may be newer than the one this process read (two
  instances during an update): the claims are taken from it before anything is prepared, released
  or written again. A file replaced by a newer one (written whole) is emptied by the instance
  that replaced it, and by any that sees it replaced once it is linked nowhere
  (:func:`~cdi_plugin.store.slotfile.retire`), so that an instance still holding it waits for the
  file to be written again instead of writing its older claims back: by whoever has the newer
  record, or by an instance restarted since (a file written after the one it held is then taken
  whatever its record number, as a restart would take it).
* :meth:`PreparedClaims.reload` reads the file again only when it changed since this process last
  read or wrote it (else an ``lstat`` and the two slot headers): a process sharing the file reloads
  before each change.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from cdi_plugin.dra.preparedstate import Devices, PreparedState, PreparedStateError, decode, encode
from cdi_plugin.errors import CdiPluginError, SpecLoadError, SpecWriteError
from cdi_plugin.store import slotfile
from cdi_plugin.store.atomic import fsync_dir
from cdi_plugin.wording import plural

log = logging.getLogger(__name__)

#: Two slots of at most 2 MiB: about 11,000 prepared claims; a node prepares a few per pod.
MAX_STATE_BYTES = 4 * 1024 * 1024
UNTIL_REPAIRED = "nothing is prepared or released until it is repaired or moved away"
WHAT = "a prepared-claims file"


class StateWriteError(CdiPluginError):
    """The prepared claims could not be written; the file and memory are as they were."""


def read_prepared(path: Path) -> PreparedState:
    """The prepared claims the file holds (its newest whole record); SpecLoadError or
    PreparedStateError, one line, when it cannot be used."""
    return decode(slotfile.read(path, MAX_STATE_BYTES, WHAT).record, str(path))


class PreparedClaims:
    """The prepared claims by UID (:attr:`state`), read at start and written before each answer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.state = PreparedState()
        #: Why the file cannot be used (one line naming it), or None.
        self.problem: str | None = None
        self._seen: slotfile.Seen | None = None
        self._held: _Held | None = None
        #: The record last read or written here is known not to be the newest (the file held was
        #: replaced before it went, or overwritten with another record of that number): a file
        #: written anew since is taken, whatever its record number.
        self._superseded = False
        self._damaged: str | None = None
        self._lock = asyncio.Lock()
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="prepared-claims")
        if not self.reload():
            log.error("%s; %s", self.problem, UNTIL_REPAIRED)

    def reload(self) -> bool:
        """Read the file if it changed since it was last read or written here; False (and
        :attr:`problem` set) when it cannot be used. A missing file changes nothing: it is empty at
        start, and wiped with its directory later (:meth:`restore` writes it again)."""
        try:
            changed = slotfile.changed(self.path, self._seen)
        except FileNotFoundError:
            return self._caught_up()
        except OSError as exc:
            self.problem = f"{self.path}: {exc.strerror or exc}"
            return False
        if self.problem is None and not changed:
            return True
        try:
            reading = slotfile.read(self.path, MAX_STATE_BYTES, WHAT)
            state = decode(reading.record, str(self.path))
        except (SpecLoadError, PreparedStateError) as exc:
            self.problem = str(exc)
            return False
        older = _older(reading.seen, self._seen, self._superseded)
        if older is not None:
            self.problem = f"{self.path}: {older}"
            return False
        self.state = state
        if reading.damaged is not None and reading.damaged != self._damaged:
            log.warning("%s: %s", self.path, reading.damaged)
        self.problem, self._seen, self._damaged = None, reading.seen, reading.damaged
        self._superseded = False
        self._hold()
        return True

    def _caught_up(self) -> bool:
        """The file is gone: the claims of the record last written in the file this process holds
        open, if newer than the one it read (another instance's); False, and :attr:`problem` set,
        when that file was replaced by a newer one before it went, cannot be read, or holds
        another record of the number last read or written here (two writers without the lock)."""
        if self._held is None:
            self.problem = None
            return True
        try:
            reading = slotfile.read_open(self._held.fd, MAX_STATE_BYTES, f"{self.path} (removed)")
            state = decode(reading.record, str(self.path)) if reading.seen.slot_size else None
        except (OSError, SpecLoadError, PreparedStateError):
            self._superseded = True
            self.problem = (
                f"{self.path}: removed, and the file this driver read last was replaced before by "
                "another instance, which holds the claims written last; waiting for the file to be "
                "written again"
            )
            return False
        found, last = reading.seen, self._seen.sequence if self._seen is not None else 0
        other = _other_record(found, self._seen) if state is not None and self._seen is not None else None
        if other is not None:
            self._superseded = True
            self.problem = f"{self.path}: removed, holding {other}"
            return False
        if state is not None and found.sequence > last:
            log.warning(
                "%s was removed: %s from record %d, written since this driver read it",
                self.path,
                plural(len(state.claims), "prepared claim"),
                reading.seen.sequence,
            )
            self.state, self._seen = state, reading.seen
        self.problem = None
        return True

    def _hold(self) -> None:
        """Keep the file just read or written open (module docstring), for reading only (a file
        that cannot be opened for writing is held too); the one held before, if now linked nowhere,
        is retired. When the file is gone already, or replaced, none is: the memory is as new."""
        seen, held = self._seen, self._held
        if seen is None or (held is not None and held.identity == seen.file[:2]):
            return
        try:
            new: _Held | None = _Held(
                os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            )
        except OSError:
            new = None
        if new is not None and new.identity != seen.file[:2]:
            new.close()
            new = None
        self._held = new
        if held is not None:
            slotfile.retire(held.fd)
            held.close()

    def get(self, uid: str) -> Devices | None:
        return self.state.claims.get(uid)

    def unusable(self) -> str | None:
        """Why no claim can be prepared or released now (one line), or None; while there is a
        reason, the file is read again first."""
        if self.problem is not None:
            before = self.problem
            if self.reload():
                log.warning(
                    "%s: usable again, %s", self.path, plural(len(self.state.claims), "prepared claim")
                )
            elif self.problem != before:
                log.error("%s; %s", self.problem, UNTIL_REPAIRED)
        return None if self.problem is None else f"{self.problem}; {UNTIL_REPAIRED}"

    async def put(self, claims: Mapping[str, Devices]) -> None:
        """Keep newly prepared claims: returns once the file holds them; StateWriteError else."""
        await self._change(lambda state: state.with_claims(claims))

    async def drop(self, uids: Iterable[str]) -> None:
        """Forget released claims: returns once the file no longer holds them; StateWriteError else."""
        gone = list(uids)
        await self._change(lambda state: state.without(gone))

    def gone(self) -> bool:
        """Whether the file is gone while there may be claims to write again: this process's, or
        those another instance wrote into the file removed, which this one holds open."""
        return not os.path.lexists(self.path) and (bool(self.state.claims) or self._held is not None)

    async def restore(self) -> bool:
        """Write the claims again if their file is gone; True when it was written. A file refused
        (an older record) and moved away is written again too, not left until the next change."""
        async with self._lock:
            if os.path.lexists(self.path):
                return False
            if self.problem is None:
                self.reload()  # the claims another instance wrote last, into the file removed
            if self.unusable() is not None or not self.state.claims:
                return False
            await self._written(self.state)
        log.warning(
            "%s was gone: written again, %s", self.path, plural(len(self.state.claims), "prepared claim")
        )
        return True

    async def _change(self, change: Callable[[PreparedState], PreparedState]) -> None:
        if self.problem is not None:  # never overwritten
            raise StateWriteError(f"{self.problem}; {UNTIL_REPAIRED}")

        async def write_then_keep() -> None:
            async with self._lock:
                state = change(self.state)
                if state is not self.state:
                    await self._written(state)

        task = asyncio.ensure_future(write_then_keep())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # raised below, or nobody waits
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            while not task.done():  # the event loop's end cancels every task, this one's too
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait([task])
            raise

    async def _written(self, state: PreparedState) -> None:
        """Write ``state`` in this file's thread, then keep it. Cancelled meanwhile, still returns
        only once the write has ended (blocking for the rest of it), memory following the file."""
        write = self._writer.submit(self._write, state)
        try:
            await asyncio.wrap_future(write)
        except asyncio.CancelledError:
            concurrent.futures.wait([write])
            if not write.cancelled() and write.exception() is None:
                self.state = state
                self._superseded = False
                self._hold()
            raise
        self.state = state
        self._superseded = False
        self._hold()

    def _write(self, state: PreparedState) -> None:
        try:
            _make_dirs(self.path.parent)
            self._seen = slotfile.write(self.path, encode(state), self._seen, MAX_STATE_BYTES)
        except SpecWriteError as exc:
            raise StateWriteError(str(exc)) from None
        except OSError as exc:
            raise StateWriteError(f"{exc.filename or self.path}: {exc.strerror or exc}") from None


def _make_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents (the kubelet wiped them), each durably: its
    parent fsynced once it holds it."""
    missing: list[Path] = []
    for level in (directory, *directory.parents):
        if os.path.lexists(level):
            break
        missing.append(level)
    if missing:
        directory.mkdir(parents=True, exist_ok=True)
    for made in missing:
        fsync_dir(made.parent)


class _Held:
    """A file kept open (its identity: device and inode), closed when replaced or collected."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.close = weakref.finalize(self, os.close, fd)
        info = os.fstat(fd)
        self.identity = (info.st_dev, info.st_ino)


_WHY_OLDER = "a copy put back, or another instance's older state?"
_WHY_OTHER = "two instances wrote it without excluding each other, or a copy was put back?"


def _older(found: slotfile.Seen, last: slotfile.Seen | None, superseded: bool) -> str | None:
    """Why the record found is not as new as the one this process last read or wrote, or None: a
    copy put back, or the file written again by another instance that missed changes since (the
    directory wiped during an update); believed, it forgets the claims prepared since and keeps
    those released since. Each write, by any instance, numbers its record one more than the
    newest it knows; a file written whole has an origin later than the one it replaces. So a file
    of another origin is newer when its origin is later and its record number higher, or, when
    the record last read or written here is ``superseded`` already, whatever its number (written
    anew by an instance restarted since: as a restart of this one would, it is taken; so is, then,
    any file with an origin when the one last read here, of a release before origins, has none)."""
    if last is None or not last.sequence or (superseded and last.origin is None and found.origin is not None):
        return None
    if found.origin is not None and last.origin is not None and found.origin != last.origin:
        if found.origin < last.origin:
            return (
                f"record {found.sequence} of a file written before the one this driver last read or "
                f"wrote ({_WHY_OLDER})"
            )
        if found.sequence > last.sequence or superseded:
            return None
        return (
            f"record {found.sequence} of a file written anew by an instance that did not know record "
            f"{last.sequence} this driver last read or wrote (restarted after the directory was wiped?)"
        )
    if found.sequence > last.sequence:
        return None
    if found.sequence < last.sequence:
        what = f"record {found.sequence}" if found.slot_size else "a file without record numbers"
        return f"{what}, older than record {last.sequence} this driver last read or wrote ({_WHY_OLDER})"
    return _other_record(found, last)


def _other_record(found: slotfile.Seen, last: slotfile.Seen) -> str | None:
    """Whether the record found has the number of the one last read or written here, not its
    contents: under the lock, no two writes give a file the same number; so neither is known to
    be the newest, and the file is refused."""
    if found.sequence != last.sequence or found.headers[found.newest] == last.headers[last.newest]:
        return None
    return f"another record {found.sequence} than the one this driver last read or wrote ({_WHY_OTHER})"
