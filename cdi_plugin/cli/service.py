"""Long-running jobs in one event loop until a signal (``cdi-gen watch``, ``cdi-plugin serve``).

Every job gets the same stop event. One signal handler sets it; a job that ends or fails sets it
too, so the others stop as well (a watcher whose event source broke must not leave a plugin
serving specs that no longer follow the host). A job that has not ended :data:`STOP_GRACE`
seconds after the stop is cancelled. The first failure is raised once all jobs ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from cdi_plugin.aio.run import Job, run_jobs, stop_on_signals
from cdi_plugin.cli.scanopts import fail

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from cdi_plugin.metrics import MetricsServer, Probes
    from cdi_plugin.scan.watcher import WatchOptions

log = logging.getLogger(__name__)

INITIAL_SCAN = "initial scan"
#: Seconds the jobs have to end on their own after a stop; well within the 30 s Kubernetes waits
#: between SIGTERM and SIGKILL.
STOP_GRACE = 10.0


async def run_until_stopped(*jobs: Job, stop: asyncio.Event | None = None, grace: float = STOP_GRACE) -> None:
    """Run ``jobs`` together until ``stop`` is set, SIGTERM, SIGINT or SIGHUP arrives (handled only
    on the main thread), or one of them ends; then each ends on its own within ``grace`` seconds
    or is cancelled."""
    stop = stop or asyncio.Event()
    with stop_on_signals(stop):
        await run_jobs(stop, *jobs, grace=grace)


def start_metrics_server(
    address: tuple[str, int], registry: CollectorRegistry, probes: Probes, program: str
) -> MetricsServer:
    """The metrics endpoint, listening on ``address``; a bind failure is a one-line fatal error
    naming ``program``."""
    from cdi_plugin.metrics import MetricsServer

    server = MetricsServer(*address, registry, probes)
    try:
        server.start()
    except OSError as exc:
        fail(
            program,
            f"--metrics-address {server.url.removeprefix('http://')}: cannot listen: {exc.strerror or exc}",
        )
    return server


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
