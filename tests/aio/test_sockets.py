"""Whether anyone listens on a socket, and removing a socket after its server stopped: only when
it is still the one that server bound."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from pathlib import Path

import grpc
import pytest
from asyncinotify import Inotify, Mask

from cdi_plugin.aio.sockets import (
    MAX_SOCKET_PATH,
    bind_private,
    identity,
    remove_if_ours,
    serve_private,
    someone_listens,
    stop_serving,
)


def test_a_stale_socket_with_the_identity_bound_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "plugin.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))  # bound, never listening: what a stopped server leaves
        bound = identity(path)
        assert bound is not None
        remove_if_ours(path, bound)
    assert not path.exists()


def test_a_listening_socket_at_the_path_is_left_even_with_the_same_identity(tmp_path: Path) -> None:
    """The inode number a stopped server's socket had is reused at once for the next file: the
    replacing instance's socket can carry the old identity."""
    path = tmp_path / "plugin.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        s.listen()
        remove_if_ours(path, identity(path))
        assert identity(path) is not None


def test_a_listener_that_does_not_accept_is_seen_at_once(tmp_path: Path) -> None:
    """Its backlog full (a process stopped, or too busy to accept): it listens, and the probe
    says so without waiting for a connection to be taken (it runs on the event loop)."""
    path = tmp_path / "busy.sock"
    with socket.socket(socket.AF_UNIX) as listener, contextlib.ExitStack() as pending:
        listener.bind(str(path))
        listener.listen(0)
        while True:  # fill the backlog: a connection more would wait
            waiting = pending.enter_context(socket.socket(socket.AF_UNIX))
            waiting.setblocking(False)
            try:
                waiting.connect(str(path))
            except BlockingIOError:
                break
        assert someone_listens(path)
        listener.close()
        assert not someone_listens(path)  # closed: refused, a stale socket


def test_another_file_or_nothing_at_the_path_is_left(tmp_path: Path) -> None:
    path = tmp_path / "plugin.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        bound = identity(path)
    os.unlink(path)
    remove_if_ours(path, bound)  # nothing there: no error
    path.write_text("not a socket")
    remove_if_ours(path, bound)
    assert path.read_text() == "not a socket"
    remove_if_ours(path, None)
    assert path.exists()


def test_a_server_replaced_while_stopping_keeps_the_replacement(tmp_path: Path) -> None:
    """The order of a handover: gRPC unlinks the old socket as it stops, the new instance binds
    the path, then the old instance cleans up."""
    path = tmp_path / "plugin.sock"

    async def handover() -> None:
        old = grpc.aio.server()
        old.add_insecure_port(f"unix://{path}")
        await old.start()
        bound = identity(path)
        await old.stop(None)
        with socket.socket(socket.AF_UNIX) as new:
            new.bind(str(path))
            new.listen()
            remove_if_ours(path, bound)
            assert identity(path) is not None

    asyncio.run(asyncio.wait_for(handover(), 30))


def _umask() -> int:
    """The process's umask, read without changing it."""
    for entry in Path("/proc/self/status").read_text().splitlines():
        if entry.startswith("Umask:"):
            return int(entry.split()[1], 8)
    raise AssertionError("no Umask in /proc/self/status")


class _Noted:
    """A real gRPC server whose bind notes the process's umask at that moment: another thread
    creating a file or a directory then gets its mode from it."""

    def __init__(self) -> None:
        self.server = grpc.aio.server()
        self.umasks: list[int] = []

    def add_insecure_port(self, address: str) -> int:
        self.umasks.append(_umask())
        return self.server.add_insecure_port(address)

    async def start(self) -> None:
        await self.server.start()

    async def stop(self, grace: float | None) -> None:
        await self.server.stop(grace)


