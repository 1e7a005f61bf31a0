"""Spec files the inventory skips, and why, logged once per problem while it lasts."""

from __future__ import annotations

import logging

from cdi_plugin.store.registry import Snapshot

log = logging.getLogger(__name__)


class ProblemLog:
    def __init__(self) -> None:
        self._logged: set[str] = set()

    def update(self, snapshot: Snapshot) -> None:
        """Log the broken files and conflicting devices of ``snapshot`` not logged before."""
        current: set[str] = set()
        for broken in snapshot.broken:
            for problem in broken.problems[:1]:
                where = f"{problem.pointer}: " if problem.pointer else ""
                current.add(f"skipping spec file {broken.path}: {where}{problem.message}")
        for conflict in snapshot.conflicts:
            paths = ", ".join(str(p) for p in conflict.paths)
            current.add(
                f"skipping device {conflict.qualified_name}: defined in {paths} at the same priority "
                f"(a runtime resolves neither)"
            )
        for line in sorted(current - self._logged):
            log.warning("%s", line)
        self._logged = current
