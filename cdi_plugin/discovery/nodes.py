"""Device nodes as ``stat`` sees them, and devnode globs expanded under /dev.

Paths handed around are always the host's ``/dev/...`` names (what a CDI spec must say); the
``dev_root`` argument says where that tree is visible to this process (``/dev`` normally, a
mounted copy such as ``/host/dev`` in a container, a temporary directory in tests).
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Iterable
from typing import Literal, NamedTuple

from cdi_plugin.discovery.model import NodeInfo
from cdi_plugin.discovery.query import DEV, check_devnode_glob


class GlobHit(NamedTuple):
    path: str  # the /dev/... name
    node: NodeInfo
    is_symlink: bool


def local_path(devnode: str, dev_root: str) -> str:
    """Where the host node ``devnode`` (``/dev/...``) is visible to this process."""
    if dev_root == DEV or not (devnode == DEV or devnode.startswith(DEV + "/")):
        return devnode
    return dev_root + devnode[len(DEV) :]


def node_from_stat(st: os.stat_result) -> NodeInfo | None:
    """The node facts of a character or block device; ``None`` for any other file type."""
    kind: Literal["c", "b"]
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    else:
        return None
    return NodeInfo(
        type=kind,
        major=os.major(st.st_rdev),
        minor=os.minor(st.st_rdev),
        mode=stat.S_IMODE(st.st_mode),
        uid=st.st_uid,
        gid=st.st_gid,
    )


def stat_node(devnode: str, dev_root: str = DEV) -> NodeInfo | None:
    """``stat`` (following symlinks) the host node ``devnode``. Raises :class:`OSError`."""
    return node_from_stat(os.stat(local_path(devnode, dev_root)))


def expand_globs(patterns: Iterable[str], dev_root: str, warnings: list[str]) -> list[GlobHit]:
    """Character and block nodes matching any of ``patterns`` (each checked first).

    Wildcards match within one path component only (no ``**`` recursion); other file types are
    ignored; a match that vanished meanwhile is ignored; any other ``stat`` failure becomes a warning.
    """
    found: dict[str, GlobHit] = {}
    escaped_root = glob.escape(dev_root)
    for pattern in patterns:
        check_devnode_glob(pattern)
        for local in glob.glob(escaped_root + pattern[len(DEV) :]):
            path = DEV + local[len(dev_root) :]
            if path in found:
                continue
            try:
                node = node_from_stat(os.stat(local))
                is_symlink = os.path.islink(local)
            except FileNotFoundError:
                continue
            except OSError as exc:
                warnings.append(f"devnode glob {pattern}: cannot stat {printable(path)}: {exc.strerror}")
                continue
            if node is not None:
                found[path] = GlobHit(path, node, is_symlink)
    return list(found.values())


def printable(text: str) -> str:
    """``text`` with control characters escaped, for one-line messages."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
