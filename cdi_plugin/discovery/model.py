"""What discovery hands to the generator: plain, immutable facts about host devices.

Discovery knows nothing about CDI. A :class:`DeviceSource` answers a :class:`Query` (which
subsystems, which extra ``/dev`` globs, which sysfs attributes the device classes look at) with
:class:`DiscoveredDevice` values; the udev implementation is the only code that imports pyudev.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Protocol

_EMPTY: Mapping[str, str] = MappingProxyType({})


def _mapping() -> Any:
    """A read-only mapping field: empty by default, left out of ``hash()`` (mappings have none)."""
    return field(default_factory=lambda: _EMPTY, hash=False)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """The host device node as ``stat`` sees it."""

    type: Literal["c", "b"]
    major: int
    minor: int
    mode: int  # permission bits only (st_mode & 0o7777)
    uid: int
    gid: int


@dataclass(frozen=True, slots=True)
class Ancestor:
    """A parent device in sysfs (e.g. the PCI device above a DRM card), nearest first."""

    subsystem: str
    sys_name: str
    sys_path: str
    driver: str | None = None
    properties: Mapping[str, str] = _mapping()
    attributes: Mapping[str, str] = _mapping()  # only the attributes the query asked for


@dataclass(frozen=True, slots=True)
class DiscoveredDevice:
    """One host device.

    ``sys_path`` is empty and ``subsystem`` is ``""`` for a node found only by a ``/dev`` glob
    (never announced to udev, e.g. ``/dev/nvidia0`` or a binderfs node).
    ``properties`` are udev properties (from the udev database where udevd runs, else from the
    sysfs ``uevent`` file); values come from the device and may hold hostile text.
    """

    subsystem: str
    sys_name: str
    sys_path: str = ""
    devnode: str | None = None
    devtype: str | None = None
    driver: str | None = None
    node: NodeInfo | None = None
    devlinks: tuple[str, ...] = ()
    properties: Mapping[str, str] = _mapping()
    attributes: Mapping[str, str] = _mapping()  # only the attributes the query asked for
    ancestors: tuple[Ancestor, ...] = ()


@dataclass(frozen=True, slots=True)
class Query:
    """What to discover. Empty ``subsystems`` means every subsystem."""

    subsystems: frozenset[str] = frozenset()
    devnode_globs: tuple[str, ...] = ()  # absolute globs under /dev, matched with stat only
    attributes: frozenset[str] = frozenset()  # sysfs attribute names to read (device and ancestors)
    with_ancestors: bool = True


@dataclass(frozen=True, slots=True)
class Discovery:
    devices: tuple[DiscoveredDevice, ...]
    warnings: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class UdevEvent:
    """A uevent, as much as a watcher needs: what happened to which device.

    The event's other properties are not kept: a watcher reads the device again (by ``sys_path``,
    as a scan reads it: with its attributes, parents and the node's stat) or rescans.
    """

    action: str  # add, remove, change, move, bind, unbind, online, offline
    subsystem: str
    sys_name: str
    devnode: str | None = None
    sys_path: str = ""


class DeviceSource(Protocol):
    """Anything that can list host devices: udev, a fixture file, a test's list."""

    def discover(self, query: Query) -> Discovery: ...


class DeviceLookup(Protocol):
    """A source that can also read one device, as ``discover`` would report it."""

    def discover(self, query: Query) -> Discovery: ...

    def lookup(self, sys_path: str, query: Query) -> DiscoveredDevice | None:
        """The device at ``sys_path`` if it exists and is of the query's subsystems, else None."""
        ...


class StaticSource:
    """A source over a list (tests, benchmarks): filters by subsystem only; ``devices`` may be
    changed between calls. Counts its enumerations."""

    def __init__(self, devices: Sequence[DiscoveredDevice]) -> None:
        self.devices = list(devices)
        self.enumerations = 0

    def lookup(self, sys_path: str, query: Query) -> DiscoveredDevice | None:
        found = [d for d in self.devices if d.sys_path == sys_path and d.subsystem]
        if not found or (query.subsystems and found[0].subsystem not in query.subsystems):
            return None
        return found[0]

    def discover(self, query: Query) -> Discovery:
        self.enumerations += 1
        if not query.subsystems:
            return Discovery(tuple(self.devices))
        wanted = query.subsystems | {""}
        return Discovery(tuple(d for d in self.devices if d.subsystem in wanted))
