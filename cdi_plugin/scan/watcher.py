"""``cdi-gen watch``: keep the specs in step with the host's devices and with the configuration.

1. The event sources start first (uevents queue in the kernel meanwhile), then a full scan runs.
2. Every trigger adds what it touches to the next batch (:mod:`.gathering`), released at once
   for the first event after a quiet spell, coalesced for the rest: a uevent of the classes'
   subsystems adds its device and kinds (:mod:`.uevents`); device nodes appearing or vanishing in
   the directories of devnode globs, a receive-buffer overflow (every class), a valid
   configuration edit (every class), a changed fixture file (every class), one of our spec files
   deleted behind our back or the output directory re-created (the kinds whose files are
   missing), and a full rescan every ``resync`` seconds add kinds to rescan. While a batch gathers
   (a burst), the devices of its events are read ahead.
3. Each batch runs in a worker thread (:mod:`.updates`), so that the event loop keeps serving
   (the device plugin's gRPC in ``cdi-plugin serve --scan``): a device's entry is updated alone
   where it can be (:mod:`.livespecs`), else its classes are rescanned with :func:`~.pipeline.run_scan`. The
   writer is the one ``cdi-gen scan`` uses: atomic, ownership-respecting, only changed files are
   written, and the specs of classes outside the batch are left alone. Devices with hostile udev
   data are always skipped and logged. ``on_written`` hears of each file as soon as it is in
   place, ``on_applied`` of every write once its batch is done.
4. One log line per batch says which files were written or removed and which devices came and went.

A batch that fails (a foreign spec of the same kind, a full disk) is logged once and retried with
a growing delay (1 s up to a minute) until it succeeds (:mod:`.retries`).
:attr:`Watcher.stalled_since` says since when rescans have not got through (one still running, or
failing because another scan held the output directory's lock too long), for the liveness probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from asyncinotify import Mask

from cdi_plugin.aio.dirwatch import FILES, DirWatch
from cdi_plugin.aio.pulse import Pulse
from cdi_plugin.aio.run import run_until
from cdi_plugin.cdi.model import Spec
from cdi_plugin.discovery.model import DeviceSource, UdevEvent
from cdi_plugin.discovery.sources import make_source
from cdi_plugin.errors import CdiPluginError, DiscoveryError
from cdi_plugin.scan.batchlog import BatchLog
from cdi_plugin.scan.configfollow import ConfigFollower
from cdi_plugin.scan.gathering import Batch, Gathering
from cdi_plugin.scan.memory import release_memory
from cdi_plugin.scan.nodedirs import glob_dirs, host_path
from cdi_plugin.scan.pipeline import Placed, ScanReport
from cdi_plugin.scan.probe import check_delivery
from cdi_plugin.scan.retries import Retries
from cdi_plugin.scan.targets import Kinds, targets_for
from cdi_plugin.scan.uevents import Uevents
from cdi_plugin.scan.updates import BatchWork, DeviceEvent
from cdi_plugin.scan.watchoptions import OnApplied, OnWritten, WatchOptions
from cdi_plugin.store.dirlock import LockTimeoutError, LockWaitStopped
from cdi_plugin.store.registry import Stat
from cdi_plugin.wording import fault, plural

if TYPE_CHECKING:  # prometheus_client is loaded only where metrics are served
    from cdi_plugin.metrics import ScanMetrics

log = logging.getLogger(__name__)

#: A key meaning "every class" (a full rescan); never a kind, which cannot hold ``*``.
ALL = "*"
#: A key meaning "check the output directory for spec files of ours that went away".
OUTPUT = "?"
#: Editors and ConfigMaps change a file in several steps; read it once they are done.
FILE_SETTLE_QUIET = 0.05
FILE_SETTLE_MAX = 0.25


class Watcher:
    """Construct (loads the configuration: raises ``ConfigError``), then ``await run(stop)``.

    ``source`` replaces the device source that ``options.source`` names (tests, benchmarks); what
    is watched still follows ``options.source``. ``on_applied`` follows every write (see
    :data:`OnApplied`), ``on_written`` every file written (see :data:`OnWritten`).
    """

    def __init__(
        self,
        options: WatchOptions,
        source: DeviceSource | None = None,
        metrics: ScanMetrics | None = None,
        on_applied: OnApplied | None = None,
        on_written: OnWritten | None = None,
    ) -> None:
        self.options = options
        self.metrics = metrics
        self.on_applied = on_applied
        self.on_written = on_written
        self.config = ConfigFollower(
            options.scan.config,
            plugin_section_used=options.plugin_section_used,
            check_plugin=options.check_plugin,
            allow_hooks_and_mounts=options.scan.allow_hooks_and_mounts,
            on_invalid=None if metrics is None else lambda: metrics.record_validation_failure("config"),
            runtimes=options.scan.runtimes,
            fmt=options.scan.fmt,
        )
        self.config.load()
        if source is None:
            # a device udevd has not set up yet is read on its udev event; the kernel sends none later
            kernel = options.uevent_source == "kernel"
            source = make_source(
                options.source,
                dev_root=options.dev_root,
                simulated=False,
                initialized_only=False if kernel else None,
            )
        self.source = source
        self.targets = targets_for(self.config.classes)
        #: The classes and scan options of the next batch: the configuration as last reloaded.
        self.classes = list(self.config.classes)
        #: Set once the watcher stops: a batch waiting for another scan's lock gives up.
        self.stopping = threading.Event()
        self.scan_options = dataclasses.replace(
            options.scan,
            skip_refused=True,
            dry_run=False,
            runtimes=self.config.runtimes,
            stopping=self.stopping,
        )
        self.work = BatchWork(self.scan_options, source)
        self.gathering = Gathering(self.work, options.quiet, options.max_delay)
        #: Set once the first scan is done and every event source listens.
        self.ready = asyncio.Event()
        #: Fired after every batch, whether it succeeded or not.
        self.batches = Pulse()
        self.feed = Uevents(
            options.uevent_source,
            options.receive_buffer,
            targets=lambda: self.targets,
            add=self._on_uevent,
            lost=lambda: self._add(ALL),
            fail=self._fail,
        )
        self._busy = False
        self.written = BatchLog()
        self._node_kinds: set[str] = set()
        self._fatal: asyncio.Future[None] | None = None
        self.retries = Retries(self._add)
        #: ``time.monotonic()`` since which rescans have not got through; None when they do.
        self.stalled_since: float | None = None

    @property
    def fixture(self) -> Path | None:
        spec = self.options.source
        return Path(os.path.abspath(spec.removeprefix("fixture:"))) if spec.startswith("fixture:") else None

    # -- running --------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Watch until ``stop`` is set; raises when the event source fails for good."""
        loop = asyncio.get_running_loop()
        self._fatal = loop.create_future()
        output_dir = self.options.scan.output_dir
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(self._close)
            stack.callback(asyncio.ensure_future(self._stop_waiting(stop)).cancel)
            nodes = await stack.enter_async_context(
                DirWatch(self._node_dirs(), name="device nodes", relevant=self._node_relevant)
            )
            output = await stack.enter_async_context(
                DirWatch(
                    [output_dir],
                    name="output dir",
                    events=Mask.DELETE | Mask.MOVED_FROM,
                    relevant=lambda _d, name: name in self.written.files,
                )
            )
            follow: list[tuple[DirWatch, Callable[[], Awaitable[None]], bool]] = [
                (nodes, lambda: self._on_nodes(nodes), False),
                (output, self._on_output, False),
            ]
            if self.config.path is not None:
                config = await stack.enter_async_context(
                    DirWatch(self.config.dirs(), name="config", events=FILES)
                )
                follow.append((config, lambda: self._on_config(config, nodes), True))
            fixture = self.fixture
            if fixture is not None:
                watch = await stack.enter_async_context(
                    DirWatch(
                        [fixture.parent],
                        name="fixture",
                        events=FILES,
                        relevant=lambda _d, name: name == fixture.name or name.startswith(".."),
                    )
                )
                follow.append((watch, self._on_fixture, True))
            if self.options.source == "udev":
                self.feed.start()
            self._log_start(output_dir)
            seen = [w.pulse.count for w, _, _ in follow]  # what happens during the first scan counts
            await self._process(Batch(frozenset({frozenset({ALL})}), 0, {}, frozenset()), initial=True)
            probe = []
            if self.feed.monitor is not None and self.options.probe:
                probe.append(check_delivery(self.feed.monitor.source, self.options.probe_timeout))
            self.ready.set()
            await run_until(
                stop,
                self._fatal,
                self._batches(),
                *([self._resync(self.options.resync)] if self.options.resync else []),
                *(self._follow(w, on, settle, n) for (w, on, settle), n in zip(follow, seen, strict=True)),
                helpers=probe,
            )
        log.info("stopped watching")

    def _log_start(self, output_dir: Path) -> None:
        kinds = [c.kind for c in self.classes if c.enabled]
        monitor = self.feed.monitor
        if monitor is not None:
            events = f"{monitor.source} uevents of " + (
                ", ".join(sorted(self.targets.subsystems)) or "every subsystem"
            )
        elif self.fixture is not None:
            events = f"changes of {self.fixture}"
        else:
            events = "no uevents (no class matches by subsystem)"
        log.info(
            "watching %s for %s (%s) into %s: %s%s%s",
            self.options.source,
            plural(len(kinds), "device class"),
            self.config.source,
            output_dir,
            events,
            f"; device nodes {', '.join(g for g, _ in self.targets.globs)}" if self.targets.globs else "",
            f"; configuration {self.config.path}" if self.config.path else "",
        )

    async def _stop_waiting(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self.stopping.set()

    def _close(self) -> None:
        self.retries.cancel()
        self.feed.stop()

    async def _follow(
        self, watch: DirWatch, on_change: Callable[[], Awaitable[None]], settle: bool, seen: int
    ) -> None:
        while True:
            if settle:
                seen = await watch.pulse.settle(seen, FILE_SETTLE_QUIET, FILE_SETTLE_MAX)
            else:
                await watch.pulse.wait_after(seen)
                seen = watch.pulse.count
            await on_change()

    async def _batches(self) -> None:
        while True:
            await self._process(await self.gathering.next_batch())

    async def _resync(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self._add(ALL)

    def settled(self) -> bool:
        """No batch runs, is gathered or waits for a retry, and no uevent waits to be read."""
        gathering = self.gathering
        return not (
            self._busy or gathering.releasing or len(gathering) or self.retries.pending or self.feed.queued()
        )

    async def idle(self, timeout: float = 60.0) -> None:
        """Return once every uevent received so far has been handled (see :meth:`settled`);
        raises ``TimeoutError`` when events keep it busy for ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.settled():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"the watcher was still busy after {timeout}s")
            await self.batches.wait_after(self.batches.count, min(remaining, 0.01))

    @property
    def uevents(self) -> int:
        """uevents read so far."""
        return self.feed.count

    def _fail(self, exc: DiscoveryError) -> None:
        """The event source failed for good: :meth:`run` raises ``exc``."""
        if self._fatal is not None and not self._fatal.done():
            self._fatal.set_exception(exc)

    def _add(self, *kinds: str) -> None:
        if kinds:
            self.gathering.add(frozenset(kinds))

    def _on_uevent(self, event: UdevEvent, kinds: Kinds) -> None:
        if event.sys_path and event.subsystem and event.action != "move":  # a move renames: rescan
            self.gathering.device(DeviceEvent(event.sys_path, kinds), removed=event.action == "remove")
        else:
            self._add(*kinds)

    # -- device nodes, configuration ------------------------------------------------------------

    def _node_dirs(self) -> frozenset[Path]:
        return glob_dirs([g for g, _ in self.targets.globs], self.options.dev_root)

    def _node_relevant(self, directory: Path, name: str) -> bool:
        path = host_path(directory, name, self.options.dev_root)
        kinds = self.targets.kinds_for_dir_entry(path) if path is not None else frozenset()
        self._node_kinds |= kinds
        return bool(kinds)

    async def _on_output(self) -> None:
        self._add(OUTPUT)

    async def _on_fixture(self) -> None:
        self._add(ALL)

    async def _on_nodes(self, nodes: DirWatch) -> None:
        kinds = self._node_kinds or set(self.targets.glob_kinds)
        self._node_kinds = set()
        self._add(*kinds)
        nodes.set_dirs(self._node_dirs())

    async def _on_config(self, config: DirWatch, nodes: DirWatch) -> None:
        # in a worker thread: reading the file, checking it (in a child process once serve has
        # asked for that) and building the classes take up to about 0.1 s
        if await asyncio.to_thread(self.config.reload):
            # for the next batch: one may be running in its thread meanwhile
            self.classes = list(self.config.classes)
            self.scan_options = dataclasses.replace(self.scan_options, runtimes=self.config.runtimes)
            before = self.targets
            self.targets = targets_for(self.classes)
            if (before.subsystems, before.every_subsystem) != (
                self.targets.subsystems,
                self.targets.every_subsystem,
            ):
                try:
                    if self.options.source == "udev":
                        self.feed.start()
                except DiscoveryError as exc:
                    self._fail(exc)
            nodes.set_dirs(self._node_dirs())
            self._add(ALL)
        config.set_dirs(self.config.dirs())

    # -- batches --------------------------------------------------------------------------------

    async def _process(self, batch: Batch, *, initial: bool = False) -> None:
        keys, events = batch.keys, batch.events
        wanted: set[str] = set().union(*(k for k in keys if isinstance(k, frozenset)))
        devices = [k for k in keys if isinstance(k, DeviceEvent)]
        self.feed.batch_started()
        scope: set[str] | None = None
        if ALL not in wanted:
            scope = wanted - {OUTPUT}
            if OUTPUT in wanted:
                scope |= self.written.missing(self.options.scan.output_dir)
            if not scope and not devices:
                self.batches.fire()
                return
        wanted |= {kind for d in devices for kind in d.kinds}
        classes, self.work.options = self.classes, self.scan_options
        started = time.perf_counter()
        if self.stalled_since is None:
            self.stalled_since = time.monotonic()
        self._busy = True
        placed = self._placed(asyncio.get_running_loop())
        work = asyncio.ensure_future(
            asyncio.to_thread(
                self.work.run, classes, scope, devices, placed, numbers=batch.numbers, gone=batch.gone
            )
        )

        def finish() -> None:
            self._busy = False
            outcomes, exc = work.result()
            seconds = time.perf_counter() - started
            if not isinstance(exc, LockTimeoutError):
                self.stalled_since = None
            for outcome in outcomes:
                self.written.record(
                    outcome.report, outcome.scope, events, seconds * 1000, initial, updated=outcome.updated
                )
                self._applied(outcome.report)
            if isinstance(exc, LockWaitStopped):
                log.info("%s", exc)
            elif isinstance(exc, CdiPluginError):
                self.retries.failed(wanted, scope, str(exc))
            elif exc is not None:
                log.error("rescan failed unexpectedly", exc_info=exc)
                self.retries.failed(wanted, scope, fault(exc))
            else:
                self.retries.succeeded(wanted, ALL)
                if scope is None:
                    release_memory(collect=initial)  # what the scan's transient objects left in the allocator
            if self.metrics is not None:
                self.written.count(self.metrics, seconds, [o.report for o in outcomes], exc)
            self.batches.fire()

        try:
            await asyncio.wait([work])  # never cancels the work, which never raises
        except asyncio.CancelledError:
            # stopping: the files are being written anyway; finish, and say what was done
            self.stopping.set()
            await asyncio.wait([work])
            finish()
            raise
        finish()

    def _placed(self, loop: asyncio.AbstractEventLoop) -> Placed | None:
        """What the batch's thread calls as each file is in place: ``on_written``, on the loop."""
        on_written = self.on_written
        if on_written is None:
            return None

        def placed(path: Path, spec: Spec | None, stat: Stat | None) -> None:
            loop.call_soon_threadsafe(on_written, path, spec, stat)

        return placed

    def _applied(self, report: ScanReport) -> None:
        applied = report.applied
        if self.on_applied is None or applied is None or not applied.done:
            return
        specs = {f.path: f.spec.spec if f.spec is not None else None for f in report.files}
        self.on_applied(applied, {path: specs.get(path) for path, _ in applied.done})
