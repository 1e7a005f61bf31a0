"""What the plugin advertises, per resource: device IDs, health, NUMA nodes; and who is told.

:class:`DeviceState` turns the spec directories (through :class:`SpecSource`) into per-resource
views, keeps devices whose spec entry disappeared as Unhealthy for the grace period before
dropping them, and publishes every change on the resource's :class:`Board`, which the
ListAndWatch streams follow. Everything here runs on the event loop thread without awaiting, so a
view is always consistent. Logs say what is served, what changed and why something is skipped.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from cdi_plugin.aio.pulse import Pulse
from cdi_plugin.cdi.names import natural_key
from cdi_plugin.deviceplugin.health import Health, HostNode, check, host_nodes, watch_dirs
from cdi_plugin.deviceplugin.resources import Catalog, build_catalog
from cdi_plugin.deviceplugin.settings import Settings
from cdi_plugin.deviceplugin.specsource import SpecSource
from cdi_plugin.deviceplugin.topology import NumaLocator
from cdi_plugin.metrics import PluginMetrics
from cdi_plugin.store.ownership import owned_kinds, read_record
from cdi_plugin.store.registry import Snapshot

log = logging.getLogger(__name__)

GONE_REASON = "its CDI spec entry is gone"
NOT_SERVED_REASON = "its kind is no longer served"
#: How long a kind served as cdi-gen's stays served after its file stopped matching the record.
OWNERSHIP_SETTLE = 2.0
_MAX_DETAIL_LINES = 20


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    id: str
    qualified_name: str
    replica: int
    healthy: bool
    reason: str = ""
    numa: tuple[int, ...] = ()
    #: Monotonic time the spec entry disappeared; None while it exists.
    gone_since: float | None = None


@dataclass(frozen=True, slots=True)
class ResourceView:
    name: str
    devices: Mapping[str, DeviceStatus] = field(default_factory=dict)


class Board:
    """The latest view of one resource; ListAndWatch streams wait here for the next version."""

    def __init__(self, view: ResourceView) -> None:
        self.view = view
        self.closed = False
        self._pulse = Pulse()

    @property
    def version(self) -> int:
        return self._pulse.count

    def publish(self, view: ResourceView) -> bool:
        if view.devices == self.view.devices or self.closed:
            return False
        self.view = view
        self._pulse.fire()
        return True

    def close(self) -> None:
        """The resource is gone: streams send an empty list (the kubelet drops the devices), then end."""
        self.view = ResourceView(self.view.name)
        self.closed = True
        self._pulse.fire()

    async def next_view(self, seen: int) -> tuple[int, ResourceView, bool]:
        """(version, view, closed) once the version differs from ``seen`` (-1: at once)."""
        await self._pulse.wait_after(seen)
        return self._pulse.count, self.view, self.closed


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class DeviceState:
    def __init__(
        self,
        settings: Settings,
        source: SpecSource,
        numa: NumaLocator,
        clock: Callable[[], float] = time.monotonic,
        metrics: PluginMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics if metrics is not None else PluginMetrics()
        self.source = source
        self.numa = numa
        self.clock = clock
        #: Fired after every change of the resources or of any device's status.
        self.pulse = Pulse()
        self._boards: dict[str, Board] = {}
        self._statuses: dict[str, dict[str, DeviceStatus]] = {}
        self._catalog = Catalog()
        self._nodes: dict[str, tuple[HostNode, ...]] = {}
        self._node_dirs: frozenset[Path] = frozenset()
        self._node_paths: frozenset[str] = frozenset()
        self._health: dict[tuple[HostNode, ...], Health] = {}
        self._snapshot: Snapshot | None = None
        self._generation = -1
        self._logged_notes: set[str] = set()
        self._logged_files: set[str] = set()
        self._logged_serving: dict[str, str] = {}
        self._owned_served: set[str] = set()
        self._unowned_since: dict[str, float] = {}

    # -- reading ----------------------------------------------------------------------------------

    def resources(self) -> list[str]:
        return sorted(self._boards)

    def board(self, resource: str) -> Board | None:
        return self._boards.get(resource)

    def status(self, resource: str, device_id: str) -> DeviceStatus | None:
        board = self._boards.get(resource)
        return board.view.devices.get(device_id) if board else None

    def node_dirs(self) -> frozenset[Path]:
        """Directories holding the host device nodes of advertised devices (for the health watch)."""
        return self._node_dirs

    def node_paths(self) -> frozenset[str]:
        """The host device node paths of advertised devices."""
        return self._node_paths

    def next_expiry(self) -> float | None:
        """When the next device in its grace period is due to be dropped (monotonic seconds)."""
        times = [
            s.gone_since + self.settings.grace_period
            for statuses in self._statuses.values()
            for s in statuses.values()
            if s.gone_since is not None
        ]
        times += [since + OWNERSHIP_SETTLE for since in self._unowned_since.values()]
        return min(times, default=None)

    # -- updating ---------------------------------------------------------------------------------

    def sync(self) -> Snapshot:
        """Catch up with the spec directories if anything in them changed; the current snapshot."""
        snapshot = self.source.current()
        if self.source.generation != self._generation:
            self._reconcile(snapshot)
        return snapshot

    def recheck_health(self) -> None:
        """Stat every host device node again (a watched /dev directory changed)."""
        self._apply()

    def expire(self) -> None:
        """Drop devices whose grace period is over; let go of kinds no longer cdi-gen's."""
        if self._unowned_since and self._snapshot is not None:
            self._reconcile(self.source.current())
        else:
            self._apply()

    def problem(self, qualified_name: str, snapshot: Snapshot) -> str | None:
        """Why ``qualified_name`` must not be handed out, or None: it must resolve in ``snapshot``
        (taken by :meth:`sync` just before) and every host node it names must be present."""
        entry = snapshot.resolve(qualified_name)
        if entry is None:
            return "does not resolve in the CDI spec directories (removed, broken or conflicting)"
        health = check(host_nodes(entry.spec, entry.device))
        if not health.healthy:
            self._apply()
            return f"is Unhealthy: {health.reason}"
        return None

    # -- internals --------------------------------------------------------------------------------

    def _reconcile(self, snapshot: Snapshot) -> None:
        self._generation = self.source.generation
        self._snapshot = snapshot
        self._log_files(snapshot)
        self.metrics.spec_problems(len(snapshot.broken), len(snapshot.conflicts))
        served = self._select(sorted({str(e.kind) for e in snapshot.devices.values()}))
        catalog = build_catalog(snapshot.devices, served, self.settings.replicas_for)
        for note in catalog.notes:
            if note.key not in self._logged_notes:
                self._logged_notes.add(note.key)
                log.warning("%s", note.message)
        self._catalog = catalog
        nodes = {}
        for resource in catalog.resources.values():
            for dev in resource.devices:
                if dev.qualified_name not in nodes:
                    entry = snapshot.devices[dev.qualified_name]
                    nodes[dev.qualified_name] = host_nodes(entry.spec, entry.device)
        if nodes != self._nodes:
            self._nodes = nodes
            unique = set(nodes.values())
            self._node_paths = frozenset(os.path.normpath(n.path) for group in unique for n in group)
            self._node_dirs = frozenset(d for group in unique for d in watch_dirs(group))
            self.pulse.fire()
        self._apply(restat=False)

    def _select(self, kinds: list[str]) -> set[str]:
        """The kinds to serve: cdi-gen's (by its ownership record) and those matching ``--kind``.

        cdi-gen replaces its ownership record (owning the old and the new content) just before it
        renames a spec file into place, so a record read before that can meet the new file: for a
        moment the file does not match the record. A kind served as cdi-gen's therefore stays served for
        :data:`OWNERSHIP_SETTLE` seconds after its file stopped matching, and is let go only if it
        still does not match then (someone else changed the file): no flapping on every rewrite.
        """
        owned = owned_kinds(self.source.dirs)
        now = self.clock()
        served: set[str] = set()
        for kind in kinds:
            glob = self.settings.matching_glob(kind)
            if kind in owned:
                self._unowned_since.pop(kind, None)
                why = f"serving kind {kind}: its spec was written by cdi-gen"
            elif glob is not None:
                why = f"serving kind {kind}: it matches --kind {glob}"
            elif (
                kind in self._owned_served
                and now - self._unowned_since.setdefault(kind, now) < OWNERSHIP_SETTLE
            ):
                served.add(kind)
                continue
            elif kind in self._owned_served or kind in self._recorded_kinds():
                why = (
                    f"not serving kind {kind}: its spec file was changed since cdi-gen wrote it "
                    f"(serve it with --kind {kind})"
                )
            else:
                why = f"not serving kind {kind}: cdi-gen did not write it (serve it with --kind {kind})"
            if kind in owned or glob is not None:
                served.add(kind)
            if self._logged_serving.get(kind) != why:
                self._logged_serving[kind] = why
                log.info("%s", why)
        self._owned_served = {k for k in served if k in owned or k in self._owned_served}
        self._unowned_since = {k: t for k, t in self._unowned_since.items() if k in served and k not in owned}
        return served

    def _recorded_kinds(self) -> set[str]:
        return {f.kind for d in self.source.dirs for f in read_record(d).values()}

    def _log_files(self, snapshot: Snapshot) -> None:
        current: set[str] = set()
        for broken in snapshot.broken:
            for problem in broken.problems[:1]:
                where = f"{problem.pointer}: " if problem.pointer else ""
                line = f"skipping spec file {broken.path}: {where}{problem.message}"
                current.add(line)
                if line not in self._logged_files:
                    log.warning("%s", line)
        for conflict in snapshot.conflicts:
            paths = ", ".join(str(p) for p in conflict.paths)
            line = (
                f"skipping device {conflict.qualified_name}: defined in {paths} at the same priority "
                f"(a runtime resolves neither)"
            )
            current.add(line)
            if line not in self._logged_files:
                log.warning("%s", line)
        self._logged_files = current

    def _apply(self, *, restat: bool = True) -> None:
        """Recompute every advertised device's status and publish what changed.

        ``restat=False`` (after a spec change) stats only nodes not seen before: the health of the
        others can only have changed through an event in their directory, which re-stats all.
        """
        now = self.clock()
        if restat:
            self._health.clear()
            self.numa.forget()
        known = self._health
        health: dict[str, Health] = {}
        for name, nodes in self._nodes.items():
            found = known.get(nodes)
            if found is None:
                found = known[nodes] = check(nodes)
            health[name] = found
        for stale in set(known) - set(self._nodes.values()):
            del known[stale]
        fresh: dict[str, dict[str, DeviceStatus]] = {}
        for resource in self._catalog.resources.values():
            statuses = fresh.setdefault(resource.name, {})
            for dev in resource.devices:
                h = health[dev.qualified_name]
                numa = self.numa.numa_nodes(h.rdevs) if h.healthy else ()
                if not h.healthy:
                    before = self._statuses.get(resource.name, {}).get(dev.id)
                    numa = before.numa if before is not None else ()
                statuses[dev.id] = DeviceStatus(
                    dev.id, dev.qualified_name, dev.replica, h.healthy, h.reason, numa
                )
        grace = self.settings.grace_period
        for name, statuses in self._statuses.items():
            for device_id, previous in statuses.items():
                if device_id in fresh.get(name, {}):
                    continue
                since = previous.gone_since if previous.gone_since is not None else now
                if now - since < grace:
                    still_there = self._snapshot is not None and self._snapshot.resolve(
                        previous.qualified_name
                    )
                    reason = NOT_SERVED_REASON if still_there else GONE_REASON
                    gone = replace(previous, healthy=False, reason=reason, gone_since=since)
                    fresh.setdefault(name, {})[device_id] = gone
        changed = False
        for name in sorted(set(fresh) | set(self._statuses)):
            new = fresh.get(name, {})
            old = self._statuses.get(name, {})
            if new == old and name in self._boards:
                continue
            self._log_changes(name, old, new)
            ordered = MappingProxyType({k: new[k] for k in sorted(new, key=natural_key)})
            if name not in self._boards and new:
                self._boards[name] = Board(ResourceView(name, ordered))
                changed = True
            elif name in self._boards and not new:
                self._boards.pop(name).close()
                changed = True
            elif name in self._boards:
                changed |= self._boards[name].publish(ResourceView(name, ordered))
        self._statuses = {k: v for k, v in fresh.items() if v}
        self.metrics.set_devices({n: [s.healthy for s in v.values()] for n, v in self._statuses.items()})
        if changed:
            self.pulse.fire()

    def _log_changes(
        self, resource: str, old: Mapping[str, DeviceStatus], new: Mapping[str, DeviceStatus]
    ) -> None:
        if not old and new:
            healthy = sum(1 for s in new.values() if s.healthy)
            physical = len({s.qualified_name for s in new.values()})
            log.info(
                "%s: advertising %s as %s (%d Healthy)",
                resource,
                _plural(physical, "device"),
                _plural(len(new), "device ID"),
                healthy,
                extra={"resource": resource},
            )
        if old and not new:
            log.info(
                "%s: no devices left, no longer serving this resource", resource, extra={"resource": resource}
            )
        if not old or not new:
            return
        lines: list[str] = []
        before = {s.qualified_name: s for s in old.values()}
        after = {s.qualified_name: s for s in new.values()}
        for name in sorted(set(before) | set(after), key=natural_key):
            was, now = before.get(name), after.get(name)
            if was is None and now is not None:
                lines.append(f"{name} added ({'Healthy' if now.healthy else 'Unhealthy: ' + now.reason})")
            elif now is None and was is not None:
                lines.append(f"{name} dropped")
            elif was is not None and now is not None:
                if now.gone_since is not None and was.gone_since is None:
                    lines.append(
                        f"{name}: {now.reason}; advertised as Unhealthy for "
                        f"{self.settings.grace_period:g}s before it is dropped"
                    )
                elif was.healthy and not now.healthy:
                    lines.append(f"{name} is Unhealthy: {now.reason}")
                elif now.healthy and not was.healthy:
                    lines.append(f"{name} is Healthy again")
                elif now.numa != was.numa:
                    lines.append(f"{name} is now on NUMA node(s) {list(now.numa)}")
        if len(lines) > _MAX_DETAIL_LINES:
            head = "; ".join(lines[:5])
            log.info("%s: %d changes: %s; ...", resource, len(lines), head, extra={"resource": resource})
            return
        for line in lines:
            log.info("%s: %s", resource, line, extra={"resource": resource})
