"""Spec files on disk: where they live, what they are called, and reading one safely."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
from pathlib import Path

from cdi_plugin.cdi import codec
from cdi_plugin.cdi.names import Kind
from cdi_plugin.errors import SpecLoadError
from cdi_plugin.recurring import Recurring
from cdi_plugin.store.atomic import WRITTEN_NAME_MAX
from cdi_plugin.wording import file_type

log = logging.getLogger(__name__)

STATIC_DIR = Path("/etc/cdi")
DYNAMIC_DIR = Path("/var/run/cdi")
#: The directories runtimes read by default, lowest priority first (a later directory wins).
DEFAULT_SPEC_DIRS = (STATIC_DIR, DYNAMIC_DIR)
#: Names the spec directories the runtimes of this host read, when they are not the default ones.
SPEC_DIRS_ENV = "CDI_SPEC_DIRS"
#: Runtimes read only these suffixes (not ``.yml``), without recursing into subdirectories.
SPEC_SUFFIXES: dict[str, codec.Format] = {".json": "json", ".yaml": "yaml"}
#: The most characters a vendor and a class may have together: their spec file,
#: ``<vendor>-<class>.json`` (or ``.yaml``), must be a name :mod:`.atomic` can write.
KIND_CHARS_MAX = WRITTEN_NAME_MAX - len("-") - max(map(len, SPEC_SUFFIXES))
#: A spec this large is not a device spec; refusing it keeps a stray file from eating memory.
MAX_SPEC_BYTES = 4 * 1024 * 1024


def parse_spec_dirs(text: str) -> tuple[Path, ...]:
    """Directories separated by ``:``, as ``$CDI_SPEC_DIRS`` and ``--cdi-spec-dirs`` list them;
    empty entries are dropped, and a repeated directory keeps its last place: its priority in the
    CDI library is its last index, and a name it defines resolves from it over the ones between."""
    return tuple(reversed(dict.fromkeys(Path(d) for d in reversed(text.split(":")) if d)))


def spec_dirs() -> tuple[Path, ...]:
    """The spec directories runtimes read, lowest priority first: ``$CDI_SPEC_DIRS`` when it names
    any, else /etc/cdi and /var/run/cdi."""
    return parse_spec_dirs(os.environ.get(SPEC_DIRS_ENV, "")) or DEFAULT_SPEC_DIRS


def file_suffix(path: Path) -> str:
    """The suffix as the CDI Go library takes it (``filepath.Ext``): from the last dot of the
    name on, so ``.json`` is the suffix of a file named ``.json`` (``Path.suffix`` is empty)."""
    dot = path.name.rfind(".")
    return path.name[dot:] if dot >= 0 else ""


def spec_format(path: Path) -> codec.Format | None:
    """The format runtimes parse a file as, or None if they ignore the file."""
    return SPEC_SUFFIXES.get(file_suffix(path))


def spec_file_name(kind: Kind, fmt: codec.Format = "json") -> str:
    """``<vendor>-<class>.<ext>``, the CDI library's naming."""
    return f"{kind.vendor}-{kind.class_}.{'yaml' if fmt == 'yaml' else 'json'}"


def list_spec_files(directory: Path) -> list[Path]:
    """The files a runtime would read from ``directory``, in its order.

    A directory that does not exist yields []; one that cannot be listed (not a directory, no
    permission) is skipped with a warning, as runtimes skip it: one bad directory must not stop
    the others from being read. The warning is said once while the directory stays unreadable for
    the same reason, then summarised every few minutes, and the directory being read again is said
    once (:class:`~cdi_plugin.recurring.Recurring`). :func:`scan_spec_dir` raises instead.
    """
    try:
        found = scan_spec_dir(directory)
    except SpecLoadError as exc:
        with _UNLISTED_LOCK:
            unlisted = _UNLISTED.setdefault(directory, Recurring(log))
        unlisted.report(logging.WARNING, f"skipping spec directory {exc}")
        return []
    if directory in _UNLISTED:
        with _UNLISTED_LOCK:
            ended = _UNLISTED.pop(directory) if directory in _UNLISTED else None
        if ended is not None:
            ended.recovered()
    return found


#: The spec directories that could not be listed the last time, while they cannot (a few: those
#: the runtimes of this node read).
_UNLISTED: dict[Path, Recurring] = {}
_UNLISTED_LOCK = threading.Lock()


def scan_spec_dir(directory: Path) -> list[Path]:
    """Like :func:`list_spec_files`, but a directory that cannot be listed raises :class:`SpecLoadError`.

    A spec directory that is itself a symbolic link holds no specs: the CDI library walks it
    without following the link (Go's ``filepath.Walk``), so runtimes resolve nothing from it.
    """
    try:
        fd = open_spec_dir(directory)
        try:
            with os.scandir(fd) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return []
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            with contextlib.suppress(OSError):
                mode = os.lstat(directory).st_mode
                why = LINKED_DIR if stat.S_ISLNK(mode) else f"is {file_type(mode)}, not a directory"
                raise SpecLoadError(str(directory), "", "not-a-directory", why) from None
        raise SpecLoadError(str(directory), "", *_os_reason(exc)) from None
    return [
        directory / e.name
        for e in entries
        if not e.is_dir(follow_symlinks=False) and e.name.endswith((".json", ".yaml"))
    ]


