"""What the plugin advertises, per resource: device IDs, health, NUMA nodes; and who is told.

:class:`DeviceState` is the device plugin's view of the device inventory
(:class:`~cdi_plugin.inventory.SpecInventory`): it follows the inventory in step, and after every
change maps the devices it touched to kubelet resources and device IDs (the catalog's rules,
:mod:`.resources`, kept device by device in :mod:`.advertised`) and publishes the list of each
resource that changed on its :class:`Board`, which the ListAndWatch streams follow; only the kinds
the settings give the device plugin (:meth:`Settings.serves`), none with ``--api dra``.
Everything here runs on the event loop thread without awaiting, so a view is always consistent.
Logs say what is advertised and what changed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cdi_plugin.aio.pulse import Pulse
from cdi_plugin.cdi.names import natural_key
from cdi_plugin.deviceplugin.advertised import AdvertisedKind, Change, DeviceStatus, Revision
from cdi_plugin.deviceplugin.resources import Note, kind_note
from cdi_plugin.deviceplugin.settings import Settings
from cdi_plugin.inventory import NumaLocator, SpecInventory, SpecSource
from cdi_plugin.metrics import PluginMetrics
from cdi_plugin.store.registry import Snapshot
from cdi_plugin.wording import plural

log = logging.getLogger(__name__)

_MAX_DETAIL_LINES = 20


@dataclass(frozen=True, slots=True)
class ResourceView:
    name: str
    devices: Mapping[str, DeviceStatus] = field(default_factory=dict)
    #: What changed since the view before (None: not told).
    revision: Revision | None = None


class Board:
    """The latest view of one resource; ListAndWatch streams wait here for the next version."""

    def __init__(self, view: ResourceView) -> None:
        self.view = view
        self.closed = False
        self._pulse = Pulse()

    @property
    def version(self) -> int:
        return self._pulse.count

    def publish(self, view: ResourceView) -> None:
        """A new view (the caller knows it differs)."""
        if self.closed:
            return
        self.view = view
        self._pulse.fire()

    def close(self) -> None:
        """The resource is gone: streams send an empty list (the kubelet drops the devices), then end."""
        self.view = ResourceView(self.view.name)
        self.closed = True
        self._pulse.fire()

    async def next_view(self, seen: int) -> tuple[int, ResourceView, bool]:
        """(version, view, closed) once the version differs from ``seen`` (-1: at once)."""
        await self._pulse.wait_after(seen)
        return self._pulse.count, self.view, self.closed


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
        self.clock = clock
        self.inventory = SpecInventory(
            source,
            numa,
            grace_period=settings.grace_period,
            matching_glob=settings.matching_glob,
            clock=clock,
        )
        #: Fired after every change of the inventory (devices, their status, watched node directories).
        self.pulse = self.inventory.changed
        self._boards: dict[str, Board] = {}
        self._kinds: dict[str, AdvertisedKind] = {}
        self._health: dict[str, list[bool]] = {}  # resource -> the health of each of its IDs
        self._logged_notes: set[str] = set()
        self._counted = -1  # the source's generation whose problems the metrics show
        self.inventory.follow(self._show)

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
        return self.inventory.node_dirs()

    def node_paths(self) -> frozenset[str]:
        """The host device node paths of advertised devices."""
        return self.inventory.node_paths()

    def next_expiry(self) -> float | None:
        """When the next device in its grace period is due to be dropped (monotonic seconds)."""
        return self.inventory.next_expiry()

    # -- updating ---------------------------------------------------------------------------------

    def sync(self) -> Snapshot:
        """Catch up with the spec directories on the calling thread (tools and tests)."""
        snapshot = self.inventory.sync()
        self._count_problems()
        return snapshot

    async def refresh(self) -> None:
        """Read the spec directories in a worker thread and apply what changed (the spec watch fired)."""
        await self.inventory.refresh()
        self._count_problems()

    async def settled(self) -> None:
        """Return once every change of the spec directories made before the call is applied."""
        await self.inventory.settled()
        self._count_problems()

    def recheck_health(self, paths: Iterable[str] | None = None) -> None:
        """Stat the host device nodes at ``paths`` again, or all (a watched /dev directory changed)."""
        self.inventory.recheck_health(paths)

    def expire(self) -> None:
        """Drop devices whose grace period is over."""
        self.inventory.expire()

    def problem(self, qualified_name: str) -> str | None:
        """Why ``qualified_name`` must not be handed out, or None (see :meth:`SpecInventory.problem`)."""
        return self.inventory.problem(qualified_name)

    # -- internals --------------------------------------------------------------------------------

    def _count_problems(self) -> None:
        reading = self.inventory.reading
        if self.source.generation != self._counted and reading is not None:
            self._counted = self.source.generation  # not the reading: it would keep the last one alive
            self.metrics.spec_problems(len(reading.snapshot.broken), len(reading.snapshot.conflicts))

    def _show(self) -> None:
        """Publish what changed in the inventory's devices (:attr:`SpecInventory.delta`): only
        the resources of the kinds it touched, only the devices it names."""
        devices = self.inventory.devices()
        by_kind: dict[str, list[str]] = {}
        for name in self.inventory.delta:
            by_kind.setdefault(name.partition("=")[0], []).append(name)
        for kind in sorted(by_kind):
            advertised = self._kinds.get(kind)
            if advertised is None:
                if not self.settings.serves("device-plugin", kind):
                    self._left_out(kind)
                    continue
                skipped = kind_note(kind)
                if skipped is not None:
                    self._note([skipped])
                    continue
                advertised = self._kinds[kind] = AdvertisedKind(
                    kind, max(1, self.settings.replicas_for(kind))
                )
            old = advertised.devices
            changes, notes = advertised.apply(devices, by_kind[kind])
            self._note(notes)
            if not changes:
                continue
            new = advertised.devices
            self._log_changes(kind, old, new, changes)
            if kind not in self._boards:
                self._boards[kind] = Board(ResourceView(kind, new, advertised.revision))
            elif not new:
                self._boards.pop(kind).close()
            else:
                self._boards[kind].publish(ResourceView(kind, new, advertised.revision))
            if new:
                self._health[kind] = advertised.health()
            else:
                del self._kinds[kind]
                self._health.pop(kind, None)
        if by_kind:
            self.metrics.set_devices(self._health)

    def _left_out(self, kind: str) -> None:
        """Log once why a kind is not advertised (another API serves it), when this side runs."""
        why = self.settings.left_out("device-plugin", kind)
        if why is not None and f"api:{kind}" not in self._logged_notes:
            self._logged_notes.add(f"api:{kind}")
            log.info("not advertising kind %s: %s", kind, why)

    def _note(self, notes: Iterable[Note]) -> None:
        for note in notes:
            if note.key not in self._logged_notes:
                self._logged_notes.add(note.key)
                log.warning("%s", note.message)

    def _log_changes(
        self,
        resource: str,
        old: Mapping[str, DeviceStatus],
        new: Mapping[str, DeviceStatus],
        changes: Mapping[str, Change],
    ) -> None:
        if not old and new:
            healthy = sum(1 for s in new.values() if s.healthy)
            physical = len({s.qualified_name for s in new.values()})
            log.info(
                "%s: advertising %s as %s (%d Healthy)",
                resource,
                plural(physical, "device"),
                plural(len(new), "device ID"),
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
        for name in sorted(changes, key=natural_key):
            was, now = changes[name]
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
                elif now.numa_nodes != was.numa_nodes:
                    lines.append(f"{name} is now on NUMA node(s) {list(now.numa_nodes)}")
        if len(lines) > _MAX_DETAIL_LINES:
            head = "; ".join(lines[:5])
            log.info("%s: %d changes: %s; ...", resource, len(lines), head, extra={"resource": resource})
            return
        for line in lines:
            log.info("%s: %s", resource, line, extra={"resource": resource})
