"""The device inventory fed by the spec directories: which devices this node serves, in which
kind, with which health and NUMA node, under which CDI name; and a change stream to follow.

:class:`SpecInventory` puts the parts together: a consistent reading of the directories
(:mod:`~cdi_plugin.inventory.source`), the kinds to serve (:mod:`~cdi_plugin.inventory.selection`),
host node health (:mod:`~cdi_plugin.inventory.health`) and NUMA nodes
(:mod:`~cdi_plugin.inventory.numa`), and the grace period (:mod:`~cdi_plugin.inventory.grace`).
Everything runs on the event loop thread without awaiting, so :meth:`devices` is always one
consistent state. Consumers follow it either in step (:meth:`follow`: called right after every
change, before anything else runs) or asynchronously (:meth:`changes`, or :attr:`changed`, which
fires after every change of the devices or of :meth:`node_dirs`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from types import MappingProxyType

from cdi_plugin.aio.pulse import Pulse
from cdi_plugin.inventory.grace import GracePeriod
from cdi_plugin.inventory.health import HealthTracker, check, host_nodes
from cdi_plugin.inventory.numa import NumaLocator
from cdi_plugin.inventory.problems import ProblemLog
from cdi_plugin.inventory.record import NO_FACTS, ServedDevice, UdevFacts
from cdi_plugin.inventory.selection import KindSelection
from cdi_plugin.inventory.source import Reading, SpecSource
from cdi_plugin.store.registry import Snapshot

Devices = Mapping[str, ServedDevice]


def _no_glob(kind: str) -> str | None:
    return None


class SpecInventory:
    def __init__(
        self,
        source: SpecSource,
        numa: NumaLocator,
        *,
        grace_period: float,
        matching_glob: Callable[[str], str | None] = _no_glob,
        facts: Callable[[str], UdevFacts | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``matching_glob(kind)`` names the ``--kind`` glob serving a kind cdi-gen did not write;
        ``facts(cdi_name)`` gives the udev facts of a device where they are known (spec files do
        not carry them)."""
        self.source = source
        self.numa = numa
        self.clock = clock
        self.grace = GracePeriod(grace_period)
        self.selection = KindSelection(matching_glob)
        self.health = HealthTracker()
        self.changed = Pulse()
        self._facts = facts
        self._followers: list[Callable[[], None]] = []
        self._problems = ProblemLog()
        self._reading: Reading | None = None
        self._devices: Devices = MappingProxyType({})

    # -- reading ----------------------------------------------------------------------------------

    def devices(self) -> Devices:
        """The devices served now (and those in their grace period), by CDI name, in name order."""
        return self._devices

    def follow(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every change, whoever caused it."""
        self._followers.append(listener)

    async def changes(self) -> AsyncIterator[Devices]:
        """The devices now, then again after every change (intermediate states may be skipped)."""
        last: Devices | None = None
        while True:
            seen = self.changed.count
            if self._devices is not last:
                last = self._devices
                yield last
            await self.changed.wait_after(seen)

    @property
    def reading(self) -> Reading | None:
        """The reading of the spec directories the devices were taken from."""
        return self._reading

    def node_dirs(self) -> frozenset[Path]:
        """Directories holding the host device nodes of served devices (for the health watch)."""
        return self.health.node_dirs

    def node_paths(self) -> frozenset[str]:
        """The host device node paths of served devices."""
        return self.health.node_paths

    def next_expiry(self) -> float | None:
        """When the next device in its grace period is due to go (monotonic seconds)."""
        return self.grace.next_expiry(self._devices.values())

    def problem(self, cdi_name: str, snapshot: Snapshot) -> str | None:
        """Why ``cdi_name`` must not be handed out, or None: it must resolve in ``snapshot``
        (taken by :meth:`sync` just before) and every host node it names must be present."""
        entry = snapshot.resolve(cdi_name)
        if entry is None:
            return "does not resolve in the CDI spec directories (removed, broken or conflicting)"
        health = check(host_nodes(entry.spec, entry.device))
        if not health.healthy:
            self._update(restat=True)
            return f"is Unhealthy: {health.reason}"
        return None

    # -- updating ---------------------------------------------------------------------------------

    def sync(self) -> Snapshot:
        """Catch up with the spec directories if anything in them changed; the current snapshot."""
        snapshot = self.source.current()
        reading = self.source.reading
        if reading is not None and reading is not self._reading:
            self._reconcile(reading)
        return snapshot

    def recheck_health(self) -> None:
        """Stat every host device node again (a watched directory changed)."""
        self._update(restat=True)

    def expire(self) -> None:
        """Drop the devices whose grace period is over."""
        self._update(restat=False)

    # -- internals --------------------------------------------------------------------------------

    def _reconcile(self, reading: Reading) -> None:
        self._reading = reading
        snapshot = reading.snapshot
        self._problems.update(snapshot)
        served = self.selection.select((str(e.kind) for e in snapshot.devices.values()), reading)
        nodes = {
            name: host_nodes(entry.spec, entry.device)
            for name, entry in snapshot.devices.items()
            if str(entry.kind) in served
        }
        self._update(restat=False, nodes_changed=self.health.track(nodes))

    def _update(self, *, restat: bool, nodes_changed: bool = False) -> None:
        """Recompute every device's record; fire :attr:`changed` when anything differs."""
        if restat:
            self.numa.forget()
        health = self.health.health(restat=restat)
        fresh: dict[str, ServedDevice] = {}
        for name, h in health.items():
            before = self._devices.get(name)
            if h.healthy:
                numa = self.numa.numa_nodes(h.rdevs)
            else:
                numa = before.numa_nodes if before is not None else ()
            udev = (self._facts(name) if self._facts is not None else None) or NO_FACTS
            fresh[name] = ServedDevice(
                cdi_name=name, healthy=h.healthy, reason=h.reason, numa_nodes=numa, udev=udev
            )
        snapshot = self._reading.snapshot if self._reading is not None else None
        devices = self.grace.carry(
            self._devices,
            fresh,
            self.clock(),
            lambda name: snapshot is not None and snapshot.resolve(name) is not None,
        )
        if devices != self._devices:
            self._devices = MappingProxyType(dict(sorted(devices.items())))
        elif not nodes_changed:
            return
        for listener in self._followers:
            listener()
        self.changed.fire()
