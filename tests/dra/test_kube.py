"""Slices and claims through the API server, against a fake one over real HTTP."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cdi_plugin.dra import api
from cdi_plugin.dra.kube import ApiServerError, Backoff, KubeApi
from cdi_plugin.dra.kubelet import ClaimReadError, DraService, KubeletPlugin, Paths, PreparedClaims
from cdi_plugin.dra.names import DraConfigError
from cdi_plugin.dra.slices import build_pool, slice_name
from cdi_plugin.inventory import SpecInventory
from tests.deviceplugin.helpers import make_node
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import CLAIMS, SLICES, FakeApiServer, running
from tests.dra.fakekubelet import FakeKubelet
from tests.dra.rules import pool_problems
from tests.dra.specinventory import refresh, spec_inventory
from tests.dra.test_kubelet import claim_obj

pytestmark = pytest.mark.asyncio


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with running(FakeApiServer()) as api:
        api.add_node(NODE)
        yield api


class Sleeps(list[float]):
    async def __call__(self, delay: float) -> None:
        self.append(delay)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def _kubeconfig(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": url}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "users": [{"name": "test", "user": {"token": "t"}}],
    }))  # fmt: skip
    return path


@pytest_asyncio.fixture
async def kube(tmp_path: Path, server: FakeApiServer, sleeps: Sleeps) -> AsyncIterator[KubeApi]:
    api = KubeApi.connect(
        DRIVER, NODE, _kubeconfig(tmp_path, server.url), backoff=Backoff(0.1, 1.0, 4), sleep=sleeps
    )
    yield api
    await api.close()


def _inventory(spec_dir: Path, host_nodes: Path, count: int) -> SpecInventory:
    nodes = {}
    for i in range(count):
        make_node(host_nodes / f"fuse{i}")
        nodes[f"fuse{i}"] = str(host_nodes / f"fuse{i}")
    write_spec(spec_dir, "cdi-plugin.io/fuse", nodes)
    return spec_inventory([spec_dir])


def _ours(server: FakeApiServer) -> list[dict[str, Any]]:
    found = [
        s for s in server.slices.values() if s["spec"]["nodeName"] == NODE and s["spec"]["driver"] == DRIVER
    ]
    return sorted(found, key=lambda s: str(s["metadata"]["name"]))


def _foreign(node: str, driver: str) -> dict[str, Any]:
    return build_pool(driver, node, {}, taints=True).slices(0)[0]


async def test_node_check(kube: KubeApi, server: FakeApiServer) -> None:
    assert await kube.node_uid() == server.nodes[NODE]["metadata"]["uid"]
    other = KubeApi(DRIVER, "node-x", kube.client)
    with pytest.raises(DraConfigError, match="node 'node-x': not found in the API server"):
        await other.node_uid()


async def test_read_claim(kube: KubeApi, server: FakeApiServer, sleeps: Sleeps) -> None:
    server.add_claim({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                      "metadata": {"namespace": "ns", "name": "c", "uid": "u1"}})  # fmt: skip
    claim = await kube.read_claim("ns", "c")
    assert claim is not None
    assert claim["metadata"]["uid"] == "u1"
    assert await kube.read_claim("ns", "gone") is None
    server.fail("GET", CLAIMS, 500, 429)
    claim = await kube.read_claim("ns", "c")
    assert claim is not None
    assert len(sleeps) == 2
    assert sleeps[1] > sleeps[0]  # exponential backoff
    server.fail("GET", CLAIMS, 403)
    with pytest.raises(ClaimReadError, match=r"ResourceClaim ns/c: 403 Forbidden: injected 403"):
        await kube.read_claim("ns", "c")


async def test_api_server_down_gives_up_with_a_clear_error(tmp_path: Path, sleeps: Sleeps) -> None:
    with running(FakeApiServer()) as api:
        url = api.url  # closed once the block ends: nothing listens there any more
    down = KubeApi.connect(
        DRIVER, NODE, _kubeconfig(tmp_path, url), backoff=Backoff(0.1, 1.0, 3), sleep=sleeps
    )
    try:
        with pytest.raises(ClaimReadError, match=r"ConnectError.*gave up after 3 attempts"):
            await down.read_claim("ns", "c")
    finally:
        await down.close()
    assert len(sleeps) == 2


async def test_publish_splits_then_follows_the_inventory(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    other_node = server.put_slice(_foreign("node-b", DRIVER))
    other_driver = server.put_slice(_foreign(NODE, "gpu.example.com"))
    inv = _inventory(spec_dir, host_nodes, 200)

    done = await kube.publish(build_pool(DRIVER, NODE, inv.devices(), taints=True))
    assert (done.generation, len(done.create)) == (0, 2)
    stored = _ours(server)
    assert pool_problems(stored) == []
    assert [len(s["spec"]["devices"]) for s in stored] == [128, 72]
    node_uid = server.nodes[NODE]["metadata"]["uid"]
    assert all(
        s["metadata"]["ownerReferences"]
        == [{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}]
        for s in stored
    )

    server.requests.clear()
    assert (await kube.publish(build_pool(DRIVER, NODE, inv.devices(), taints=True))).empty
    assert server.writes() == []

    (host_nodes / "fuse0").unlink()  # unhealthy: tainted, its slice holds at most 64 now
    write_spec(spec_dir, "cdi-plugin.io/fuse", {f"fuse{i}": str(host_nodes / f"fuse{i}") for i in range(201)})
    make_node(host_nodes / "fuse200")  # and a hot-plugged one
    refresh(inv)
    done = await kube.publish(build_pool(DRIVER, NODE, inv.devices(), taints=True))
    stored = _ours(server)
    assert pool_problems(stored) == []
    assert {s["spec"]["pool"]["generation"] for s in stored} == {1}
    devices = {d["name"]: d for s in stored for d in s["spec"]["devices"]}
    assert len(devices) == 201
    assert devices["fuse-fuse0"]["taints"] == [
        {"key": f"{DRIVER}/unhealthy", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}
    ]
    server.requests.clear()  # the server's timeAdded is no difference: nothing to send again
    assert (await kube.publish(build_pool(DRIVER, NODE, inv.devices(), taints=True))).empty
    assert server.writes() == []

    write_spec(spec_dir, "cdi-plugin.io/fuse", {"fuse1": str(host_nodes / "fuse1")})  # hot-unplug
    refresh(inv)
    done = await kube.publish(build_pool(DRIVER, NODE, inv.devices(), taints=True))
    stored = _ours(server)
    assert [s["metadata"]["name"] for s in stored] == [slice_name(DRIVER, NODE, 0)]
    assert stored[0]["spec"]["pool"] == {"name": NODE, "generation": 2, "resourceSliceCount": 1}
    assert len(done.delete) == 2

    assert server.slices[other_node["metadata"]["name"]] == other_node
    assert server.slices[other_driver["metadata"]["name"]] == other_driver
    assert all(not p.startswith(f"{SLICES}/{other_node['metadata']['name']}") for _, p in server.writes())


async def test_a_concurrent_update_is_a_conflict_then_replanned(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path, sleeps: Sleeps
) -> None:
    inv = _inventory(spec_dir, host_nodes, 3)
    await kube.publish(build_pool(DRIVER, NODE, inv.devices(), taints=True))
    name = slice_name(DRIVER, NODE, 0)

    def someone_else_writes(method: str, path: str) -> None:
        if method == "PUT":
            server.before = None
            server._store(copy.deepcopy(server.slices[name]))  # a new resourceVersion behind our back

    server.before = someone_else_writes
    (host_nodes / "fuse2").unlink()
    refresh(inv)
    done = await kube.publish(build_pool(DRIVER, NODE, inv.devices(), taints=True))
    puts = [p for m, p in server.requests if m == "PUT"]
    assert puts == [f"{SLICES}/{name}", f"{SLICES}/{name}"]  # refused with 409, then sent again
    assert len(sleeps) == 1
    [stored] = _ours(server)
    assert stored["spec"]["pool"]["generation"] == done.generation == 1
    assert any("taints" in d for d in stored["spec"]["devices"])


async def test_throttling_and_server_errors_are_retried_then_reported(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path, sleeps: Sleeps
) -> None:
    inv = _inventory(spec_dir, host_nodes, 2)
    server.fail("POST", SLICES, 429, 500)
    await kube.publish(build_pool(DRIVER, NODE, inv.devices(), taints=True))
    assert pool_problems(_ours(server)) == []
    assert len(sleeps) == 2

    server.fail("GET", SLICES, 503, 503, 503, 503)
    with pytest.raises(
        ApiServerError,
        match=r"publishing ResourceSlices .*: 503 ServiceUnavailable: .*gave up after 4 attempts",
    ):
        await kube.publish(build_pool(DRIVER, NODE, {}, taints=True))


async def test_a_refused_slice_is_not_retried(kube: KubeApi, server: FakeApiServer, sleeps: Sleeps) -> None:
    pool = build_pool(DRIVER, NODE, {}, taints=True)
    bad = type(pool)(DRIVER, NODE, (({"name": "Not_A_Label"},),))
    with pytest.raises(ApiServerError, match=r"422 Invalid: .*is not a DNS label"):
        await kube.publish(bad)
    assert sleeps == []
    assert _ours(server) == []


async def test_prepare_reads_claims_from_the_api_server(
    tmp_path: Path, kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    inv = _inventory(spec_dir, host_nodes, 1)
    paths = Paths(DRIVER, registry_dir=tmp_path / "registry", plugins_dir=tmp_path / "plugins")
    ref = api.Claim("ns", "c", "uid-1")
    server.add_claim(claim_obj(ref, ("fuse", NODE, "fuse-fuse0")))
    service = DraService(DRIVER, NODE, inv, kube, PreparedClaims(paths.state_file))
    async with KubeletPlugin(paths, service):
        kubelet = FakeKubelet(paths.registry_dir)
        await kubelet.register(kubelet.sockets()[0], DRIVER)
        assert await kubelet.prepare(ref, api.Claim("ns", "gone", "uid-2")) == {
            "uid-1": (api.PreparedDevice(("fuse",), NODE, "fuse-fuse0", ("cdi-plugin.io/fuse=fuse0",)),),
            "uid-2": "claim ns/gone: not found in the API server (deleted after allocation?)",
        }
    assert ("GET", f"{CLAIMS}ns/resourceclaims/c") in server.requests
