"""The inventory as one consumer sees it: only the devices of the kinds it serves.

``serve`` runs one inventory for both of its sides; the configuration gives each kind to one API
(or, for a kind shared by design, to both), and the DRA driver reads the inventory through a
:class:`KindView` that keeps the kinds given to DRA. The view offers what the driver reads
(:class:`cdi_plugin.dra.inventory.Inventory`): the devices, their changes, the wait for pending
changes and the last check before a device is handed out. Which kinds it keeps is decided once
per kind (the settings do not change while the process runs), and each kind left out is logged
once, with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from types import MappingProxyType
from typing import Protocol

from cdi_plugin.inventory.record import ServedDevice

log = logging.getLogger(__name__)

Devices = Mapping[str, ServedDevice]


class Followed(Protocol):
    """The part of :class:`~cdi_plugin.inventory.SpecInventory` a view reads."""

    def devices(self) -> Devices: ...

    def changes(self) -> AsyncIterator[Devices]: ...

    async def settled(self) -> None: ...

    def problem(self, cdi_name: str) -> str | None: ...


class KindView:
    def __init__(self, inventory: Followed, left_out: Callable[[str], str | None], consumer: str) -> None:
        """``left_out(kind)``: why ``consumer`` does not serve the kind, or None when it does;
        logged once per kind left out, when the kind first appears."""
        self._inventory = inventory
        self._left_out = left_out
        self._consumer = consumer
        self._kinds: dict[str, bool] = {}
        self._of: Devices | None = None  # the inventory's devices :attr:`_devices` was made from
        self._devices: Devices = MappingProxyType({})

    def keeps(self, kind: str) -> bool:
        kept = self._kinds.get(kind)
        if kept is None:
            why = self._left_out(kind)
            kept = self._kinds[kind] = why is None
            if why is not None:
                log.info("%s: not serving kind %s: %s", self._consumer, kind, why)
        return kept

    def devices(self) -> Devices:
        """The devices of the kept kinds, by CDI name, in the inventory's order; the same object
        as long as they did not change."""
        devices = self._inventory.devices()
        if devices is not self._of:
            self._of = devices
            kept = {name: d for name, d in devices.items() if self.keeps(d.kind)}
            if kept != self._devices:
                self._devices = MappingProxyType(kept)
        return self._devices

    async def changes(self) -> AsyncIterator[Devices]:
        """The devices now, then again after every change of a kept kind's devices."""
        last: Devices | None = None
        async for _ in self._inventory.changes():
            devices = self.devices()
            if devices is not last:
                last = devices
                yield devices

    async def settled(self) -> None:
        await self._inventory.settled()

    def problem(self, cdi_name: str) -> str | None:
        kind = cdi_name.partition("=")[0]
        if not self.keeps(kind):
            return f"kind {kind} is not served through this API"
        return self._inventory.problem(cdi_name)
