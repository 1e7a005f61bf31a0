"""One resource's advertised device IDs, kept device by device.

:class:`AdvertisedKind` applies the catalog's rules (:mod:`.resources`) to the devices of one kind
as they change: a change to one device costs a few dictionary operations, plus, when a device
comes or goes, one pass in order over the kind's IDs to lay out the new list. The result is what
:func:`~.resources.build_catalog` gives for the same devices (but for an ID two devices would
share, which valid CDI names cannot give: here the device advertised first keeps it).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from cdi_plugin.cdi.names import natural_key
from cdi_plugin.deviceplugin.resources import Note, clash_note, device_ids
from cdi_plugin.inventory.record import ServedDevice


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    """One advertised device ID: a replica of an inventory device."""

    id: str
    replica: int
    device: ServedDevice

    @property
    def qualified_name(self) -> str:
        return self.device.cdi_name

    @property
    def healthy(self) -> bool:
        return self.device.healthy

    @property
    def reason(self) -> str:
        return self.device.reason

    @property
    def numa(self) -> tuple[int, ...]:
        return self.device.numa_nodes


#: (what the device was, what it is now): None when it was not, or is no longer, advertised.
Change = tuple[ServedDevice | None, ServedDevice | None]


class AdvertisedKind:
    def __init__(self, kind: str, replicas: int) -> None:
        self.kind = kind
        self.replicas = replicas
        #: Device ID -> status, in the order advertised (device names in natural order, then replicas).
        self.devices: Mapping[str, DeviceStatus] = MappingProxyType({})
        self._order: list[str] = []  # the advertised devices' CDI names, sorted by :func:`_key`
        self._statuses: dict[str, tuple[DeviceStatus, ...]] = {}  # CDI name -> its IDs' statuses
        self._holders: dict[str, str] = {}  # device ID -> CDI name

    def apply(
        self, devices: Mapping[str, ServedDevice], names: Iterable[str]
    ) -> tuple[dict[str, Change], list[Note]]:
        """Take these devices of the kind as ``devices`` has them now (absent: gone); what changed
        in what is advertised, by CDI name, and the notes of devices not advertised."""
        changes: dict[str, Change] = {}
        notes: list[Note] = []
        laid_out = True  # False when a device came or went: the order must be laid out again
        updated = dict(self.devices)
        for name in names:
            device = devices.get(name)
            held = self._statuses.get(name)
            was = held[0].device if held else None
            if device is not None and held:
                if device != was:
                    fresh = tuple(DeviceStatus(s.id, s.replica, device) for s in held)
                    self._statuses[name] = fresh
                    updated.update((s.id, s) for s in fresh)
                    changes[name] = (was, device)
                continue
            if held:
                self._drop(name, held)
                laid_out = False
                changes[name] = (was, None)
            if device is not None and self._add(device, notes):
                laid_out = False
                changes[name] = (was, device)
        if not changes:
            return changes, notes
        if laid_out:
            self.devices = MappingProxyType(updated)
        else:
            statuses = self._statuses
            self.devices = MappingProxyType({s.id: s for n in self._order for s in statuses[n]})
        return changes, notes

    def _drop(self, name: str, held: tuple[DeviceStatus, ...]) -> None:
        del self._statuses[name]
        for status in held:
            del self._holders[status.id]
        del self._order[bisect.bisect_left(self._order, _key(name), key=_key)]

    def _add(self, device: ServedDevice, notes: list[Note]) -> bool:
        ids, note = device_ids(device, self.replicas)
        if note is not None:
            notes.append(note)
        fresh: list[DeviceStatus] = []
        for i, device_id in enumerate(ids):
            holder = self._holders.get(device_id)
            if holder is not None:
                notes.append(clash_note(self.kind, device.cdi_name, i, device_id, holder))
                continue
            self._holders[device_id] = device.cdi_name
            fresh.append(DeviceStatus(device_id, i, device))
        if not fresh:
            return False
        self._statuses[device.cdi_name] = tuple(fresh)
        bisect.insort(self._order, device.cdi_name, key=_key)
        return True


def _key(cdi_name: str) -> tuple[tuple[tuple[int, int, str], ...], str]:
    """Device names in natural order (``dev2`` before ``dev10``), then by name (``dev02``, ``dev2``).
    Computed for each comparison rather than kept: a few per change, against 1000 keys held."""
    return natural_key(cdi_name.partition("=")[2]), cdi_name
