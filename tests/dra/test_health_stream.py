"""Device health streams (``DRAResourceHealth.NodeWatchResources``) over the real DRA socket, with
the fake kubelet: changes, refreshes, both versions, two streams at once, a dropped stream, a
stopping driver, a kubelet that never asks."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
import pytest_asyncio

from cdi_plugin.dra import api
from cdi_plugin.dra.health import HEALTHY, UNHEALTHY, DeviceHealth
from cdi_plugin.dra.health_service import MAX_STREAMS
from cdi_plugin.dra.kubelet import KubeletPlugin, Paths
from cdi_plugin.dra.prepared import PreparedClaims
from cdi_plugin.dra.service import DraService
from cdi_plugin.inventory import SpecInventory
from tests.deviceplugin.helpers import eventually, make_node
from tests.dra.conftest import DRIVER, NODE
from tests.dra.fakekubelet import FakeKubelet
from tests.dra.specinventory import refresh
from tests.dra.test_health import inventory
from tests.dra.test_kubelet import Claims, claim_obj

__all__ = ["inventory"]


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(DRIVER, registry_dir=tmp_path / "plugins_registry", plugins_dir=tmp_path / "plugins")


@pytest_asyncio.fixture
async def plugin(paths: Paths, inventory: SpecInventory) -> AsyncIterator[KubeletPlugin]:
    service = DraService(DRIVER, NODE, inventory, Claims(), PreparedClaims(paths.state_file))
    async with KubeletPlugin(paths, service) as p:
        yield p


async def _kubelet(paths: Paths) -> FakeKubelet:
    kubelet = FakeKubelet(paths.registry_dir)
    await kubelet.register(paths.registration_socket, DRIVER)
    return kubelet


@pytest_asyncio.fixture
async def kubelet(paths: Paths, plugin: KubeletPlugin) -> FakeKubelet:
    return await _kubelet(paths)


Devices = dict[str, DeviceHealth]


def _health_of(name: str, health: str) -> Callable[[Devices], bool]:
    return lambda devices: name in devices and devices[name].health == health


def _any(devices: Devices) -> bool:
    return True


def _status(devices: Devices) -> dict[str, tuple[str, str, int]]:
    """What a message says of each device, without its time stamp."""
    return {n: (h.health, h.message, h.timeout) for n, h in devices.items()}


pytestmark = pytest.mark.asyncio


async def test_the_stream_follows_a_host_node_that_goes_and_comes_back(
    kubelet: FakeKubelet, inventory: SpecInventory, host_nodes: Path
) -> None:
    async with kubelet.watch_health() as stream:
        assert stream.version == api.HEALTH_V1
        _, _, first = await stream.next(_any)
        assert {n: h.health for n, h in first.items()} == {
            "gpu-card0": HEALTHY,
            "gpu-card1": HEALTHY,
            "gpu-gone": UNHEALTHY,
        }
        os.unlink(host_nodes / "card1")
        refresh(inventory)  # what the node watch does after the deletion's event
        index, _, gone = await stream.next(_health_of("gpu-card1", UNHEALTHY))
        assert gone["gpu-card1"].message == f"host device node {host_nodes}/card1 is missing"
        assert gone["gpu-card0"].health == HEALTHY  # the full list in every message
        make_node(host_nodes / "card1")
        refresh(inventory)
        _, _, back = await stream.next(_health_of("gpu-card1", HEALTHY), after=index)
        assert back["gpu-card1"].message == ""
        assert stream.problems == []


async def test_the_1_36_kubelet_calls_v1alpha1_and_gets_the_same_lists(
    kubelet: FakeKubelet, inventory: SpecInventory, host_nodes: Path
) -> None:
    async with kubelet.watch_health(api.HEALTH_V1ALPHA1) as old, kubelet.watch_health(api.HEALTH_V1) as new:
        os.unlink(host_nodes / "card0")
        refresh(inventory)
        _, _, on_old = await old.next(_health_of("gpu-card0", UNHEALTHY))
        _, _, on_new = await new.next(_health_of("gpu-card0", UNHEALTHY))
        assert _status(on_old) == _status(on_new)
        assert old.problems == new.problems == []


async def test_two_streams_at_once_both_get_every_list_and_a_dropped_one_leaves_the_other(
    kubelet: FakeKubelet,
    inventory: SpecInventory,
    host_nodes: Path,
    plugin: KubeletPlugin,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    first, second = kubelet.watch_health(), kubelet.watch_health()
    try:
        await first.next(_any)
        await second.next(_any)
        assert plugin.health.open == 2
        assert (
            "the kubelet opened a device health stream (v1.DRAResourceHealth, 2 streams open)" in caplog.text
        )
        await first.drop()
        ended = "a device health stream ended (v1.DRAResourceHealth, the kubelet closed it): 1 stream open"
        await eventually(lambda: ended in caplog.text, ended)
        os.unlink(host_nodes / "card1")
        refresh(inventory)
        await second.next(_health_of("gpu-card1", UNHEALTHY))
        assert not second.ended
    finally:
        await second.drop()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    # the driver still prepares claims
    claims = plugin.service.claims
    assert isinstance(claims, Claims)
    ref = api.Claim("ns", "c", "uid-1")
    claims.add(claim_obj(ref, ("r", NODE, "gpu-card0")))
    assert isinstance((await kubelet.prepare(ref))["uid-1"], tuple)


async def test_the_list_is_sent_again_before_the_timeout_when_nothing_changes(
    paths: Paths, plugin: KubeletPlugin
) -> None:
    plugin.health.refresh = 0.05
    kubelet = await _kubelet(paths)
    async with kubelet.watch_health() as stream:
        _, _, first = await stream.next(_any)
        _, _, again = await stream.next(_any, after=2)
        assert _status(again) == _status(first)
        assert all(again[n].last_updated >= first[n].last_updated for n in first)
        assert stream.problems == []


async def test_stopping_the_driver_ends_the_streams_without_error(
    paths: Paths, plugin: KubeletPlugin
) -> None:
    kubelet = await _kubelet(paths)
    stream = kubelet.watch_health()
    await stream.next(_any)
    await asyncio.wait_for(plugin.stop(grace=30), 10)  # the stream ends: the server's grace is not waited
    await stream.drop()
    assert stream.ended
    assert stream.error is None
    await plugin.start()  # served again: a new stream gets the list
    async with (await _kubelet(paths)).watch_health() as again:
        await again.next(_any)


async def test_a_kubelet_that_never_asks_gets_one_log_line_and_nothing_breaks(
    paths: Paths, plugin: KubeletPlugin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    plugin.health.expect_within = 0.05
    kubelet = await _kubelet(paths)
    silent = "has not asked for device health: pods will not show the health"
    await eventually(lambda: silent in caplog.text, silent)
    [line] = [r for r in caplog.records if "has not asked for device health" in r.getMessage()]
    assert "\n" not in line.getMessage()
    claims = plugin.service.claims
    assert isinstance(claims, Claims)
    ref = api.Claim("ns", "c", "uid-1")
    claims.add(claim_obj(ref, ("r", NODE, "gpu-card0")))
    assert isinstance((await kubelet.prepare(ref))["uid-1"], tuple)


async def test_a_kubelet_that_asks_in_time_gets_no_such_line(
    paths: Paths, plugin: KubeletPlugin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin")
    plugin.health.expect_within = 0.3
    plugin.health.refresh = 0.2
    kubelet = await _kubelet(paths)
    async with kubelet.watch_health() as stream:
        # the third message comes at least 0.4 s after the stream opened, after the registration's check
        await stream.next(_any, after=2)
    assert "has not asked for device health" not in caplog.text


async def test_a_malformed_request_is_invalid_argument(kubelet: FakeKubelet) -> None:
    async with grpc.aio.insecure_channel(f"unix://{kubelet.endpoint}") as channel:
        call = channel.unary_stream(
            "/v1alpha1.DRAResourceHealth/NodeWatchResources",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in call(b"\x0a\x05\xff\xff", timeout=5):
                pass
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed v1alpha1.NodeWatchResourcesRequest" in str(info.value.details())


async def test_a_stream_beyond_the_bound_ends_the_oldest_so_a_restarted_kubelet_is_served(
    kubelet: FakeKubelet, inventory: SpecInventory, host_nodes: Path, plugin: KubeletPlugin
) -> None:
    """The old kubelet's streams, still open, leave the restarted kubelet's served; a client that
    opens streams in a loop holds the newest MAX_STREAMS."""
    streams = [kubelet.watch_health() for _ in range(MAX_STREAMS)]
    try:
        for stream in streams:
            await stream.next(_any)
        for _ in range(2 * MAX_STREAMS):
            streams.append(kubelet.watch_health())
            await streams[-1].next(_any)
        for stream in streams[:-MAX_STREAMS]:
            await eventually(lambda s=stream: s.ended, "an older stream ended")
            assert stream.error is not None
            assert stream.error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert stream.error.details() == (
                f"the device health stream ended: newer streams were opened, and at most {MAX_STREAMS} "
                "are served at once"
            )
        assert plugin.health.open == MAX_STREAMS
        os.unlink(host_nodes / "card1")
        refresh(inventory)
        for stream in streams[-MAX_STREAMS:]:
            await stream.next(_health_of("gpu-card1", UNHEALTHY))
            assert not stream.ended
    finally:
        for stream in streams:
            await stream.drop()
