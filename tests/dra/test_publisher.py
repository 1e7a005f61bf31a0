"""Slices following the inventory through a list and a watch of the node's own slices, against the
fake API server over real HTTP: the least traffic when all is well, backoff when it is not."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cdi_plugin.dra import api
from cdi_plugin.dra.kube import SLICES, KubeApi
from cdi_plugin.dra.publisher import SlicePublisher
from cdi_plugin.dra.reflector import SliceCache, SliceWatch
from cdi_plugin.dra.slices import Plan, build_pool, slice_name
from cdi_plugin.inventory import SpecInventory
from tests.deviceplugin.helpers import eventually, make_node
from tests.dra import faults
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import FakeApiServer
from tests.dra.kubefixtures import Sleeps, connect, foreign, inventory_of, kube, ours, server, sleeps
from tests.dra.rules import pool_problems
from tests.dra.specinventory import refresh, spec_inventory
from tests.dra.test_kubelet import claim_obj

__all__ = ["kube", "server", "sleeps"]

pytestmark = pytest.mark.asyncio


def _names(server: FakeApiServer) -> set[str]:
    return {d["name"] for s in ours(server) for d in s["spec"]["devices"]}


@contextlib.asynccontextmanager
async def publishing(publisher: SlicePublisher, inventory: SpecInventory) -> AsyncIterator[None]:
    task = asyncio.create_task(publisher.run(inventory))
    try:
        yield
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def change(published: asyncio.Queue[Plan]) -> Plan:
    """The next publish that sent something (a watch event, or a wake, makes one that sends nothing)."""

    async def first() -> Plan:
        while (done := await published.get()).empty:
            pass
        return done

    return await asyncio.wait_for(first(), 30)


def lists(server: FakeApiServer) -> int:
    return server.count("GET", SLICES, watch=False)


def watches(server: FakeApiServer) -> list[str]:
    """The version each watch of the slices started from, in order."""
    return [c.query["resourceVersion"][0] for c in server.calls if c.path == SLICES and c.watch]


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
        assert _names(server) == {"fuse-fuse"}

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
        assert _names(server) == {"fuse-fuse", "gpu-card0"}
        assert pool_problems(ours(server)) == []


async def test_slices_deleted_by_someone_else_come_back_through_the_watch(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    make_node(host_nodes / "fuse")
    write_spec(spec_dir, "cdi-plugin.io/fuse", {"fuse": str(host_nodes / "fuse")})
    publisher = SlicePublisher(kube)
    async with publishing(publisher, spec_inventory([spec_dir])):
        await eventually(lambda: _names(server) == {"fuse-fuse"}, "the first publish")
        first = ours(server)[0]["metadata"]["uid"]
        assert server.delete_slices(nodeName=NODE) == 1  # a starting kubelet deletes its node's slices
        await eventually(
            lambda: ours(server) and ours(server)[0]["metadata"]["uid"] != first, "the slice again"
        )
        assert _names(server) == {"fuse-fuse"}
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
        await eventually(lambda: _names(server) == {"fuse-fuse"}, "the first publish")
        # kubectl delete node; its kubelet registers it again: the old UID's slices are collected
        new_uid = server.recreate_node(NODE)
        await eventually(lambda: owner() == new_uid, "the slice owned by the node's new UID", 30)
        assert _names(server) == {"fuse-fuse"}
        assert kube.node_uid == new_uid


async def test_a_steady_state_sends_nothing_but_watch_renewals(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    """Renewed from the bookmarks' versions, however much the rest of the cluster changes: the
    server keeps only the last 200 versions, and other claims change 100 times a second."""
    server.keep = 200
    inv = inventory_of(spec_dir, host_nodes, 2)
    publisher = SlicePublisher(kube, watch_timeout=(1, 1))

    async def churn() -> None:
        for i in range(10**6):
            server.add_claim(claim_obj(api.Claim("ns", f"c{i % 50}", f"uid-{i}")))
            await asyncio.sleep(0.01)

    churning = asyncio.create_task(churn())
    try:
        async with publishing(publisher, inv):
            await eventually(
                lambda: len(ours(server)) == 1 and len(watches(server)) >= 2, "published and watching"
            )
            calls = len(server.calls)
            publisher.wake()  # as when the kubelet registers the driver: nothing differs, nothing is sent
            await eventually(lambda: len(watches(server)) >= 7, "five more renewals", timeout=60)
            later = server.calls[calls:]
    finally:
        churning.cancel()
    assert {(c.method, c.path, c.watch) for c in later} == {("GET", SLICES, True)}
    assert lists(server) == 1
    versions = [int(v) for v in watches(server)]
    assert versions == sorted(versions)
    assert versions[-1] > versions[1] + 200  # the bookmarks' versions: older ones were forgotten


async def test_a_silent_watch_is_replaced_from_the_last_version(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.misbehave("GET", SLICES, faults.silent(), watch=True)
    publisher = SlicePublisher(kube, read_timeout=0.5, sleep=Sleeps())
    with caplog.at_level(logging.WARNING):
        async with publishing(publisher, inventory_of(spec_dir, host_nodes, 1)):
            await eventually(lambda: len(watches(server)) >= 2, "a second watch")
    first, second = watches(server)[:2]
    assert first == second  # no event came on the silent one
    assert lists(server) == 1
    assert (
        f"GET {SLICES} (watch): nothing received for 0.5 s (a silent connection); watching them again in"
        in (caplog.text)
    )


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


async def test_a_storm_of_410s_lists_at_most_4_times_in_10_s(
    kube: KubeApi, server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Counted in the time the reflector waits (its sleeps are recorded, not slept)."""
    server.misbehave("GET", SLICES, faults.expired(), watch=True, times=None)
    sleeps = Sleeps()
    with caplog.at_level(logging.WARNING):
        async with reflecting(kube, sleeps):
            await eventually(lambda: lists(server) >= 8, "eight lists")
    at = [sum(sleeps[:i]) for i in range(8)]  # when each list was sent, in the reflector's time
    assert max(sum(t <= start + 10 for t in at[i:]) for i, start in enumerate(at)) <= 4
    assert sleeps[6] >= 24  # up to 30 s apart
    assert caplog.text.count("410 Expired") <= lists(server)


