"""The driver's requests to the API server, against a fake one over real HTTP that also answers as
no API server should: every answer is input, and each bad one is one error naming the request and
the reason, within a bound of time and memory."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import pytest

from cdi_plugin.dra.backoff import Backoff
from cdi_plugin.dra.kube import SLICES, KubeApi
from cdi_plugin.dra.names import DraConfigError
from cdi_plugin.dra.prepare import ClaimReadError
from cdi_plugin.dra.rest import ApiServerError
from cdi_plugin.dra.slices import build_pool
from tests.dra import faults
from tests.dra.conftest import DRIVER, NODE
from tests.dra.fakeapiserver import CLAIMS, NODES, FakeApiServer, running
from tests.dra.kubefixtures import Sleeps, connect, foreign, kube, server, sleeps
from tests.dra.serving import kubeconfig

__all__ = ["kube", "server", "sleeps"]

pytestmark = pytest.mark.asyncio

CLAIM = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"namespace": "ns", "name": "c", "uid": "u1"}}  # fmt: skip
CLAIM_PATH = f"{CLAIMS}ns/resourceclaims/c"

#: Answers no API server sends, and the reason the driver gives for each (after the request).
BAD_ANSWERS = {
    "an HTML 503 page": (faults.html(503), "503 Service Unavailable (text/html, not a Status)"),
    "an HTML page with 200": (
        faults.body(200, b"<!DOCTYPE html><html><body>Sign in</body></html>", "text/html"),
        "200 answer: an HTML page ('<!DOCTYPE html><html><body>Sign in</body></html>')",
    ),
    "a non-JSON 200 body": (faults.body(200, b"OK\r\n", "text/plain"), "200 answer: not JSON ('OK')"),
    "a JSON array": (faults.body(200, b"[1, 2]"), "200 answer: a JSON array, not an object"),
    "a JSON string": (faults.body(200, b'"ok"'), "200 answer: a JSON string, not an object"),
    "an empty 200 body": (faults.body(200, b""), "200 answer: an empty body"),
    "a number of 5000 digits": (faults.body(200, b'{"a": ' + b"9" * 5000 + b"}"), "a number 5000 characters"),
    "JSON nested 100000 deep": (faults.body(200, b"[" * 100000), "200 answer: JSON nested too deep"),
    "a 64 MiB body": (faults.huge(64 << 20), "an answer larger than 4 MiB"),
    "a 64 MiB body, its length declared": (
        faults.huge(64 << 20, declared=True),
        "an answer larger than 4 MiB",
    ),
    "a gzip bomb (never inflated)": (faults.gzip_bomb(64 << 20), "200 answer: not JSON ("),
    "a status line no server sends": (
        faults.raw(b"HTTP/1.1 999 Odd\tReason\xe9\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"),
        "999 Odd\\tReason (no content type, not a Status)",
    ),
    "a body without end": (faults.drip(0.05), "no complete answer within 1 s"),
    "a chunk header of 15000 bytes": (
        faults.raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"z" * 15000 + b"\r\n"),
        "RemoteProtocolError: illegal chunk header: bytearray(b'zzz",
    ),
    "a reason phrase and a content type of 15000 bytes": (
        faults.raw(
            b"HTTP/1.1 500 " + b"a" * 15000 + b"\r\nContent-Type: " + b"b" * 15000 + b"\r\n"
            b"Connection: close\r\nContent-Length: 0\r\n\r\n"
        ),
        "500 aaaa",
    ),
    "no answer at all": (faults.hang(), "no complete answer within 1 s"),
    "a 500 that is not a Status": (
        faults.body(500, b'{"error": "boom"}'),
        "500 Internal Server Error (application/json, not a Status)",
    ),
}


@pytest.mark.parametrize("answer", BAD_ANSWERS)
async def test_every_bad_answer_is_one_error_naming_the_request(
    kube: KubeApi, server: FakeApiServer, answer: str
) -> None:
    action, reason = BAD_ANSWERS[answer]
    server.misbehave("GET", NODES, action)
    started = time.monotonic()
    with pytest.raises(ApiServerError) as info:
        await kube.rest.request("GET", f"{NODES}{NODE}", timeout=1.0)
    assert time.monotonic() - started < 5
    message = str(info.value)
    assert message.startswith(f"GET {NODES}{NODE}: "), message
    assert reason in message, message
    assert "\n" not in message
    assert len(message) < 300
    assert await kube.read_node_uid() == server.nodes[NODE]["metadata"]["uid"]  # the next one is fine


async def test_a_request_given_no_time_left_is_not_given_the_default(
    kube: KubeApi, server: FakeApiServer
) -> None:
    """A caller's deadline that has run out (a timeout of 0) is kept, not the client's own timeout."""
    server.misbehave("GET", NODES, faults.hang())
    with pytest.raises(ApiServerError, match=r"no complete answer within 0 s$"):
        await kube.rest.request("GET", f"{NODES}{NODE}", timeout=0.0)


@pytest.mark.parametrize(
    ("node", "reason"),
    [
        ({"metadata": {"uid": 5}}, "metadata.uid: 5 is not a string"),
        ({"metadata": []}, r"metadata: \[\] is not an object"),
        ({"metadata": "x"}, "metadata: 'x' is not an object"),
        ({"kind": "Node"}, "metadata.uid: missing"),
        ({"metadata": {"uid": ""}}, "metadata.uid: empty"),
    ],
)
async def test_a_node_of_the_wrong_shape_is_an_error(
    kube: KubeApi, server: FakeApiServer, node: dict[str, object], reason: str
) -> None:
    server.misbehave("GET", NODES, faults.body(200, json.dumps(node).encode()))
    with pytest.raises(ApiServerError, match=f"^GET {NODES}{NODE}: {reason}$"):
        await kube.read_node_uid()


async def test_the_node_check(kube: KubeApi, server: FakeApiServer) -> None:
    assert await kube.read_node_uid() == kube.node_uid == server.nodes[NODE]["metadata"]["uid"]
    server.misbehave("GET", NODES, faults.html(404))  # a proxy's page, not the API server's word
    with pytest.raises(ApiServerError, match=r"404 Not Found \(text/html, not a Status\)"):
        await kube.read_node_uid()
    other = KubeApi(DRIVER, "node-x", kube.rest)
    with pytest.raises(DraConfigError, match="node 'node-x': not found in the API server"):
        await other.read_node_uid()


async def test_a_status_message_cannot_forge_a_line(kube: KubeApi, server: FakeApiServer) -> None:
    server.misbehave("GET", NODES, faults.status(403, "Forbidden", "no\n2026-01-01 INFO all is well\x1b[2J"))
    with pytest.raises(ApiServerError) as info:
        await kube.read_node_uid()
    assert str(info.value) == f"GET {NODES}{NODE}: 403 Forbidden: no\\n2026-01-01 INFO all is well\\x1b[2J"
    assert (info.value.code, info.value.retryable) == (403, False)


async def test_read_claim(kube: KubeApi, server: FakeApiServer, sleeps: Sleeps) -> None:
    server.add_claim(CLAIM)
    claim = await kube.read_claim("ns", "c")
    assert claim is not None
    assert claim["metadata"]["uid"] == "u1"
    assert await kube.read_claim("ns", "gone") is None
    server.fail("GET", CLAIMS, 500, 429)
    assert await kube.read_claim("ns", "c") is not None
    assert len(sleeps) == 2
    assert sleeps[1] > sleeps[0]  # exponential backoff
    server.fail("GET", CLAIMS, 403)
    with pytest.raises(
        ClaimReadError, match=rf"^GET {CLAIM_PATH}: 403 Forbidden: injected 403 \(attempt 1\)$"
    ):
        await kube.read_claim("ns", "c")


@pytest.mark.parametrize(
    "answer", ["an HTML 503 page", "a non-JSON 200 body", "a JSON array", "no answer at all"]
)
async def test_a_claim_read_that_keeps_failing_gives_up_naming_the_claim_and_the_reason(
    kube: KubeApi, server: FakeApiServer, sleeps: Sleeps, answer: str
) -> None:
    server.add_claim(CLAIM)
    action, reason = BAD_ANSWERS[answer]
    server.misbehave("GET", CLAIM_PATH, action, times=None)
    started = time.monotonic()
    with pytest.raises(ClaimReadError) as info:
        await kube.read_claim("ns", "c")
    assert time.monotonic() - started < kube.claim_deadline + 2
    assert str(info.value).startswith(f"GET {CLAIM_PATH}: ")
    assert reason.replace("1 s", "") in str(info.value)
    assert len(sleeps) >= 1
    assert sleeps == sorted(sleeps)  # retried, with backoff
    server.behave()
    assert await kube.read_claim("ns", "c") is not None


async def test_a_hanging_claim_read_ends_within_its_deadline(tmp_path: Path, server: FakeApiServer) -> None:
    """Each attempt has its own timeout; all of them end by the deadline, well before the kubelet's."""
    server.add_claim(CLAIM)
    server.misbehave("GET", CLAIM_PATH, faults.hang(), times=None)
    kube = connect(tmp_path, server.url, claim_deadline=2.5, claim_attempt_timeout=1.0)
    try:
        started = time.monotonic()
        with pytest.raises(
            ClaimReadError, match=r"no complete answer within [\d.]+ s \(gave up after \d attempts in 2.5 s\)"
        ):
            await kube.read_claim("ns", "c")
        assert time.monotonic() - started < 3.5
    finally:
        await kube.close()
    assert 2 <= server.count("GET", CLAIM_PATH) <= 3


