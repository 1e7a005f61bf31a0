"""The prepared claims on disk: read with the bounded reader, written durably before memory
changes (in place, into the slot that does not hold the newest record), never overwritten when
unusable, written again when the file is gone, and seen by another instance sharing the file."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cdi_plugin.dra.prepare import PreparedDevice
from cdi_plugin.dra.prepared import PreparedClaims, StateWriteError, read_prepared
from cdi_plugin.dra.preparedstate import PreparedState, encode
from cdi_plugin.store.atomic import write_atomic
from cdi_plugin.store.slotfile import HEADER, MIN_SLOT, record_slot
from tests.dra.test_prepared_serve import BAD_FILES

pytestmark = pytest.mark.timeout(30)

CARD0 = (PreparedDevice(("gpu",), "node-a", "gpu-card0", ("example.com/gpu=card0",)),)
CARD1 = (PreparedDevice(("gpu",), "node-a", "gpu-card1", ("example.com/gpu=card1",)),)


def on_disk(path: Path) -> PreparedState:
    return read_prepared(path)


def card(i: int) -> tuple[PreparedDevice, ...]:
    return (PreparedDevice(("gpu",), "node-a", f"gpu-card{i}", (f"example.com/gpu=card{i}",)),)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "plugins" / "d" / "prepared.json"


@pytest.mark.parametrize("bad", list(BAD_FILES))
def test_a_file_that_cannot_be_used_is_one_line_within_2s_and_never_overwritten(
    path: Path, bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    path.parent.mkdir(parents=True)
    reason = f"{path}: {BAD_FILES[bad](path)}"
    before = path.lstat()
    started = time.monotonic()
    with caplog.at_level(logging.ERROR):
        prepared = PreparedClaims(path)
    assert time.monotonic() - started < 2
    assert prepared.problem == reason
    assert caplog.messages == [
        f"{reason}; nothing is prepared or released until it is repaired or moved away"
    ]
    assert prepared.unusable() == caplog.messages[0]
    with pytest.raises(StateWriteError):
        asyncio.run(prepared.put({"uid-1": CARD0}))
    assert path.lstat().st_ino == before.st_ino
    assert prepared.state == PreparedState()


def test_moved_away_or_repaired_it_is_used_again(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path.parent.mkdir(parents=True)
    path.write_text('{"version": 1, "claims": {"uid-1": 5}}')
    prepared = PreparedClaims(path)
    assert prepared.unusable() is not None
    write_atomic(path, encode(PreparedState({"uid-1": CARD0})))  # repaired in place
    with caplog.at_level(logging.WARNING):
        assert prepared.unusable() is None
    assert f"{path}: usable again, 1 prepared claim" in caplog.messages
    assert prepared.get("uid-1") == CARD0

    path.write_text("[]")
    again = PreparedClaims(path)
    path.rename(path.with_name("moved-away.json"))
    assert again.unusable() is None
    assert again.state == PreparedState()


def test_a_file_of_an_earlier_release_is_read_and_written_anew(path: Path) -> None:
    path.parent.mkdir(parents=True)
    entry = {"request_names": ["gpu"], "pool_name": "node-a", "device_name": "gpu-card0",
             "cdi_device_ids": ["example.com/gpu=card0"], "admin_access": False}  # fmt: skip
    path.write_text(json.dumps({"uid-1": [entry]}))
    prepared = PreparedClaims(path)
    assert prepared.get("uid-1") == CARD0
    asyncio.run(prepared.put({"uid-2": CARD1}))
    assert path.read_bytes()[:8] == b"CDISLOTS"
    assert on_disk(path) == PreparedState({"uid-1": CARD0, "uid-2": CARD1})
    assert PreparedClaims(path).state == prepared.state


def test_changes_are_on_disk_when_they_return_and_a_failed_one_changes_nothing(path: Path) -> None:
    prepared = PreparedClaims(path)  # no file, no directory yet: nothing prepared

    async def scenario() -> None:
        await prepared.put({"uid-1": CARD0, "uid-2": CARD1})
        assert on_disk(path) == prepared.state == PreparedState({"uid-1": CARD0, "uid-2": CARD1})
        assert (path.stat().st_mode & 0o777) == 0o600
        path.unlink()
        path.mkdir()  # in the way: the rename fails
        with pytest.raises(StateWriteError) as info:
            await prepared.drop(["uid-1"])
        assert str(info.value) == f"{path}: cannot replace: Is a directory"
        assert prepared.get("uid-1") == CARD0
        with pytest.raises(StateWriteError):
            await prepared.put({"uid-3": CARD0})
        assert prepared.state == PreparedState({"uid-1": CARD0, "uid-2": CARD1})
        path.rmdir()
        await prepared.drop(["uid-1", "uid-never"])
        assert on_disk(path) == prepared.state == PreparedState({"uid-2": CARD1})
        assert sorted(os.listdir(path.parent)) == ["prepared.json"]  # no temporary file left

    asyncio.run(scenario())


def test_a_cancelled_caller_does_not_stop_the_write_and_memory_follows_the_file(path: Path) -> None:
    prepared = PreparedClaims(path)

    async def scenario() -> None:
        task = asyncio.create_task(prepared.put({"uid-1": CARD0}))
        await asyncio.sleep(0)  # the write has started in its thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await prepared.drop(["uid-never"])  # waits for the write before it: nothing else to do
        assert on_disk(path) == prepared.state == PreparedState({"uid-1": CARD0})

    asyncio.run(scenario())


def test_a_write_cancelled_with_every_task_ends_before_its_caller_does(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The event loop's end cancels every task, the write's own too: the caller, which holds the
    node's lock, still returns only once the write has ended (else another instance could take
    the lock and write the file at the same time), and memory follows the file."""
    prepared = PreparedClaims(path)
    started, release = threading.Event(), threading.Event()
    ended: list[PreparedState] = []
    write = prepared._write

    def slow_write(state: PreparedState) -> None:  # a disk slow to sync
        started.set()
        release.wait(30)
        write(state)
        ended.append(state)

    monkeypatch.setattr(prepared, "_write", slow_write)

    async def scenario() -> None:
        task = asyncio.create_task(prepared.put({"uid-1": CARD0}))
        await asyncio.to_thread(started.wait, 30)
        for other in asyncio.all_tasks() - {asyncio.current_task()}:
            other.cancel()
        later = threading.Timer(0.2, release.set)
        later.start()
        try:
            with pytest.raises(asyncio.CancelledError):
                await task
            assert ended == [PreparedState({"uid-1": CARD0})]
        finally:
            release.set()
            later.join()
        assert on_disk(path) == prepared.state == PreparedState({"uid-1": CARD0})

    asyncio.run(scenario())


