"""NodePrepareResources reads each claim with a GET, against the fake API server over real HTTP:
what the kubelet names and what the API server answers are input, and a bad one fails its claim
alone, in one line, never the call."""

from __future__ import annotations

import copy
import fcntl
import logging
import os
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cdi_plugin.cli.logs import TextFormatter
from cdi_plugin.dra import api
from cdi_plugin.dra.kube import KubeApi
from cdi_plugin.dra.kubelet import KubeletPlugin, Paths
from cdi_plugin.dra.prepared import PreparedClaims
from cdi_plugin.dra.serialize import Serializer
from cdi_plugin.dra.service import DraService
from tests.dra import faults
from tests.dra.conftest import DRIVER, NODE
from tests.dra.fakeapiserver import FakeApiServer
from tests.dra.fakekubelet import FakeKubelet
from tests.dra.kubefixtures import connect, inventory_of, kube, server, sleeps
from tests.dra.test_kubelet import claim_obj
from tests.dra.test_serve import claim_path as path

__all__ = ["kube", "server", "sleeps"]

pytestmark = pytest.mark.asyncio

FUSE = "cdi-plugin.io/fuse="


def devices(ref: api.Claim, *names: str) -> dict[str, Any]:
    return {ref.uid: tuple(api.PreparedDevice(("r",), NODE, f"fuse-{n}", (FUSE + n,)) for n in names)}


@pytest.fixture
def service(tmp_path: Path, spec_dir: Path, host_nodes: Path, kube: KubeApi) -> DraService:
    inventory = inventory_of(spec_dir, host_nodes, 4)
    return DraService(DRIVER, NODE, inventory, kube, PreparedClaims(tmp_path / "prepared.json"))


@pytest_asyncio.fixture
async def kubelet(tmp_path: Path, service: DraService) -> AsyncIterator[FakeKubelet]:
    paths = Paths(DRIVER, registry_dir=tmp_path / "registry", plugins_dir=tmp_path / "plugins")
    async with KubeletPlugin(paths, service):
        kubelet = FakeKubelet(paths.registry_dir)
        await kubelet.register(kubelet.sockets()[0], DRIVER)
        yield kubelet


async def test_each_claim_is_read_with_one_get_and_no_claim_is_listed_or_watched(
    server: FakeApiServer, kubelet: FakeKubelet
) -> None:
    one, two = api.Claim("ns", "one", "uid-1"), api.Claim("other", "two", "uid-2")
    server.add_claim(claim_obj(one, ("r", NODE, "fuse-fuse0"), ("r", NODE, "fuse-fuse1")))
    server.add_claim(claim_obj(two, ("r/sub", NODE, "fuse-fuse2")))
    for i in range(50):  # the rest of the cluster: never read
        server.add_claim(claim_obj(api.Claim(f"ns{i}", "c", f"uid-x{i}"), ("r", f"node-{i}", "fuse-fuse0")))
    assert await kubelet.prepare(one, two) == {**devices(one, "fuse0", "fuse1"), **devices(two, "fuse2")}
    assert sorted((c.method, c.path, c.query) for c in server.calls) == [
        ("GET", path(one), {}),
        ("GET", path(two), {}),
    ]
    assert await kubelet.prepare(one) == devices(one, "fuse0", "fuse1")  # prepared: not read again
    assert len(server.calls) == 2


async def test_a_reallocated_claim_gets_its_new_device_whatever_the_watches_do(
    server: FakeApiServer, kubelet: FakeKubelet
) -> None:
    """Every watch the server answers goes silent: nothing of a claim depends on one."""
    server.misbehave("GET", "/", faults.silent(), watch=True, times=None)
    ref = api.Claim("ns", "c", "uid-1")
    server.add_claim(claim_obj(ref, ("r", NODE, "fuse-fuse0")))
    assert await kubelet.prepare(ref) == devices(ref, "fuse0")
    assert await kubelet.unprepare(ref) == {"uid-1": ""}
    server.add_claim(claim_obj(ref, ("r", NODE, "fuse-fuse3")))  # deallocated, then allocated again
    assert await kubelet.prepare(ref) == devices(ref, "fuse3")


async def test_a_replaced_or_deleted_claim_fails(server: FakeApiServer, kubelet: FakeKubelet) -> None:
    old, new = api.Claim("ns", "c", "uid-old"), api.Claim("ns", "c", "uid-new")
    server.add_claim(claim_obj(new, ("r", NODE, "fuse-fuse0")))
    gone = api.Claim("ns", "gone", "uid-gone")
    assert await kubelet.prepare(old, gone) == {
        "uid-old": "claim ns/c: UID uid-new in the API server, uid-old requested (the claim was replaced)",
        "uid-gone": "claim ns/gone: not found in the API server (deleted after allocation?)",
    }