@pytest.mark.parametrize(
    ("namespace", "name", "reason"),
    [
        (
            "ns",
            "../../../../api/v1/nodes/node-a",
            "name '../../../../api/v1/nodes/node-a': not a DNS subdomain",
        ),
        ("ns?watch=true", "c", "namespace 'ns?watch=true': not a DNS label"),
        ("ns", "c#x", "name 'c#x': not a DNS subdomain"),
        ("ns", "c%2F..", "name 'c%2F..': not a DNS subdomain"),
        ("ns", "a" * 300, "name 'aaaa"),
        ("ns", "c\n", "name 'c\\n': not a DNS subdomain"),
        ("", "c", "namespace '': not a DNS label"),
    ],
)
async def test_a_claim_name_the_api_would_refuse_is_never_sent(
    kube: KubeApi, server: FakeApiServer, namespace: str, name: str, reason: str
) -> None:
    with pytest.raises(ClaimReadError) as info:
        await kube.read_claim(namespace, name)
    assert str(info.value).startswith(reason)
    assert server.calls == []


async def test_names_go_into_the_path_as_segments(kube: KubeApi, server: FakeApiServer) -> None:
    server.add_claim({**CLAIM, "metadata": {"namespace": "ns", "name": "a.b-c", "uid": "u2"}})
    assert await kube.read_claim("ns", "a.b-c") is not None
    assert [(c.method, c.path, c.query) for c in server.calls] == [
        ("GET", f"{CLAIMS}ns/resourceclaims/a.b-c", {})
    ]


