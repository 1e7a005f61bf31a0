"""Long-running jobs in one event loop until a signal (``cdi-gen watch``, ``cdi-plugin serve``).

Every job gets the same stop event. One signal handler sets it; a job that ends or fails sets it
too, so the others stop as well (a watcher whose event source broke must not leave a plugin
serving specs that no longer follow the host). A job that has not ended :data:`STOP_GRACE`
seconds after the stop is cancelled. The first failure is raised once all jobs ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from typing import TYPE_CHECKING

from cdi_plugin.aio.run import Job, run_jobs, stop_on_signals
from cdi_plugin.cli.scanopts import fail

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from cdi_plugin.metrics import MetricsServer, Probes
    from cdi_plugin.scan.watchoptions import WatchOptions

log = logging.getLogger(__name__)

INITIAL_SCAN = "initial scan"
#: Seconds the jobs have to end on their own after a stop; well within the 30 s Kubernetes waits
#: between SIGTERM and SIGKILL.
STOP_GRACE = 10.0
#: How often an address in use is tried again (the instance holding it is stopping).
BIND_RETRY = 0.5


async def run_until_stopped(*jobs: Job, stop: asyncio.Event | None = None, grace: float = STOP_GRACE) -> None:
    """Run ``jobs`` together until ``stop`` is set, SIGTERM, SIGINT or SIGHUP arrives (handled only
    on the main thread), or one of them ends; then each ends on its own within ``grace`` seconds
    or is cancelled."""
    stop = stop or asyncio.Event()
    with stop_on_signals(stop):
        await run_jobs(stop, *jobs, grace=grace)


def start_metrics_server(
    address: tuple[str, int],
    registry: CollectorRegistry,
    probes: Probes,
    program: str,
    *,
    wait_if_busy: bool = False,
) -> MetricsServer:
    """The metrics endpoint, listening on ``address``; a bind failure is a one-line fatal error
    naming ``program``. With ``wait_if_busy`` an address in use is not: the server is returned
    unstarted, for :func:`serve_when_free` (another instance holds it during an update)."""
    from cdi_plugin.metrics import MetricsServer

    server = MetricsServer(*address, registry, probes)
    where = f"--metrics-address {server.url.removeprefix('http://')}"
    try:
        server.start()
    except OSError as exc:
        if wait_if_busy and exc.errno == errno.EADDRINUSE:
            log.warning(
                "%s: in use (by the instance this pod replaces, during an update?); serving metrics and "
                "probes once it is free, the probes reach that instance meanwhile",
                where,
            )
        else:
            fail(program, f"{where}: cannot listen: {exc.strerror or exc}")
    return server


async def serve_when_free(server: MetricsServer, stop: asyncio.Event) -> None:
    """A job: start ``server`` as soon as its address is free (tried every :data:`BIND_RETRY`
    seconds), then serve until ``stop``."""
    while not server.started:
        try:
            server.start()
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(BIND_RETRY):
                    await stop.wait()
            if stop.is_set():
                return
    await stop.wait()


def serve_scan_metrics(options: WatchOptions, address: tuple[str, int], program: str) -> None:
    """``cdi-gen watch --metrics-address``: the watcher, its metrics and probes on ``address``.

    Live while the event loop runs, the output directory can be listed and rescans get through
    (not stuck, nor failing for want of the output directory's lock, for 30 s); ready after the
    first scan, once every event source listens.
    """
    from cdi_plugin.metrics import Probes, ScanMetrics
    from cdi_plugin.scan.watcher import Watcher

    metrics = ScanMetrics()
    probes = Probes([options.scan.output_dir])
    probes.require([INITIAL_SCAN])
    watcher = Watcher(options, metrics=metrics)
    probes.track("rescans", lambda: watcher.stalled_since)
    server = start_metrics_server(address, metrics.registry, probes, program)

    async def heartbeat(stop: asyncio.Event) -> None:
        while not stop.is_set():
            probes.beat()
            probes.satisfy(INITIAL_SCAN, watcher.ready.is_set())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(probes.interval):
                    await stop.wait()

    try:
        asyncio.run(run_until_stopped(watcher.run, heartbeat))
    finally:
        server.close()