class _StartsLate(_Noted):
    """A real gRPC server whose start, once serving, waits until it is cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.starting = asyncio.Event()

    async def start(self) -> None:
        await self.server.start()
        self.starting.set()
        await asyncio.Event().wait()


def test_a_socket_is_bound_0600_without_changing_the_process_umask(tmp_path: Path) -> None:
    path = tmp_path / "dra.sock"

    async def bind() -> None:
        noted = _Noted()
        assert bind_private(noted, path)
        await noted.server.start()
        try:
            assert noted.umasks == [0o002]
            assert os.lstat(path).st_mode & 0o777 == 0o600
            assert someone_listens(path)
            assert [p.name for p in tmp_path.iterdir()] == ["dra.sock"]  # the private directory went
        finally:
            await stop_serving(noted, path, identity(path), None)

    old = os.umask(0o002)
    try:
        asyncio.run(asyncio.wait_for(bind(), 30))
    finally:
        os.umask(old)
    assert list(tmp_path.iterdir()) == []


def test_a_socket_is_moved_into_place_whole_and_not_changed_after(tmp_path: Path) -> None:
    """Moved, not linked then unlinked beside: the socket's link count, and so its ctime, which a
    watcher may take for a socket created again, never change once it is at its path."""
    path = tmp_path / "dra.sock"

    async def bind() -> list[Mask]:
        with Inotify() as inotify:
            inotify.add_watch(tmp_path, Mask.CREATE | Mask.MOVED_TO)
            noted = _Noted()
            assert bind_private(noted, path)
            try:
                masks = []
                while not masks or masks[-1] & Mask.ISDIR:
                    event = await asyncio.wait_for(inotify.get(), 30)
                    masks.append(event.mask)
                    assert event.name is not None
                    assert event.name.name == "dra.sock" or event.mask & Mask.ISDIR
                return masks
            finally:
                await stop_serving(noted, path, identity(path), None)

    *private, placed = asyncio.run(asyncio.wait_for(bind(), 60))
    assert [m & ~Mask.ISDIR for m in private] == [Mask.CREATE]  # the private directory
    assert placed == Mask.MOVED_TO


def test_a_socket_that_cannot_be_bound_leaves_nothing_behind(tmp_path: Path) -> None:
    """gRPC refuses a path over its length limit: no socket, no private directory."""
    parent = tmp_path / ("d" * (MAX_SOCKET_PATH - len(os.fsencode(tmp_path)) - 10))
    parent.mkdir()

    async def bind() -> None:
        server = grpc.aio.server()
        assert not bind_private(server, parent / "a-long-socket-name.sock")
        await server.stop(None)

    asyncio.run(asyncio.wait_for(bind(), 30))
    assert list(parent.iterdir()) == []


def test_a_start_cancelled_removes_the_socket_and_stays_cancelled(tmp_path: Path) -> None:
    """gRPC removes only the private path it bound: the socket linked into place is removed by
    whoever started the server, also when the start is cancelled (the process is stopping), and
    the cancellation goes on."""
    path = tmp_path / "dra.sock"

    async def cancelled() -> None:
        server = _StartsLate()
        task = asyncio.create_task(serve_private(server, path))
        await server.starting.wait()
        assert identity(path) is not None
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not path.exists()
        await server.stop(None)

    asyncio.run(asyncio.wait_for(cancelled(), 30))
    assert list(tmp_path.iterdir()) == []


def test_a_socket_another_process_serves_is_never_replaced(tmp_path: Path) -> None:
    """Two instances may both find the path free and bind at once: the later one's socket never
    takes the place of the earlier one's (a rename would, silently)."""
    path = tmp_path / "dra.sock"

    async def bind() -> None:
        with socket.socket(socket.AF_UNIX) as other:
            other.bind(str(path))
            other.listen()
            theirs = identity(path)
            server = grpc.aio.server()
            assert not bind_private(server, path)
            await server.stop(None)
            assert identity(path) == theirs
            assert [p.name for p in tmp_path.iterdir()] == ["dra.sock"]

    asyncio.run(asyncio.wait_for(bind(), 30))


def _leftover(parent: Path, name: str, *, age: float, listening: bool = False) -> socket.socket:
    """A private directory as a process killed between its bind and its link leaves it, with its
    socket ``s`` (listening, or closed: dead), last changed ``age`` seconds ago."""
    private = parent / name
    private.mkdir(0o700)
    held = socket.socket(socket.AF_UNIX)
    held.bind(str(private / "s"))
    if listening:
        held.listen()
    else:
        held.close()
    then = time.time() - age
    os.utime(private, (then, then))
    return held


def test_a_private_directory_left_by_a_killed_bind_is_removed_at_the_next(tmp_path: Path) -> None:
    """Only what a bind leaves is removed, once older than any bind in progress: a directory
    another process binds in now, one whose socket someone serves, one holding other files, one
    named otherwise or not 0700 stays."""
    dead = _leftover(tmp_path, ".beef", age=3600)
    young = _leftover(tmp_path, ".cafe", age=0)
    served = _leftover(tmp_path, ".feed", age=3600, listening=True)
    other = _leftover(tmp_path, ".d00d", age=3600)
    (tmp_path / ".d00d" / "note").write_text("not a socket")
    named = _leftover(tmp_path, ".sockets", age=3600)
    opened = _leftover(tmp_path, ".abba", age=3600)
    os.chmod(tmp_path / ".abba", 0o755)
    then = time.time() - 3600
    os.utime(tmp_path / ".abba", (then, then))

    async def bind() -> None:
        server = grpc.aio.server()
        assert bind_private(server, tmp_path / "dra.sock")
        await server.start()
        await stop_serving(server, tmp_path / "dra.sock", identity(tmp_path / "dra.sock"), None)

    try:
        asyncio.run(asyncio.wait_for(bind(), 30))
    finally:
        for held in (dead, young, served, other, named, opened):
            held.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".abba", ".cafe", ".d00d", ".feed", ".sockets"]
