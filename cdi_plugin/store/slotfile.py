"""A file of two slots, each able to hold a whole record: a change overwrites the slot that does not
hold the newest record, in place, and is durable after one ``fdatasync``; a write cut short by a
crash or a power loss leaves the other slot, and so the record before it, as it was.

For state that must be durable before a change is answered, at a fraction of what an atomic
replacement costs (its rename, the directory's fsync and the journal commit they bring are paid
only when the file is created or grows). Layout: two slots of ``S`` bytes (a power of two, at
least :data:`MIN_SLOT`, so that the two never share a block or a page), each starting with a
32-byte header, little-endian::

    magic           8 bytes  "CDISLOTS"
    format version  u32      1
    slot size       u32      S
    sequence        u64      one more than the record written before it
    length          u32      of the record that follows the header
    checksum        u32      CRC-32 of the header's first 28 bytes, then of the record

A slot never written holds zeros. The newest record is the one of the highest sequence whose
checksum holds: a torn write fails its checksum, and the other slot's record is the newest. The
file's last 32 bytes (in slot 1, after any record: a reader of format 1 that knows no origin
passes over them) are its origin, written once when the file is written whole::

    magic           8 bytes  "CDIORIGN"
    created         u64      nanoseconds since the epoch, later than the origin of the file it
                             replaces (the one last read or written here)
    nonce           u64      random
    checksum        u32      CRC-32 of the 24 bytes before it; then 4 zero bytes

so that a file written anew since the one a process last read (another file) is told from a copy
of an earlier one put back; a file without a valid origin (written before origins, or a record
written in place over it) has none.

* :func:`write` puts the record in the slot that does not hold the newest one (``pwrite``, then
  ``fdatasync``: the file's size and blocks stay as they are, so no metadata has to be journaled).
  The file is created, and grown (the slot size doubled until the record fits), by writing it
  whole, zero-filled to its full size: a temporary file beside it (once those a killed writer
  left are removed), fsynced, then linked at the path where there is no file (``link`` fails if
  another process created one meanwhile: no window between a check and the creation), or renamed
  over the file last read or written here (grown, or a plain file replaced), then the directory
  fsynced. Another file than the one last read or written here (another process wrote it since)
  is never replaced; the file the rename unlinks is emptied (truncated), whatever other names it
  has, as :func:`retire` does (not one moved away meanwhile).
* :func:`read` reads the file with the bounded reader; a file without the magic is returned whole
  (a plain file, as the state was written before slots).
* :func:`read_open` reads a file already open, by its descriptor (a file removed since, which
  another process may have written since this one last read it).
* :func:`retire` empties a file replaced by a newer one once it is linked nowhere, for the
  processes that still hold it open (a plain file too: it is never written in place, so nothing
  else says it was replaced); the process that replaced it empties it at once.
* :func:`changed` tells whether the file is still as last read or written here: one ``lstat`` and,
  for a slot file, its two headers (an in-place write changes neither the inode nor the size, and
  timestamps are too coarse to show two writes in a row).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import struct
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

from cdi_plugin.errors import SpecLoadError, SpecWriteError
from cdi_plugin.store.atomic import StagedFile, fsync_dir, remove_stale
from cdi_plugin.store.files import open_regular, read_file_stat

MAGIC = b"CDISLOTS"
FORMAT_VERSION = 1
HEADER = struct.Struct("<8sIIQII")
_CHECKED = HEADER.size - 4  # the header's bytes the checksum covers
_ZEROS = bytes(HEADER.size)
FOOTER = struct.Struct("<8sQQI4x")
FOOTER_MAGIC = b"CDIORIGN"
#: The smallest slot: no two slots share a block or a page (64 KiB pages included).
MIN_SLOT = 64 * 1024

_Headers = tuple[bytes | None, bytes | None]


@dataclass(frozen=True, slots=True)
class Seen:
    """The file as this process last read or wrote it: enough to tell whether it changed since,
    and where the next record goes."""

    #: st_dev, st_ino, st_size.
    file: tuple[int, int, int]
    #: A plain file (replaced whole when written): its mtime and ctime.
    times: tuple[int, int] = (0, 0)
    #: A slot file: its slot size (0 for a plain file), both headers as read (None for a slot that
    #: is damaged: the file is read again until it is overwritten), the newest slot and its sequence.
    slot_size: int = 0
    headers: _Headers = (None, None)
    newest: int = 0
    sequence: int = 0
    #: A slot file's origin (created, nonce; see the module's docstring), or None.
    origin: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class Reading:
    """A file as :func:`read` found it."""

    #: The newest record of a slot file, or a plain file's contents.
    record: bytes
    seen: Seen
    #: A slot passed over as damaged (a write cut short), in a few words; None when there is none.
    damaged: str | None = None


def is_slot_file(data: bytes) -> bool:
    half = len(data) // 2
    return data[:8] == MAGIC or data[half : half + 8] == MAGIC


def record_slot(sequence: int, record: bytes, slot_size: int) -> bytes:
    """The bytes a slot starts with to hold ``record``: its header, then the record."""
    head = HEADER.pack(MAGIC, FORMAT_VERSION, slot_size, sequence, len(record), 0)[:_CHECKED]
    return head + struct.pack("<I", zlib.crc32(record, zlib.crc32(head))) + record


def origin_footer(origin: tuple[int, int]) -> bytes:
    """The file's last bytes, which say when it was written whole."""
    head = FOOTER.pack(FOOTER_MAGIC, *origin, 0)[: FOOTER.size - 8]
    return head + struct.pack("<I", zlib.crc32(head)) + bytes(4)


