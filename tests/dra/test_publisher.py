"""Slices following the inventory, against the fake API server over real HTTP: split into pools,
written again when the inventory, the node or the slices stored change, retried with backoff
when a write fails, and device taints as the server keeps them (the list and watch that tell
the publisher what is stored: test_reflector.py)."""

from __future__ import annotations

import asyncio
import copy
import logging
from pathlib import Path
from typing import Any

import pytest

from cdi_plugin.dra.kube import SLICES, KubeApi
from cdi_plugin.dra.publisher import SlicePublisher
from cdi_plugin.dra.slices import Plan, slice_name
from tests.deviceplugin.helpers import eventually, make_node
from tests.dra import faults
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import FakeApiServer
from tests.dra.kubefixtures import (
    Sleeps,
    device_names,
    foreign,
    inventory_of,
    kube,
    lists,
    ours,
    publishing,
    server,
    sleeps,
)
from tests.dra.rules import pool_problems
from tests.dra.specinventory import refresh, spec_inventory

__all__ = ["kube", "server", "sleeps"]

pytestmark = pytest.mark.asyncio


async def change(published: asyncio.Queue[Plan]) -> Plan:
    """The next publish that sent something (a watch event, or a wake, makes one that sends nothing)."""

    async def first() -> Plan:
        while (done := await published.get()).empty:
            pass
        return done

    return await asyncio.wait_for(first(), 30)


