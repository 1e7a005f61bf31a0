"""Slices following the inventory, through the fake API server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from cdi_plugin.dra.kube import Backoff, KubeApi
from cdi_plugin.dra.publisher import SlicePublisher
from cdi_plugin.dra.slices import Plan
from tests.deviceplugin.helpers import make_node
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import SLICES, FakeApiServer, running
from tests.dra.rules import pool_problems
from tests.dra.specinventory import refresh, spec_inventory
from tests.dra.test_kube import Sleeps, _kubeconfig, _ours

pytestmark = pytest.mark.asyncio


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with running(FakeApiServer()) as api:
        api.add_node(NODE)
        yield api


@pytest_asyncio.fixture
async def kube(tmp_path: Path, server: FakeApiServer) -> AsyncIterator[KubeApi]:
    api = KubeApi.connect(
        DRIVER, NODE, _kubeconfig(tmp_path, server.url), backoff=Backoff(0.1, 1.0, 2), sleep=Sleeps()
    )
    yield api
    await api.close()


def _names(server: FakeApiServer) -> set[str]:
    return {d["name"] for s in _ours(server) for d in s["spec"]["devices"]}


async def test_run_follows_the_inventory_and_survives_an_api_outage(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    make_node(host_nodes / "fuse")
    write_spec(spec_dir, "cdi-plugin.io/fuse", {"fuse": str(host_nodes / "fuse")})
    inv = spec_inventory([spec_dir])
    published: asyncio.Queue[Plan] = asyncio.Queue()
    sleeps = Sleeps()
    publisher = SlicePublisher(kube, sleep=sleeps, on_publish=published.put_nowait)
    task = asyncio.create_task(publisher.run(inv))
    try:
        assert (await asyncio.wait_for(published.get(), 30)).generation == 0
        assert _names(server) == {"fuse-fuse"}

        server.fail("GET", SLICES, 503, 503)  # one publish fails after its own 2 attempts
        make_node(host_nodes / "card0")
        write_spec(spec_dir, "cdi-plugin.io/gpu", {"card0": str(host_nodes / "card0")})
        refresh(inv)
        done = await asyncio.wait_for(published.get(), 30)
        assert done.generation == 1
        assert len(sleeps) == 1  # the publisher's own backoff, after the failed publish
        assert _names(server) == {"fuse-fuse", "gpu-card0"}
        assert pool_problems(_ours(server)) == []
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_without_device_taints_unhealthy_devices_are_withdrawn(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    server.drop_taints = True
    make_node(host_nodes / "card0")
    write_spec(
        spec_dir,
        "cdi-plugin.io/gpu",
        {"card0": str(host_nodes / "card0"), "card1": str(host_nodes / "card1")},
    )
    inv = spec_inventory([spec_dir])
    publisher = SlicePublisher(kube)
    await publisher.publish(inv.devices())
    assert publisher.taints is False
    assert _names(server) == {"gpu-card0"}
    assert pool_problems(_ours(server)) == []


async def test_with_device_taints_unhealthy_devices_stay_tainted(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    make_node(host_nodes / "card0")
    write_spec(
        spec_dir,
        "cdi-plugin.io/gpu",
        {"card0": str(host_nodes / "card0"), "card1": str(host_nodes / "card1")},
    )
    publisher = SlicePublisher(kube)
    await publisher.publish(spec_inventory([spec_dir]).devices())
    assert publisher.taints is True
    [stored] = _ours(server)
    assert [d.get("taints") for d in stored["spec"]["devices"]] == [
        None,
        [{"key": f"{DRIVER}/unhealthy", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}],
    ]


async def test_slices_deleted_by_someone_else_come_back_on_wake_and_on_resync(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    make_node(host_nodes / "fuse")
    write_spec(spec_dir, "cdi-plugin.io/fuse", {"fuse": str(host_nodes / "fuse")})
    published: asyncio.Queue[Plan] = asyncio.Queue()
    publisher = SlicePublisher(kube, on_publish=published.put_nowait, resync=3600)
    task = asyncio.create_task(publisher.run(spec_inventory([spec_dir])))
    try:
        await asyncio.wait_for(published.get(), 30)
        server.slices.clear()  # a starting kubelet deletes its node's slices, then registers the driver
        publisher.wake()
        assert (await asyncio.wait_for(published.get(), 30)).create
        assert _names(server) == {"fuse-fuse"}

        publisher.resync = 0.1
        publisher.wake()  # the wait with the new period begins after this publish
        server.slices.clear()  # no wake this time

        async def recreated() -> Plan:
            while (done := await published.get()).empty:
                pass
            return done

        assert (await asyncio.wait_for(recreated(), 30)).create
        assert _names(server) == {"fuse-fuse"}
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
