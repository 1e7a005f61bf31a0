"""The real ``cdi-plugin serve --api dra|both`` against an API server that answers as none should:
nothing it sends ends the process or touches the device plugin and the kubelet's sockets, storms
are met with backoff, and nothing from outside forges a log line or reaches a URL unchecked."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from cdi_plugin.dra import api
from tests.deviceplugin.fake_kubelet import FakeKubelet as DevicePluginKubelet
from tests.deviceplugin.helpers import make_node, run
from tests.dra import faults
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import ALL_CLAIMS, NODES, SLICES, FakeApiServer, running
from tests.dra.serving import DraNode, Serve, dra_node, published, register
from tests.dra.test_kubelet import claim_obj
from tests.dra.test_serve import CLAIM, FUSE, claim_path

__all__ = ["dra_node"]

pytestmark = pytest.mark.timeout(180)


def prepared(*names: str) -> tuple[api.PreparedDevice, ...]:
    return tuple(api.PreparedDevice(("fuse",), NODE, f"fuse-{n}", (f"{FUSE}={n}",)) for n in names)


def _fuse_node(node: DraNode, *names: str) -> None:
    for name in names:
        make_node(node.dev / name)
    write_spec(node.specs, FUSE, {name: str(node.dev / name) for name in names})
    node.api.add_node(NODE)


def lists(server: FakeApiServer) -> list[float]:
    """When each list (of slices, or of claims) was asked for."""
    return [
        c.time for c in server.calls if c.path in (SLICES, ALL_CLAIMS) and c.method == "GET" and not c.watch
    ]


def test_with_api_both_a_hostile_api_server_never_touches_the_device_plugin(dra_node: DraNode) -> None:
    """HTML pages, garbage, arrays, slices without a version, a claim elsewhere without its pool:
    the process runs on, the device plugin allocates all along, Prepare fails per claim, and once
    the API server answers again the slices are published and claims prepared."""
    _fuse_node(dra_node, "fuse")
    server = dra_node.api
    other = claim_obj(api.Claim("ns", "elsewhere", "uid-x"), ("r", "node-b", "fuse-fuse"))
    del other["status"]["allocation"]["devices"]["results"][0]["pool"]
    server.add_claim(other)
    server.add_claim(claim_obj(CLAIM, ("fuse", NODE, "fuse-fuse")))

    async def scenario() -> None:
        async with DevicePluginKubelet(dra_node.device_plugins) as dp_kubelet:
            server.misbehave("GET", "/", faults.html(503), times=None)
            # --verbose: failures in a row after the first are logged at debug level
            serve = await Serve.start(dra_node.args("both", *dra_node.both_ways(), "--verbose"))
            try:
                client = await dp_kubelet.wait_registered(FUSE, timeout=20)
                await client.wait_until(lambda d: "fuse" in d)

                async def allocates() -> None:
                    answer = await client.allocate(["fuse"])
                    assert [d.name for d in answer.cdi_devices] == [f"{FUSE}=fuse"]

                html_503 = "503 Service Unavailable (text/html, not a Status)"
                await serve.logged(f"cannot confirm node {NODE}: GET {NODES}{NODE}: {html_503}")
                await allocates()
                await serve.wait_for(lambda: server.count("GET", f"{NODES}{NODE}") >= 3, "three node reads")

                server.behave()  # the node is found, nothing else is right
                bad_slice = {"metadata": {"name": "s"}, "spec": {"driver": DRIVER, "nodeName": NODE}}
                server.misbehave("GET", SLICES, faults.body(200, b"[1, 2]"), watch=False, times=2)
                server.misbehave(
                    "GET", SLICES, faults.body(200, json.dumps({"metadata": {"resourceVersion": "1"},
                                                                "items": [bad_slice]}).encode()), watch=False,
                )  # fmt: skip
                server.misbehave(
                    "GET", SLICES, faults.watch_lines(b"<html>", b"garbage"), watch=True, times=None
                )
                server.misbehave("GET", claim_path(CLAIM), faults.html(503), times=None)
                kubelet = await register(dra_node, serve)
                [error] = (await kubelet.prepare(CLAIM)).values()
                assert isinstance(error, str)
                assert error.startswith(
                    f"claim default/fuse-claim: cannot read it: GET {claim_path(CLAIM)}: {html_503}"
                )
                await allocates()
                await serve.logged(f"GET {SLICES}: 200 answer: a JSON array, not an object")
                await serve.logged(
                    "a ResourceSlice that is not one: metadata.resourceVersion: missing", timeout=40
                )
                await serve.logged(
                    f"GET {SLICES} (watch): an event that is not one: an HTML page", timeout=40
                )
                await allocates()

                server.behave()
                assert await serve.wait_for(lambda: published(dra_node), "slices", timeout=60) == {
                    "fuse-fuse": FUSE
                }
                assert await kubelet.prepare(CLAIM) == {CLAIM.uid: prepared("fuse")}
                await allocates()
                assert serve.proc.returncode is None
                assert all(line.startswith("{") for line in serve.lines), serve.lines  # no traceback
                # the node's reads that failed in a row: their first in full, and their end
                node = [json.loads(line) for line in serve.lines if f"cannot confirm node {NODE}" in line]
                assert [r["level"] for r in node if r["level"] != "debug"] == ["error", "info"], node
                assert re.fullmatch(rf"DRA driver {DRIVER}: recovered after .*: cannot confirm node {NODE}",
                                    node[-1]["msg"])  # fmt: skip
            finally:
                code = await serve.stop()
        assert code == 0, serve.lines
        assert dra_node.kubelet_sockets() == []

    with running(server):
        run(scenario(), timeout=150)


def test_a_claim_reallocated_while_every_watch_is_silent_gets_its_new_device(dra_node: DraNode) -> None:
    _fuse_node(dra_node, "fuse", "fuse2")
    server = dra_node.api
    server.add_claim(claim_obj(CLAIM, ("fuse", NODE, "fuse-fuse")))

    async def scenario() -> None:
        server.misbehave("GET", "/", faults.silent(), watch=True, times=None)
        serve = await Serve.start(dra_node.args("dra"))
        try:
            kubelet = await register(dra_node, serve)
            await serve.wait_for(lambda: server.watches, "a watch")
            assert await kubelet.prepare(CLAIM) == {CLAIM.uid: prepared("fuse")}
            assert await kubelet.unprepare(CLAIM) == {CLAIM.uid: ""}
            server.add_claim(claim_obj(CLAIM, ("fuse", NODE, "fuse-fuse2")))  # allocated again, elsewhere
            assert await kubelet.prepare(CLAIM) == {CLAIM.uid: prepared("fuse2")}
        finally:
            code = await serve.stop()
        assert code == 0, serve.lines

    with running(server):
        run(scenario(), timeout=60)


def test_a_hanging_claim_get_fails_the_claim_before_the_kubelets_deadline(dra_node: DraNode) -> None:
    """With the driver's own timeouts: the kubelet waits 45 s, the claim's error comes within 30 s."""
    _fuse_node(dra_node, "fuse")
    server = dra_node.api

    async def scenario() -> tuple[Any, float]:
        server.misbehave("GET", "/", faults.silent(), watch=True, times=None)  # nothing comes but by GET
        serve = await Serve.start(dra_node.args("dra"))
        try:
            kubelet = await register(dra_node, serve)
            server.add_claim(claim_obj(CLAIM, ("fuse", NODE, "fuse-fuse")))
            server.misbehave("GET", claim_path(CLAIM), faults.hang(), times=None)
            started = time.monotonic()
            answer = await kubelet.prepare(CLAIM)  # the fake kubelet's deadline is the real one's, 45 s
            took = time.monotonic() - started
        finally:
            code = await serve.stop()
        assert code == 0, serve.lines
        return answer, took

    with running(server):
        answer, took = run(scenario(), timeout=90)
    assert took < 30
    assert re.fullmatch(
        rf"claim default/fuse-claim: cannot read it: GET {claim_path(CLAIM)}: no complete answer within "
        r"[\d.]+ s \(gave up after \d attempts in 28 s\)",
        answer[CLAIM.uid],
    ), answer


def test_a_storm_of_410s_lists_a_few_times_and_slower_and_slower(dra_node: DraNode) -> None:
    _fuse_node(dra_node, "fuse")
    server = dra_node.api

    async def scenario() -> Serve:
        server.misbehave("GET", "/", faults.expired(), watch=True, times=None)
        serve = await Serve.start(dra_node.args("dra"))
        try:
            await serve.wait_for(lambda: len(lists(server)) >= 4, "four lists", timeout=40)
        finally:
            code = await serve.stop()
        assert code == 0, serve.lines
        return serve

    with running(server):
        serve = run(scenario(), timeout=60)
    at = lists(server)
    assert at[3] - at[0] >= 0.8 * (1 + 2 + 4) - 0.1  # 1 s, 2 s, 4 s apart, less their jitter
    # one lasting failure: its first line, and no end while each watch after a list fails
    assert sum("410 Expired" in m for m in serve.messages()) == 1, serve.messages()
    assert not [m for m in serve.messages() if "recovered after " in m]


def test_a_storm_of_watch_errors_backs_off_and_lists_no_more(dra_node: DraNode) -> None:
    _fuse_node(dra_node, "fuse")
    server = dra_node.api

    async def scenario() -> None:
        server.misbehave("GET", "/", faults.status(500, "InternalError", "etcd"), watch=True, times=None)
        serve = await Serve.start(dra_node.args("dra"))
        try:
            await serve.wait_for(lambda: server.watches >= 4, "four watches", timeout=40)
        finally:
            code = await serve.stop()
        assert code == 0, serve.lines

    with running(server):
        run(scenario(), timeout=60)
    watches = [c.time for c in server.calls if c.watch]
    assert watches[3] - watches[0] >= 0.8 * (1 + 2 + 4) - 0.1
    assert len(lists(server)) == 1


def test_names_from_the_kubelet_and_the_api_server_are_checked_and_never_forge_a_log_line(
    dra_node: DraNode,
) -> None:
    """In the text log a record is one line, whatever a name holds; a name the API refuses never
    reaches a URL."""
    _fuse_node(dra_node, "fuse")
    server = dra_node.api
    forged = api.Claim("default", "forged", "uid-2")
    server.add_claim(
        claim_obj(forged, ("fuse", NODE, "fuse-fuse\n2026-01-01 00:00:00,000 INFO  all is well"))
    )
    traversal = api.Claim("default", "../../../../api/v1/nodes/node-a", "uid-3")
    # lone surrogates, which a proxy may write in JSON but no UTF-8 (a gRPC answer, a log) holds
    lone, refused = api.Claim("default", "lone", "uid-4"), api.Claim("default", "refused", "uid-5")
    lone_obj = json.dumps(claim_obj(lone, ("fuse", NODE, "fuse-\ud800"))).encode()
    server.misbehave("GET", claim_path(lone), faults.body(200, lone_obj))
    server.misbehave("GET", claim_path(refused), faults.status(403, "Forbidden", "no \udc80 access"))

    async def scenario() -> tuple[dict[str, Any], Serve]:
        serve = await Serve.start([*dra_node.args("dra"), "--log-format", "text"])
        try:
            kubelet = await register(dra_node, serve)
            answer = await kubelet.prepare(forged, traversal, lone, refused)
            await serve.wait_for(lambda: sum("prepare failed" in line for line in serve.lines) >= 4, "logged")
        finally:
            code = await serve.stop()
        assert code == 0, serve.lines
        return answer, serve

    with running(server):
        answer, serve = run(scenario(), timeout=60)
    assert answer == {
        "uid-2": "claim default/forged: the API server's answer is not a usable claim: "
        "status.allocation.devices.results[0].device: "
        "'fuse-fuse\\n2026-01-01 00:00:00,000 INFO  all is well' is not a DNS label",
        "uid-3": "claim 'default/../../../../api/v1/nodes/node-a': "
        "name '../../../../api/v1/nodes/node-a': not a DNS subdomain of at most 253 characters",
        "uid-4": "claim default/lone: the API server's answer is not a usable claim: "
        "status.allocation.devices.results[0].device: 'fuse-\\ud800' is not a DNS label",
        "uid-5": f"claim default/refused: cannot read it: GET {claim_path(refused)}: "
        "403 Forbidden: no \\udc80 access (attempt 1)",
    }
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ", line) for line in serve.lines), (
        serve.lines
    )
    assert not any("all is well" in line and "prepare failed" not in line for line in serve.lines)
    assert [c.path for c in server.calls if "nodes" in c.path] == [f"{NODES}{NODE}"]  # the node's one GET
