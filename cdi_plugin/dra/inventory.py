"""What the DRA driver needs from the device inventory, and nothing more.

The inventory (the layer that also feeds the device plugin) knows which CDI devices this node
serves, their health and NUMA node, and the udev facts they were discovered from. The driver
reads the current devices and follows changes; it never looks at spec files or udev itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True, kw_only=True)
class UdevFacts:
    """udev properties a DeviceClass can select on; ``None`` when unknown or not stable."""

    subsystem: str | None = None
    driver: str | None = None
    vendor_id: str | None = None
    model_id: str | None = None
    serial: str | None = None
    pci_address: str | None = None  # domain:bus:device.function, e.g. 0000:3b:00.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ServedDevice:
    """One device the node serves, named by its fully-qualified CDI name."""

    cdi_name: str  # vendor/class=name; it resolves in the spec directories
    healthy: bool = True
    reason: str = ""  # why it is unhealthy
    numa_node: int | None = None
    udev: UdevFacts = UdevFacts()

    @property
    def kind(self) -> str:
        return self.cdi_name.partition("=")[0]


class Inventory(Protocol):
    def devices(self) -> Mapping[str, ServedDevice]:
        """The devices served now, by CDI name."""
        ...

    def changes(self) -> AsyncIterator[Mapping[str, ServedDevice]]:
        """The devices now, then again after every change (coalesced: intermediate states may be skipped)."""
        ...
