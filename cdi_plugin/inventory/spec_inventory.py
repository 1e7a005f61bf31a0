"""The device inventory fed by the spec directories: which devices this node serves, in which
kind, with which health and NUMA node, under which CDI name; and a change stream to follow.

:class:`SpecInventory` puts the parts together: a consistent reading of the directories
(:mod:`~cdi_plugin.inventory.source`), the kinds to serve (:mod:`~cdi_plugin.inventory.selection`),
host node health (:mod:`~cdi_plugin.inventory.health`) and NUMA nodes
(:mod:`~cdi_plugin.inventory.numa`), and the grace period (:mod:`~cdi_plugin.inventory.grace`).
Every change is applied on the event loop thread without awaiting, so :meth:`devices` is always
one consistent state; reading the directories (listing, parsing, validating, hashing) runs in a
worker thread (:meth:`refresh`). Consumers follow it either in step (:meth:`follow`: called right
after every change, before anything else runs) or asynchronously (:meth:`changes`, or
:attr:`changed`, which fires after every change of the devices or of :meth:`node_dirs`).

:meth:`settled` is what a caller that must not act on a stale inventory (Allocate) awaits: it
returns at once unless a change may be pending, judged without listing anything: an event of the
spec directories' watch (:meth:`watch_with`) that no reading has covered, or one the kernel holds
that the watch has not read yet; without a watch, a directory whose stat moved. Then it waits for
a reading begun after the call to be applied.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

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


class SpecWatch(Protocol):
    """The spec directories' watch, as :meth:`SpecInventory.settled` consults it."""

    @property
    def pulse(self) -> Pulse:
        """Fired for every event the watch has read."""

    def unread(self) -> bool:
        """True while the kernel holds events the watch has not read yet."""


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
        self._watch: SpecWatch | None = None
        self._covered = -1  # the watch's pulse count when the applied reading began
        self._asked = self._done = 0  # refreshes asked for, and covered by a finished reading
        self._reader: asyncio.Future[None] | None = None
        self._reading_from = -1  # the watch's pulse count when the reading under way began

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

    def problem(self, cdi_name: str) -> str | None:
        """Why ``cdi_name`` must not be handed out, or None: it must be served from the applied
        reading (await :meth:`settled` first) and every host node it names must be present (a
        ``stat`` each: the node may be gone before its directory's event was handled)."""
        nodes = self.health.nodes(cdi_name)
        if nodes is None:
            return "does not resolve in the CDI spec directories (removed, broken or conflicting)"
        health = check(nodes)
        if not health.healthy:
            self._update(restat=True)
            return f"is Unhealthy: {health.reason}"
        return None

    # -- updating ---------------------------------------------------------------------------------

    def watch_with(self, watch: SpecWatch) -> None:
        """Judge pending changes by this watch of the spec directories from now on."""
        self._watch = watch

    def pending(self) -> bool:
        """True when the spec directories may have changed since the applied reading began (O(1))."""
        watch = self._watch
        if watch is not None:
            return watch.pulse.count != self._covered or watch.unread()
        return self.source.moved()

    async def settled(self) -> None:
        """Return once every change made to the spec directories before the call is applied."""
        watch = self._watch
        if watch is not None:
            # An event the watch read in this loop iteration is handled in the next one.
            await asyncio.sleep(0)
        if not self.pending():
            return
        reader = self._reader
        # No event since the reading under way began: it covers every change made so far.
        covering = watch is not None and self._reading_from == watch.pulse.count and not watch.unread()
        if reader is not None and covering:
            await asyncio.shield(reader)
        else:
            await self.refresh()

    async def refresh(self) -> None:
        """Read the spec directories in a worker thread and apply the reading on the loop. A call
        made while a reading is under way waits for it, then for one begun after the call."""
        self._asked += 1
        ticket = self._asked
        while self._done < ticket:
            if self._reader is None:
                self._reader = asyncio.ensure_future(self._read())
            await asyncio.shield(self._reader)

    async def _read(self) -> None:
        covers = self._asked
        count = self._reading_from = self._watch.pulse.count if self._watch is not None else -1
        unsettled = self.source.unsettled
        try:
            await asyncio.to_thread(self.source.current)
            if self.source.unsettled == unsettled:  # else the directories kept changing: still pending
                self._covered = count
            self._apply()
        finally:
            self._done = max(self._done, covers)
            self._reader = None

    def sync(self) -> Snapshot:
        """Catch up with the spec directories on the calling thread (tools and tests; a server's
        event loop awaits :meth:`refresh`); the current snapshot."""
        snapshot = self.source.current()
        self._apply()
        return snapshot

    def _apply(self) -> None:
        reading = self.source.reading
        if reading is not None and reading is not self._reading:
            self._reconcile(reading)

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
