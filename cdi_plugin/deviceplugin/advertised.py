"""One resource's advertised device IDs, kept device by device.

:class:`AdvertisedKind` applies the catalog's rules (:mod:`.resources`) to the devices of one kind
as they change: a change to one device costs a few dictionary operations and a copy of the
kind's ID mapping (no Python loop over the kind's devices). The result is what
:func:`~.resources.build_catalog` gives for the same devices (but for an ID two devices would
share, which valid CDI names cannot give: here the device advertised first keeps it). Each change
is a :class:`Revision` naming the IDs it touched, so that what is built from the IDs (the
ListAndWatch response) can follow it device by device too.
"""

from __future__ import annotations

import bisect
import itertools
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

_serials = itertools.count()


@dataclass(frozen=True, slots=True)
class Revision:
    """One state of a kind's advertised IDs: ``ids`` were added, replaced or dropped since the
    revision numbered ``after`` (serial numbers are unique in the process)."""

    serial: int
    after: int
    ids: frozenset[str]


class AdvertisedKind:
    def __init__(self, kind: str, replicas: int) -> None:
        self.kind = kind
        self.replicas = replicas
        #: Device ID -> status, in the order advertised (device names in natural order, then replicas).
        self.devices: Mapping[str, DeviceStatus] = MappingProxyType({})
        self._ids: dict[str, DeviceStatus] = {}  # what :attr:`devices` shows (copied, never changed)
        self.revision = Revision(next(_serials), -1, frozenset())
        #: How many of :attr:`devices` are Healthy.
        self.healthy = 0
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
        updated = self._ids.copy()
        touched: set[str] = set()
        came: list[str] = []  # devices newly advertised: their IDs are laid out in order below
        healthy = self.healthy
        for name in names:
            device = devices.get(name)
            held = self._statuses.get(name)
            was = held[0].device if held else None
            if device is not None and held:
                if device != was:
                    fresh = tuple(DeviceStatus(s.id, s.replica, device) for s in held)
                    self._statuses[name] = fresh
                    updated.update((s.id, s) for s in fresh)
                    touched.update(s.id for s in fresh)
                    healthy += (device.healthy - held[0].healthy) * len(fresh)
                    changes[name] = (was, device)
                continue
            if held:
                self._drop(name, held)
                for status in held:
                    del updated[status.id]
                    touched.add(status.id)
                healthy -= held[0].healthy * len(held)
                changes[name] = (was, None)
            if device is not None and self._add(device, notes):
                fresh = self._statuses[name]
                came.append(name)
                touched.update(s.id for s in fresh)
                healthy += device.healthy * len(fresh)
                changes[name] = (was, device)
        if not changes:
            return changes, notes
        self._ids = self._in_order(updated, came) if came else updated
        self.devices = MappingProxyType(self._ids)
        self.healthy = healthy
        self.revision = Revision(next(_serials), self.revision.serial, frozenset(touched))
        return changes, notes

    def health(self) -> list[bool]:
        """As many True as there are Healthy IDs, and False for each other one (for counting)."""
        return [True] * self.healthy + [False] * (len(self.devices) - self.healthy)

    def _in_order(self, updated: dict[str, DeviceStatus], came: list[str]) -> dict[str, DeviceStatus]:
        """``updated`` with the IDs of the devices that ``came`` in their place: one device's are
        inserted before those of the device after it; several lay out the kind again."""
        statuses = self._statuses
        if len(came) > 1:
            return {s.id: s for n in self._order for s in statuses[n]}
        fresh = [(s.id, s) for s in statuses[came[0]]]
        after = bisect.bisect_right(self._order, _key(came[0]), key=_key)
        if after == len(self._order):
            updated.update(fresh)
            return updated
        items = list(updated.items())
        at = list(updated).index(statuses[self._order[after]][0].id)
        items[at:at] = fresh
        return dict(items)

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
