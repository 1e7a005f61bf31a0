"""A file of two slots: a change overwrites the older slot in place, a torn write leaves the record
before it, growth and anything unexpected replace the file whole, and a file that holds no whole
record is refused in one line."""

from __future__ import annotations

import multiprocessing
import os
import resource
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from cdi_plugin.errors import SpecLoadError, SpecWriteError
from cdi_plugin.store import slotfile
from cdi_plugin.store.atomic import write_atomic
from cdi_plugin.store.slotfile import (
    FOOTER,
    HEADER,
    MIN_SLOT,
    changed,
    origin_footer,
    read,
    record_slot,
    write,
)

MAX = 4 * 1024 * 1024


def slot(path: Path, index: int, size: int = MIN_SLOT) -> bytes:
    return path.read_bytes()[index * size : (index + 1) * size]


def written(path: Path, *records: bytes) -> slotfile.Seen:
    seen = None
    for record in records:
        seen = write(path, record, seen, MAX)
    assert seen is not None
    return seen


def test_created_zero_filled_then_each_change_overwrites_the_older_slot_in_place(tmp_path: Path) -> None:
    path = tmp_path / "state"
    seen = write(path, b"one", None, MAX)
    created = path.stat()
    assert created.st_size == 2 * MIN_SLOT
    assert created.st_mode & 0o777 == 0o600
    assert slot(path, 0)[: HEADER.size + 3] == record_slot(1, b"one", MIN_SLOT)
    assert slot(path, 1)[: -FOOTER.size] == bytes(MIN_SLOT - FOOTER.size)  # zero-filled: no new block
    assert seen.origin is not None
    assert slot(path, 1)[-FOOTER.size :] == origin_footer(seen.origin)
    assert read(path, MAX, "state").record == b"one"

    for sequence, record in enumerate([b"two", b"three", b"four"], start=2):
        newest = slot(path, seen.newest)
        seen = write(path, record, seen, MAX)
        assert slot(path, 1 - seen.newest) == newest  # the record before it is untouched
        reading = read(path, MAX, "state")
        assert (reading.record, reading.seen.sequence, reading.damaged) == (record, sequence, None)
        assert reading.seen == seen
        after = path.stat()
        assert (after.st_ino, after.st_size) == (created.st_ino, created.st_size)
    assert (seen.newest, seen.sequence) == (1, 4)  # 1, 3 in slot 0; 2, 4 in slot 1
    assert os.listdir(tmp_path) == ["state"]  # no temporary file


@pytest.mark.parametrize("cut", [17, 20, HEADER.size, HEADER.size + 10, -1])
def test_a_torn_write_leaves_the_record_before_it(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "state"
    written(path, b'{"a": 1}', b'{"a": 2}')  # record 2 in slot 1
    torn = record_slot(3, b'{"a": 3, "more": "than before"}', MIN_SLOT)[:cut]
    with path.open("r+b") as fh:  # a crash in the middle of writing record 3 into slot 0
        fh.write(torn)
    reading = read(path, MAX, "state")
    assert reading.record == b'{"a": 2}'
    assert reading.seen.sequence == 2
    assert reading.damaged == "slot 0 (checksum mismatch) passed over: record 2 of slot 1 is used"

    seen = write(path, b'{"a": 4}', reading.seen, MAX)  # into the torn slot, not over record 2
    assert read(path, MAX, "state").record == b'{"a": 4}'
    assert (seen.newest, seen.sequence) == (0, 3)
    assert slot(path, 1)[: HEADER.size + 8] == record_slot(2, b'{"a": 2}', MIN_SLOT)


def test_a_write_cut_short_fails_and_leaves_no_half_record(tmp_path: Path) -> None:
    path = tmp_path / "state"
    seen = written(path, b"one")
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (MIN_SLOT + 40, limit[1]))  # 40 bytes of slot 1, then EFBIG
    try:
        with pytest.raises(SpecWriteError) as info:
            write(path, b"two" * 100, seen, MAX)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
    assert str(info.value) == f"{path}: cannot write: File too large"
    assert slot(path, 1)[: HEADER.size] == bytes(HEADER.size)  # marked empty again
    reading = read(path, MAX, "state")
    assert (reading.record, reading.damaged) == (b"one", None)
    assert write(path, b"two", seen, MAX).sequence == 2
    assert read(path, MAX, "state").record == b"two"


