"""The driver's API server side against the fake API server over real HTTP: the server, a
kubeconfig naming it, a KubeApi on it, an inventory of N devices, sleeps that are recorded, the
publisher or the list and watch alone running, and what the server received."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cdi_plugin.dra.backoff import Backoff
from cdi_plugin.dra.kube import SLICES, KubeApi
from cdi_plugin.dra.publisher import SlicePublisher
from cdi_plugin.dra.reflector import SliceCache, SliceWatch
from cdi_plugin.dra.slices import build_pool
from cdi_plugin.inventory import SpecInventory
from tests.deviceplugin.helpers import make_node
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import FakeApiServer, running
from tests.dra.serving import kubeconfig
from tests.dra.specinventory import spec_inventory

__all__ = ["kube", "server", "sleeps"]


class Sleeps(list[float]):
    """An asyncio.sleep that records each delay and sleeps ``real`` seconds instead (0: none)."""

    def __init__(self, real: float = 0.0) -> None:
        super().__init__()
        self.real = real

    async def __call__(self, delay: float) -> None:
        self.append(delay)
        await asyncio.sleep(self.real)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with running(FakeApiServer()) as api:
        api.add_node(NODE)
        yield api


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def connect(tmp_path: Path, url: str, driver: str = DRIVER, node: str = NODE, **kwargs: Any) -> KubeApi:
    """A KubeApi on ``url``; each request given 2 s (not 10) for its whole answer."""
    kwargs.setdefault("backoff", Backoff(0.1, 1.0, 4))
    kube = KubeApi.connect(driver, node, kubeconfig(tmp_path / "kubeconfig", url), **kwargs)
    kube.rest.timeout = 2.0
    return kube


@pytest_asyncio.fixture
async def kube(tmp_path: Path, server: FakeApiServer, sleeps: Sleeps) -> AsyncIterator[KubeApi]:
    api = connect(tmp_path, server.url, sleep=sleeps, claim_deadline=5.0, claim_attempt_timeout=1.0)
    yield api
    await api.close()


def inventory_of(spec_dir: Path, host_nodes: Path, count: int) -> SpecInventory:
    """An inventory of ``count`` healthy FUSE-like devices, fuse0 to fuse<count-1>."""
    nodes = {}
    for i in range(count):
        make_node(host_nodes / f"fuse{i}")
        nodes[f"fuse{i}"] = str(host_nodes / f"fuse{i}")
    write_spec(spec_dir, "cdi-plugin.io/fuse", nodes)
    return spec_inventory([spec_dir])


def ours(server: FakeApiServer, driver: str = DRIVER, node: str = NODE) -> list[dict[str, Any]]:
    """The slices of this node and driver the server holds, by name."""
    found = [
        s for s in server.slices.values() if (s["spec"]["nodeName"], s["spec"]["driver"]) == (node, driver)
    ]
    return sorted(found, key=lambda s: str(s["metadata"]["name"]))


def foreign(node: str, driver: str) -> dict[str, Any]:
    return build_pool(driver, node, {}, taints=True).slices(0)[0]


def device_names(server: FakeApiServer) -> set[str]:
    """The names of the devices in the slices of this node and driver."""
    return {d["name"] for s in ours(server) for d in s["spec"]["devices"]}


@contextlib.asynccontextmanager
async def publishing(publisher: SlicePublisher, inventory: SpecInventory) -> AsyncIterator[None]:
    """The publisher running on ``inventory``, cancelled at the end."""
    task = asyncio.create_task(publisher.run(inventory))
    try:
        yield
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def lists(server: FakeApiServer) -> int:
    """The lists of the slices received."""
    return server.count("GET", SLICES, watch=False)


def watches(server: FakeApiServer) -> list[str]:
    """The version each watch of the slices started from, in order."""
    return [c.query["resourceVersion"][0] for c in server.calls if c.path == SLICES and c.watch]


@contextlib.asynccontextmanager
async def reflecting(kube: KubeApi, sleeps: Sleeps) -> AsyncIterator[SliceCache]:
    """The list and watch of the node's slices alone, its delays recorded in ``sleeps``."""
    cache = SliceCache()
    task = asyncio.create_task(SliceWatch(kube, cache, sleep=sleeps).run())
    try:
        yield cache
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
