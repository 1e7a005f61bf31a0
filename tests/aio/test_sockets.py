"""Removing a socket after its server stopped: only when it is still the one that server bound."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import grpc

from cdi_plugin.aio.sockets import identity, remove_if_ours


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
