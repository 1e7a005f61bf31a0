"""The spec directories as the plugin reads them: a :class:`SpecRegistry` plus a cheap change check.

:meth:`SpecSource.current` lists the directories and stats the spec files and cdi-gen's ownership
record (no reads); only when one of them changed does it ask the registry to refresh, which
re-reads only the changed files. Allocate calls it on every request, so names are resolved against
what is on disk at that moment, for the price of a directory listing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from cdi_plugin.store.files import SPEC_SUFFIXES
from cdi_plugin.store.ownership import RECORD_NAME
from cdi_plugin.store.registry import Snapshot, SpecRegistry

Stamp = tuple[tuple[str, int, int, int, int], ...]


def _stamp(directory: Path) -> Stamp:
    out = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                name = entry.name
                if not (name.endswith(tuple(SPEC_SUFFIXES)) or name == RECORD_NAME):
                    continue
                try:
                    st = entry.stat()
                except OSError:
                    continue
                out.append((name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    except OSError:
        return ()
    out.sort()
    return tuple(out)


class SpecSource:
    def __init__(self, dirs: Sequence[Path]) -> None:
        self.dirs = tuple(dirs)
        self._registry = SpecRegistry(self.dirs)
        self._stamps: tuple[Stamp, ...] | None = None
        self._snapshot: Snapshot | None = None
        #: Incremented whenever a new snapshot was taken because something changed.
        self.generation = 0

    def current(self) -> Snapshot:
        """The snapshot of the directories as they are now; cheap when nothing changed.

        The directories are listed rather than judged by their mtime, which file systems keep
        at a coarse (jiffy) granularity: two entries added within one tick would look alike.
        """
        stamps = tuple(_stamp(d) for d in self.dirs)
        if self._snapshot is None or stamps != self._stamps:
            self._stamps = stamps
            self._snapshot = self._registry.refresh()
            self.generation += 1
        return self._snapshot
