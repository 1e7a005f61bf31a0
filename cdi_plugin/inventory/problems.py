"""Spec files and devices the inventory skips, and why, logged once per problem while it lasts."""

from __future__ import annotations

import logging

from cdi_plugin.inventory.record import ambiguous_reason
from cdi_plugin.store.registry import Snapshot

log = logging.getLogger(__name__)


class ProblemLog:
    def __init__(self) -> None:
        self._logged: set[str] = set()
        #: Device names several files of one directory define -> those files.
        self.ambiguous: dict[str, list[str]] = {}

    def update(self, snapshot: Snapshot) -> None:
        """Log the broken files and conflicting devices of ``snapshot`` not logged before."""
        current: set[str] = set()
        for broken in snapshot.broken:
            for problem in broken.problems[:1]:
                where = f"{problem.pointer}: " if problem.pointer else ""
                current.add(f"skipping spec file {broken.path}: {where}{problem.message}")
        self.ambiguous = {}
        for conflict in snapshot.conflicts:
            self.ambiguous.setdefault(conflict.qualified_name, []).extend(map(str, conflict.paths))
        for name, paths in self.ambiguous.items():
            current.add(f"skipping device {name}: {ambiguous_reason(paths)}")
        for line in sorted(current - self._logged):
            log.warning("%s", line)
        self._logged = current