def test_a_record_larger_than_a_slot_grows_the_file_by_writing_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "state"
    seen = written(path, b"small", b"small again")
    before = path.stat().st_ino
    big = b"x" * (MIN_SLOT - HEADER.size - FOOTER.size + 1)
    with path.open("rb") as held:
        os.link(path, tmp_path / "link")
        seen = write(path, big, seen, MAX)
        assert os.fstat(held.fileno()).st_size == 0  # the file replaced is emptied, linked or not
    grown = path.stat()
    assert grown.st_ino != before
    assert grown.st_size == 4 * MIN_SLOT
    reading = read(path, MAX, "state")
    assert (reading.record, reading.seen.sequence, reading.seen.slot_size) == (big, 3, 2 * MIN_SLOT)
    assert slot(path, 1, 2 * MIN_SLOT)[: -FOOTER.size] == bytes(2 * MIN_SLOT - FOOTER.size)

    write(path, b"small", seen, MAX)  # slots stay as large: in place again
    assert (path.stat().st_ino, path.stat().st_size) == (grown.st_ino, grown.st_size)
    assert read(path, MAX, "state").record == b"small"

    huge = b"y" * (5 * MIN_SLOT)  # doubled until it fits
    write(path, huge, read(path, MAX, "state").seen, MAX)
    assert path.stat().st_size == 2 * 8 * MIN_SLOT
    assert read(path, MAX, "state").record == huge


def test_a_record_no_slot_can_hold_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state"
    seen = written(path, b"kept")
    before = path.read_bytes()
    with pytest.raises(SpecWriteError) as info:
        write(path, b"z" * (MAX // 2), seen, MAX)
    assert (
        str(info.value)
        == f"{path}: cannot write: {MAX // 2} bytes, more than a slot of the file holds (2097088)"
    )
    assert path.read_bytes() == before


def test_a_plain_file_is_read_whole_and_replaced_by_slots_at_the_first_write(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.write_bytes(b'{"plain": true}')
    reading = read(path, MAX, "state")
    assert reading.record == b'{"plain": true}'
    assert reading.seen.slot_size == 0
    assert not changed(path, reading.seen)
    write(path, b"slots", reading.seen, MAX)
    assert path.read_bytes()[:8] == b"CDISLOTS"
    assert read(path, MAX, "state").record == b"slots"


def test_a_file_that_is_not_the_one_seen_is_neither_written_into_nor_replaced(tmp_path: Path) -> None:
    path = tmp_path / "state"
    seen = written(path, b"mine")
    theirs = b"x" * (2 * MIN_SLOT)
    write_atomic(path, theirs)  # another file of the same size in its place
    with pytest.raises(SpecWriteError) as info:
        write(path, b"mine again", seen, MAX)
    assert str(info.value) == (
        f"{path}: cannot write: another file is in its place than the one last read here (written "
        "meanwhile by another process?); it is not replaced"
    )
    assert path.read_bytes() == theirs
    with pytest.raises(SpecWriteError):
        write(path, b"mine at first", None, MAX)
    assert path.read_bytes() == theirs

    path.unlink()
    path.mkdir()
    with pytest.raises(SpecWriteError) as info:
        write(path, b"in the way", seen, MAX)
    assert str(info.value) == f"{path}: cannot replace: Is a directory"


def test_changed_sees_each_write_in_place_whatever_the_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "state"
    writer = written(path, b"one")
    reader = read(path, MAX, "state").seen
    assert not changed(path, reader)
    for record in (b"two", b"three"):
        before = path.stat()
        writer = write(path, record, writer, MAX)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # as if within one clock tick
        assert changed(path, reader)
        reading = read(path, MAX, "state")
        assert reading.record == record
        reader = reading.seen
        assert not changed(path, reader)
        assert not changed(path, writer)
    write_atomic(path, path.read_bytes())  # the same bytes, another file
    assert changed(path, reader)
    path.unlink()
    with pytest.raises(FileNotFoundError):
        changed(path, reader)


def two_slots(first: bytes, second: bytes, size: int = MIN_SLOT) -> bytes:
    return first.ljust(size, b"\0") + second.ljust(size, b"\0")


def damaged(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 1])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            two_slots(damaged(record_slot(1, b"{}", MIN_SLOT)), damaged(record_slot(2, b"{}", MIN_SLOT))),
            "no slot holds a whole record (slot 0: checksum mismatch; slot 1: checksum mismatch)",
        ),
        (
            two_slots(b"CDISLOTS" + b"\xff" * 24, b""),
            "no slot holds a whole record (slot 0: a record of 4294967295 bytes, longer than the slot; "
            "slot 1: empty)",
        ),
        (
            two_slots(b"CDISLOTX", record_slot(1, b"{}", MIN_SLOT)[:-1]),
            "no slot holds a whole record (slot 0: no slot header; slot 1: checksum mismatch)",
        ),
        (
            two_slots(record_slot(4, b"{}", MIN_SLOT), record_slot(4, b"[]", MIN_SLOT)),
            "both slots hold record 4",
        ),
        (
            two_slots(record_slot(1, b"{}", 2 * MIN_SLOT), b""),
            "no slot holds a whole record (slot 0: written for slots of 131072 bytes, in slots of 65536; "
            "slot 1: empty)",
        ),
        (
            record_slot(1, b"{}", MIN_SLOT).ljust(100_000, b"\0"),
            "100000 bytes, not two slots of 64 KiB to 2 MiB",
        ),
        (record_slot(1, b"{}", 4096).ljust(8192, b"\0"), "8192 bytes, not two slots of 64 KiB to 2 MiB"),
    ],
)
def test_a_file_without_a_whole_record_is_one_line_naming_why(
    tmp_path: Path, data: bytes, message: str
) -> None:
    path = tmp_path / "state"
    path.write_bytes(data)
    with pytest.raises(SpecLoadError) as info:
        read(path, MAX, "state")
    assert str(info.value).startswith(f"{path}: {message}")
    assert "\n" not in str(info.value)


