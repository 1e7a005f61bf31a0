"""Prepare from the claims a watch keeps, against the fake API server over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cdi_plugin.dra import api
from cdi_plugin.dra.claims import ClaimCache
from cdi_plugin.dra.kube import LIST_CHUNK, Backoff, KubeApi
from cdi_plugin.dra.kubelet import DraService, KubeletPlugin, Paths, PreparedClaims
from tests.dra.conftest import DRIVER, NODE
from tests.dra.fakeapiserver import ALL_CLAIMS, CLAIMS, FakeApiServer, running
from tests.dra.fakekubelet import FakeKubelet
from tests.dra.test_kube import _inventory, _kubeconfig
from tests.dra.test_kubelet import claim_obj

pytestmark = pytest.mark.asyncio

FUSE = "cdi-plugin.io/fuse="


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with running(FakeApiServer()) as api:
        api.add_node(NODE)
        yield api


@pytest_asyncio.fixture
async def kube(tmp_path: Path, server: FakeApiServer) -> AsyncIterator[KubeApi]:
    api = KubeApi.connect(DRIVER, NODE, _kubeconfig(tmp_path, server.url), backoff=Backoff(0.01, 0.05, 2))
    yield api
    await api.close()


@pytest_asyncio.fixture
async def cache(kube: KubeApi) -> AsyncIterator[ClaimCache]:
    cache = ClaimCache(DRIVER, NODE, kube, backoff=Backoff(0.05, 0.2))
    task = asyncio.create_task(cache.run())
    try:
        yield cache
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
def service(tmp_path: Path, spec_dir: Path, host_nodes: Path, kube: KubeApi, cache: ClaimCache) -> DraService:
    inventory = _inventory(spec_dir, host_nodes, 4)
    return DraService(DRIVER, NODE, inventory, kube, PreparedClaims(tmp_path / "prepared.json"), cache=cache)


async def until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{what}: not within {timeout} s")


def gets(server: FakeApiServer, ref: api.Claim) -> int:
    return server.requests.count(("GET", f"{CLAIMS}{ref.namespace}/resourceclaims/{ref.name}"))


def lists(server: FakeApiServer) -> int:
    return server.requests.count(("GET", ALL_CLAIMS)) - server.watches


def cached(cache: ClaimCache, ref: api.Claim) -> Callable[[], bool]:
    return lambda: cache.get(ref.namespace, ref.name, ref.uid) is not None


def devices(ref: api.Claim, *names: str) -> dict[str, Any]:
    return {ref.uid: tuple(api.PreparedDevice(("r",), NODE, f"fuse-{n}", (FUSE + n,)) for n in names)}


async def test_claims_allocated_here_are_prepared_without_a_get(
    server: FakeApiServer, cache: ClaimCache, service: DraService
) -> None:
    before, after = api.Claim("ns", "before", "uid-1"), api.Claim("ns", "after", "uid-2")
    server.add_claim(claim_obj(before, ("r", NODE, "fuse-fuse0"), ("r", NODE, "fuse-fuse1")))
    await until(cached(cache, before), "the listed claim")
    server.add_claim(claim_obj(after, ("r/sub", NODE, "fuse-fuse2")))
    await until(cached(cache, after), "the watched claim")
    assert await service.prepare([before, after]) == {
        **devices(before, "fuse0", "fuse1"),
        **devices(after, "fuse2"),
    }
    assert gets(server, before) == gets(server, after) == 0
    assert server.watches == 1
    assert lists(server) == 1


async def test_prepare_through_the_kubelet_answers_from_the_watch(
    tmp_path: Path, server: FakeApiServer, cache: ClaimCache, service: DraService
) -> None:
    ref = api.Claim("ns", "c", "uid-1")
    server.add_claim(claim_obj(ref, ("r", NODE, "fuse-fuse3")))
    await until(cached(cache, ref), "the claim")
    paths = Paths(DRIVER, registry_dir=tmp_path / "registry", plugins_dir=tmp_path / "plugins")
    async with KubeletPlugin(paths, service):
        kubelet = FakeKubelet(paths.registry_dir)
        await kubelet.register(kubelet.sockets()[0], DRIVER)
        assert await kubelet.prepare(ref) == devices(ref, "fuse3")
    assert gets(server, ref) == 0


async def test_a_claim_the_watch_has_not_brought_is_read_with_a_get(
    server: FakeApiServer, cache: ClaimCache, service: DraService
) -> None:
    await until(lambda: cache.synced, "the first list")
    ref = api.Claim("ns", "late", "uid-1")
    obj = claim_obj(ref, ("r", NODE, "fuse-fuse0"))
    server.claims["ns", "late"] = {
        **obj,
        "metadata": {**obj["metadata"], "resourceVersion": "5"},
    }  # no event yet
    assert await service.prepare([ref]) == devices(ref, "fuse0")
    assert gets(server, ref) == 1


async def test_a_deleted_claim_leaves_the_cache_and_is_not_found(
    server: FakeApiServer, cache: ClaimCache, service: DraService
) -> None:
    ref = api.Claim("ns", "c", "uid-1")
    server.add_claim(claim_obj(ref, ("r", NODE, "fuse-fuse0")))
    await until(cached(cache, ref), "the claim")
    server.delete_claim("ns", "c")
    await until(lambda: not cached(cache, ref)(), "the claim's deletion")
    assert await service.prepare([ref]) == {
        "uid-1": "claim ns/c: not found in the API server (deleted after allocation?)"
    }
    assert gets(server, ref) == 1


async def test_a_replaced_claim_is_a_uid_mismatch(
    server: FakeApiServer, cache: ClaimCache, service: DraService
) -> None:
    old, new = api.Claim("ns", "c", "uid-old"), api.Claim("ns", "c", "uid-new")
    server.add_claim(claim_obj(new, ("r", NODE, "fuse-fuse0")))
    await until(cached(cache, new), "the new claim")
    assert cache.get("ns", "other-name", "uid-new") is None  # a UID is only taken with its own name
    assert await service.prepare([old]) == {
        "uid-old": "claim ns/c: UID uid-new in the API server, uid-old requested (the claim was replaced)"
    }
    assert gets(server, old) == 1


async def test_claims_of_another_driver_or_node_are_not_kept(
    server: FakeApiServer, cache: ClaimCache, service: DraService
) -> None:
    other_driver, other_node, ours = (api.Claim("ns", n, f"uid-{n}") for n in ("driver", "node", "ours"))
    server.add_claim(claim_obj(other_driver, ("r", NODE, "fuse-fuse0"), driver="gpu.example.com"))
    server.add_claim(claim_obj(other_node, ("r", "node-b", "fuse-fuse0")))
    server.add_claim(claim_obj(ours, ("r", NODE, "fuse-fuse1")))
    await until(cached(cache, ours), "our claim, watched after the others")
    assert not cached(cache, other_driver)()
    assert not cached(cache, other_node)()
    assert await service.prepare([other_driver, other_node]) == {
        "uid-driver": "claim ns/driver: no device allocated by driver cdi-plugin.io",
        "uid-node": "claim ns/node: device node-b/fuse-fuse0: pool node-b is not this node's pool node-a",
    }
    assert gets(server, other_driver) == gets(server, other_node) == 1


async def test_a_watch_ended_by_the_server_is_taken_up_where_it_was(
    server: FakeApiServer, cache: ClaimCache
) -> None:
    first, second = api.Claim("ns", "a", "uid-a"), api.Claim("ns", "b", "uid-b")
    server.add_claim(claim_obj(first, ("r", NODE, "fuse-fuse0")))
    await until(cached(cache, first), "the first claim")
    await until(lambda: server.watches == 1, "the watch after the list")  # else nothing to break
    server.break_watches()
    server.add_claim(claim_obj(second, ("r", NODE, "fuse-fuse1")))
    await until(cached(cache, second), "the claim added while the watch was ending")
    assert server.watches == 2
    assert lists(server) == 1
    assert cache.synced


async def test_a_watch_whose_reconnection_fails_once_is_taken_up_without_a_list(
    server: FakeApiServer, cache: ClaimCache
) -> None:
    first, second = api.Claim("ns", "a", "uid-a"), api.Claim("ns", "b", "uid-b")
    server.add_claim(claim_obj(first, ("r", NODE, "fuse-fuse0")))
    await until(cached(cache, first), "the first claim")
    await until(lambda: server.watches == 1, "the watch after the list")
    server.fail("GET", ALL_CLAIMS, 503)  # the watch's own reconnection (a dropped connection)
    server.break_watches()
    server.add_claim(claim_obj(second, ("r", NODE, "fuse-fuse1")))
    await until(cached(cache, second), "the claim added while the watch was down")
    # the list, the watch, its failed reconnection, the watch resumed; listing again would add one
    assert server.requests.count(("GET", ALL_CLAIMS)) == 4
    assert server.watches == 2
    assert cache.synced


async def test_a_broken_watch_falls_back_to_gets_then_lists_again(
    server: FakeApiServer, cache: ClaimCache, service: DraService
) -> None:
    first, second = api.Claim("ns", "a", "uid-a"), api.Claim("ns", "b", "uid-b")
    server.add_claim(claim_obj(first, ("r", NODE, "fuse-fuse0")))
    await until(cached(cache, first), "the first claim")
    await until(lambda: server.watches == 1, "the watch after the list")
    server.fail("GET", ALL_CLAIMS, *[503] * 1000)  # the watch's reconnection, then every list, fail
    server.break_watches()
    await until(lambda: not cache.synced, "the broken watch noticed")
    assert await service.prepare([first]) == devices(first, "fuse0")
    assert gets(server, first) == 1  # read again: the cache is not trusted meanwhile
    server.add_claim(claim_obj(second, ("r", NODE, "fuse-fuse1")))
    with server.lock:
        server.failures.clear()  # the API server is back
    await until(cached(cache, second), "the claims listed again")
    assert await service.prepare([second]) == devices(second, "fuse1")
    assert gets(server, second) == 0


async def test_an_expired_watch_lists_again(server: FakeApiServer, cache: ClaimCache) -> None:
    kept, gone = api.Claim("ns", "kept", "uid-k"), api.Claim("ns", "gone", "uid-g")
    server.add_claim(claim_obj(kept, ("r", NODE, "fuse-fuse0")))
    server.add_claim(claim_obj(gone, ("r", NODE, "fuse-fuse1")))
    await until(cached(cache, gone), "both claims")
    with server.lock:
        del server.claims["ns", "gone"]  # its deletion's event is among those the server forgets
    server.compact()
    server.break_watches()  # the watch comes back with a version the server no longer keeps: 410
    await until(lambda: lists(server) == 2 and cache.synced, "the claims listed again")
    assert cached(cache, kept)()
    assert not cached(cache, gone)()


async def test_a_large_cluster_is_listed_page_by_page(server: FakeApiServer, kube: KubeApi) -> None:
    refs = [api.Claim(f"ns{i % 7}", f"c{i}", f"uid-{i}") for i in range(LIST_CHUNK * 2 + 1)]
    for i, ref in enumerate(refs):
        server.add_claim(claim_obj(ref, ("r", NODE if i % 2 else "node-b", "fuse-fuse0")))
    cache = ClaimCache(DRIVER, NODE, kube)
    task = asyncio.create_task(cache.run())
    try:
        await until(lambda: cache.synced, "the list")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert lists(server) == 3  # three pages
    assert [r.uid for r in refs if cached(cache, r)()] == [r.uid for i, r in enumerate(refs) if i % 2]
