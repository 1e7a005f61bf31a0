"""Atomic file replacement: a reader sees the old file or the new one, never a partial one.

The temporary file lives in the target directory (so the rename cannot cross file systems) and
is named ``.<name>.<random>.tmp``, which runtimes never read (they read only ``*.json`` and
``*.yaml``). Data is fsynced before the rename and the directory after it.

:class:`StagedFile` splits the same steps in two, so that several files can be written before
any of them replaces its target (or, :meth:`StagedFile.create`, is created where none is): a full
disk or a read-only file system shows up while staging, when nothing visible has changed yet.
:func:`remove_stale` removes the temporary files a killed process left behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
from collections.abc import Collection
from pathlib import Path

from cdi_plugin.errors import SpecWriteError


def write_atomic(path: Path, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data``; when it cannot be written or renamed, the old file is left
    as it was (a directory that cannot be synced afterwards raises with the new one in place).

    ``durable=False`` skips the fsyncs: the file is still never seen half-written, but a power
    loss may take the new contents back (for state that is rebuilt after a reboot anyway)."""
    StagedFile(path, data, mode, durable=durable).commit()
    if durable:
        fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make a rename, link or unlink in ``directory`` durable. Raises :class:`SpecWriteError`
    when it cannot (an I/O error: the change may not survive a power loss); a file system that
    cannot sync a directory at all (EINVAL) counts as done, as there is nothing more to do."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        why = f"cannot open it to make its changes durable: {exc.strerror}"
        raise SpecWriteError(f"{directory}: {why}") from None
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise SpecWriteError(
                f"{directory}: cannot make its changes durable (fsync): {exc.strerror}"
            ) from None
    finally:
        os.close(fd)


#: ``.<name>.<8 random characters>.tmp``, as :func:`tempfile.mkstemp` names them.
_TEMP = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp")
#: The longest file name of Linux file systems, in bytes (NAME_MAX of ext4, xfs, btrfs, tmpfs).
NAME_MAX = 255
#: The longest name of a file written here, in bytes: its temporary file's name, 14 bytes longer,
#: must fit in NAME_MAX too.
WRITTEN_NAME_MAX = NAME_MAX - len("..12345678.tmp")


def remove_stale(directory: Path, names: Collection[str]) -> list[str]:
    """Remove the temporary files of ``names`` in ``directory``: regular files named as
    :class:`StagedFile` names them and owned by this process's user, nothing else. Call it only
    while no other writer stages files there (holding the directory's lock). Returns the names
    removed."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        match = _TEMP.fullmatch(entry.name)
        if match is None or match["name"] not in names:
            continue
        with contextlib.suppress(OSError):
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(entry.path)
                removed.append(entry.name)
    return removed


class StagedFile:
    """New contents for ``path``, written (and fsynced unless not ``durable``) to a temporary file
    beside it.

    :meth:`commit` renames it into place; :meth:`discard` removes it. Raises
    :class:`SpecWriteError` (and leaves nothing behind) when the data cannot be written.
    """

    def __init__(self, path: Path, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
        self.path = path
        directory = path.parent
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        except OSError as exc:
            raise SpecWriteError(f"{path}: cannot create a file in {directory}: {exc.strerror}") from None
        self._tmp: str | None = tmp
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fchmod(fh.fileno(), mode)
                if durable:
                    os.fsync(fh.fileno())
                #: The staged file's identity, which the target has once committed or created.
                self.info = os.fstat(fh.fileno())
        except OSError as exc:
            self.discard()
            raise SpecWriteError(f"{path}: cannot write: {exc.strerror or exc}") from None

    def commit(self) -> None:
        """Replace the target with the staged data (the directory is fsynced by the caller)."""
        if self._tmp is None:
            raise SpecWriteError(f"{self.path}: nothing staged")
        try:
            os.replace(self._tmp, self.path)
        except OSError as exc:
            self.discard()
            raise SpecWriteError(f"{self.path}: cannot replace: {exc.strerror or exc}") from None
        self._tmp = None

    def create(self) -> bool:
        """Give the staged data the target's name only where there is none: ``link`` fails when
        another process created it meanwhile, so there is no window between a check and the
        rename. False then (the staged file is removed, the other file stays); the directory is
        fsynced by the caller."""
        if self._tmp is None:
            raise SpecWriteError(f"{self.path}: nothing staged")
        try:
            os.link(self._tmp, self.path, follow_symlinks=False)
        except FileExistsError:
            return False
        except OSError as exc:
            raise SpecWriteError(f"{self.path}: cannot create: {exc.strerror or exc}") from None
        finally:
            self.discard()
        return True

    def discard(self) -> None:
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            self._tmp = None
