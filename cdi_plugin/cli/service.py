"""Long-running jobs in one event loop until a signal (``cdi-gen watch``, ``cdi-plugin serve``).

Every job gets the same stop event. One signal handler sets it; a job that ends or fails sets it
too, so the others stop as well (a watcher whose event source broke must not leave a plugin
serving specs that no longer follow the host). The first failure is raised once all jobs ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from cdi_plugin.aio.run import stop_on_signals
from cdi_plugin.cli.scanopts import fail

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from cdi_plugin.metrics import MetricsServer, Probes
    from cdi_plugin.scan.watcher import WatchOptions

log = logging.getLogger(__name__)

Job = Callable[[asyncio.Event], Awaitable[None]]
INITIAL_SCAN = "initial scan"


async def run_until_stopped(*jobs: Job, stop: asyncio.Event | None = None) -> None:
    """Run ``jobs`` together until ``stop`` is set, SIGTERM, SIGINT or SIGHUP arrives (handled only
    on the main thread), or one of them ends."""
    stop = stop or asyncio.Event()
    with stop_on_signals(stop):
        tasks = [asyncio.ensure_future(job(stop)) for job in jobs]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        stop.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result


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
                await asyncio.wait_for(stop.wait(), probes.interval)

    try:
        asyncio.run(run_until_stopped(watcher.run, heartbeat))
    finally:
        server.close()
