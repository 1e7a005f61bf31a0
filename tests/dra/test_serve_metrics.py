"""The DRA driver's metrics and readiness, scraped over HTTP from a real ``cdi-plugin serve --api
dra|both --metrics-address 127.0.0.1:0`` process, as a fake kubelet, a fake device plugin kubelet
and a fake API server (real sockets) make each of them move."""

from __future__ import annotations

import asyncio
import re
from typing import get_args

import pytest

from cdi_plugin.dra import api
from cdi_plugin.dra.kube import RESOURCE_API
from cdi_plugin.dra.report import PrepareResult, PublishResult, UnprepareResult
from cdi_plugin.metrics import dra as metrics_dra
from tests.deviceplugin.fake_kubelet import FakeKubelet as DevicePluginKubelet
from tests.deviceplugin.helpers import make_node, run
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import NODES, SLICES, running
from tests.dra.fakekubelet import FakeKubelet, RegistrationRefused
from tests.dra.serving import DraNode, Serve, dra_node, published, register
from tests.dra.test_kubelet import claim_obj
from tests.dra.test_serve import claim_path
from tests.metrics.scrape import Samples, get, metrics_until, ready_until, scrape, value

__all__ = ["dra_node"]

pytestmark = pytest.mark.timeout(180)

FUSE, TTY = "cdi-plugin.io/fuse", "cdi-plugin.io/tty"
REGISTRATION = f"DRA driver {DRIVER}: registration with the kubelet"
FIRST_PUBLISH = f"DRA driver {DRIVER}: first publish of its ResourceSlices"
PREPARE_RESULTS = get_args(PrepareResult)
UNPREPARE_RESULTS = get_args(UnprepareResult)


def test_the_metrics_know_every_result_the_driver_reports() -> None:
    assert metrics_dra.PREPARE_RESULTS == PREPARE_RESULTS
    assert metrics_dra.UNPREPARE_RESULTS == UNPREPARE_RESULTS
    assert get_args(PublishResult) == metrics_dra.PUBLISH_RESULTS


async def _endpoint(serve: Serve) -> str:
    """The base URL of the metrics endpoint, from the line that says where it listens."""
    found = await serve.wait_for(
        lambda: next((m for m in serve.messages() if m.startswith("serving metrics on ")), ""), "metrics"
    )
    match = re.match(r"serving metrics on (http://127\.0\.0\.1:\d+)/metrics", found)
    assert match, found
    return match.group(1)


def _counts(found: Samples, name: str, results: tuple[str, ...]) -> dict[str, float | None]:
    return {r: value(found, name, result=r) for r in results}


