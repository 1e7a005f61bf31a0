"""ResourceSlice names: no pair of driver and node takes another's, each pair's names stay the same
across restarts, and slices named by an earlier release keep their names (an instance of it may
run beside this one);
against the fake API server over real HTTP. A name another driver's or node's slice holds is
reported with its holder."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from cdi_plugin.cdi.names import short_hash
from cdi_plugin.dra.kube import SLICES, KubeApi
from cdi_plugin.dra.names import SUBDOMAIN_MAX, is_dns_subdomain
from cdi_plugin.dra.publisher import SlicePublisher
from cdi_plugin.dra.rest import ApiServerError
from cdi_plugin.dra.slices import Plan, Pool, build_pool, content, slice_name
from cdi_plugin.inventory import SpecInventory
from tests.deviceplugin.helpers import eventually
from tests.dra.conftest import DRIVER, NODE
from tests.dra.fakeapiserver import FakeApiServer
from tests.dra.kubefixtures import Sleeps, connect, foreign, inventory_of, kube, ours, server, sleeps
from tests.dra.rules import pool_problems

__all__ = ["kube", "server", "sleeps"]

FUSES = {"fuse-fuse0", "fuse-fuse1", "fuse-fuse2"}
Obj = dict[str, Any]


def old_slice_name(driver: str, node: str, index: int) -> str:
    """The name earlier versions gave slice ``index``: pairs could share it."""
    name = f"{node}-{driver}-{index}"
    if len(name) <= SUBDOMAIN_MAX:
        return name
    tail = f"-{short_hash(name)}-{index}"
    return name[: SUBDOMAIN_MAX - len(tail)].rstrip("-.") + tail


def long_node(length: int) -> str:
    """A node name of ``length`` characters: labels of 63 joined by dots."""
    name = ".".join(["n" * 63] * 5)[:length]
    assert is_dns_subdomain(name)
    return name


def splits(joined: str) -> list[tuple[str, str]]:
    """Every (driver, node) whose slices earlier versions named ``<joined>-<index>``."""
    found = []
    for i, char in enumerate(joined):
        node, driver = joined[:i], joined[i + 1 :]
        if char == "-" and is_dns_subdomain(node) and is_dns_subdomain(driver, 63):
            found.append((driver, node))
    return found


#: (driver, node): dashes and dots shifted between node and driver; long pairs alike up to the cut
#: (the node, then the driver's first part); names of exactly 253 characters uncut, and of one more.
TRICKY = [
    *splits("a-b-x.io"),
    *splits("node-1.rack-2.example.com-gpu.vendor-x.io"),
    *splits(f"{long_node(200)}-a-b-c.io"),
    *[(f"gpu-{k}.example.com", long_node(240)) for k in range(10)],
    *[(DRIVER, f"{long_node(240)}.{k}") for k in range(10)],
    *[(DRIVER, long_node(length)) for length in (227, 228, 229, 230, 253)],
    ("d" * 63, long_node(253)),
]


def test_names_are_unique_valid_and_readable_for_tricky_pairs() -> None:
    assert len(set(TRICKY)) == len(TRICKY)
    assert len({old_slice_name(d, n, 0) for d, n in TRICKY}) < len(TRICKY)  # earlier versions collided
    seen: dict[str, tuple[str, str, int]] = {}
    for driver, node in TRICKY:
        for index in (0, 1, 9, 10, 127):
            name = slice_name(driver, node, index)
            assert name == slice_name(driver, node, index)
            assert is_dns_subdomain(name), name
            assert seen.setdefault(name, (driver, node, index)) == (driver, node, index), name
            head, pair_hash, number = name.rsplit("-", 2)
            assert (pair_hash, number) == (short_hash(f"{driver}/{node}"), str(index))
            readable = f"{node}-{driver}"
            if len(readable) + len(pair_hash) + len(number) + 2 <= SUBDOMAIN_MAX:
                assert head == readable
            else:  # cut: as much of the node and driver as fits
                assert readable.startswith(head), name
                assert len(name) >= SUBDOMAIN_MAX - 2, name
    assert len(slice_name(DRIVER, long_node(228), 0)) == 253  # the longest that is not cut
    assert slice_name(DRIVER, NODE, 0) == "node-a-cdi-plugin.io-191eb5de-0"  # the same in every version


async def publish_once(
    tmp_path: Path, server: FakeApiServer, driver: str, node: str, inventory: SpecInventory
) -> Plan:
    """A driver's start: list its slices, publish the pool once, exit."""
    kube = connect(tmp_path, server.url, driver, node)
    try:
        await kube.read_node_uid()
        publisher = SlicePublisher(kube)
        publisher.cache.replace(*await kube.list_slices())
        return await publisher.publish(inventory.devices())
    finally:
        await kube.close()


