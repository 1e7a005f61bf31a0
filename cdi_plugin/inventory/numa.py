"""NUMA node of a host device node, from sysfs.

``<sysfs>/dev/{char,block}/MAJ:MIN`` links to the device's sysfs directory; its ``device`` link
(when present) to the parent bus device. Walking up from there, the first ``numa_node`` file found
(PCI devices have one) gives the node; ``-1`` or no file means the device has no NUMA affinity.
The walk never leaves the sysfs root, which is injectable so tests can use a fake tree.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from cdi_plugin.inventory.health import Rdev


class NumaLocator:
    """Looks NUMA nodes up once per device number (they do not change while the node exists)."""

    def __init__(self, sysfs_root: Path = Path("/sys")) -> None:
        self.sysfs_root = sysfs_root
        self._cache: dict[Rdev, int | None] = {}

    def numa_nodes(self, rdevs: Iterable[Rdev]) -> tuple[int, ...]:
        """The distinct NUMA nodes of these device numbers, sorted; empty when none is known."""
        nodes = {self.numa_node(r) for r in rdevs}
        return tuple(sorted(n for n in nodes if n is not None))

    def numa_node(self, rdev: Rdev) -> int | None:
        if rdev not in self._cache:
            self._cache[rdev] = self._lookup(rdev)
        return self._cache[rdev]

    def forget(self, rdevs: Iterable[Rdev] | None = None) -> None:
        """Drop cached answers, of these device numbers or all (a device number may belong to
        another device after a hot-plug)."""
        if rdevs is None:
            self._cache.clear()
            return
        for rdev in rdevs:
            self._cache.pop(rdev, None)

    def _lookup(self, rdev: Rdev) -> int | None:
        try:
            root = self.sysfs_root.resolve()
            entry = root / "dev" / ("block" if rdev.block else "char") / f"{rdev.major}:{rdev.minor}"
            start = entry / "device" if (entry / "device").exists() else entry
            here = start.resolve(strict=True)
        except OSError:
            return None
        while here != root and root in here.parents:
            try:
                text = (here / "numa_node").read_text().strip()
            except FileNotFoundError:
                here = here.parent
                continue
            except OSError:
                return None
            try:
                node = int(text)
            except ValueError:
                return None
            return node if node >= 0 else None
        return None
