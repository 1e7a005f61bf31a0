"""Composition root of ``cdi-plugin serve``: spec watch, health watch, endpoints, signals.

Tasks, all on one event loop:

* spec dirs changed (inotify, debounced) -> :meth:`DeviceState.settled` re-reads the files the
  events named in a worker thread (Allocate does not wait for the debounce: it asks for the
  reading);
* a directory holding an advertised host device node changed -> health re-checked;
* a device's grace period ran out -> it is dropped;
* the state changed -> the set of endpoints (one per resource) and of watched node directories
  follows it: a new kind is served and registered, a resource without devices is stopped.

SIGTERM, SIGINT or SIGHUP stops everything: servers stop, the sockets this process bound are
removed, and :func:`run` returns normally (exit status 0). SIGHUP does not reload in place: the
``plugin`` settings shape every endpoint, so a restart (which the DaemonSet does) reads them again.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from cdi_plugin.aio.dirwatch import FILES, DirWatch
from cdi_plugin.aio.run import cancel_and_wait, run_until, stop_on_signals
from cdi_plugin.deviceplugin.lifecycle import Endpoint
from cdi_plugin.deviceplugin.servicer import OPTIONS, DevicePluginService
from cdi_plugin.deviceplugin.settings import Settings
from cdi_plugin.deviceplugin.state import DeviceState
from cdi_plugin.inventory import NumaLocator, SpecSource
from cdi_plugin.metrics import PluginMetrics

log = logging.getLogger(__name__)

#: A burst of inotify events is handled once it has been quiet this long (at most DEBOUNCE_MAX).
DEBOUNCE_QUIET = 0.01
DEBOUNCE_MAX = 0.05
ENDPOINT_RESTART_DELAY = 1.0


class Daemon:
    def __init__(
        self, settings: Settings, metrics: PluginMetrics | None = None, *, endpoints: bool = True
    ) -> None:
        """``endpoints=False`` keeps the inventory following the host without serving the device
        plugin API (another consumer of :attr:`state`'s inventory, the DRA driver, serves it)."""
        self.settings = settings
        self.serve_endpoints = endpoints
        #: Without endpoints this only follows the inventory, and says so as the inventory.
        self.log = log if endpoints else logging.getLogger("cdi_plugin.inventory")
        self.metrics = metrics if metrics is not None else PluginMetrics(spec_dirs=settings.spec_dirs)
        self.source = SpecSource(settings.spec_dirs)
        self.state = DeviceState(
            settings, self.source, NumaLocator(settings.sysfs_root), metrics=self.metrics
        )
        self.endpoints: dict[str, tuple[Endpoint, asyncio.Task[None]]] = {}
        self._node_paths: frozenset[str] = frozenset()
        self._node_events: set[str] = set()  # served node paths the node watch named since the last check
        self._node_noted = 0
        self._plugin_watch: DirWatch | None = None
        self._node_watch: DirWatch | None = None
        self._endpoint_group: asyncio.TaskGroup | None = None

    async def run(self, stop: asyncio.Event) -> None:
        s = self.settings
        dirs, kinds = ", ".join(str(d) for d in s.spec_dirs), ", ".join(s.kinds) or "cdi-gen's"
        if self.serve_endpoints:
            log.info(
                "starting: spec dirs %s, plugin dir %s, kubelet socket %s, kinds %s, replicas %d, "
                "CDI strategy %s, grace period %gs",
                dirs, s.plugin_dir, s.kubelet_socket, kinds, s.replicas, s.cdi_strategy, s.grace_period,
            )  # fmt: skip
        else:
            self.log.info("starting: spec dirs %s, kinds %s, grace period %gs", dirs, kinds, s.grace_period)
        async with (
            DirWatch(
                s.spec_dirs,
                name="spec dirs",
                events=FILES,
                relevant=self.state.inventory.note,
                follow_links=False,
            ) as specs,
            DirWatch([], name="device nodes", relevant=self._node_relevant) as nodes,
            DirWatch(
                {s.plugin_dir, s.kubelet_socket.parent} if self.serve_endpoints else set(), name="plugin dir"
            ) as plugin_dir,
        ):
            self._plugin_watch, self._node_watch = plugin_dir, nodes
            self.state.inventory.watch_with(specs)
            self.state.inventory.watch_nodes_with(nodes)
            await self.state.refresh()
            if self.serve_endpoints and not self.state.resources() and not self.state.inventory.devices():
                log.info(
                    "nothing to serve yet: no kind written by cdi-gen%s in %s; watching for changes",
                    " or matching --kind" if s.kinds else "",
                    ", ".join(str(d) for d in s.spec_dirs),
                )
            try:
                await run_until(
                    stop,
                    self._follow_specs(specs),
                    self._follow_nodes(nodes),
                    self._expire(),
                    self._follow_state(),
                    self._heartbeat(),
                )
            finally:
                await self._close_endpoints(list(self.endpoints))
        self.log.info("stopped")

    async def _heartbeat(self) -> None:
        """Tell the liveness probe that this event loop runs."""
        while True:
            self.metrics.beat()
            await asyncio.sleep(self.metrics.probes.interval)

    def _node_relevant(self, directory: Path, name: str) -> bool:
        path = str(directory / name)
        if path not in self._node_paths:
            return False
        self._node_events.add(path)
        self._node_noted += 1
        return True

    async def _follow_specs(self, specs: DirWatch) -> None:
        seen = specs.pulse.count
        while True:
            # with the directories of the files spec files that are symbolic links point to
            specs.set_dirs((*self.settings.spec_dirs, *self.source.link_dirs()))
            seen = await specs.pulse.settle(seen, DEBOUNCE_QUIET, DEBOUNCE_MAX)
            await self.state.settled()  # an Allocate may have had the change read already

    async def _follow_nodes(self, nodes: DirWatch) -> None:
        seen, noted = nodes.pulse.count, self._node_noted
        while True:
            now = await nodes.pulse.settle(seen, DEBOUNCE_QUIET, DEBOUNCE_MAX)
            paths, self._node_events = self._node_events, set()
            # Every event named a served node: re-check the devices at those nodes only.
            named = now - seen == self._node_noted - noted
            self.state.recheck_health(paths if named else None)
            seen, noted = now, self._node_noted

    async def _expire(self) -> None:
        while True:
            seen = self.state.pulse.count
            due = self.state.next_expiry()
            timeout = None if due is None else max(0.0, due - self.state.clock()) + 0.01
            if not await self.state.pulse.wait_after(seen, timeout):
                self.state.expire()

    async def _follow_state(self) -> None:
        """Keep the endpoints (tasks of this one's group) and the node watch following the state."""
        async with asyncio.TaskGroup() as endpoints:
            self._endpoint_group = endpoints
            await self._follow_state_in_group()

    async def _follow_state_in_group(self) -> None:
        while True:
            seen = self.state.pulse.count
            self._node_paths = self.state.node_paths()
            assert self._node_watch is not None
            before = self._node_watch.targets
            self._node_watch.set_dirs(self.state.node_dirs())
            if self._node_watch.targets != before:
                # a node may have gone between its first check and its directory being watched
                self.state.recheck_health()
            wanted = set(self.state.resources()) if self.serve_endpoints else set()
            self.metrics.serving(wanted)
            await self._close_endpoints(sorted(set(self.endpoints) - wanted))
            for resource in sorted(wanted - set(self.endpoints)):
                self._open_endpoint(resource)
            await self.state.pulse.wait_after(seen)

    def _open_endpoint(self, resource: str) -> None:
        assert self._plugin_watch is not None
        state, strategy = self.state, self.settings.cdi_strategy
        endpoint = Endpoint(
            resource,
            self.settings,
            lambda: DevicePluginService(resource, state, strategy),
            self._plugin_watch,
            OPTIONS,
            metrics=self.metrics,
        )
        assert self._endpoint_group is not None
        task = self._endpoint_group.create_task(self._supervise(endpoint), name=f"endpoint:{resource}")
        self.endpoints[resource] = (endpoint, task)

    async def _supervise(self, endpoint: Endpoint) -> None:
        while True:
            try:
                await endpoint.run()
            except Exception:
                log.exception("%s: endpoint failed; restarting it", endpoint.resource)
                await endpoint.close()
                await asyncio.sleep(ENDPOINT_RESTART_DELAY)

    async def _close_endpoints(self, resources: list[str]) -> None:
        await asyncio.gather(*(self._close_endpoint(r) for r in resources))

    async def _close_endpoint(self, resource: str) -> None:
        endpoint, task = self.endpoints.pop(resource)
        await cancel_and_wait(task)
        removed = f", removed {endpoint.path}" if await endpoint.close() else ""
        log.info("%s: stopped serving%s", resource, removed, extra={"resource": resource})


async def run(
    settings: Settings,
    stop: asyncio.Event | None = None,
    metrics: PluginMetrics | None = None,
) -> None:
    """Serve until ``stop`` is set or SIGTERM/SIGINT/SIGHUP arrives (handled only on the main thread)."""
    stop = stop or asyncio.Event()
    with stop_on_signals(stop):
        await Daemon(settings, metrics).run(stop)