@pytest.mark.asyncio
async def test_pairs_whose_slices_were_named_alike_both_publish(
    tmp_path: Path, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    """Driver x.io on node a-b and driver b-x.io on node a both named their first slice
    a-b-x.io-0: the second met 409 AlreadyExists at every attempt and never published."""
    inv = inventory_of(spec_dir, host_nodes, 3)
    pairs = [("x.io", "a-b"), ("b-x.io", "a")]
    for driver, node in pairs:
        server.add_node(node)
        await publish_once(tmp_path, server, driver, node, inv)
    for driver, node in pairs:
        stored = ours(server, driver, node)
        assert pool_problems(stored) == []
        assert {d["name"] for s in stored for d in s["spec"]["devices"]} == FUSES
    assert len(server.slices) == 2


@pytest.mark.asyncio
@pytest.mark.parametrize(("driver", "node"), [("x.io", "a-b"), ("gpu-3.example.com", long_node(240))])
async def test_a_restarted_driver_finds_its_slices_and_writes_nothing(
    tmp_path: Path, server: FakeApiServer, host_nodes: Path, driver: str, node: str
) -> None:
    server.add_node(node)
    inv = inventory_of(tmp_path / "cdi", host_nodes, 200)
    assert len((await publish_once(tmp_path, server, driver, node, inv)).create) == 2
    before = ours(server, driver, node)
    assert sorted(s["metadata"]["name"] for s in before) == sorted(
        slice_name(driver, node, i) for i in (0, 1)
    )
    writes = server.writes()
    assert (await publish_once(tmp_path, server, driver, node, inv)).empty
    assert server.writes() == writes
    assert ours(server, driver, node) == before


def reader_views(server: FakeApiServer, after: int) -> list[list[Obj]]:
    """This node's pool after each change since version ``after``, as a reader takes it (the
    scheduler): the slices of the highest generation; older ones are ignored."""
    held: dict[str, Obj] = {}
    views = []
    for version, resource, kind, obj in server.events:
        if resource != "slices" or (obj["spec"]["driver"], obj["spec"]["nodeName"]) != (DRIVER, NODE):
            continue
        if kind == "DELETED":
            del held[obj["metadata"]["name"]]
        else:
            held[obj["metadata"]["name"]] = obj
        if version > after:
            top = max((s["spec"]["pool"]["generation"] for s in held.values()), default=None)
            views.append([s for s in held.values() if s["spec"]["pool"]["generation"] == top])
    return views


def legacy_write(server: FakeApiServer, pool: Pool, generation: int) -> None:
    """What an earlier release's publisher does with ``pool``: its slices under the earlier names,
    every other slice of the pair deleted (first, as it did)."""
    wanted = pool.slices(generation)
    for i, obj in enumerate(wanted):
        obj["metadata"]["name"] = old_slice_name(pool.driver, pool.node, i)
    for obj in ours(server, pool.driver, pool.node):
        if obj["metadata"]["name"] not in {o["metadata"]["name"] for o in wanted}:
            server.delete_slices(name=obj["metadata"]["name"])
    for obj in wanted:
        server.put_slice(obj)


def earlier_release_content(server: FakeApiServer, pool: Pool) -> bool:
    """Whether an earlier release's publisher finds nothing to write: the stored slices are its
    names for ``pool``, in one generation, holding what they should."""
    stored = ours(server, pool.driver, pool.node)
    generations = {s["spec"]["pool"]["generation"] for s in stored}
    if len(generations) != 1:
        return False
    wanted = pool.slices(generations.pop())
    for i, obj in enumerate(wanted):
        obj["metadata"]["name"] = old_slice_name(pool.driver, pool.node, i)
    return sorted(map(content, stored)) == sorted(map(content, wanted))


@pytest.mark.asyncio
async def test_slices_named_by_an_earlier_release_are_kept_and_rewritten_in_place(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    """An update runs an instance of the earlier release beside this one: both want the same
    names, so neither replaces the other's slices (with new names they rewrote the pool at each
    other's every write for as long as both ran, the pool at times gone for readers)."""
    inv = inventory_of(spec_dir, host_nodes, 200)
    await kube.read_node_uid()
    pool = dataclasses.replace(build_pool(DRIVER, NODE, inv.devices(), taints=True), node_uid=kube.node_uid)
    legacy_write(server, pool, 3)
    others = []
    for node, driver in [("node-b", DRIVER), (NODE, "gpu.example.com")]:
        obj = foreign(node, driver)
        obj["metadata"]["name"] = old_slice_name(driver, node, 0)
        others.append(server.put_slice(obj))
    legacy = [old_slice_name(DRIVER, NODE, i) for i in (0, 1)]

    publisher = SlicePublisher(kube)
    publisher.cache.replace(*await kube.list_slices())
    assert (await publisher.publish(inv.devices())).empty  # the earlier release's slices are right
    assert server.writes() == []

    fewer = dict(list(inv.devices().items())[1:])  # a device gone: both slices rewritten in place
    start = server.revision
    done = await publisher.publish(fewer)
    assert [s["metadata"]["name"] for s in ours(server)] == legacy
    assert [m for m, _ in server.writes()] == ["PUT", "PUT"]
    assert all(view for view in reader_views(server, start)), "a moment with no slice of the pool"
    assert all(server.slices[o["metadata"]["name"]] == o for o in others)  # untouched

    # the earlier release's instance, beside it, sees the same devices: its rewrite is adopted
    again = dataclasses.replace(build_pool(DRIVER, NODE, fewer, taints=True), node_uid=kube.node_uid)
    legacy_write(server, again, done.generation + 1)
    publisher.cache.replace(*await kube.list_slices())  # as the watch brings it
    assert (await publisher.publish(fewer)).empty


@pytest.mark.asyncio
async def test_a_slice_an_earlier_release_did_not_write_gets_this_releases_name(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    """A pool that grows past the earlier release's slices: the new slice gets this release's
    name; where both names of an index are stored (such a slice written by each release, both
    running), the earlier one stays and this release's goes, last, readers keeping a whole pool:
    the earlier release then finds its slices right (were its slice deleted, it would delete
    this release's first and create its own again, the pool incomplete meanwhile, and this
    release, seeing that, would create its own again)."""
    inv = inventory_of(spec_dir, host_nodes, 300)
    await kube.read_node_uid()
    devices = inv.devices()
    first = dict(list(devices.items())[:200])
    pool = dataclasses.replace(build_pool(DRIVER, NODE, first, taints=True), node_uid=kube.node_uid)
    legacy_write(server, pool, 0)
    publisher = SlicePublisher(kube)
    publisher.cache.replace(*await kube.list_slices())
    await publisher.publish(devices)
    names = [old_slice_name(DRIVER, NODE, 0), old_slice_name(DRIVER, NODE, 1), slice_name(DRIVER, NODE, 2)]
    assert sorted(s["metadata"]["name"] for s in ours(server)) == sorted(names)
    assert pool_problems(ours(server)) == []

    server.put_slice(dict(ours(server)[0], metadata={"name": old_slice_name(DRIVER, NODE, 2)}))
    publisher.cache.replace(*await kube.list_slices())
    start, before = server.revision, len(server.writes())
    await publisher.publish(devices)
    legacy = [old_slice_name(DRIVER, NODE, i) for i in range(3)]
    assert [s["metadata"]["name"] for s in ours(server)] == legacy
    assert server.writes()[before:][-1] == ("DELETE", f"{SLICES}/{slice_name(DRIVER, NODE, 2)}")
    assert all(view for view in reader_views(server, start)), "a moment with no slice of the pool"
    whole = dataclasses.replace(build_pool(DRIVER, NODE, devices, taints=True), node_uid=kube.node_uid)
    assert earlier_release_content(server, whole)


@pytest.mark.asyncio
async def test_a_name_taken_by_another_drivers_slice_is_named_in_one_line_and_tried_again(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    taken = foreign(NODE, "gpu.example.com")
    taken["metadata"]["name"] = name = slice_name(DRIVER, NODE, 0)
    taken = server.put_slice(taken)
    sleeps = Sleeps(0.05)
    publisher = SlicePublisher(kube, sleep=sleeps)
    task = asyncio.create_task(publisher.run(inventory_of(spec_dir, host_nodes, 1)))
    try:
        # failures in a row after the first are at debug level
        with caplog.at_level(logging.DEBUG, "cdi_plugin"):
            await eventually(lambda: len(sleeps) >= 3, "three failed publishes")
            assert server.slices[name] == taken
            server.delete_slices(driver="gpu.example.com")  # the stale slice deleted by hand
            await eventually(lambda: len(ours(server)) == 1, "the pool published")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    failures = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("failing to publish ResourceSlices: POST")
    ]
    assert len(failures) == len(sleeps)
    assert all(
        re.fullmatch(
            rf"failing to publish ResourceSlices: POST {re.escape(SLICES)}: the name '{name}' is "
            r"taken by a ResourceSlice of driver 'gpu\.example\.com' on node 'node-a' \(409 AlreadyExists\); "
            r"trying again in \d+ s",
            message,
        )
        for message in failures
    ), failures
    assert sleeps == sorted(sleeps)


def _holder(driver: str, node: str | None) -> Obj:
    obj = foreign(node or NODE, driver)
    if node is None:  # a slice of devices reachable from every node
        del obj["spec"]["nodeName"]
        obj["spec"]["allNodes"] = True
    return obj


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("holder", "problem"),
    [
        (
            _holder("gpu.example.com", NODE),
            "is taken by a ResourceSlice of driver 'gpu.example.com' on node 'node-a'",
        ),
        (_holder(DRIVER, "node-b"), f"is taken by a ResourceSlice of driver '{DRIVER}' on node 'node-b'"),
        (
            _holder("net.example.com", None),
            "is taken by a ResourceSlice of driver 'net.example.com' bound to no",
        ),
        # this node's own (the answer to an earlier create was lost, say): the next list brings it
        (
            _holder(DRIVER, NODE),
            'resourceslices.resource.k8s.io "node-a-cdi-plugin.io-191eb5de-0" already exists',
        ),
    ],
    ids=["another driver", "another node", "no node", "its own"],
)
async def test_a_taken_name_is_named_with_its_holder(
    kube: KubeApi, server: FakeApiServer, holder: Obj, problem: str
) -> None:
    mine = build_pool(DRIVER, NODE, {}, taints=True).slices(0)[0]
    holder["metadata"]["name"] = mine["metadata"]["name"]
    server.put_slice(holder)
    with pytest.raises(ApiServerError) as failed:
        await kube.create_slice(mine)
    assert (failed.value.code, failed.value.reason) == (409, "AlreadyExists")
    assert problem in str(failed.value)
    assert str(failed.value).endswith("(409 AlreadyExists)") == ("taken" in problem)