async def test_the_api_server_down_gives_up_with_a_clear_error(tmp_path: Path, sleeps: Sleeps) -> None:
    with running(FakeApiServer()) as api:
        url = api.url  # closed once the block ends: nothing listens there any more
    down = connect(tmp_path, url, sleep=sleeps, claim_deadline=20.0)
    try:
        with pytest.raises(ClaimReadError, match=r"ConnectError.* \(attempt 4\)$"):
            await down.read_claim("ns", "c")
    finally:
        await down.close()
    assert len(sleeps) == 3


async def test_credentials_that_cannot_be_had_are_one_error_naming_the_request(
    tmp_path: Path, server: FakeApiServer, sleeps: Sleeps
) -> None:
    """A token file read again after a 401 (a rotated token) that is gone, an exec plugin that
    fails: the request is not sent, and fails like one that found no connection (a claim is
    tried again), never with lightkube's own exception."""
    token = tmp_path / "token"
    token.write_text("t1")
    config = kubeconfig(tmp_path / "kubeconfig", server.url, {"tokenFile": str(token)})
    kube = KubeApi.connect(DRIVER, NODE, config, sleep=sleeps, backoff=Backoff(0.1, 1.0, 2))
    failing = KubeApi.connect(DRIVER, NODE, kubeconfig(tmp_path / "exec", server.url, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "false",
    }}), sleep=sleeps, backoff=Backoff(0.1, 1.0, 2))  # fmt: skip
    try:
        assert await kube.read_node_uid() == server.nodes[NODE]["metadata"]["uid"]
        token.unlink()
        server.fail("GET", NODES, 401)
        with pytest.raises(ApiServerError) as info:
            await kube.read_node_uid()
        assert str(info.value) == (
            f"GET {NODES}{NODE}: no credentials: ConfigError: Token file {token} not found"
        )
        assert (info.value.retryable, info.value.result) == (True, "connection-error")
        token.write_text("t2")
        server.fail("GET", CLAIMS, 401)
        server.add_claim(CLAIM)
        assert await kube.read_claim("ns", "c") is not None  # the token read again
        with pytest.raises(
            ApiServerError, match=rf"^GET {NODES}{NODE}: no credentials: ConfigError: Exec false"
        ):
            await failing.read_node_uid()
        with pytest.raises(ClaimReadError, match=r": no credentials: .* \(attempt 2\)$"):
            await failing.read_claim("ns", "c")
    finally:
        await kube.close()
        await failing.close()
    assert [c.query for c in server.calls if c.path == CLAIM_PATH] == [{}, {}]  # the 401, then the claim


