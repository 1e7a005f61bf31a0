"""The directories to watch for device nodes that match devnode globs (``/dev/nvidia[0-9]*``).

Globs name host paths under ``/dev``; ``dev_root`` is where that tree is visible to this process
(``/dev``, a mounted ``/host/dev``, a temporary directory in tests), as for discovery. A glob whose
directory part has a wildcard (``/dev/bus/usb/*/*``) is watched on every directory that matches
now and on the fixed part above the first wildcard, so that new directories are seen; the set is
computed again after every change.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from pathlib import Path

from cdi_plugin.discovery.query import DEV
from cdi_plugin.globs import path_glob_match


def _subdirs(directory: Path, pattern: str) -> list[Path]:
    try:
        with os.scandir(directory) as entries:
            return [Path(e.path) for e in entries if e.is_dir() and path_glob_match(pattern, e.name)]
    except OSError:
        return []


def glob_dirs(globs: Iterable[str], dev_root: str = DEV) -> frozenset[Path]:
    """Where a node matching one of ``globs`` could appear, as paths under ``dev_root``."""
    root = Path(dev_root)
    out: set[Path] = set()
    for pattern in globs:
        parts = pattern.split("/")[2:-1]  # the components between /dev and the node's name
        fixed = 0
        while fixed < len(parts) and not glob.has_magic(parts[fixed]):
            fixed += 1
        level = [root.joinpath(*parts[:fixed])]
        out.update(level)
        for part in parts[fixed:]:
            level = [sub for d in level for sub in _subdirs(d, part)]
            out.update(level)
    return frozenset(out)


def host_path(directory: Path, name: str, dev_root: str = DEV) -> str | None:
    """The ``/dev/...`` name of the entry ``name`` of ``directory`` (a path under ``dev_root``)."""
    local = os.path.join(directory, name)
    root = dev_root.rstrip("/")
    if not local.startswith(root + "/"):
        return None
    return DEV + local[len(root) :]