NAMES_REFUSED = {
    api.Claim("ns", "../../../../api/v1/nodes/node-a", "uid-a"): "name '../../../../api/v1/nodes/node-a': "
    "not a DNS subdomain of at most 253 characters",
    api.Claim("ns?x=1", "c", "uid-b"): "namespace 'ns?x=1': not a DNS label of at most 63 characters",
    api.Claim("ns", "C", "uid-c"): "name 'C': not a DNS subdomain of at most 253 characters",
    api.Claim("ns\n", "c", "uid-d"): "namespace 'ns\\n': not a DNS label of at most 63 characters",
    api.Claim(
        "ns", "c", "uid e\n"
    ): "UID 'uid e\\n': not a UID (letters, digits, '-', '.' and '_', at most 128)",
}


async def test_names_the_api_would_refuse_fail_their_claim_and_are_never_sent(
    server: FakeApiServer, kubelet: FakeKubelet
) -> None:
    good = api.Claim("ns", "good", "uid-good")
    server.add_claim(claim_obj(good, ("r", NODE, "fuse-fuse0")))
    answer = await kubelet.prepare(good, *NAMES_REFUSED)
    assert answer.pop(good.uid) == devices(good, "fuse0")[good.uid]
    assert answer == {
        ref.uid: f"claim {f'{ref.namespace}/{ref.name}'!r}: {why}" for ref, why in NAMES_REFUSED.items()
    }
    assert [(c.method, c.path) for c in server.calls] == [("GET", path(good))]


#: Claims as no API server holds them: each fails alone, naming the field and why.
BAD_CLAIMS = {
    "a result without its pool": (
        lambda c: c["status"]["allocation"]["devices"]["results"][0].pop("pool"),
        "status.allocation.devices.results[0].pool: missing",
    ),
    "a device name with a newline": (
        lambda c: c["status"]["allocation"]["devices"]["results"][0].update(
            device="fuse-fuse0\n2026 INFO forged"
        ),
        "status.allocation.devices.results[0].device: 'fuse-fuse0\\n2026 INFO forged' is not a DNS label",
    ),
    "a pool with a question mark": (
        lambda c: c["status"]["allocation"]["devices"]["results"][0].update(pool="node-a?x"),
        "status.allocation.devices.results[0].pool: 'node-a?x' is not a pool name",
    ),
    "results that are an object": (
        lambda c: c["status"]["allocation"]["devices"].update(results={"pool": NODE}),
        "devices.results: {'pool': 'node-a'} is not a list",
    ),
    "a result that is an array": (
        lambda c: c["status"]["allocation"]["devices"].update(results=[["r", NODE]]),
        "status.allocation.devices.results[0]: not an object",
    ),
    "an allocation that is an array": (
        lambda c: c["status"].update(allocation=[1]),
        "status.allocation: [1] is not an object",
    ),
    "adminAccess that is a string": (
        lambda c: c["status"]["allocation"]["devices"]["results"][0].update(adminAccess="yes"),
        "status.allocation.devices.results[0].adminAccess: 'yes' is not true or false",
    ),
    "a UID that is a number": (lambda c: c["metadata"].update(uid=7), "metadata.uid: 7 is not a string"),
    "another claim": (
        lambda c: c["metadata"].update(name="other"),
        "metadata.name: 'other', not the claim asked for",
    ),
    "33 results": (
        lambda c: c["status"]["allocation"]["devices"].update(
            results=c["status"]["allocation"]["devices"]["results"] * 33
        ),
        "status.allocation.devices.results: 33 entries, at most 32",
    ),
}