def test_readiness_waits_for_each_side_and_a_first_publish_and_slices_and_requests_are_counted(
    dra_node: DraNode,
) -> None:
    """--api both: fuse goes to the device plugin, tty to DRA; the first create of the slice fails."""
    make_node(dra_node.dev / "fuse")
    make_node(dra_node.dev / "ttyUSB0")
    write_spec(dra_node.specs, FUSE, {"fuse": str(dra_node.dev / "fuse")})
    write_spec(dra_node.specs, TTY, {"ttyUSB0": str(dra_node.dev / "ttyUSB0")})
    dra_node.api.add_node(NODE, "v1.36.2")
    config = dra_node.config.with_name("config.yaml")
    config.write_text(f'plugin: {{resources: {{"{TTY}": {{api: dra}}}}}}\n')
    dra_node.api.fail("POST", SLICES, 500)

    async def scenario() -> None:
        args = dra_node.args("both", "--config", str(config), "--metrics-address", "127.0.0.1:0")
        serve = await Serve.start(args)
        try:
            base = await _endpoint(serve)
            # The first publish fails: not ready, and the reason is said.
            found = await metrics_until(
                base,
                lambda s: value(s, "cdi_plugin_dra_slice_publishes_total", result="failed") == 1,
                "failure",
            )
            assert value(found, "cdi_plugin_dra_pool_published") == 0
            assert value(found, "cdi_plugin_dra_api_requests_total", verb="create", result="5xx") == 1
            status, body = await asyncio.to_thread(get, base + "/readyz")
            assert status == 503
            assert f"{FIRST_PUBLISH} (POST {SLICES}: 500 InternalError: injected 500), {REGISTRATION}" in body

            # Tried again: published, and only the kubelets are waited for.
            found = await metrics_until(
                base, lambda s: value(s, "cdi_plugin_dra_pool_published") == 1, "published"
            )
            assert published(dra_node) == {"tty-ttyusb0": TTY}
            assert _counts(found, "cdi_plugin_dra_slice_publishes_total", ("changed", "failed")) == {
                "changed": 1, "failed": 1,
            }  # fmt: skip
            await ready_until(base, 503, f"waiting for: {FUSE}, {REGISTRATION}")

            # Each request the fake API server answered is counted once, by verb and result.
            dra_node.api.break_watches()
            await serve.wait_for(lambda: dra_node.api.watches == 2, "the watch started again")
            found = await asyncio.to_thread(scrape, base)
            api_server = dra_node.api
            assert {
                (verb, result): value(found, "cdi_plugin_dra_api_requests_total", verb=verb, result=result)
                for verb, result in (("get", "ok"), ("list", "ok"), ("create", "ok"), ("create", "5xx"),
                                     ("watch", "ok"))
            } == {
                ("get", "ok"): 2,  # the node, and the discovery document of resource.k8s.io/v1
                ("list", "ok"): api_server.count("GET", SLICES, watch=False),
                ("create", "ok"): api_server.count("POST", SLICES) - 1,
                ("create", "5xx"): 1,
                ("watch", "ok"): api_server.watches - 1,  # every watch that ended; one is open
            }  # fmt: skip
            assert [api_server.count(*call) for call in (("GET", f"{NODES}{NODE}"), ("GET", RESOURCE_API),
                                                          ("POST", SLICES))] == [1, 1, 2]  # fmt: skip

            async with DevicePluginKubelet(dra_node.device_plugins) as dp_kubelet:
                await dp_kubelet.wait_registered(FUSE, timeout=20)
                await ready_until(base, 503, f"waiting for: {REGISTRATION}")
                await register(dra_node, serve)
                await ready_until(base, 200, "ok (3 ready)")
                assert value(await asyncio.to_thread(scrape, base), "cdi_plugin_dra_registered") == 1

                # A kubelet that refuses the driver: not ready, with its reason.
                with pytest.raises(RegistrationRefused):
                    await FakeKubelet(dra_node.registry, known_versions=()).register(
                        dra_node.registration_socket, DRIVER
                    )
                refused = f"none of the versions {list(api.ADVERTISED)} is supported"
                await ready_until(base, 503, f"waiting for: {REGISTRATION} (refused: {refused})")
                assert value(await asyncio.to_thread(scrape, base), "cdi_plugin_dra_registered") == 0
                await register(dra_node, serve)
                await ready_until(base, 200, "ok (3 ready)")

                # The registration socket removed: served again, not ready until registered again.
                socket = dra_node.registration_socket
                before = socket.stat().st_ctime_ns
                socket.unlink()
                await serve.wait_for(
                    lambda: socket.exists() and socket.stat().st_ctime_ns != before,
                    "the registration socket served again",
                )
                assert await asyncio.to_thread(get, base + "/readyz") == (
                    503,
                    f"waiting for: {REGISTRATION}\n",
                )
                await register(dra_node, serve)
                await ready_until(base, 200, "ok (3 ready)")
        finally:
            code = await serve.stop()
        assert code == 0, serve.lines

    with running(dra_node.api):
        run(scenario(), timeout=150)