async def test_publish_splits_then_follows_the_inventory(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    other_node = server.put_slice(foreign("node-b", DRIVER))
    other_driver = server.put_slice(foreign(NODE, "gpu.example.com"))
    inv = inventory_of(spec_dir, host_nodes, 200)
    await kube.read_node_uid()
    publisher = SlicePublisher(kube)
    publisher.cache.replace(*await kube.list_slices())

    done = await publisher.publish(inv.devices())
    assert (done.generation, len(done.create)) == (0, 2)
    stored = ours(server)
    assert pool_problems(stored) == []
    assert [len(s["spec"]["devices"]) for s in stored] == [128, 72]
    node_uid = server.nodes[NODE]["metadata"]["uid"]
    assert all(
        s["metadata"]["ownerReferences"]
        == [{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}]
        for s in stored
    )

    server.calls.clear()  # the answers to the writes are what the next publish compares with
    assert (await publisher.publish(inv.devices())).empty
    assert server.calls == []

    (host_nodes / "fuse0").unlink()  # unhealthy: tainted, its slice holds at most 64 now
    write_spec(spec_dir, "cdi-plugin.io/fuse", {f"fuse{i}": str(host_nodes / f"fuse{i}") for i in range(201)})
    make_node(host_nodes / "fuse200")  # and a hot-plugged one
    refresh(inv)
    await publisher.publish(inv.devices())
    stored = ours(server)
    assert pool_problems(stored) == []
    assert {s["spec"]["pool"]["generation"] for s in stored} == {1}
    devices = {d["name"]: d for s in stored for d in s["spec"]["devices"]}
    assert len(devices) == 201
    assert devices["fuse-fuse0"]["taints"] == [
        {"key": f"{DRIVER}/unhealthy", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}
    ]
    server.calls.clear()  # the server's timeAdded is no difference: nothing to send again
    assert (await publisher.publish(inv.devices())).empty
    assert server.calls == []

    write_spec(spec_dir, "cdi-plugin.io/fuse", {"fuse1": str(host_nodes / "fuse1")})  # hot-unplug
    refresh(inv)
    done = await publisher.publish(inv.devices())
    stored = ours(server)
    assert [s["metadata"]["name"] for s in stored] == [slice_name(DRIVER, NODE, 0)]
    assert stored[0]["spec"]["pool"] == {"name": NODE, "generation": 2, "resourceSliceCount": 1}
    assert len(done.delete) == 2
    assert server.slices[other_node["metadata"]["name"]] == other_node
    assert server.slices[other_driver["metadata"]["name"]] == other_driver


async def test_a_conflict_lists_the_slices_again_then_publishes(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    inv = inventory_of(spec_dir, host_nodes, 3)
    publisher = SlicePublisher(kube)
    publisher.cache.replace(*await kube.list_slices())
    await publisher.publish(inv.devices())
    name = slice_name(DRIVER, NODE, 0)

    def someone_else_writes(method: str, path: str) -> None:
        if method == "PUT":
            server.before = None
            server._store(copy.deepcopy(server.slices[name]))  # a new resourceVersion behind our back

    server.before = someone_else_writes
    (host_nodes / "fuse2").unlink()
    refresh(inv)
    with pytest.raises(Exception, match="409 Conflict"):
        await publisher.publish(inv.devices())
    server.calls.clear()
    done = await publisher.publish(inv.devices())  # what the publish loop does after its backoff
    assert [(c.method, c.path) for c in server.calls] == [("GET", SLICES), ("PUT", f"{SLICES}/{name}")]
    [stored] = ours(server)
    assert stored["spec"]["pool"]["generation"] == done.generation == 1
    assert any("taints" in d for d in stored["spec"]["devices"])


async def test_run_follows_the_inventory_and_survives_failed_writes(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    make_node(host_nodes / "fuse")
    write_spec(spec_dir, "cdi-plugin.io/fuse", {"fuse": str(host_nodes / "fuse")})
    inv = spec_inventory([spec_dir])
    published: asyncio.Queue[Plan] = asyncio.Queue()
    sleeps = Sleeps()
    publisher = SlicePublisher(kube, sleep=sleeps, on_publish=published.put_nowait)
    async with publishing(publisher, inv):
        assert (await change(published)).generation == 0
        assert device_names(server) == {"fuse-fuse"}

        server.fail("PUT", SLICES, 503)
        server.misbehave("PUT", SLICES, faults.html(502))
        server.misbehave("PUT", SLICES, faults.body(200, b"[]"))
        make_node(host_nodes / "card0")
        write_spec(spec_dir, "cdi-plugin.io/gpu", {"card0": str(host_nodes / "card0")})
        refresh(inv)
        done = await change(published)
        assert done.generation == 1
        assert len(sleeps) == 3  # the publisher's backoff after each failed publish
        assert sleeps == sorted(sleeps)
        assert device_names(server) == {"fuse-fuse", "gpu-card0"}
        assert pool_problems(ours(server)) == []


async def test_slices_deleted_by_someone_else_come_back_through_the_watch(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    make_node(host_nodes / "fuse")
    write_spec(spec_dir, "cdi-plugin.io/fuse", {"fuse": str(host_nodes / "fuse")})
    publisher = SlicePublisher(kube)
    async with publishing(publisher, spec_inventory([spec_dir])):
        await eventually(lambda: device_names(server) == {"fuse-fuse"}, "the first publish")
        first = ours(server)[0]["metadata"]["uid"]
        assert server.delete_slices(nodeName=NODE) == 1  # a starting kubelet deletes its node's slices
        await eventually(
            lambda: ours(server) and ours(server)[0]["metadata"]["uid"] != first, "the slice again"
        )
        assert device_names(server) == {"fuse-fuse"}
        assert lists(server) == 1  # seen through the watch, not by listing again


async def test_a_node_registered_again_with_a_new_uid_owns_the_slices_published_again(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    make_node(host_nodes / "fuse")
    write_spec(spec_dir, "cdi-plugin.io/fuse", {"fuse": str(host_nodes / "fuse")})
    await kube.read_node_uid()
    publisher = SlicePublisher(kube)

    def owner() -> str:
        stored = ours(server)
        return str(stored[0]["metadata"]["ownerReferences"][0]["uid"]) if len(stored) == 1 else ""

    async with publishing(publisher, spec_inventory([spec_dir])):
        await eventually(lambda: device_names(server) == {"fuse-fuse"}, "the first publish")
        # kubectl delete node; its kubelet registers it again: the old UID's slices are collected
        new_uid = server.recreate_node(NODE)
        await eventually(lambda: owner() == new_uid, "the slice owned by the node's new UID", 30)
        assert device_names(server) == {"fuse-fuse"}
        assert kube.node_uid == new_uid


async def test_without_device_taints_unhealthy_devices_are_withdrawn(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.drop_taints = True
    make_node(host_nodes / "card0")
    write_spec(
        spec_dir,
        "cdi-plugin.io/gpu",
        {"card0": str(host_nodes / "card0"), "card1": str(host_nodes / "card1")},
    )
    publisher = SlicePublisher(kube)
    publisher.cache.replace(*await kube.list_slices())
    await publisher.publish(spec_inventory([spec_dir]).devices())
    assert publisher.taints is False
    assert device_names(server) == {"gpu-card0"}
    assert pool_problems(ours(server)) == []
    assert "dropped the device taints" in caplog.text
    assert "otherwise than written" not in caplog.text  # one line for one cause


async def test_a_slice_stored_otherwise_than_written_is_adopted_not_written_again_and_again(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def webhook(obj: dict[str, Any]) -> None:  # a mutating admission webhook that drops an attribute
        for device in obj["spec"]["devices"]:
            device["attributes"].pop("vendor", None)

    server.mutate = webhook
    inv = inventory_of(spec_dir, host_nodes, 2)
    published: asyncio.Queue[Plan] = asyncio.Queue()
    publisher = SlicePublisher(kube, on_publish=published.put_nowait)
    with caplog.at_level(logging.WARNING):
        async with publishing(publisher, inv):
            assert len((await change(published)).create) == 1
            # the answer, then its watch event: each a pass, which finds nothing to write
            await eventually(lambda: lists(server) == 1 and server.watches >= 1, "the watch")
            publisher.wake()

            async def quiet() -> None:  # a pass that writes nothing
                while not (await published.get()).empty:
                    pass

            await asyncio.wait_for(quiet(), 30)
            assert [m for m, _ in server.writes()] == ["POST"]
            # a change of the pool is written, and adopted again as stored
            (host_nodes / "fuse0").unlink()
            refresh(inv)
            assert len((await change(published)).update) == 1
            [stored] = ours(server)
            assert "taints" in stored["spec"]["devices"][0]
            assert "vendor" not in stored["spec"]["devices"][0]["attributes"]
    assert caplog.text.count("stored ResourceSlice") == 2, caplog.text
    assert [m for m, _ in server.writes()] == ["POST", "PUT"]


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
    publisher.cache.replace(*await kube.list_slices())
    await publisher.publish(spec_inventory([spec_dir]).devices())
    assert publisher.taints is True
    [stored] = ours(server)
    assert [d.get("taints") for d in stored["spec"]["devices"]] == [
        None,
        [{"key": f"{DRIVER}/unhealthy", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}],
    ]
