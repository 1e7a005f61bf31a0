"""The metrics endpoint scraped over real HTTP while the plugin serves a fake kubelet and allocates."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from cdi_plugin.deviceplugin import daemon
from cdi_plugin.deviceplugin.settings import Settings
from cdi_plugin.metrics import MetricsServer, PluginMetrics, Probes
from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import Layout, eventually, make_node, run, spec_of, write_spec
from tests.metrics.scrape import get, metrics_until, scrape, value

KIND = "cdi-plugin.io/test"

pytestmark = pytest.mark.timeout(180)


@contextlib.asynccontextmanager
async def observed_plugin(settings: Settings, metrics: PluginMetrics) -> AsyncIterator[str]:
    """The plugin in this event loop with its metrics served on 127.0.0.1; yields the base URL."""
    server = MetricsServer("127.0.0.1", 0, metrics.registry, metrics.probes)
    server.start()
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.run(settings, stop, metrics=metrics))
    try:
        yield server.url
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        server.close()


async def http(url: str) -> tuple[int, str]:
    return await asyncio.to_thread(get, url)


def test_scrape_while_serving_and_allocating(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    n1, n2 = make_node(layout.dev / "n1"), make_node(layout.dev / "n2")
    write_spec(layout.etc, spec_of(KIND, {"a": [n1], "b": [n2]}))
    settings = layout.settings()
    metrics = PluginMetrics(spec_dirs=settings.spec_dirs)

    async def scenario() -> None:
        async with observed_plugin(settings, metrics) as base:
            # served but the kubelet is not there yet: alive, not ready, and saying why
            found = await metrics_until(
                base, lambda s: value(s, "cdi_plugin_devices", resource=KIND, health="Healthy") == 2
            )
            assert value(found, "cdi_plugin_devices", resource=KIND, health="Unhealthy") == 0
            assert await http(base + "/healthz") == (200, "ok\n")
            status, body = await http(base + "/readyz")
            assert (status, body) == (503, f"waiting for: {KIND}\n")

            async with FakeKubelet(layout.plugin_dir) as kubelet:
                client = await kubelet.wait_registered(KIND)
                await client.wait_until(lambda d: len(d) == 2)
                found = await metrics_until(
                    base, lambda s: value(s, "cdi_plugin_registered", resource=KIND) == 1
                )
                assert value(found, "cdi_plugin_registrations_total", resource=KIND, result="ok") == 1
                assert await http(base + "/readyz") == (200, "ok (1 ready)\n")

                before = await asyncio.to_thread(scrape, base)
                assert value(before, "cdi_plugin_allocations_total", resource=KIND, result="ok") is None
                answer = await client.allocate(["a"])
                assert [d.name for d in answer.cdi_devices] == [f"{KIND}=a"]
                with pytest.raises(grpc.aio.AioRpcError):
                    await client.allocate(["nope"], as_kubelet=False)
                # counted once the answer is on its way
                after = await metrics_until(
                    base, lambda s: value(s, "cdi_plugin_allocations_total", resource=KIND, result="ok") == 1
                )
                assert (
                    value(after, "cdi_plugin_allocations_total", resource=KIND, result="invalid-argument")
                    == 1
                )
                count = value(after, "cdi_plugin_allocate_duration_seconds_count", resource=KIND)
                total = value(after, "cdi_plugin_allocate_duration_seconds_sum", resource=KIND)
                assert count == 2
                assert total is not None
                assert total > 0
                slowest = value(
                    after, "cdi_plugin_allocate_duration_seconds_bucket", resource=KIND, le="+Inf"
                )
                assert slowest == 2

                # a host node disappears: the gauge follows the health the kubelet is told
                n2.unlink()
                await client.wait_until(lambda d: d["b"].health == "Unhealthy")
                found = await metrics_until(
                    base, lambda s: value(s, "cdi_plugin_devices", resource=KIND, health="Unhealthy") == 1
                )
                assert value(found, "cdi_plugin_devices", resource=KIND, health="Healthy") == 1

                # a kubelet restart: not registered, then registered again
                registrations = kubelet.registrations
                await kubelet.restart()
                await kubelet.wait_registered(KIND, after=registrations)
                found = await metrics_until(
                    base,
                    lambda s: value(s, "cdi_plugin_registrations_total", resource=KIND, result="ok") == 2,
                )
                assert value(found, "cdi_plugin_registered", resource=KIND) == 1

    run(scenario())


def test_a_node_with_nothing_to_serve_is_healthy_and_ready(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    settings = layout.settings()
    metrics = PluginMetrics(spec_dirs=settings.spec_dirs)

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir), observed_plugin(settings, metrics) as base:
            deadline = time.monotonic() + 60
            while (ready := await http(base + "/readyz"))[0] != 200 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert ready == (200, "ok (nothing to serve)\n")
            assert await http(base + "/healthz") == (200, "ok\n")
            found = await asyncio.to_thread(scrape, base)
            assert not [k for k in found if k[0] == "cdi_plugin_devices"]

    run(scenario())


def test_a_resource_that_goes_away_loses_its_series(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    spec = write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "n1")]}))
    settings = layout.settings(grace_period=0.0)
    metrics = PluginMetrics(spec_dirs=settings.spec_dirs)

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, observed_plugin(settings, metrics) as base:
            await kubelet.wait_registered(KIND)
            await metrics_until(base, lambda s: value(s, "cdi_plugin_registered", resource=KIND) == 1)
            spec.unlink()
            found = await metrics_until(
                base, lambda s: value(s, "cdi_plugin_devices", resource=KIND, health="Healthy") is None
            )
            assert value(found, "cdi_plugin_registered", resource=KIND) is None
            assert await http(base + "/readyz") == (200, "ok (nothing to serve)\n")

    run(scenario())


def test_healthz_fails_while_the_event_loop_is_blocked(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    settings = layout.settings()
    metrics = PluginMetrics(probes=Probes(settings.spec_dirs, stale_after=0.4))
    seen: list[tuple[int, str]] = []
    polling, stale = threading.Event(), threading.Event()

    def poll(base: str) -> None:
        while polling.is_set():
            seen.append(get(base + "/healthz"))
            if seen[-1][0] == 503:
                stale.set()
            time.sleep(0.05)

    async def scenario() -> None:
        async with observed_plugin(settings, metrics) as base:
            while await http(base + "/healthz") != (200, "ok\n"):  # the loop beats
                await asyncio.sleep(0.05)
            polling.set()
            poller = threading.Thread(target=poll, args=(base,))
            poller.start()
            try:
                # the event loop is stuck until the endpoint's threads, which are not, say so
                assert stale.wait(60), seen
                await eventually(lambda: seen[-1] == (200, "ok\n"), "healthy again")
            finally:
                polling.clear()
                poller.join()
            assert await http(base + "/healthz") == (200, "ok\n")

    run(scenario())
    stale = [body for status, body in seen if status == 503]
    assert stale, seen
    assert all(body.startswith("the event loop has not run for ") for body in stale)
    assert seen[-1] == (200, "ok\n")
