"""The DRA tests serve the real inventory (:class:`~cdi_plugin.inventory.SpecInventory`) over spec
directories on disk, every kind served (as ``--kind '*'`` would), no grace period, and udev facts,
which spec files do not carry, from a table by device number as udev would give them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from cdi_plugin.inventory import NumaLocator, SpecInventory, SpecSource, UdevFacts
from cdi_plugin.inventory.health import Rdev


def spec_inventory(
    dirs: Sequence[Path],
    facts: Mapping[Rdev, UdevFacts] | Callable[[Rdev], UdevFacts | None] | None = None,
    *,
    sysfs: Path | None = None,
) -> SpecInventory:
    """The inventory of ``dirs``, read once; NUMA nodes from ``sysfs`` (default: none known)."""
    inventory = SpecInventory(
        SpecSource(dirs),
        NumaLocator(sysfs or dirs[0].parent / "sys"),
        grace_period=0.0,
        matching_glob=lambda kind: "*",
        facts=facts if callable(facts) else dict(facts or {}).get,
    )
    inventory.sync()
    return inventory


def refresh(inventory: SpecInventory) -> None:
    """What the plugin's watches do after a change: read the directories, stat the host nodes."""
    inventory.sync()
    inventory.recheck_health()
