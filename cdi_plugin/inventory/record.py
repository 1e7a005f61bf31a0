"""The inventory's record of one device: the shape every consumer (device plugin, DRA) reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdi_plugin.wording import defined_in

#: Why a device in its grace period is Unhealthy.
GONE_REASON = "its CDI spec entry is gone"
NOT_SERVED_REASON = "its kind is no longer served"


def ambiguous_reason(paths: Sequence[str]) -> str:
    """Why a device whose name several files of one directory define is not served."""
    return f"{defined_in(list(paths))} at the same priority, so no runtime resolves it"


@dataclass(frozen=True, slots=True, kw_only=True)
class UdevFacts:
    """udev properties a DeviceClass can select on; ``None`` when unknown or not stable."""

    subsystem: str | None = None
    driver: str | None = None
    vendor_id: str | None = None
    model_id: str | None = None
    serial: str | None = None
    pci_address: str | None = None  # domain:bus:device.function, e.g. 0000:3b:00.0


NO_FACTS = UdevFacts()


@dataclass(frozen=True, slots=True, kw_only=True)
class ServedDevice:
    """One device the node serves, named by its fully-qualified CDI name."""

    cdi_name: str  # vendor/class=name; it resolves in the spec directories
    healthy: bool = True
    reason: str = ""  # why it is unhealthy
    #: The NUMA nodes of its host device nodes (the last known ones while it is Unhealthy).
    numa_nodes: tuple[int, ...] = ()
    udev: UdevFacts = NO_FACTS
    #: Monotonic time its spec entry disappeared (or its kind stopped being served); None while served.
    gone_since: float | None = None

    @property
    def kind(self) -> str:
        return self.cdi_name.partition("=")[0]

    @property
    def name(self) -> str:
        """The device name inside its kind (after the ``=``)."""
        return self.cdi_name.partition("=")[2]

    @property
    def numa_node(self) -> int | None:
        """The device's NUMA node when it has exactly one."""
        return self.numa_nodes[0] if len(self.numa_nodes) == 1 else None