@pytest.mark.parametrize("case", BAD_CLAIMS)
async def test_a_claim_of_the_wrong_shape_fails_alone(
    server: FakeApiServer, kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    spoil, reason = BAD_CLAIMS[case]
    bad, good = api.Claim("ns", "bad", "uid-bad"), api.Claim("ns", "good", "uid-good")
    server.add_claim(claim_obj(good, ("r", NODE, "fuse-fuse0")))
    server.add_claim(claim_obj(bad, ("r", NODE, "fuse-fuse1")))
    spoiled = copy.deepcopy(server.claims["ns", "bad"])
    spoil(spoiled)
    server.claims["ns", "bad"] = spoiled
    with caplog.at_level(logging.WARNING, "cdi_plugin"):
        answer = await kubelet.prepare(bad, good)
    assert answer == {
        **devices(good, "fuse0"),
        "uid-bad": f"claim ns/bad: the API server's answer is not a usable claim: {reason}",
    }
    lines = [TextFormatter().format(r) for r in caplog.records]
    assert any(reason in line for line in lines), lines
    assert all("\n" not in line for line in lines)


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        (faults.html(503), "503 Service Unavailable (text/html, not a Status)"),
        (
            faults.body(200, b"<html>login</html>", "text/html"),
            "200 answer: an HTML page ('<html>login</html>')",
        ),
        (faults.body(200, b"[]"), "200 answer: a JSON array, not an object"),
        (faults.huge(16 << 20), "an answer larger than 4 MiB"),
    ],
    ids=["an HTML 503 page", "an HTML 200 page", "an array", "a huge body"],
)
async def test_a_claim_answered_with_garbage_is_a_per_claim_error_not_a_failed_call(
    server: FakeApiServer, kubelet: FakeKubelet, action: faults.Action, reason: str
) -> None:
    bad, good = api.Claim("ns", "bad", "uid-bad"), api.Claim("ns", "good", "uid-good")
    server.add_claim(claim_obj(bad, ("r", NODE, "fuse-fuse1")))
    server.add_claim(claim_obj(good, ("r", NODE, "fuse-fuse0")))
    server.misbehave("GET", path(bad), action, times=None)
    answer = await kubelet.prepare(bad, good)
    error = answer.pop("uid-bad")
    assert answer == devices(good, "fuse0")
    assert isinstance(error, str)
    assert error.startswith(f"claim ns/bad: cannot read it: GET {path(bad)}: {reason}"), error
    assert error.endswith("(attempt 4)"), error
    assert "\n" not in error
    server.behave()
    assert await kubelet.prepare(bad) == devices(bad, "fuse1")  # the kubelet's next call


async def test_a_hanging_get_is_a_per_claim_error_within_the_deadline(
    tmp_path: Path, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    ref = api.Claim("ns", "c", "uid-1")
    server.add_claim(claim_obj(ref, ("r", NODE, "fuse-fuse0")))
    server.misbehave("GET", path(ref), faults.hang(), times=None)
    kube = connect(tmp_path, server.url, claim_deadline=3.0, claim_attempt_timeout=1.0)
    service = DraService(
        DRIVER, NODE, inventory_of(spec_dir, host_nodes, 1), kube, PreparedClaims(tmp_path / "prepared.json")
    )
    try:
        started = time.monotonic()
        [error] = (await service.prepare([ref])).values()
        assert time.monotonic() - started < 4.5
    finally:
        await kube.close()
    assert isinstance(error, str)
    assert re.fullmatch(
        rf"claim ns/c: cannot read it: GET {path(ref)}: no complete answer within [\d.]+ s "
        r"\(gave up after [23] attempts in 3 s\)",
        error,
    ), error


async def test_the_claim_reads_and_the_wait_for_the_lock_stay_within_the_call_budget(
    tmp_path: Path, server: FakeApiServer, spec_dir: Path, host_nodes: Path
) -> None:
    """A read that takes its whole deadline, then the lock held by another instance of the driver:
    the call ends at its budget, as the kubelet's own deadline would otherwise end it, unanswered."""
    ref = api.Claim("ns", "c", "uid-1")
    server.add_claim(claim_obj(ref, ("r", NODE, "fuse-fuse0")))
    server.misbehave("GET", path(ref), faults.hang(), times=None)
    kube = connect(tmp_path, server.url, claim_deadline=2.0, claim_attempt_timeout=1.0)
    lock = tmp_path / "serialize.lock"
    service = DraService(
        DRIVER,
        NODE,
        inventory_of(spec_dir, host_nodes, 1),
        kube,
        PreparedClaims(tmp_path / "prepared.json"),
        serializer=Serializer(lock),  # waits 30 s for the lock, but for the budget
        call_budget=4.0,
    )
    other = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        started = time.monotonic()
        [error] = (await service.prepare([ref])).values()
        assert time.monotonic() - started < 10
    finally:
        os.close(other)
        await kube.close()
    assert isinstance(error, str)
    assert re.fullmatch(
        rf"claim ns/c: not prepared: {lock}: held by another instance of the driver for more than [\d.]+s",
        error,
    ), error
    waited = float(error.rsplit(" ", 1)[1].rstrip("s"))
    assert 0 < waited < 2.5  # what the reads left of the 4 s
