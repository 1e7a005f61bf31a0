"""The device inventory fed by the spec directories: which devices this node serves, in which
kind, with which health and NUMA node, under which CDI name; and a change stream to follow.

:class:`SpecInventory` puts the parts together: a consistent reading of the directories
(:mod:`~cdi_plugin.inventory.source`), the kinds to serve (:mod:`~cdi_plugin.inventory.selection`),
host node health (:mod:`~cdi_plugin.inventory.health`) and NUMA nodes
(:mod:`~cdi_plugin.inventory.numa`), and the grace period (:mod:`~cdi_plugin.inventory.grace`).
Every change is applied on the event loop thread without awaiting, so :meth:`devices` is always
one consistent state; reading the directories (listing, parsing, validating, hashing) runs in a
worker thread (:meth:`refresh`). Consumers follow it either in step (:meth:`follow`: called right
after every change, before anything else runs; :attr:`delta` names the devices it touched) or
asynchronously (:meth:`changes`, or :attr:`changed`, which fires after every change of the
devices or of :meth:`node_dirs`). A change costs with the devices it touches: a reading is
applied entry by entry, an event of the host nodes' watch re-checks the nodes it named.

:meth:`settled` (what Allocate awaits, so as not to act on a stale inventory), :meth:`refresh`,
:meth:`watch_with` and :meth:`accept` are those of :class:`~cdi_plugin.inventory.readings.Readings`:
when the directories are read, and whether a change may be pending.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping
from itertools import compress
from operator import is_not
from pathlib import Path
from types import MappingProxyType

from cdi_plugin.aio.pulse import Pulse
from cdi_plugin.cdi.model import Spec
from cdi_plugin.inventory.grace import GracePeriod
from cdi_plugin.inventory.health import Health, HealthTracker, HostNode, Rdev, check, host_nodes
from cdi_plugin.inventory.numa import NumaLocator
from cdi_plugin.inventory.problems import ProblemLog
from cdi_plugin.inventory.readings import Readings, SpecWatch
from cdi_plugin.inventory.record import (
    GONE_REASON,
    NO_FACTS,
    NOT_SERVED_REASON,
    ServedDevice,
    UdevFacts,
    ambiguous_reason,
)
from cdi_plugin.inventory.selection import KindSelection
from cdi_plugin.inventory.source import Reading, SpecSource
from cdi_plugin.store.registry import ResolvedDevice, Snapshot, Stat

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
        facts: Callable[[Rdev], UdevFacts | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``matching_glob(kind)`` names the ``--kind`` glob serving a kind cdi-gen did not write;
        ``facts(rdev)`` gives the udev facts of the device owning a host node's device number, or
        None (spec files do not carry them); a device's facts are those of its first host node
        that has some, looked up again when its device numbers change or after it was Unhealthy.
        It may be set later (as :attr:`facts`), before the first reading."""
        self.source = source
        self.numa = numa
        self.clock = clock
        self.grace = GracePeriod(grace_period)
        self.selection = KindSelection(matching_glob)
        self.health = HealthTracker()
        self.changed = Pulse()
        self.facts = facts
        self._udev: dict[str, tuple[tuple[Rdev, ...], UdevFacts]] = {}  # name -> (its rdevs, facts)
        self._followers: list[Callable[[], None]] = []
        self._problems = ProblemLog()
        self._reading: Reading | None = None
        self._devices: Devices = MappingProxyType({})
        self._served: dict[str, ServedDevice] = {}  # what :attr:`_devices` shows (copied, never changed)
        self._readings = Readings(source, self._apply)
        self._entries: dict[str, ResolvedDevice] = {}  # served name -> its entry, as last applied
        self._kind_names: dict[str, frozenset[str]] = {}  # served kind -> its names, as last applied
        self._gone: dict[str, float] = {}  # devices in their grace period -> since when
        #: The CDI names whose record the last change added, changed or dropped (followers read it).
        self.delta: frozenset[str] = frozenset()
        self._node_watch: SpecWatch | None = None
        self._nodes_checked = -1  # the node watch's pulse count when the nodes were last stat'ed

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
        return min(self._gone.values()) + self.grace.seconds if self._gone else None

    def problem(self, cdi_name: str) -> str | None:
        """Why ``cdi_name`` must not be handed out, or None: it must be served from the applied
        reading (await :meth:`settled` first) and every host node it names must be present. The
        health known is trusted while the watch of the nodes' directories (:meth:`watch_nodes_with`)
        has nothing pending; otherwise each node is stat'ed: it may be gone before its
        directory's event was handled."""
        nodes = self.health.nodes(cdi_name)
        if nodes is None:
            paths = self._problems.ambiguous.get(cdi_name)
            if paths is not None:
                return f"is {ambiguous_reason(paths)}"
            return "does not resolve in the CDI spec directories (removed, broken or conflicting)"
        watch = self._node_watch
        if watch is not None and watch.pulse.count == self._nodes_checked and not watch.unread():
            device = self._devices.get(cdi_name)
            if device is not None and device.healthy:
                return None
        health = check(nodes)
        if not health.healthy:
            self._revise(self.health.names_at(n.path for n in nodes) | {cdi_name}, restat=True)
            return f"is Unhealthy: {health.reason}"
        return None

    # -- updating ---------------------------------------------------------------------------------

    def watch_with(self, watch: SpecWatch) -> None:
        """Judge pending changes by this watch of the spec directories (:meth:`Readings.watch_with`)."""
        self._readings.watch_with(watch)

    def note(self, directory: Path, name: str) -> bool:
        """The watch saw entry ``name`` of ``directory`` change; False when readings ignore it."""
        return self.source.note(directory, name)

    def accept(
        self, written: Mapping[Path, Spec | None], stats: Mapping[Path, Stat | None] | None = None
    ) -> None:
        """Apply files this process has just written into a spec directory (:meth:`Readings.accept`)."""
        self._readings.accept(written, stats)

    def pending(self) -> bool:
        """True when the spec directories may have changed since the applied reading began (O(1))."""
        return self._readings.pending()

    async def settled(self) -> None:
        """Return once every change made to the spec directories before the call is applied."""
        await self._readings.settled()

    async def refresh(self) -> None:
        """Read the spec directories in a worker thread and apply the reading on the loop
        (:meth:`Readings.refresh`)."""
        await self._readings.refresh()

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

    def watch_nodes_with(self, watch: SpecWatch) -> None:
        """The watch of the directories holding the served host nodes, which calls
        :meth:`recheck_health` (after its events) from now on."""
        self._node_watch = watch
        self._nodes_checked = -1

    def recheck_health(self, paths: Iterable[str] | None = None) -> None:
        """Stat the host device nodes again: those at ``paths`` (their watch named them) or all
        (a watched directory changed in a way the watch could not name)."""
        if self._node_watch is not None:
            self._nodes_checked = self._node_watch.pulse.count
        if paths is None:
            self._update(restat=True)
        else:
            self._revise(self.health.names_at(paths), restat=True)

    def expire(self) -> None:
        """Drop the devices whose grace period is over."""
        self._update(restat=False)

    # -- internals --------------------------------------------------------------------------------

    def _reconcile(self, reading: Reading) -> None:
        """Apply a reading device by device: a kind whose names the registry did not resolve
        again is skipped whole, and in the others only the entries that are not the ones applied
        before (by identity, then by their host nodes) are evaluated again."""
        self._reading = reading
        snapshot = reading.snapshot
        self._problems.update(snapshot)
        served = self.selection.select(snapshot.kinds.keys(), reading)
        before, entries = self._kind_names, self._entries
        now = {kind: snapshot.kinds[kind] for kind in served}
        changes: dict[str, tuple[HostNode, ...] | None] = {}
        for kind, names in now.items():
            old = before.get(kind, frozenset())
            if names is old:
                continue
            for name in old - names:
                del entries[name]
                changes[name] = None
            for name in _moved(names, snapshot.devices, entries):
                entry = snapshot.devices[name]
                cached, held = entries.get(name), self.health.nodes(name)
                entries[name] = entry
                if cached is not None and held is not None and _same_edits(cached, entry):
                    continue
                nodes = host_nodes(entry.spec, entry.device)
                if nodes != held:
                    changes[name] = nodes
        for kind in before.keys() - now.keys():
            for name in before[kind]:
                del entries[name]
                changes[name] = None
        self._kind_names = now
        nodes_changed = self.health.retrack(changes)
        self._revise(changes, restat=False, nodes_changed=nodes_changed)

    def _record(self, name: str, health: Health, before: ServedDevice | None) -> ServedDevice:
        if health.healthy:
            numa = self.numa.numa_nodes(health.rdevs)
            udev = self._udev_facts(name, health.rdevs)
        else:
            numa = before.numa_nodes if before is not None else ()
            udev = before.udev if before is not None else NO_FACTS
            self._udev.pop(name, None)
        fresh = ServedDevice(
            cdi_name=name, healthy=health.healthy, reason=health.reason, numa_nodes=numa, udev=udev
        )
        return before if fresh == before and before is not None else fresh

    def _udev_facts(self, name: str, rdevs: tuple[Rdev, ...]) -> UdevFacts:
        if self.facts is None:
            return NO_FACTS
        cached = self._udev.get(name)
        if cached is not None and cached[0] == rdevs:
            return cached[1]
        found = next((f for r in rdevs if (f := self.facts(r)) is not None), NO_FACTS)
        self._udev[name] = (rdevs, found)
        return found

    def _why(self, name: str) -> str:
        """Why a device served before is not served now."""
        if self._reading is not None and self._reading.snapshot.resolve(name) is not None:
            return NOT_SERVED_REASON
        paths = self._problems.ambiguous.get(name)
        return GONE_REASON if paths is None else ambiguous_reason(paths)

    def _revise(self, names: Iterable[str], *, restat: bool, nodes_changed: bool = False) -> None:
        """Evaluate these devices' records again (``restat``: stat their nodes again); fire
        :attr:`changed` when one differs. Costs with ``names``, not with the devices served."""
        health = self.health.health_of(names, restat=restat)
        if restat:
            self.numa.forget(r for h in health.values() for r in h.rdevs)
        devices = self._devices
        now = self.clock()
        fresh: dict[str, ServedDevice | None] = {}
        for name in names:
            before = devices.get(name)
            found = health.get(name)
            if found is not None:
                record: ServedDevice | None = self._record(name, found, before)
            else:
                record = None if before is None else self.grace.keep(before, now, self._why)
            if record is not before:
                fresh[name] = record
        self._publish(fresh, nodes_changed)

    def _update(self, *, restat: bool) -> None:
        """Evaluate every device's record again (``restat``: stat every node again)."""
        if restat:
            self.numa.forget()
        health = self.health.health(restat=restat)
        devices = self._devices
        now = self.clock()
        fresh: dict[str, ServedDevice | None] = {}
        for name, device in devices.items():
            if name not in health:
                kept = self.grace.keep(device, now, self._why)
                if kept is not device:
                    fresh[name] = kept
        for name, found in health.items():
            before = devices.get(name)
            record = self._record(name, found, before)
            if record is not before:
                fresh[name] = record
        self._publish(fresh, False)

    def _publish(self, fresh: Mapping[str, ServedDevice | None], nodes_changed: bool) -> None:
        """Apply changed records (None: dropped) and tell the followers."""
        if not fresh and not nodes_changed:
            return
        devices = self._served.copy()
        came: list[str] = []
        for name, record in fresh.items():
            if record is None:
                devices.pop(name, None)
                self._udev.pop(name, None)
                self._gone.pop(name, None)
                continue
            if name not in devices:
                came.append(name)
            devices[name] = record
            if record.gone_since is None:
                self._gone.pop(name, None)
            else:
                self._gone[name] = record.gone_since
        self._served = _in_order(devices, came) if came else devices
        self._devices = MappingProxyType(self._served)
        self.delta = frozenset(fresh)
        for listener in self._followers:
            listener()
        self.changed.fire()


def _moved(
    names: Collection[str], now: Mapping[str, ResolvedDevice], then: Mapping[str, ResolvedDevice]
) -> list[str]:
    """The names whose entry in ``now`` is not the one in ``then`` (by identity; absent from
    ``then`` included), compared without a Python loop over the names."""
    return list(compress(names, map(is_not, map(now.__getitem__, names), map(then.get, names))))


def _in_order(devices: dict[str, ServedDevice], came: list[str]) -> dict[str, ServedDevice]:
    """``devices``, whose names are in order but for those that ``came`` last, all in order: a
    few are inserted where they belong, more are sorted with the others."""
    if len(came) > 8:
        return dict(sorted(devices.items()))
    items = list(devices.items())
    kept = len(items) - len(came)
    names, rest = list(devices)[:kept], items[kept:]
    del items[kept:]
    for name, record in sorted(rest):
        at = bisect.bisect(names, name)
        names.insert(at, name)
        items.insert(at, (name, record))
    return dict(items)


def _same_edits(old: ResolvedDevice, new: ResolvedDevice) -> bool:
    """Whether two entries inject the same edits, judged by identity (a writer in this process
    hands over specs that reuse the entries it did not change)."""
    return old.device is new.device and old.spec.container_edits is new.spec.container_edits
