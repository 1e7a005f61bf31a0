"""The lock file that makes Prepare and Unprepare of the driver's instances on a node take turns."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
from pathlib import Path

import pytest

from cdi_plugin.dra.serialize import SerializeError, Serializer
from tests.deviceplugin.helpers import eventually, run


def locked_elsewhere(path: Path) -> bool:
    """Whether another open file description of ``path`` is refused the lock."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_the_lock_is_created_held_for_the_block_and_released(tmp_path: Path) -> None:
    lock = tmp_path / "plugins" / "driver" / "serialize.lock"

    async def scenario() -> None:
        async with Serializer(lock).hold():
            assert locked_elsewhere(lock)
        assert not locked_elsewhere(lock)

    run(scenario())
    assert oct(lock.stat().st_mode & 0o777) == "0o600"


def test_a_second_holder_waits_until_the_first_is_done(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lock = tmp_path / "serialize.lock"
    order: list[str] = []

    async def second() -> None:
        async with Serializer(lock).hold():
            order.append("second")

    async def scenario() -> None:
        caplog.set_level(logging.DEBUG, "cdi_plugin.dra.serialize")
        async with Serializer(lock).hold():
            task = asyncio.create_task(second())
            waiting = f"waiting for {lock}: another instance of the driver holds it"
            await eventually(lambda: waiting in caplog.text, waiting)
            order.append("first")
        await task

    run(scenario())
    assert order == ["first", "second"]


def test_a_holder_that_keeps_it_too_long_fails_the_call_in_one_line(tmp_path: Path) -> None:
    lock = tmp_path / "serialize.lock"

    async def scenario() -> None:
        async with Serializer(lock).hold():
            with pytest.raises(SerializeError) as caught:
                async with Serializer(lock, timeout=0.05).hold():
                    pytest.fail("held twice")
        assert str(caught.value) == f"{lock}: held by another instance of the driver for more than 0.05s"

    run(scenario())


def test_a_lock_file_removed_while_waited_for_is_created_again_and_locked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Holding an unlinked file excludes nobody: the waiter locks the file that is there now."""
    lock = tmp_path / "serialize.lock"

    async def scenario() -> None:
        caplog.set_level(logging.DEBUG, "cdi_plugin.dra.serialize")
        got = asyncio.Event()
        release = asyncio.Event()

        async def waiter() -> None:
            async with Serializer(lock).hold():
                got.set()
                await release.wait()

        waiting: list[asyncio.Task[None]] = []

        async def holder() -> None:
            async with Serializer(lock).hold():
                waiting.append(asyncio.create_task(waiter()))
                await eventually(lambda: "waiting for" in caplog.text, "waiting for the lock")
                lock.unlink()  # e.g. a kubelet restart that wiped the plugin directory

        with pytest.raises(SerializeError, match="removed or replaced while this call held it"):
            await holder()
        await got.wait()
        assert locked_elsewhere(lock)  # the new file, not the unlinked one
        release.set()
        await waiting[0]

    run(scenario())


def test_a_lock_file_replaced_while_held_fails_the_block_that_held_it(tmp_path: Path) -> None:
    """Whoever opens the new file takes the lock beside the holder: the holder's change may have
    run beside another, and must not be answered as done."""
    lock = tmp_path / "serialize.lock"

    replaced = (
        f"{lock}: removed or replaced while this call held it, so another call may have run beside "
        "it (the kubelet calls again)"
    )

    async def scenario() -> None:
        async def holder() -> None:
            async with Serializer(lock).hold() as still_held:
                still_held()
                lock.unlink()
                async with Serializer(lock, timeout=30).hold():  # the new file: taken at once
                    with pytest.raises(SerializeError) as caught:
                        still_held()
                    assert str(caught.value) == replaced

        with pytest.raises(SerializeError) as caught:
            await holder()
        assert str(caught.value) == replaced
        async with Serializer(lock).hold() as still_held:  # the file there now is taken as usual
            still_held()

    run(scenario())


@pytest.mark.parametrize("kind", ["symlink", "directory"])
def test_a_lock_path_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    lock = tmp_path / "serialize.lock"
    target = tmp_path / "elsewhere"
    if kind == "symlink":
        target.write_text("")
        lock.symlink_to(target)
        why = "cannot open the lock: Too many levels of symbolic links"
    else:
        lock.mkdir()
        why = "cannot open the lock: Is a directory"

    async def scenario() -> None:
        with pytest.raises(SerializeError) as caught:
            async with Serializer(lock).hold():
                pytest.fail("locked")
        assert str(caught.value) == f"{lock}: {why}"

    run(scenario())
    assert kind != "symlink" or target.read_text() == ""