def test_prepare_and_unprepare_are_counted_by_result_with_their_durations(dra_node: DraNode) -> None:
    make_node(dra_node.dev / "fuse")
    write_spec(dra_node.specs, FUSE, {"fuse": str(dra_node.dev / "fuse")})
    dra_node.api.add_node(NODE, "v1.36.2")
    claim = api.Claim("default", "fuse-claim", "uid-1")
    other = api.Claim("default", "other", "uid-2")  # the same device
    gone = api.Claim("default", "gone", "uid-3")  # not in the API server
    replaced = api.Claim("default", "fuse-claim", "uid-4")  # the API server has another UID
    nope = api.Claim("default", "nope", "uid-5")  # allocated a device this node does not serve
    denied = api.Claim("default", "denied", "uid-6")  # the API server refuses the GET
    for ref, device in ((claim, "fuse-fuse"), (other, "fuse-fuse"), (nope, "nope"), (denied, "fuse-fuse")):
        dra_node.api.add_claim(claim_obj(ref, ("fuse", NODE, device)))
    dra_node.api.fail("GET", claim_path(denied), 403)
    state = dra_node.plugins / DRIVER / "prepared.json"
    lock = dra_node.plugins / DRIVER / "serialize.lock"

    async def scenario() -> None:
        serve = await Serve.start(dra_node.args("dra", "--metrics-address", "127.0.0.1:0"))
        try:
            base = await _endpoint(serve)
            found = await asyncio.to_thread(scrape, base)
            assert _counts(found, "cdi_plugin_dra_prepare_claims_total", PREPARE_RESULTS) == dict.fromkeys(
                PREPARE_RESULTS, 0
            )  # every result from the start: the first failure is an increase
            await ready_until(base, 503, f"waiting for: {REGISTRATION}")  # --api dra: nothing else
            kubelet = await register(dra_node, serve)
            await ready_until(base, 200, "ok (2 ready)")
            prepares: dict[str, float] = dict.fromkeys(PREPARE_RESULTS, 0)
            unprepares: dict[str, float] = dict.fromkeys(UNPREPARE_RESULTS, 0)

            async def prepare(ref: api.Claim, result: str) -> Samples:
                [answer] = (await kubelet.prepare(ref)).values()
                assert isinstance(answer, tuple) == (result == "ok"), answer
                prepares[result] += 1
                found = await asyncio.to_thread(scrape, base)
                assert _counts(found, "cdi_plugin_dra_prepare_claims_total", PREPARE_RESULTS) == prepares
                assert value(found, "cdi_plugin_dra_prepare_duration_seconds_count") == sum(prepares.values())
                return found

            async def unprepare(ref: api.Claim, result: str) -> Samples:
                [error] = (await kubelet.unprepare(ref)).values()
                assert (error == "") == (result == "ok"), error
                unprepares[result] += 1
                found = await asyncio.to_thread(scrape, base)
                assert (
                    _counts(found, "cdi_plugin_dra_unprepare_claims_total", UNPREPARE_RESULTS) == unprepares
                )
                assert value(found, "cdi_plugin_dra_unprepare_duration_seconds_count") == sum(
                    unprepares.values()
                )
                return found

            found = await prepare(claim, "ok")
            assert value(found, "cdi_plugin_dra_claims_prepared") == 1
            await prepare(other, "device-in-use")
            await prepare(gone, "not-found")
            await prepare(replaced, "invalid-claim")
            await prepare(nope, "device-unavailable")
            found = await prepare(denied, "api-error")
            calls = sum(prepares.values())
            assert value(found, "cdi_plugin_dra_prepare_duration_seconds_bucket", le="+Inf") == calls
            assert 0 < (value(found, "cdi_plugin_dra_prepare_duration_seconds_sum") or 0) < 45 * calls
            assert value(found, "cdi_plugin_dra_claims_prepared") == 1
            found = await unprepare(claim, "ok")
            assert value(found, "cdi_plugin_dra_claims_prepared") == 0

            # The GETs of the claims: one per claim not prepared yet, by result.
            gets = [c for c in dra_node.api.calls if c.method == "GET" and "/resourceclaims/" in c.path]
            assert len(gets) == 6
            assert {
                result: value(found, "cdi_plugin_dra_api_requests_total", verb="get", result=result)
                for result in ("ok", "404", "403")
            } == {"ok": 2 + 4, "404": 1, "403": 1}  # the node's, the discovery document's, the claims'

            # The lock shared with other instances cannot be taken (a directory in its place).
            lock.unlink()
            lock.mkdir()
            await prepare(claim, "lock-error")
            await unprepare(claim, "lock-error")
            lock.rmdir()

            # The prepared claims' file cannot be used.
            state.write_text("{not json")
            await prepare(claim, "state-error")
            found = await unprepare(claim, "state-error")
            assert value(found, "cdi_plugin_dra_claims_prepared") == 0
        finally:
            code = await serve.stop()
        assert code == 0, serve.lines

    with running(dra_node.api):
        run(scenario(), timeout=150)


def test_a_driver_not_started_for_want_of_dra_in_the_api_server_is_not_waited_for(dra_node: DraNode) -> None:
    """--api both on an API server without resource.k8s.io/v1: the device plugin serves on, and
    readiness is its alone."""
    make_node(dra_node.dev / "fuse")
    write_spec(dra_node.specs, FUSE, {"fuse": str(dra_node.dev / "fuse")})
    dra_node.api.add_node(NODE)
    dra_node.api.resource_versions = ()

    async def scenario() -> None:
        async with DevicePluginKubelet(dra_node.device_plugins) as dp_kubelet:
            serve = await Serve.start(dra_node.args("both", "--metrics-address", "127.0.0.1:0"))
            try:
                base = await _endpoint(serve)
                await dp_kubelet.wait_registered(FUSE, timeout=30)
                await serve.logged(f"the DRA driver {DRIVER} is not started", timeout=30)
                await ready_until(base, 200, "ok (1 ready)")
                found = await asyncio.to_thread(scrape, base)
                assert value(found, "cdi_plugin_dra_registered") == 0
                assert value(found, "cdi_plugin_dra_pool_published") == 0
                assert value(found, "cdi_plugin_dra_api_requests_total", verb="get", result="404") == 1
            finally:
                code = await serve.stop()
        assert code == 0, serve.lines

    with running(dra_node.api):
        run(scenario(), timeout=90)
