"""What the DRA driver needs from the device inventory, and nothing more.

The inventory (:mod:`cdi_plugin.inventory`, which also feeds the device plugin) knows which CDI
devices this node serves, their health and NUMA node, and the udev facts they were discovered
from; its :class:`~cdi_plugin.inventory.SpecInventory` satisfies :class:`Inventory`. The driver
reads the current devices, follows changes and asks before handing a device out; it never looks
at spec files or udev itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol

from cdi_plugin.inventory.record import ServedDevice, UdevFacts

__all__ = ["Inventory", "ServedDevice", "UdevFacts"]


class Inventory(Protocol):
    def devices(self) -> Mapping[str, ServedDevice]:
        """The devices served now, by CDI name."""
        ...

    def changes(self) -> AsyncIterator[Mapping[str, ServedDevice]]:
        """The devices now, then again after every change (coalesced: intermediate states may be skipped)."""
        ...

    async def settled(self) -> None:
        """Return once every change of the spec directories made before the call is applied."""
        ...

    def problem(self, cdi_name: str) -> str | None:
        """Why the device must not be handed out now (unresolvable, a host node gone), or None."""
        ...
