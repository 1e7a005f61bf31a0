"""The prepared claims on disk: read with the bounded reader, written durably before memory
changes, never overwritten when unusable, written again when the file is gone."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path

import pytest

from cdi_plugin.dra.prepare import PreparedDevice
from cdi_plugin.dra.prepared import PreparedClaims, StateWriteError
from cdi_plugin.dra.preparedstate import PreparedState, decode, encode
from cdi_plugin.store.atomic import write_atomic
from tests.dra.test_prepared_serve import BAD_FILES

pytestmark = pytest.mark.timeout(30)

CARD0 = (PreparedDevice(("gpu",), "node-a", "gpu-card0", ("example.com/gpu=card0",)),)
CARD1 = (PreparedDevice(("gpu",), "node-a", "gpu-card1", ("example.com/gpu=card1",)),)


def on_disk(path: Path) -> PreparedState:
    return decode(path.read_bytes(), str(path))


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
    assert json.loads(path.read_text())["version"] == 1
    assert on_disk(path) == PreparedState({"uid-1": CARD0, "uid-2": CARD1})


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
    write_atomic(path, encode(PreparedState({"uid-2": CARD1})))  # another instance of the driver
    assert prepared.reload()
    assert prepared.state == PreparedState({"uid-2": CARD1})
    path.write_text("[]")
    assert not prepared.reload()
    assert prepared.problem == f"{path}: an array where an object belongs"
