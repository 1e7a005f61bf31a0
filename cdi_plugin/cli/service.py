"""Long-running jobs in one event loop until a signal (``cdi-gen watch``, ``cdi-plugin serve``).

Every job gets the same stop event. One signal handler sets it; a job that ends or fails sets it
too, so the others stop as well (a watcher whose event source broke must not leave a plugin
serving specs that no longer follow the host). The first failure is raised once all jobs ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from cdi_plugin.cli.scanopts import fail

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from cdi_plugin.metrics import MetricsServer, Probes
    from cdi_plugin.scan.watcher import WatchOptions

log = logging.getLogger(__name__)

Job = Callable[[asyncio.Event], Awaitable[None]]
INITIAL_SCAN = "initial scan"
#: Each stops every job cleanly. SIGHUP too: a hang-up (the terminal closed, or a reload asked of a
#: service without one) must not kill the process with its sockets left behind; a restart reloads.
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _on_signal(sig: signal.Signals, stop: asyncio.Event) -> None:
    log.info("%s received, stopping", sig.name)
    stop.set()


async def run_until_stopped(*jobs: Job, stop: asyncio.Event | None = None) -> None:
    """Run ``jobs`` together until ``stop`` is set or one of :data:`SIGNALS` arrives (handled only on
    the main thread), or until one of them ends."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    on_main = threading.current_thread() is threading.main_thread()
    if on_main:
        for sig in SIGNALS:
            loop.add_signal_handler(sig, _on_signal, sig, stop)
    try:
        tasks = [asyncio.ensure_future(job(stop)) for job in jobs]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        stop.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
    finally:
        if on_main:
            for sig in SIGNALS:
                loop.remove_signal_handler(sig)


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
