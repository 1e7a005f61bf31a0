"""Unix sockets: binding a server's for root alone, telling whether a process listens on one or it
is a stale file left behind, and stopping a server without taking another process's socket at
its path with it."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from pathlib import Path
from typing import Protocol

#: The longest socket path gRPC binds: sun_path holds 108 bytes with the terminating NUL, but
#: gRPC 1.85 refuses paths over 105 bytes.
MAX_SOCKET_PATH = 105

#: (device, inode) of a socket file.
Identity = tuple[int, int]


def identity(path: Path) -> Identity | None:
    """(device, inode) of the socket at ``path`` (not following a link), or None if there is none."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISSOCK(st.st_mode) else None


def remove_if_ours(path: Path, bound: Identity | None) -> None:
    """After its server stopped, remove the socket a process bound at ``path``, unless it is gone.

    gRPC unlinks a socket when its server stops, and the inode number is then free for the socket
    that another process (the instance that replaces this one) binds at the same path: the same
    identity with a process listening on it is that other process's socket, never removed.
    """
    if bound is None or identity(path) != bound:
        return
    try:
        if someone_listens(path):
            return
    except OSError:
        return  # cannot tell: leave it
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def someone_listens(path: Path) -> bool:
    """True when a process listens on the unix socket ``path``: a connection is accepted, or its
    backlog is full (asked without blocking, so a listener that does not accept never stalls the
    caller); False when it is refused or there is no such file (a stale socket, safe to replace).
    Other errors are raised."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)
        try:
            probe.connect(str(path))
        except BlockingIOError:
            return True
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                return False
            raise
        return True


class Server(Protocol):
    def add_insecure_port(self, address: str) -> int: ...

    async def stop(self, grace: float | None) -> None: ...


def bind_private(server: Server, path: Path) -> bool:
    """Bind ``server`` to the socket ``path``, mode 0600 from the start: only root (the kubelet)
    may connect. The mode comes from the umask, changed for this synchronous call only, never
    across an await (it is process-wide); no chmod follows, which would change the socket's ctime
    after gRPC has started listening on it. False when gRPC does not bind it (:func:`bind_refusal`
    says why)."""
    old_umask = os.umask(0o177)
    try:
        return bool(server.add_insecure_port(f"unix://{path}"))
    except RuntimeError:  # gRPC's "Failed to bind", without the reason
        return False
    finally:
        os.umask(old_umask)


async def stop_server(server: Server, path: Path, bound: Identity | None, grace: float | None) -> None:
    """Stop ``server``, which bound ``path`` as ``bound``, leaving a socket that another process
    has at ``path`` by then (this one's was removed, and the other bound the path again) where it is.

    gRPC removes whatever socket is at a server's path as the server stops, so the other socket
    is linked under a dot-name beside it first and linked back, the same file, if it was removed.
    """
    found = identity(path)
    keep = None
    if found is not None and found != bound:
        keep = path.with_name(f".{path.name}.{os.urandom(4).hex()}.kept")  # pids repeat across pods
        try:
            os.link(path, keep, follow_symlinks=False)
        except OSError:
            keep = None  # cannot keep it: stopping comes first
    try:
        await server.stop(grace)
    finally:
        if keep is not None:
            with contextlib.suppress(OSError):
                if identity(keep) == found:
                    os.link(keep, path, follow_symlinks=False)  # never over a socket bound since
            with contextlib.suppress(OSError):
                os.unlink(keep)


def bind_refusal(path: Path) -> str:
    """Why a unix socket cannot be bound at ``path``, in the system's words, for a server that
    failed to bind it (gRPC says only that it failed): a probe binds the path itself; a probe
    that succeeds is removed, and the reason is then gRPC's length limit, or unknown."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(str(path))
        except OSError as exc:
            return exc.strerror or str(exc)
        bound = identity(path)
    remove_if_ours(path, bound)
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        return f"longer than gRPC binds ({MAX_SOCKET_PATH} bytes)"
    return "gRPC could not bind it (GRPC_VERBOSITY=debug shows its reason)"