def _origin(data: bytes) -> tuple[int, int] | None:
    magic, created, nonce, checksum = FOOTER.unpack(data[-FOOTER.size :])
    if magic != FOOTER_MAGIC or checksum != zlib.crc32(data[-FOOTER.size : -8]):
        return None
    return created, nonce


def _slot(data: bytes, index: int, slot_size: int) -> tuple[int, bytes] | str:
    """The sequence and record a slot holds, or why it holds none."""
    start = index * slot_size
    header = data[start : start + HEADER.size]
    if header == _ZEROS:
        return "empty"
    magic, version, size, sequence, length, checksum = HEADER.unpack(header)
    if magic != MAGIC:
        return "no slot header"
    if length > slot_size - HEADER.size:
        return f"a record of {length} bytes, longer than the slot"
    record = data[start + HEADER.size : start + HEADER.size + length]
    if zlib.crc32(record, zlib.crc32(header[:_CHECKED])) != checksum:
        return "checksum mismatch"
    if version != FORMAT_VERSION:
        return f"format version {version}, not {FORMAT_VERSION}"
    if size != slot_size:
        return f"written for slots of {size} bytes, in slots of {slot_size}"
    return sequence, record


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def parse(data: bytes, source: str, max_bytes: int) -> Reading:
    """The newest record of a slot file's contents (``seen`` without the file's identity);
    SpecLoadError, one line, when no slot holds a whole record or the layout is wrong."""
    slot_size = len(data) // 2
    largest = max_bytes // 2
    if len(data) % 2 or slot_size & (slot_size - 1) or not MIN_SLOT <= slot_size <= largest:
        raise SpecLoadError(
            source,
            "",
            "slot-file",
            f"{len(data)} bytes, not two slots of {_size(MIN_SLOT)} to {_size(largest)} (a power of two)",
        )
    slots = [_slot(data, i, slot_size) for i in (0, 1)]
    whole = {i: s for i, s in enumerate(slots) if not isinstance(s, str)}
    if not whole:
        raise SpecLoadError(
            source, "", "slot-file", f"no slot holds a whole record (slot 0: {slots[0]}; slot 1: {slots[1]})"
        )
    if len(whole) == 2 and whole[0][0] == whole[1][0]:
        raise SpecLoadError(source, "", "slot-file", f"both slots hold record {whole[0][0]}")
    newest = max(whole, key=lambda i: whole[i][0])
    sequence, record = whole[newest]
    other = slots[1 - newest]
    damaged = None
    if isinstance(other, str) and other != "empty":
        damaged = f"slot {1 - newest} ({other}) passed over: record {sequence} of slot {newest} is used"
    kept = [
        None if isinstance(s, str) and s != "empty" else data[i * slot_size : i * slot_size + HEADER.size]
        for i, s in enumerate(slots)
    ]
    seen = Seen(
        (0, 0, len(data)),
        slot_size=slot_size,
        headers=(kept[0], kept[1]),
        newest=newest,
        sequence=sequence,
        origin=_origin(data),
    )
    return Reading(record, seen, damaged)