@pytest.mark.parametrize(
    ("printed", "problem"),
    [
        ("not JSON", "JSONDecodeError: Expecting value"),
        ("{}", "KeyError: 'status'"),
        ("[1]", "TypeError: list indices"),
    ],
)
async def test_an_exec_plugin_that_prints_no_credential_is_one_error_naming_the_request(
    tmp_path: Path, server: FakeApiServer, sleeps: Sleeps, printed: str, problem: str
) -> None:
    plugin = tmp_path / "plugin"
    plugin.write_text(f"#!/bin/sh\necho '{printed}'\n")
    plugin.chmod(0o755)
    config = kubeconfig(tmp_path / "exec", server.url, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin),
    }})  # fmt: skip
    kube = KubeApi.connect(DRIVER, NODE, config, sleep=sleeps, backoff=Backoff(0.1, 1.0, 2))
    try:
        with pytest.raises(ApiServerError, match=rf"^GET {NODES}{NODE}: no credentials: {problem}"):
            await kube.read_node_uid()
    finally:
        await kube.close()
    assert server.calls == []


async def test_slices_are_listed_with_field_selectors_and_checked(
    kube: KubeApi, server: FakeApiServer
) -> None:
    other_node = server.put_slice(foreign("node-b", DRIVER))
    server.put_slice(foreign(NODE, "gpu.example.com"))
    mine = server.put_slice(build_pool(DRIVER, NODE, {}, taints=True).slices(0)[0])
    items, version = await kube.list_slices()
    assert [s["metadata"]["name"] for s in items] == [mine["metadata"]["name"]]
    assert version == str(server.revision)
    [call] = server.calls
    assert call.query == {"fieldSelector": [f"spec.driver={DRIVER},spec.nodeName={NODE}"]}

    # A server that ignores the selector: the others are left out (and never touched)
    everything = {
        "kind": "ResourceSliceList",
        "metadata": {"resourceVersion": "7"},
        "items": [other_node, mine],
    }
    server.misbehave("GET", SLICES, faults.body(200, json.dumps(everything).encode()))
    assert await kube.list_slices() == ([mine], "7")


async def test_a_list_that_never_ends_is_given_up_after_a_few_pages(
    kube: KubeApi, server: FakeApiServer
) -> None:
    """Each page held until the last (up to 4 MiB each, some 35 MiB once decoded): a server that
    answers every page with another continue token is followed for 4 pages, not for ever."""
    page = {
        "kind": "ResourceSliceList",
        "metadata": {"resourceVersion": "7", "continue": "more"},
        "items": [],
    }
    server.misbehave("GET", SLICES, faults.body(200, json.dumps(page).encode()), watch=False, times=None)
    with pytest.raises(ApiServerError, match=f"^GET {SLICES}: still more pages after 4$"):
        await kube.list_slices()
    assert [c.query.get("continue") for c in server.calls] == [None] + [["more"]] * 3


