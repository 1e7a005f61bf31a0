"""The list and watch of the node's own slices, against the fake API server over real HTTP: the
least traffic when all is well (watch renewals from the bookmarks' versions), backoff across
failures when it is not, lists only when the version is gone, and a cache that keeps the
driver's own writes in order with the watch."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from cdi_plugin.dra import api
from cdi_plugin.dra.kube import SLICES, KubeApi
from cdi_plugin.dra.publisher import SlicePublisher
from cdi_plugin.dra.reflector import SliceCache
from cdi_plugin.dra.slices import build_pool
from tests.deviceplugin.helpers import eventually
from tests.dra import faults
from tests.dra.conftest import DRIVER, NODE
from tests.dra.fakeapiserver import FakeApiServer
from tests.dra.kubefixtures import (
    Sleeps,
    connect,
    device_names,
    inventory_of,
    kube,
    lists,
    ours,
    publishing,
    reflecting,
    server,
    sleeps,
    watches,
)
from tests.dra.test_kubelet import claim_obj

__all__ = ["kube", "server", "sleeps"]

pytestmark = pytest.mark.asyncio


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
                    lambda: device_names(server) == {"fuse-fuse0"},
                    "published after the bad lists",
                    timeout=60,
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
            await eventually(lambda: device_names(server) == {"fuse-fuse0"}, "the first publish")
            for action in (
                faults.watch_lines(b"garbage"),
                faults.watch_lines({"type": "MODIFIED", "object": [1]}),
                faults.watch_lines({"type": "ADDED", "object": {"metadata": {"name": "x"}, "spec": {}}}),
            ):
                server.misbehave("GET", SLICES, action, watch=True)
            server.break_watches()
            await eventually(lambda: len(watches(server)) >= 5, "three bad watches, then a good one")
            server.delete_slices(nodeName=NODE)
            await eventually(
                lambda: device_names(server) == {"fuse-fuse0"}, "the deleted slice written again"
            )
    assert lists(server) == 1
    assert caplog.text.count("an event that is not one") == 2
    assert "a ResourceSlice that is not one: metadata.resourceVersion: missing" in caplog.text