def test_a_file_gone_with_its_directory_is_written_again(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prepared = PreparedClaims(path)

    async def scenario() -> None:
        assert not await prepared.restore()  # nothing prepared: nothing to write
        assert not path.exists()
        await prepared.put({"uid-1": CARD0})
        assert not await prepared.restore()  # still there
        for p in path.parent.iterdir():
            p.unlink()
        path.parent.rmdir()
        with caplog.at_level(logging.WARNING):
            assert await prepared.restore()
        assert on_disk(path) == PreparedState({"uid-1": CARD0})

    asyncio.run(scenario())
    assert f"{path} was gone: written again, 1 prepared claim" in caplog.messages


def test_reload_reads_what_another_process_wrote(path: Path) -> None:
    prepared = PreparedClaims(path)
    asyncio.run(prepared.put({"uid-1": CARD0}))
    assert prepared.reload()
    assert prepared.state == PreparedState({"uid-1": CARD0})
    other = PreparedClaims(path)  # another instance of the driver
    asyncio.run(other.put({"uid-2": CARD1}))
    asyncio.run(other.drop(["uid-1"]))
    assert prepared.reload()
    assert prepared.state == PreparedState({"uid-2": CARD1})
    path.write_text("[]")
    assert not prepared.reload()
    assert prepared.problem == f"{path}: an array where an object belongs"


def test_a_torn_write_of_the_newest_slot_leaves_the_state_before_it(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prepared = PreparedClaims(path)
    asyncio.run(prepared.put({"uid-1": CARD0}))  # record 1, slot 0
    asyncio.run(prepared.put({"uid-2": CARD1}))  # record 2, slot 1
    with path.open("r+b") as fh:  # the end of record 2 never reached the disk
        fh.seek(MIN_SLOT + HEADER.size + 100)
        fh.write(bytes(200))
    with caplog.at_level(logging.WARNING):
        again = PreparedClaims(path)
    assert again.state == PreparedState({"uid-1": CARD0})
    assert caplog.messages == [f"{path}: slot 1 (checksum mismatch) passed over: record 1 of slot 0 is used"]
    first = path.read_bytes()[:MIN_SLOT]
    asyncio.run(again.put({"uid-3": CARD1}))  # into the torn slot: record 1 stays until it is durable
    assert path.read_bytes()[:MIN_SLOT] == first
    assert on_disk(path) == PreparedState({"uid-1": CARD0, "uid-3": CARD1})


def test_claims_beyond_a_slot_grow_the_file_then_changes_go_in_place_again(path: Path) -> None:
    prepared = PreparedClaims(path)
    asyncio.run(prepared.put({"uid-0": CARD0}))
    small = path.stat()
    assert small.st_size == 2 * MIN_SLOT
    asyncio.run(prepared.put({f"uid-{i}": card(i) for i in range(1, 600)}))  # about 90 KB
    grown = path.stat()
    assert (grown.st_ino != small.st_ino, grown.st_size) == (True, 4 * MIN_SLOT)
    assert on_disk(path) == prepared.state
    assert len(prepared.state.claims) == 600
    asyncio.run(prepared.drop(["uid-0"]))
    assert (path.stat().st_ino, path.stat().st_size) == (grown.st_ino, grown.st_size)
    assert PreparedClaims(path).state == prepared.state == on_disk(path)


def test_two_instances_sharing_the_file_each_see_every_change_of_the_other(path: Path) -> None:
    """As two drivers do during a rolling update: each reloads before its change."""
    a, b = PreparedClaims(path), PreparedClaims(path)

    async def scenario() -> None:
        for i in range(40):
            writer, other = (a, b) if i % 2 == 0 else (b, a)
            assert writer.reload()
            await writer.put({f"uid-{i}": card(i)})
            if i >= 2:
                await writer.drop([f"uid-{i - 2}"])
            assert other.reload()
            assert other.state == writer.state == on_disk(path)
            assert sorted(other.state.claims) == sorted(f"uid-{j}" for j in {max(i - 1, 0), i})

    asyncio.run(scenario())


CHILD = """
import json, sys
from pathlib import Path
from cdi_plugin.dra.prepared import PreparedClaims
prepared = PreparedClaims(Path(sys.argv[1]))
for line in sys.stdin:
    ok = prepared.reload()
    print(json.dumps([ok, sorted(prepared.state.claims)]), flush=True)
"""


def test_a_reader_in_another_process_sees_each_change(path: Path) -> None:
    prepared = PreparedClaims(path)
    asyncio.run(prepared.put({"uid-start": CARD0}))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        for i in range(60):
            if i % 3 == 2:
                asyncio.run(prepared.drop([f"uid-{i - 1}"]))
            else:
                asyncio.run(prepared.put({f"uid-{i}": card(i + 2)}))
            child.stdin.write("reload\n")
            child.stdin.flush()
            assert json.loads(child.stdout.readline()) == [True, sorted(prepared.state.claims)], i
    finally:
        child.stdin.close()
        assert child.wait(30) == 0
        child.stdout.close()


def test_a_record_not_as_new_as_the_last_one_seen_is_refused_and_memory_kept(path: Path) -> None:
    prepared = PreparedClaims(path)
    asyncio.run(prepared.put({"uid-1": CARD0}))
    copy = path.read_bytes()  # record 1, in slot 0
    asyncio.run(prepared.put({"uid-2": CARD1}))  # record 2
    kept = prepared.state
    other = record_slot(2, encode(PreparedState({"uid-3": CARD0})), MIN_SLOT)
    write_atomic(path, copy[:MIN_SLOT] + other + copy[MIN_SLOT + len(other) :])  # of this file's origin
    assert not prepared.reload()
    assert prepared.problem == (
        f"{path}: another record 2 than the one this driver last read or wrote (two instances wrote "
        "it without excluding each other, or a copy was put back?)"
    )
    elsewhere = PreparedClaims(path.with_name("elsewhere.json"))
    asyncio.run(elsewhere.put({"uid-3": CARD0}))
    asyncio.run(elsewhere.put({"uid-4": CARD1}))  # record 2 of a file written since
    os.replace(elsewhere.path, path)
    assert not prepared.reload()
    assert prepared.problem == (
        f"{path}: record 2 of a file written anew by an instance that did not know record 2 this "
        "driver last read or wrote (restarted after the directory was wiped?)"
    )
    write_atomic(path, encode(PreparedState({"uid-3": CARD0})))  # as an earlier release wrote it
    assert not prepared.reload()
    assert prepared.problem == (
        f"{path}: a file without record numbers, older than record 2 this driver last read or wrote "
        "(a copy put back, or another instance's older state?)"
    )
    assert prepared.state == kept
    path.unlink()  # moved away: the claims are the driver's own again
    assert prepared.reload()
    assert prepared.problem is None
    assert prepared.state == kept


def test_an_instance_that_missed_changes_writes_the_file_again_with_them(path: Path) -> None:
    """The directory wiped during an update: the old instance, writing the file again, takes the
    claims the new one prepared since from the file removed, which it still holds open."""
    new, old = PreparedClaims(path), PreparedClaims(path)

    async def scenario() -> None:
        await new.put({"uid-1": CARD0})
        assert old.reload()
        await new.put({"uid-2": CARD1})
        await new.drop(["uid-1"])
        path.unlink()
        assert await old.restore()

    now = PreparedState({"uid-2": CARD1})
    asyncio.run(scenario())
    assert (on_disk(path), old.state) == (now, now)
    assert new.reload()
    assert (new.problem, new.state) == (None, now)