#: Why a spec directory that is a symbolic link is skipped.
LINKED_DIR = (
    "is a symbolic link, which runtimes' CDI library does not follow; name the directory it points to"
)


def open_spec_dir(directory: Path) -> int:
    """A descriptor of ``directory`` for listing it, never through a symbolic link in its last
    component (OSError ENOTDIR there: runtimes read nothing from it)."""
    return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def is_linked_dir(directory: Path) -> bool:
    """Whether ``directory`` is a symbolic link (whose files runtimes do not read)."""
    try:
        return stat.S_ISLNK(os.lstat(directory).st_mode)
    except OSError:
        return False


#: The most symbolic links the kernel follows in one path (ELOOP beyond).
_MAX_LINKS = 40


def link_chain(path: Path) -> tuple[Path, ...]:
    """The files a runtime's read of ``path`` goes through after it: each symbolic link it points
    to in turn, then the file read (or the name missing at the end of a dangling chain); empty
    when ``path`` is not a link. Each is named in its directory with that directory's own links
    resolved, as a watch of the directory reports it. A change of any of them changes what a
    runtime reads. A loop, or more links than the kernel follows, ends the chain."""
    chain: list[Path] = []
    current = str(path)
    for _ in range(_MAX_LINKS):
        try:
            target = os.readlink(current)
        except OSError:  # not a link, or gone: the end
            break
        joined = os.path.join(os.path.dirname(current), target)
        name = os.path.basename(joined)
        if name in {"", ".", ".."}:  # a link to a directory: no file to follow
            break
        following = Path(os.path.realpath(os.path.dirname(joined))) / name
        if following in chain:
            break
        chain.append(following)
        current = str(following)
    return tuple(chain)


def _os_reason(exc: OSError) -> tuple[str, str]:
    """The rule and a short reason for an OS error."""
    return {
        errno.ENOENT: ("not-found", "no such file or directory"),
        errno.EACCES: ("unreadable", "permission denied"),
        errno.EPERM: ("unreadable", "operation not permitted"),
        errno.EISDIR: ("not-a-file", "is a directory, not a spec file"),
        errno.ENOTDIR: ("not-a-directory", "not a directory"),
        errno.ELOOP: ("unreadable", "too many levels of symbolic links"),
    }.get(exc.errno or 0, ("unreadable", exc.strerror or str(exc)))


def _size(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def read_file(path: Path, max_bytes: int, what: str, *, follow_links: bool = True) -> bytes:
    """Read a file another program may have put in place: every spec, record and config.

    It must be a regular file of at most ``max_bytes`` (checked on the open descriptor, so a file
    swapped in between check and read is seen); nothing but a regular file is opened (opening a
    device can act on it: a tape rewinds, a modem hangs up), opening never blocks (a FIFO does not
    wait for a writer), and without ``follow_links`` a symbolic link is refused. Every failure is a one-line
    :class:`SpecLoadError` naming the file and calling it ``what`` (``a device spec``) where needed;
    a file that is not a regular file is named for what it is (a FIFO, a directory, a device...).
    """
    return read_file_stat(path, max_bytes, what, follow_links=follow_links)[0]


def read_file_stat(
    path: Path, max_bytes: int, what: str, *, follow_links: bool = True
) -> tuple[bytes, os.stat_result]:
    """:func:`read_file`, and the status of the file read (from its open descriptor)."""
    source = str(path)
    fd, info = open_regular(path, what, follow_links=follow_links)
    try:
        data = b""
        if info.st_size <= max_bytes:
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise SpecLoadError(source, "", *_os_reason(exc)) from None
    finally:
        os.close(fd)
    if info.st_size > max_bytes or len(data) > max_bytes:
        raise SpecLoadError(
            source, "", "too-large", f"the file is larger than {_size(max_bytes)}, too large for {what}"
        )
    return data, info


def open_regular(path: Path, what: str, *, follow_links: bool = True) -> tuple[int, os.stat_result]:
    """Open a file for reading as :func:`read_file` does (never blocking, nothing but a regular
    file opened): its descriptor and status, or :class:`SpecLoadError`."""
    source = str(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:  # nothing but a regular file is opened (a swap after this check is seen on the descriptor)
        _check_regular((os.stat if follow_links else os.lstat)(path).st_mode, source, what)
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:  # swapped for a link after the lstat
            raise SpecLoadError(
                source, "", "not-a-file", "is a symbolic link, which is not followed"
            ) from None
        if exc.errno == errno.ENXIO:  # a socket, or a device node without its device
            with contextlib.suppress(OSError):
                _check_regular((os.stat if follow_links else os.lstat)(path).st_mode, source, what)
        raise SpecLoadError(source, "", *_os_reason(exc)) from None
    try:
        info = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise SpecLoadError(source, "", *_os_reason(exc)) from None
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        _check_regular(info.st_mode, source, what)
    return fd, info


def _check_regular(mode: int, source: str, what: str) -> None:
    if stat.S_ISLNK(mode):
        raise SpecLoadError(source, "", "not-a-file", "is a symbolic link, which is not followed")
    if not stat.S_ISREG(mode):
        raise SpecLoadError(source, "", "not-a-file", f"is {file_type(mode)}, not {what}")


def read_spec_bytes(path: Path, max_bytes: int = MAX_SPEC_BYTES) -> bytes:
    """Read a spec file (through symbolic links, as runtimes do) with :func:`read_file`."""
    return read_file(path, max_bytes, "a device spec")
