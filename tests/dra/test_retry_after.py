"""The API server's ``Retry-After`` (with a 429 or a 503, a Status or a proxy's page) heard by the
slices' list, watch and writes, within their backoff's cap, and by a claim's read within its
deadline; against the fake API server over real HTTP, the waits recorded, not slept."""

from __future__ import annotations

import asyncio
import email.utils
import json
import re
import time
from pathlib import Path

import pytest

from cdi_plugin.dra import api
from cdi_plugin.dra.backoff import Backoff
from cdi_plugin.dra.kube import SLICES, KubeApi
from cdi_plugin.dra.prepare import ClaimReadError
from cdi_plugin.dra.prepared import PreparedClaims
from cdi_plugin.dra.publisher import SlicePublisher
from cdi_plugin.dra.service import DraService
from tests.deviceplugin.helpers import eventually, make_node
from tests.dra import faults
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import CLAIMS, FakeApiServer
from tests.dra.kubefixtures import (
    Sleeps,
    connect,
    inventory_of,
    kube,
    ours,
    publishing,
    reflecting,
    server,
    sleeps,
)
from tests.dra.specinventory import spec_inventory
from tests.dra.test_kube import CLAIM, CLAIM_PATH
from tests.dra.test_kubelet import claim_obj
from tests.dra.test_serve import claim_path

__all__ = ["kube", "server", "sleeps"]

pytestmark = pytest.mark.asyncio


def http_date(seconds_from_now: float) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


@pytest.mark.parametrize(
    ("action", "waited"),
    [
        (faults.status(429, "TooManyRequests", headers={"Retry-After": "7"}), 7.0),
        (faults.html(503, headers={"Retry-After": "12"}), 12.0),
        (faults.html(429, headers={"Retry-After": "3600"}), 30.0),  # the loop's cap
    ],
    ids=["a Status", "a proxy's page", "longer than the cap"],
)
@pytest.mark.parametrize("watch", [False, True], ids=["list", "watch"])
async def test_the_list_and_the_watch_wait_as_long_as_the_server_asks(
    kube: KubeApi, server: FakeApiServer, action: faults.Action, waited: float, watch: bool
) -> None:
    server.misbehave("GET", SLICES, action, watch=watch)
    sleeps = Sleeps()
    async with reflecting(kube, sleeps):
        await eventually(lambda: server.count("GET", SLICES, watch=True) >= 1 + watch, "watched after")
    [slept] = sleeps
    assert waited <= slept <= waited * 1.2  # jitter upwards only


@pytest.mark.parametrize(
    "header", ["soon", "-5", "99999999999999", "9" * 100, "Wed, 21 Oct 2015 07:28:00 GMT", "1\x1b[2J"]
)
async def test_a_retry_after_that_is_not_one_is_ignored(
    kube: KubeApi, server: FakeApiServer, header: str
) -> None:
    server.misbehave("GET", SLICES, faults.html(503, headers={"Retry-After": header}), watch=False)
    sleeps = Sleeps()
    async with reflecting(kube, sleeps):
        await eventually(lambda: server.count("GET", SLICES, watch=True) >= 1, "watched after")
    assert len(sleeps) == 1
    assert sleeps[0] <= 1.2  # the first step of the backoff


def repeated(*values: str, code: int = 503) -> faults.Action:
    """A proxy's page with one ``Retry-After`` line per value."""
    lines = "".join(f"Retry-After: {v}\r\n" for v in values)
    head = f"HTTP/1.1 {code} Oops\r\nContent-Type: text/html\r\n{lines}Content-Length: 0\r\n"
    return faults.raw(f"{head}Connection: close\r\n\r\n".encode())


def waiting(code: int, reason: str, seconds: object, headers: dict[str, str] | None = None) -> faults.Action:
    """A Status asking to wait ``seconds`` in ``details.retryAfterSeconds``."""
    status = {**faults.status_body(code, reason, "wait"), "details": {"retryAfterSeconds": seconds}}
    return faults.body(code, json.dumps(status).encode(), headers=headers)