def read(path: Path, max_bytes: int, what: str) -> Reading:
    """The file's newest record (a plain file: all of it), read with the bounded reader (no
    symbolic link, nothing but a regular file of at most ``max_bytes``); SpecLoadError else."""
    data, info = read_file_stat(path, max_bytes, what, follow_links=False)
    file = (info.st_dev, info.st_ino, info.st_size)
    if not is_slot_file(data):
        return Reading(data, Seen(file, times=(info.st_mtime_ns, info.st_ctime_ns)))
    reading = parse(data, str(path), max_bytes)
    return replace(reading, seen=replace(reading.seen, file=file))


def read_open(fd: int, max_bytes: int, source: str) -> Reading:
    """:func:`read` of the file open as ``fd`` (named ``source`` in messages), wherever it is
    linked now, if anywhere: OSError, or SpecLoadError when it is no regular file of at most
    ``max_bytes``, is empty (:func:`retire`) or, a slot file, holds no whole record."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or not 0 < info.st_size <= max_bytes:
        raise SpecLoadError(source, "", "slot-file", f"not a regular file of 1 byte to {_size(max_bytes)}")
    data = os.pread(fd, info.st_size, 0)
    file = (info.st_dev, info.st_ino, info.st_size)
    if not is_slot_file(data):
        return Reading(data, Seen(file, times=(info.st_mtime_ns, info.st_ctime_ns)))
    reading = parse(data, source, max_bytes)
    return replace(reading, seen=replace(reading.seen, file=file))


def retire(fd: int) -> None:
    """Empty the file open as ``fd`` (truncated), if it is linked nowhere any more (replaced by a
    newer file): a process that still holds it open never takes what it held for the newest
    (:func:`read_open` refuses it). Written through ``/proc/self/fd``, so that ``fd`` may be open
    for reading only."""
    with contextlib.suppress(OSError):
        info = os.fstat(fd)
        if info.st_nlink == 0 and stat.S_ISREG(info.st_mode):
            _empty(fd)


def _empty(fd: int) -> None:
    with contextlib.suppress(OSError):
        writable = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            os.ftruncate(writable, 0)
        finally:
            os.close(writable)


def changed(path: Path, seen: Seen | None) -> bool:
    """Whether the file may differ from what :func:`read` or :func:`write` saw (``seen``).
    OSError (FileNotFoundError when it is gone) when it cannot be looked at."""
    st = os.lstat(path)
    if seen is None or not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino, st.st_size) != seen.file:
        return True
    if not seen.slot_size:
        return (st.st_mtime_ns, st.st_ctime_ns) != seen.times
    if None in seen.headers:
        return True
    try:
        fd, info = open_regular(path, "slot file", follow_links=False)
    except SpecLoadError:
        return True
    try:
        if (info.st_dev, info.st_ino) != seen.file[:2]:
            return True
        return (os.pread(fd, HEADER.size, 0), os.pread(fd, HEADER.size, seen.slot_size)) != seen.headers
    except OSError:
        return True
    finally:
        os.close(fd)


def write(path: Path, record: bytes, seen: Seen | None, max_bytes: int, mode: int = 0o600) -> Seen:
    """Make ``record`` the file's newest, durably, and return what to pass as ``seen`` next time.

    In place when the file is the slot file ``seen`` describes and the record fits in a slot;
    else the whole file is written anew (created where there is none, or grown, or replacing the
    file ``seen`` describes; never another one, which another process wrote since). Raises
    SpecWriteError when it cannot be written: the newest record is then still the one before, and
    the slot written in place is marked empty (its header zeroed), so that a record whose
    ``fdatasync`` failed is not read back from the page cache. Only when a file written whole is in
    place and its directory cannot be synced does it hold the new record (which a power loss may
    take back): it is then another file than ``seen`` describes, to be read before it is written.

    Writers of one file take turns (a lock): a temporary file beside it is taken for one a killed
    writer left, and removed (a write staging it meanwhile fails).
    """
    if seen is not None and seen.slot_size and _fits(record, seen.slot_size):
        done = _in_place(path, record, seen)
        if done is not None:
            return done
    return _whole(path, record, seen, max_bytes, mode)


def _in_place(path: Path, record: bytes, seen: Seen) -> Seen | None:
    """None when the file is not the one ``seen`` describes (gone, or replaced)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino, st.st_size) != seen.file:
        return None
    target = 1 - seen.newest
    offset = target * seen.slot_size
    data = record_slot(seen.sequence + 1, record, seen.slot_size)
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SpecWriteError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        if not _is_seen(fd, seen):
            return None
        view = memoryview(data)
        while view:
            view = view[os.pwrite(fd, view, offset + len(data) - len(view)) :]
        os.fdatasync(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):  # no half record left behind to read
            os.pwrite(fd, _ZEROS, offset)
        raise SpecWriteError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    headers = (
        (data[: HEADER.size], seen.headers[1]) if target == 0 else (seen.headers[0], data[: HEADER.size])
    )
    return replace(seen, headers=headers, newest=target, sequence=seen.sequence + 1)


