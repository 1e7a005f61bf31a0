"""A real :class:`~cdi_plugin.dra.inventory.Inventory` read from spec directories on disk.

Devices are those that resolve in the directories as a runtime reads them (the store's
SpecRegistry); a device is unhealthy when one of its host device nodes is missing. udev facts
and NUMA nodes, which spec files do not carry, come from a table as the scanner would give them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

from cdi_plugin.dra.inventory import ServedDevice, UdevFacts
from cdi_plugin.store.registry import SpecRegistry


class SpecDirInventory:
    def __init__(
        self,
        dirs: Sequence[Path],
        facts: Mapping[str, tuple[UdevFacts, int | None]] | None = None,
    ) -> None:
        self.registry = SpecRegistry(dirs)
        self.facts = dict(facts or {})
        self._devices: dict[str, ServedDevice] = {}
        self._changed = asyncio.Condition()
        self.refresh_now()

    def refresh_now(self) -> bool:
        """Re-read the directories; True when the devices changed."""
        devices = {}
        for name, resolved in sorted(self.registry.refresh().devices.items()):
            nodes = [*(resolved.device.container_edits.device_nodes or ())]
            nodes += (
                (resolved.spec.container_edits.device_nodes or ()) if resolved.spec.container_edits else ()
            )
            missing = [n.host_path or n.path for n in nodes if not os.path.exists(n.host_path or n.path)]
            udev, numa = self.facts.get(name, (UdevFacts(), None))
            devices[name] = ServedDevice(
                cdi_name=name,
                healthy=not missing,
                reason=f"{missing[0]} is missing" if missing else "",
                numa_node=numa,
                udev=udev,
            )
        changed = devices != self._devices
        self._devices = devices
        return changed

    async def refresh(self) -> None:
        if self.refresh_now():
            async with self._changed:
                self._changed.notify_all()

    def devices(self) -> Mapping[str, ServedDevice]:
        return self._devices

    async def changes(self) -> AsyncIterator[Mapping[str, ServedDevice]]:
        while True:
            current = self._devices
            yield current
            async with self._changed:
                await self._changed.wait_for(lambda seen=current: self._devices is not seen)
