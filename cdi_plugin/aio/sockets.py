"""Unix sockets: serving one for root alone, telling whether a process listens on one or it is a
stale file left behind, and removing a server's without taking another process's socket at its
path with it."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import re
import socket
import stat
import time
from pathlib import Path
from typing import Any, Protocol

#: The longest socket path gRPC binds: sun_path holds 108 bytes with the terminating NUL, but
#: gRPC 1.85 refuses paths over 105 bytes.
MAX_SOCKET_PATH = 105

#: Seconds after which a private directory (:func:`bind_private`) is a leftover of a process
#: killed while binding, not one another process binds in (a bind takes milliseconds).
LEFTOVER_AGE = 60.0

#: The name of a private directory.
_PRIVATE = re.compile(r"\.[0-9a-f]{4}")
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1

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
    """Remove the socket bound at ``path`` by a process that no longer listens on it, unless it is
    gone. Its inode number, once freed, may be taken by the socket another process binds at the
    same path: the same identity with a process listening on it is that other process's socket,
    never removed.
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

    async def start(self) -> None: ...

    async def stop(self, grace: float | None) -> None: ...


async def serve_private(server: Server, path: Path) -> Identity | None:
    """Bind ``server`` to ``path`` with :func:`bind_private` and start it: the socket's identity,
    or None when gRPC does not bind it. A start that fails or is cancelled leaves no socket at
    ``path``; the server is not stopped here (after a start cut short, gRPC's stop raises
    InvalidStateError, which would take the place of the cancellation)."""
    if not bind_private(server, path):
        return None
    bound = identity(path)
    try:
        await server.start()
    except BaseException:
        _remove_served(path, bound)
        raise
    return bound


async def stop_serving(server: Server, path: Path, bound: Identity | None, grace: float | None) -> None:
    """Remove the socket ``server`` serves at ``path`` (its identity ``bound``), then stop the
    server, with ``grace`` for the calls under way. gRPC removes only the private path it bound
    (:func:`bind_private`), so the socket is removed here, first."""
    _remove_served(path, bound)
    await server.stop(grace)


def _remove_served(path: Path, bound: Identity | None) -> None:
    """Remove the socket at ``path`` if it is ``bound``, which a server still listens on: its inode
    cannot be freed and taken by another process's socket meanwhile, so a socket of that identity
    is the server's; one another process has put at the path since stays."""
    if bound is not None and identity(path) == bound:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def bind_private(server: Server, path: Path) -> bool:
    """Bind ``server`` to the socket ``path``, mode 0600 before it appears there: only root (the
    kubelet) may connect. The socket is bound in a directory of its own beside ``path``, created
    0700 and named with a dot (the kubelet's plugin watcher passes over dot-names), made 0600
    there, where no other user can reach it, and moved into place, never over a file at ``path``
    (another instance's socket, bound since the caller removed a stale one: a plain rename would
    replace it; :func:`_move_noreplace`); the directory then goes. The process's umask, which
    every thread shares, is left alone. The private path (``.<4 hex digits>/s``) is no longer
    than a name of 7 characters beside it, such as ``dra.sock``. False when gRPC does not bind
    it, a file is at ``path``, or the directory cannot be made (:func:`bind_refusal` says why);
    also for a ``path`` longer than gRPC binds, where no client could connect. The private
    directories a process killed while binding left beside ``path`` are removed first
    (:func:`_remove_leftovers`)."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        return False
    _remove_leftovers(path.parent)
    try:
        private = _private_dir(path.parent)
    except OSError:
        return False
    bound = private / "s"
    try:
        try:
            if not server.add_insecure_port(f"unix://{bound}"):
                return False
        except RuntimeError:  # gRPC's "Failed to bind", without the reason
            return False
        os.chmod(bound, 0o600)
        try:
            _move_noreplace(bound, path)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(bound)
        os.rmdir(private)


@functools.cache
def _renameat2() -> Any:
    """libc's ``renameat2``, or None (a libc without it)."""
    function = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if function is not None:
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        function.restype = ctypes.c_int
    return function


def _move_noreplace(source: Path, target: Path) -> None:
    """Give ``source`` the name ``target`` in one step, never over a file there (FileExistsError):
    ``renameat2(RENAME_NOREPLACE)``, so that the socket is not changed once it is at ``target``
    (its link count, and so its ctime, which a watcher may take for a socket created again);
    a link, whose ``source`` the caller removes, where the file system or libc has no such
    rename."""
    rename = _renameat2()
    if rename is not None:
        if rename(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(code, os.strerror(code), str(target))
    os.link(source, target)


def _private_dir(parent: Path) -> Path:
    """A new directory ``.<4 hex digits>`` in ``parent``, mode 0700."""
    for _ in range(16):
        private = parent / f".{os.urandom(2).hex()}"
        try:
            os.mkdir(private, 0o700)
        except FileExistsError:
            continue
        return private
    raise FileExistsError(f"{parent}: no free name for a private directory to bind a socket in")


def _remove_leftovers(parent: Path) -> None:
    """Remove from ``parent`` the private directories of binds cut short: named as
    :func:`_private_dir` names them, this user's, mode 0700, unchanged for :data:`LEFTOVER_AGE`
    seconds, and holding nothing or only a socket ``s`` nobody listens on (a process killed
    between its bind and its link). Anything else, another process's bind under way included,
    stays."""
    try:
        with os.scandir(parent) as found:
            entries = [e for e in found if _PRIVATE.fullmatch(e.name)]
    except OSError:
        return
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
            if (
                not stat.S_ISDIR(st.st_mode)
                or st.st_uid != os.geteuid()
                or stat.S_IMODE(st.st_mode) != 0o700
                or time.time() - st.st_mtime < LEFTOVER_AGE  # a clock set back too
            ):
                continue
            held = os.listdir(entry.path)
            if held not in ([], ["s"]):
                continue
            if held:
                dead = Path(entry.path, "s")
                if identity(dead) is None or someone_listens(dead):
                    continue
                os.unlink(dead)
            os.rmdir(entry.path)
        except OSError:
            continue  # gone meanwhile, or cannot tell: left


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