@pytest.mark.parametrize(
    ("action", "waited"),
    [
        (repeated("7", "3"), 7.0),
        (faults.html(503, headers={"Retry-After": "5, 9"}), 5.0),
        (repeated("soon", "4"), 4.0),
        (faults.html(429, headers={"Retry-After": "later, 6"}), 6.0),
        (repeated(http_date(-60), "8"), 8.0),
        (waiting(429, "TooManyRequests", 8), 8.0),
        (waiting(500, "InternalError", 6), 6.0),
        (waiting(503, "ServiceUnavailable", 5, {"Retry-After": "11"}), 11.0),  # the header first
        (waiting(503, "ServiceUnavailable", 5, {"Retry-After": "soon"}), 5.0),
        (waiting(429, "TooManyRequests", 3600), 30.0),  # the loop's cap
    ],
    ids=[
        "two headers", "folded", "the first not a wait", "folded, the first not a wait",
        "the first in the past", "retryAfterSeconds", "a 500 with it", "the header and the Status",
        "a header that is not a wait and the Status", "longer than the cap",
    ],
)  # fmt: skip
async def test_repeated_headers_and_a_status_asking_to_wait_are_heard(
    kube: KubeApi, server: FakeApiServer, action: faults.Action, waited: float
) -> None:
    """The first wait of a repeated or folded header, as client-go reads the first line; else the
    Status's ``details.retryAfterSeconds``, as client-go's callers read it."""
    server.misbehave("GET", SLICES, action, watch=False)
    sleeps = Sleeps()
    async with reflecting(kube, sleeps):
        await eventually(lambda: server.count("GET", SLICES, watch=True) >= 1, "watched after")
    [slept] = sleeps
    assert waited <= slept <= waited * 1.2


@pytest.mark.parametrize("seconds", ["5", -5, 0, True, 5.5, 10**9, None, {"s": 5}])
async def test_a_retry_after_seconds_that_is_not_one_is_ignored(
    kube: KubeApi, server: FakeApiServer, seconds: object
) -> None:
    server.misbehave("GET", SLICES, waiting(503, "ServiceUnavailable", seconds), watch=False)
    sleeps = Sleeps()
    async with reflecting(kube, sleeps):
        await eventually(lambda: server.count("GET", SLICES, watch=True) >= 1, "watched after")
    [slept] = sleeps
    assert slept <= 1.2  # the first step of the backoff


async def test_a_refusal_asking_to_wait_is_not_waited_for(kube: KubeApi, server: FakeApiServer) -> None:
    """A 403 (a Status that is not one of throttling or of a server error) is refused, whatever
    it asks: listed again after the backoff's first step."""
    server.misbehave("GET", SLICES, waiting(403, "Forbidden", 20, {"Retry-After": "20"}), watch=False)
    sleeps = Sleeps()
    async with reflecting(kube, sleeps):
        await eventually(lambda: server.count("GET", SLICES, watch=True) >= 1, "watched after")
    [slept] = sleeps
    assert slept <= 1.2


async def test_a_watch_error_event_asking_to_wait_is_heard(kube: KubeApi, server: FakeApiServer) -> None:
    """An ERROR event's Status (the watch answered 200, then failed) with ``retryAfterSeconds``."""
    status = {**faults.status_body(500, "InternalError", "etcd"), "details": {"retryAfterSeconds": 9}}
    server.misbehave("GET", SLICES, faults.watch_lines({"type": "ERROR", "object": status}), watch=True)
    sleeps = Sleeps()
    async with reflecting(kube, sleeps):
        await eventually(lambda: server.count("GET", SLICES, watch=True) >= 2, "watched again")
    [slept] = sleeps
    assert 9.0 <= slept <= 10.8


async def test_an_http_date_is_heard(kube: KubeApi, server: FakeApiServer) -> None:
    server.misbehave("GET", SLICES, faults.html(503, headers={"Retry-After": http_date(20)}), watch=False)
    sleeps = Sleeps()
    async with reflecting(kube, sleeps):
        await eventually(lambda: server.count("GET", SLICES, watch=True) >= 1, "watched after")
    [waited] = sleeps
    assert 10 < waited <= 21 * 1.2