async def test_a_storm_of_watch_errors_backs_off_without_listing(
    kube: KubeApi, server: FakeApiServer
) -> None:
    server.misbehave("GET", SLICES, faults.status(500, "InternalError", "etcd"), watch=True, times=None)
    sleeps = Sleeps()
    async with reflecting(kube, sleeps):
        await eventually(lambda: len(watches(server)) >= 8, "eight watches")
    assert lists(server) == 1
    assert all(delay >= 0.8 * min(2**i, 30) for i, delay in enumerate(sleeps))


async def test_a_watch_that_ends_at_once_is_a_failure(kube: KubeApi, server: FakeApiServer) -> None:
    """A proxy that ends every stream at once must not make the driver renew in a loop."""
    server.misbehave("GET", SLICES, faults.watch_lines(), watch=True, times=None)
    sleeps = Sleeps()
    async with reflecting(kube, sleeps):
        await eventually(lambda: len(watches(server)) >= 5, "five watches")
    assert len(sleeps) >= 4
    assert sleeps[3] >= 0.8 * 8


async def test_a_watch_cut_short_after_an_event_is_a_failure_too(
    kube: KubeApi, server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A proxy that ends every stream after its first event (a bookmark) must not make the driver
    renew in a loop either; the event is taken all the same."""
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(server.revision + 5)}}}
    server.misbehave("GET", SLICES, faults.watch_lines(bookmark), watch=True, times=None)
    sleeps = Sleeps()
    with caplog.at_level(logging.WARNING):
        async with reflecting(kube, sleeps):
            await eventually(lambda: len(watches(server)) >= 5, "five watches")
    assert len(sleeps) >= 4
    assert sleeps[3] >= 0.8 * 8
    assert watches(server)[1:5] == [str(server.revision + 5)] * 4
    assert f"GET {SLICES} (watch): ended after " in caplog.text
    assert " s with 1 event (asked for " in caplog.text


async def test_a_version_the_server_refuses_to_watch_from_is_listed_anew(
    kube: KubeApi, server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A bookmark of a version no API server gives (a broken proxy's) is refused by the next watch
    (400, as any version the server cannot parse): the slices are listed again, and the loop is
    not stuck on that version for ever."""
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "garbage"}}}
    server.misbehave("GET", SLICES, faults.watch_lines(bookmark), watch=True)
    sleeps = Sleeps()
    with caplog.at_level(logging.DEBUG, "cdi_plugin"):  # the second failure in a row: at debug level
        async with reflecting(kube, sleeps):
            await eventually(lambda: lists(server) >= 2 and len(watches(server)) >= 3, "a list, then a watch")
    assert watches(server)[1] == "garbage"
    assert watches(server)[2].isdigit()
    assert "resourceVersion 'garbage'" in caplog.text
    assert "; listing them again in " in caplog.text


async def test_a_list_older_than_a_write_keeps_the_write(kube: KubeApi, server: FakeApiServer) -> None:
    """The answer to a write sent while a list was on its way is newer than the list: kept."""
    cache = SliceCache()
    items, version = await kube.list_slices()
    written = await kube.create_slice(build_pool(DRIVER, NODE, {}, taints=True).slices(0)[0])
    cache.put(written)
    cache.replace(items, version)  # the list answered before the write
    assert cache.objects() == [written]
    cache.replace(*await kube.list_slices())
    assert cache.objects() == [written]
    server.delete_slices(nodeName=NODE)
    cache.replace(*await kube.list_slices())  # a list newer than the object: it is gone
    assert cache.objects() == []


