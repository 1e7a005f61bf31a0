"""Creating a spec directory and its missing parents without following another user's links.

The path is walked from ``/`` one component at a time, each opened relative to its parent with
``O_NOFOLLOW``: a directory this process creates is opened (and given mode 0755) through that
descriptor, never by name again, so a symbolic link swapped in by another user of a writable parent
is not followed. An existing symbolic link is followed only when this process's user (root) owns
it, such as ``/var/run -> /run``; one owned by another user is refused.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from cdi_plugin.errors import SpecWriteError

_MAX_LINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _fail(path: Path, reason: str) -> SpecWriteError:
    return SpecWriteError(f"{path}: cannot create the spec directory: {reason}")


def make_dirs(directory: Path) -> bool:
    """Create ``directory`` and every missing parent, each mode 0755 whatever the umask; True if
    ``directory`` itself was created. Raises :class:`SpecWriteError`."""
    parts = list(Path(os.path.abspath(directory)).parts[1:])
    fd = os.open("/", _DIR_FLAGS)
    links = 0
    made = False
    try:
        while parts:
            name = parts.pop(0)
            made = False
            try:
                os.mkdir(name, 0o755, dir_fd=fd)
                made = True
            except FileExistsError:
                pass
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR) or made:
                    raise _fail(directory, f"{name}: {exc.strerror or exc}") from None
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISLNK(st.st_mode):
                    raise _fail(directory, f"{name} is not a directory") from None
                if st.st_uid != os.geteuid() or links >= _MAX_LINKS:
                    raise _fail(
                        directory, f"{name} is a symbolic link owned by uid {st.st_uid}; not following it"
                    ) from None
                links += 1
                target = os.readlink(name, dir_fd=fd)
                parts = list(Path(target).parts) + parts
                if target.startswith("/"):
                    parts.pop(0)
                    os.close(fd)
                    fd = os.open("/", _DIR_FLAGS)
                continue
            os.close(fd)
            fd = child
            if made:
                if os.fstat(fd).st_uid != os.geteuid():
                    raise _fail(directory, f"{name} was replaced by another user's directory")
                os.fchmod(fd, 0o755)
    except OSError as exc:
        raise _fail(directory, exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    return made