async def test_a_write_waits_as_long_as_the_server_asks(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    make_node(host_nodes / "fuse")
    write_spec(spec_dir, "cdi-plugin.io/fuse", {"fuse": str(host_nodes / "fuse")})
    server.misbehave("POST", SLICES, faults.status(429, "TooManyRequests", headers={"Retry-After": "9"}))
    sleeps = Sleeps()
    async with publishing(SlicePublisher(kube, sleep=sleeps), spec_inventory([spec_dir])):
        await eventually(lambda: len(ours(server)) == 1, "published after the 429")
    [slept] = sleeps
    assert 9.0 <= slept <= 10.8


async def test_a_claim_read_waits_as_long_as_the_server_asks_within_its_deadline(
    kube: KubeApi, server: FakeApiServer, sleeps: Sleeps
) -> None:
    server.add_claim(CLAIM)
    server.misbehave("GET", CLAIMS, faults.status(429, "TooManyRequests", headers={"Retry-After": "2"}))
    claim = await kube.read_claim("ns", "c")
    assert claim is not None
    assert claim["metadata"]["uid"] == "u1"
    assert sleeps == [2.0]  # the backoff alone would have waited 0.1 s


@pytest.mark.parametrize("header", ["60", "5"])
async def test_a_claim_read_the_server_puts_off_past_its_deadline_fails_at_once(
    kube: KubeApi, server: FakeApiServer, sleeps: Sleeps, header: str
) -> None:
    """Not retried sooner than the server asks: the kubelet calls again later."""
    server.add_claim(CLAIM)
    server.misbehave("GET", CLAIMS, faults.html(503, headers={"Retry-After": header}))
    started = asyncio.get_running_loop().time()
    with pytest.raises(ClaimReadError) as info:
        await kube.read_claim("ns", "c")
    assert asyncio.get_running_loop().time() - started < 5  # the deadline is 5 s
    message = str(info.value)
    assert message.startswith(f"GET {CLAIM_PATH}: 503 ")
    assert f"; the API server asks to retry in {header} s, more than the " in message
    assert " s left of the 5 s given to reading it (attempt 1)" in message
    assert sleeps == []
    assert server.count("GET", CLAIM_PATH) == 1


async def test_a_claim_read_compares_the_retry_after_with_what_is_left_of_the_call(
    tmp_path: Path, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    """A read started late in a call of many claims has less left than its own deadline: a wait
    longer than what is left of the call fails at once, naming the server's wish, instead of
    ending as a read the call ran out of time for."""
    ref = api.Claim("ns", "c", "uid-1")
    server.add_claim(claim_obj(ref, ("r", NODE, "fuse-fuse0")))
    server.misbehave("GET", CLAIMS, faults.status(429, "TooManyRequests", headers={"Retry-After": "3"}))
    kube = connect(tmp_path, server.url, claim_deadline=20.0)  # real sleeps
    service = DraService(
        DRIVER, NODE, inventory_of(spec_dir, host_nodes, 1), kube, PreparedClaims(tmp_path / "prepared.json"),
        call_budget=2.0,
    )  # fmt: skip
    try:
        [error] = (await service.prepare([ref])).values()
    finally:
        await kube.close()
    assert isinstance(error, str)
    assert re.fullmatch(
        rf"claim ns/c: cannot read it: GET {claim_path(ref)}: 429 TooManyRequests: injected; "
        r"the API server asks to retry in 3 s, more than the [\d.]+ s left of the time the kubelet "
        r"gives the call \(attempt 1\)",
        error,
    ), error
    assert server.count("GET", claim_path(ref)) == 1


async def test_a_claim_read_with_no_time_for_a_second_attempt_says_it_made_one(
    tmp_path: Path, server: FakeApiServer, sleeps: Sleeps
) -> None:
    server.add_claim(CLAIM)
    server.misbehave("GET", CLAIM_PATH, faults.html(503))
    kube = connect(tmp_path, server.url, sleep=sleeps, backoff=Backoff(30.0, 60.0, 4))
    until = asyncio.get_running_loop().time() + 10  # less than the first backoff delay
    try:
        with pytest.raises(ClaimReadError) as info:
            await kube.read_claim("ns", "c", until=until)
    finally:
        await kube.close()
    assert str(info.value).endswith("(gave up after 1 attempt within the time the kubelet gives the call)")
    assert sleeps == []