async def test_a_write_answered_after_the_watch_deleted_it_is_not_kept(
    kube: KubeApi, server: FakeApiServer
) -> None:
    """Someone else deletes the slice the driver just created (a starting kubelet deletes its node's
    slices), and the watch delivers the deletion before the driver reads the answer to its create:
    the slice is gone, so the next publish creates it again."""
    cache = SliceCache()
    cache.replace(*await kube.list_slices())
    written = await kube.create_slice(build_pool(DRIVER, NODE, {}, taints=True).slices(0)[0])
    assert server.delete_slices(nodeName=NODE) == 1
    [gone] = [obj for _, resource, kind, obj in server.events if (resource, kind) == ("slices", "DELETED")]
    cache.apply("DELETED", gone)  # the watch's event first
    cache.put(written)  # then the answer to the create
    assert cache.objects() == []
    cache.replace([written], written["metadata"]["resourceVersion"])  # a list from before the deletion
    assert cache.objects() == []
    again = await kube.create_slice(build_pool(DRIVER, NODE, {}, taints=True).slices(0)[0])
    cache.put(again)
    assert cache.objects() == [again]


async def test_an_event_behind_the_drivers_own_delete_does_not_bring_the_slice_back(
    kube: KubeApi, server: FakeApiServer
) -> None:
    cache = SliceCache()
    cache.replace(*await kube.list_slices())
    written = await kube.create_slice(build_pool(DRIVER, NODE, {}, taints=True).slices(0)[0])
    cache.put(written)
    await kube.delete_slice(written)
    cache.remove(written["metadata"]["name"])
    cache.apply("ADDED", written)  # the watch, behind
    assert cache.objects() == []


@pytest.mark.parametrize(
    "action",
    [
        faults.html(503),
        faults.body(200, b"not json"),
        faults.body(200, b'{"kind": "ResourceSliceList", "items": [1]}'),
        faults.huge(32 << 20),
        faults.hang(),
    ],
    ids=["html", "garbage", "an array in items", "huge", "hanging"],
)
async def test_a_bad_list_is_logged_and_tried_again(
    tmp_path: Path,
    server: FakeApiServer,
    host_nodes: Path,
    action: faults.Action,
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec_dir = tmp_path / "cdi"
    kube = connect(tmp_path, server.url)
    server.misbehave("GET", SLICES, action, watch=False, times=2)
    publisher = SlicePublisher(kube, sleep=Sleeps(0.01))
    try:
        with caplog.at_level(logging.DEBUG, "cdi_plugin"):
            async with publishing(publisher, inventory_of(spec_dir, host_nodes, 1)):
                await eventually(
                    lambda: _names(server) == {"fuse-fuse0"}, "published after the bad lists", timeout=60
                )
    finally:
        await kube.close()
    prefix = f"failing to follow the ResourceSlices: GET {SLICES}: "
    failures = [r for r in caplog.records if r.getMessage().startswith(prefix)]
    assert [r.levelno for r in failures] == [logging.WARNING, logging.DEBUG], caplog.text  # two in a row
    assert all("\n" not in r.getMessage() for r in failures)


async def test_garbage_on_the_watch_is_logged_and_the_watch_taken_up_again(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    publisher = SlicePublisher(kube, sleep=Sleeps(0.01))
    with caplog.at_level(logging.DEBUG, "cdi_plugin"):  # failures in a row after the first: at debug level
        async with publishing(publisher, inventory_of(spec_dir, host_nodes, 1)):
            await eventually(lambda: _names(server) == {"fuse-fuse0"}, "the first publish")
            for action in (
                faults.watch_lines(b"garbage"),
                faults.watch_lines({"type": "MODIFIED", "object": [1]}),
                faults.watch_lines({"type": "ADDED", "object": {"metadata": {"name": "x"}, "spec": {}}}),
            ):
                server.misbehave("GET", SLICES, action, watch=True)
            server.break_watches()
            await eventually(lambda: len(watches(server)) >= 5, "three bad watches, then a good one")
            server.delete_slices(nodeName=NODE)
            await eventually(lambda: _names(server) == {"fuse-fuse0"}, "the deleted slice written again")
    assert lists(server) == 1
    assert caplog.text.count("an event that is not one") == 2
    assert "a ResourceSlice that is not one: metadata.resourceVersion: missing" in caplog.text


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
    assert _names(server) == {"gpu-card0"}
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