async def test_a_server_that_ignores_the_field_selectors_costs_one_line_per_list_or_watch(
    kube: KubeApi, server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The whole cluster's slices, answered: each left alone, all of them in one warning."""
    others = [server.put_slice(foreign(f"node-{i}", DRIVER)) for i in range(50)]
    mine = server.put_slice(build_pool(DRIVER, NODE, {}, taints=True).slices(0)[0])
    everything = {"kind": "ResourceSliceList", "metadata": {"resourceVersion": "7"}, "items": [*others, mine]}
    server.misbehave("GET", SLICES, faults.body(200, json.dumps(everything).encode()))
    events = [{"type": "ADDED", "object": obj} for obj in [*others, mine]]
    server.misbehave("GET", SLICES, faults.watch_lines(*events), watch=True)
    with caplog.at_level(logging.WARNING, "cdi_plugin"):
        assert await kube.list_slices() == ([mine], "7")
        assert await _events(kube, "7") == [f"ADDED:{mine['metadata']['resourceVersion']}"]
    first = others[0]["metadata"]["name"]
    assert [r.getMessage() for r in caplog.records] == [
        f"GET {SLICES}{watch}: 50 ResourceSlices of other drivers or nodes answered, not asked for "
        f"(the first: '{first}' of driver '{DRIVER}' on node 'node-0'); left alone"
        for watch in ("", " (watch)")
    ]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ({"items": []}, "metadata.resourceVersion: missing"),
        ({"metadata": {"resourceVersion": 7}, "items": []}, "metadata.resourceVersion: 7 is not a string"),
        ({"metadata": {"resourceVersion": "7"}, "items": {"a": 1}}, "items: {'a': 1} is not a list"),
        ({"metadata": {"resourceVersion": "7"}, "items": [[1]]}, "items[0]: not an object"),
        (
            {"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {"name": "s"}, "spec": {}}]},
            "a ResourceSlice that is not one: metadata.resourceVersion: missing",
        ),
        (
            {"metadata": {"resourceVersion": "7"},
             "items": [{"metadata": {"name": "s", "resourceVersion": "1"}, "spec": {"driver": DRIVER}}]},
            "a ResourceSlice that is not one: spec.nodeName: missing",
        ),
        (
            {"metadata": {"resourceVersion": "7"},
             "items": [{"metadata": {"name": "s", "resourceVersion": "1"},
                        "spec": {"driver": DRIVER, "nodeName": NODE, "pool": {"name": NODE},
                                 "devices": {}}}]},
            "a ResourceSlice that is not one: spec.devices: {} is not a list",
        ),
    ],
)  # fmt: skip
async def test_a_list_of_the_wrong_shape_is_an_error(
    kube: KubeApi, server: FakeApiServer, answer: dict[str, object], reason: str
) -> None:
    server.misbehave("GET", SLICES, faults.body(200, json.dumps(answer).encode()))
    with pytest.raises(ApiServerError) as info:
        await kube.list_slices()
    assert str(info.value) == f"GET {SLICES}: {reason}"


async def _events(kube: KubeApi, since: str, *, timeout: int = 1, read_timeout: float = 1.0) -> list[str]:
    return [
        kind + ":" + obj["metadata"]["resourceVersion"]
        async for kind, obj in kube.watch_slices(since, timeout=timeout, read_timeout=read_timeout)
    ]


async def test_the_slice_watch_brings_this_nodes_changes_and_bookmarks(
    kube: KubeApi, server: FakeApiServer
) -> None:
    since = str(server.revision)
    server.put_slice(foreign("node-b", DRIVER))
    mine = server.put_slice(build_pool(DRIVER, NODE, {}, taints=True).slices(0)[0])
    assert await _events(kube, since) == [
        f"ADDED:{mine['metadata']['resourceVersion']}",
        f"BOOKMARK:{server.revision}",
    ]
    [call] = [c for c in server.calls if c.watch]
    assert call.query["fieldSelector"] == [f"spec.driver={DRIVER},spec.nodeName={NODE}"]
    assert (call.query["timeoutSeconds"], call.query["allowWatchBookmarks"]) == (["1"], ["true"])