def _is_seen(fd: int, seen: Seen) -> bool:
    """Whether the file open as ``fd`` is the one ``seen`` describes: its device, inode and size,
    and its origin (an inode number is reused once a file is removed: another process's file may
    have it)."""
    info = os.fstat(fd)
    if (info.st_dev, info.st_ino, info.st_size) != seen.file:
        return False
    found = (
        _origin(os.pread(fd, FOOTER.size, info.st_size - FOOTER.size))
        if info.st_size >= FOOTER.size
        else None
    )
    return found == seen.origin


def _fits(record: bytes, slot_size: int) -> bool:
    return HEADER.size + len(record) + FOOTER.size <= slot_size


_ANOTHER = (
    "another file is in its place than the one last read here (written meanwhile by another "
    "process?); it is not replaced"
)


def _whole(path: Path, record: bytes, seen: Seen | None, max_bytes: int, mode: int) -> Seen:
    slot_size = max(MIN_SLOT, seen.slot_size if seen is not None else 0)
    while not _fits(record, slot_size):
        slot_size *= 2
    if 2 * slot_size > max_bytes:
        raise SpecWriteError(
            f"{path}: cannot write: {len(record)} bytes, more than a slot of the file holds "
            f"({max_bytes // 2 - HEADER.size - FOOTER.size})"
        )
    sequence = (seen.sequence if seen is not None else 0) + 1
    created = time.time_ns()
    if seen is not None and seen.origin is not None:
        created = max(created, seen.origin[0] + 1)
    origin = (created, secrets.randbits(64))
    data = record_slot(sequence, record, slot_size)
    remove_stale(path.parent, [path.name])  # a killed writer's, maybe a second name of the file
    staged = StagedFile(
        path, data + bytes(2 * slot_size - len(data) - FOOTER.size) + origin_footer(origin), mode
    )
    replaced, links = None, 0
    try:
        try:
            st: os.stat_result | None = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is None:
            if not staged.create():
                raise SpecWriteError(f"{path}: cannot write: {_ANOTHER}")
        elif not stat.S_ISREG(st.st_mode):
            staged.commit()  # fails over a directory
        else:
            replaced = _opened_if_seen(path, seen)
            links = os.fstat(replaced).st_nlink
            staged.commit()
    except BaseException:
        if replaced is not None:
            os.close(replaced)
        raise
    finally:
        staged.discard()
    try:
        fsync_dir(path.parent)
    finally:
        if replaced is not None:
            with contextlib.suppress(OSError):
                if os.fstat(replaced).st_nlink < links:  # the rename unlinked it (not moved away)
                    _empty(replaced)
            os.close(replaced)
    info = staged.info
    return Seen(
        (info.st_dev, info.st_ino, info.st_size),
        slot_size=slot_size,
        headers=(data[: HEADER.size], _ZEROS),
        sequence=sequence,
        origin=origin,
    )


def _opened_if_seen(path: Path, seen: Seen | None) -> int:
    """The file at ``path`` open for reading, if it is the one ``seen`` describes (the one about
    to be replaced, emptied once it is); SpecWriteError else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SpecWriteError(f"{path}: cannot write: {exc.strerror or exc}") from None
    if seen is None or not _is_seen(fd, seen):
        os.close(fd)
        raise SpecWriteError(f"{path}: cannot write: {_ANOTHER}")
    return fd