def test_a_later_format_version_is_named() -> None:
    future = bytearray(record_slot(1, b"{}", MIN_SLOT))
    future[8] = 2  # the version, with its checksum made to match
    head = bytes(future[: HEADER.size - 4])
    future[HEADER.size - 4 : HEADER.size] = struct.pack("<I", zlib.crc32(b"{}", zlib.crc32(head)))
    with pytest.raises(SpecLoadError) as info:
        slotfile.parse(two_slots(bytes(future), b""), "f", MAX)
    assert (
        str(info.value) == "f: no slot holds a whole record (slot 0: format version 2, not 1; slot 1: empty)"
    )


def _create(path: Path, record: bytes, seen: slotfile.Seen, start: Any) -> None:
    """In a process of its own: write ``record`` once ``start`` lets it; exit status 1 when the
    write is refused, 0 when it is done."""
    start.wait(30)
    try:
        write(path, record, seen, MAX)
    except SpecWriteError:
        os._exit(1)
    os._exit(0)


def test_two_processes_writing_where_the_file_was_removed_create_it_once(tmp_path: Path) -> None:
    """The directory wiped, two processes write the file again at once, each from the file it
    last saw (removed): one creates it, the other's write fails (it never replaces the first
    one's), and no temporary file is left."""
    context = multiprocessing.get_context("fork")
    for i in range(20):
        path = tmp_path / f"state-{i}"
        seen = written(path, b"before")
        path.unlink()
        start = context.Barrier(2)
        writers = [context.Process(target=_create, args=(path, name, seen, start)) for name in (b"a", b"b")]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(30)
        done = [name for name, writer in zip((b"a", b"b"), writers, strict=True) if writer.exitcode == 0]
        assert sorted(writer.exitcode for writer in writers) == [0, 1], i
        reading = read(path, MAX, "state")
        assert (reading.record, reading.seen.sequence) == (done[0], 2)
    assert sorted(os.listdir(tmp_path)) == sorted(f"state-{i}" for i in range(20))


def test_a_file_with_the_inode_seen_but_another_origin_is_not_written_into(tmp_path: Path) -> None:
    """An inode number is reused once its file is removed: another process's file may have the
    one last seen here, and the same size."""
    path = tmp_path / "state"
    seen = written(path, b"mine")
    theirs = tmp_path / "theirs"
    written(theirs, b"theirs")
    path.write_bytes(theirs.read_bytes())  # same inode, same size, another origin
    with pytest.raises(SpecWriteError) as info:
        write(path, b"mine again", seen, MAX)
    assert "another file is in its place than the one last read here" in str(info.value)
    assert path.read_bytes() == theirs.read_bytes()


def test_a_temporary_file_a_killed_writer_left_is_removed_before_the_file_is_replaced(
    tmp_path: Path,
) -> None:
    """A writer killed between linking its temporary file at the path and removing it leaves a
    second name for the file (and one killed before, a file of its own): removed when the file is
    next written whole, so that the file replaced is linked nowhere once it is (a process still
    holding it then empties it) and the directory does not fill up with copies."""
    path = tmp_path / "state"
    seen = written(path, b"small")
    os.link(path, tmp_path / ".state.abcd1234.tmp")  # killed between link and unlink
    (tmp_path / ".state.efgh5678.tmp").write_bytes(b"x" * MIN_SLOT)  # killed before the link
    (tmp_path / ".other.abcd1234.tmp").write_bytes(b"another file's")
    with path.open("rb") as held:
        write(path, b"x" * MIN_SLOT, seen, MAX)  # grown: written whole
        assert os.fstat(held.fileno()).st_nlink == 0
    assert sorted(os.listdir(tmp_path)) == [".other.abcd1234.tmp", "state"]


def test_a_file_moved_away_while_it_is_replaced_is_not_emptied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user moves the file away (``mv``) between the check that the file at the path is the
    one seen and the rename over it: the rename creates the file, and the one moved away, which
    no write replaced, keeps its contents."""
    path = tmp_path / "state"
    seen = written(path, b"small")
    before = path.read_bytes()
    moved = tmp_path / "moved"
    opened = slotfile._opened_if_seen

    def then_moved(at: Path, seen: slotfile.Seen | None) -> int:
        fd = opened(at, seen)
        os.rename(at, moved)
        return fd

    monkeypatch.setattr(slotfile, "_opened_if_seen", then_moved)
    write(path, b"x" * MIN_SLOT, seen, MAX)
    assert moved.read_bytes() == before
    assert read(path, MAX, "state").record == b"x" * MIN_SLOT
