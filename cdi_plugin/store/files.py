"""Spec files on disk: where they live, what they are called, and reading one safely."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from cdi_plugin.cdi import codec
from cdi_plugin.cdi.names import Kind
from cdi_plugin.errors import SpecLoadError

STATIC_DIR = Path("/etc/cdi")
DYNAMIC_DIR = Path("/var/run/cdi")
#: The directories runtimes read, lowest priority first (a later directory wins).
DEFAULT_SPEC_DIRS = (STATIC_DIR, DYNAMIC_DIR)
#: Runtimes read only these suffixes (not ``.yml``), without recursing into subdirectories.
SPEC_SUFFIXES: dict[str, codec.Format] = {".json": "json", ".yaml": "yaml"}
#: A spec this large is not a device spec; refusing it keeps a stray file from eating memory.
MAX_SPEC_BYTES = 4 * 1024 * 1024


def spec_format(path: Path) -> codec.Format | None:
    """The format runtimes parse a file as, or None if they ignore the file."""
    return SPEC_SUFFIXES.get(path.suffix)


def spec_file_name(kind: Kind, fmt: codec.Format = "json") -> str:
    """``<vendor>-<class>.<ext>``, the CDI library's naming."""
    return f"{kind.vendor}-{kind.class_}.{'yaml' if fmt == 'yaml' else 'json'}"


def list_spec_files(directory: Path) -> list[Path]:
    """The files a runtime would read from ``directory``, in its order; [] if it does not exist."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    return [
        Path(e.path)
        for e in entries
        if not e.is_dir(follow_symlinks=False) and e.name.endswith((".json", ".yaml"))
    ]


def read_spec_bytes(path: Path, max_bytes: int = MAX_SPEC_BYTES) -> bytes:
    """Read a spec file, turning every OS failure into a one-line :class:`SpecLoadError`."""
    source = str(path)
    try:
        with open(path, "rb") as fh:
            info = os.fstat(fh.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise SpecLoadError(source, "", "not-a-file", "is a directory, not a spec file")
            if not stat.S_ISREG(info.st_mode):
                raise SpecLoadError(source, "", "not-a-file", "is not a regular file")
            data = fh.read(max_bytes + 1)
    except SpecLoadError:
        raise
    except OSError as exc:
        reason = {
            errno.ENOENT: ("not-found", "no such file or directory"),
            errno.EACCES: ("unreadable", "permission denied"),
            errno.EPERM: ("unreadable", "operation not permitted"),
            errno.EISDIR: ("not-a-file", "is a directory, not a spec file"),
            errno.ELOOP: ("unreadable", "too many levels of symbolic links"),
        }.get(exc.errno or 0, ("unreadable", exc.strerror or str(exc)))
        raise SpecLoadError(source, "", *reason) from None
    if len(data) > max_bytes:
        raise SpecLoadError(
            source,
            "",
            "too-large",
            f"the file is larger than {max_bytes // (1024 * 1024)} MiB, too large for a device spec",
        )
    return data