#: Watch streams no API server sends, and the reason the driver gives for each.
NOT_AN_EVENT = "an event that is not one: "
BAD_WATCHES = {
    "a line that is not JSON": (faults.watch_lines(b"garbage"), NOT_AN_EVENT + "not JSON ('garbage')"),
    "an HTML line": (faults.watch_lines(b"<html>"), NOT_AN_EVENT + "an HTML page ('<html>')"),
    "an event that is an array": (
        faults.watch_lines(b"[1, 2]"),
        NOT_AN_EVENT + "a JSON array, not an object",
    ),
    "an event whose object is an array": (
        faults.watch_lines({"type": "ADDED", "object": [1]}),
        NOT_AN_EVENT + "object: [1] is not an object",
    ),
    "an event of no known type": (
        faults.watch_lines({"type": "SYNC", "object": {}}),
        NOT_AN_EVENT + "type: 'SYNC' is not a watch event type",
    ),
    "a slice without metadata.resourceVersion": (
        faults.watch_lines({"type": "ADDED", "object": {"metadata": {"name": "s"}}}),
        "a ResourceSlice that is not one: metadata.resourceVersion: missing",
    ),
    "a bookmark of a version 5000 characters long": (
        faults.watch_lines({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9" * 5000}}}),
        "metadata.resourceVersion: 5000 characters, more than 64",
    ),
    "an ERROR without a Status": (
        faults.watch_lines({"type": "ERROR", "object": {}}),
        "an ERROR event without a Status",
    ),
    "410 Expired": (faults.expired(), "410 Expired: too old resource version"),
    "a watch answered 500": (faults.status(500, "InternalError", "etcd"), "500 InternalError: etcd"),
    "an HTML 502 page": (faults.html(502), "502 Bad Gateway (text/html, not a Status)"),
    "a silent connection": (faults.silent(), "nothing received for 1 s (a silent connection)"),
    "an event of 5 MiB": (
        faults.watch_lines(b'{"a": "' + b"x" * (5 << 20) + b'"}'),
        "an event larger than 4 MiB",
    ),
    "a gzip bomb (never inflated)": (faults.gzip_bomb(64 << 20), NOT_AN_EVENT + "not JSON ("),
    "a stream without end": (faults.drip(0.05), "still open long after the timeout it was asked for"),
}


@pytest.mark.parametrize("stream", BAD_WATCHES)
async def test_every_bad_watch_is_one_error_naming_the_request(
    kube: KubeApi, server: FakeApiServer, stream: str
) -> None:
    action, reason = BAD_WATCHES[stream]
    server.misbehave("GET", SLICES, action, watch=True)
    started = time.monotonic()
    with pytest.raises(ApiServerError) as info:
        await _events(kube, str(server.revision))
    assert time.monotonic() - started < 5
    message = str(info.value)
    assert message.startswith(f"GET {SLICES} (watch): "), message
    assert reason in message, message
    assert "\n" not in message
    assert len(message) < 300
    assert (info.value.code == 410) == (stream == "410 Expired")


async def test_a_stream_that_ends_in_the_middle_of_an_event_is_an_error(
    kube: KubeApi, server: FakeApiServer
) -> None:
    server.misbehave("GET", SLICES, faults.stream(b'{"type": "ADDED", "obj'), watch=True)
    with pytest.raises(ApiServerError, match=r"\(watch\): the stream ended in the middle of an event$"):
        await _events(kube, str(server.revision))


async def test_a_silent_watch_given_up_is_closed(kube: KubeApi, server: FakeApiServer) -> None:
    """The connection of a silent watch is closed when it is given up: the server sees the client go."""
    closed = asyncio.Queue[None]()
    loop = asyncio.get_running_loop()
    server.misbehave(
        "GET",
        SLICES,
        faults.silent(lambda: loop.call_soon_threadsafe(closed.put_nowait, None)),
        watch=True,
        times=3,
    )
    for _ in range(3):
        with pytest.raises(ApiServerError, match="silent"):
            await _events(kube, str(server.revision), read_timeout=0.2)
        await asyncio.wait_for(closed.get(), 10)
