"""Every request to the API server is counted once, by verb and by one of a few results, whatever
the fake API server answers over real HTTP: the labels the metrics show."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import get_args

import pytest

from cdi_plugin.dra.kube import SLICES, KubeApi
from cdi_plugin.dra.report import ApiResult, PrepareResult, PublishResult, UnprepareResult
from cdi_plugin.dra.rest import ApiServerError
from cdi_plugin.dra.slices import build_pool
from tests.dra import faults
from tests.dra.conftest import DRIVER, NODE
from tests.dra.fakeapiserver import CLAIMS, NODES, FakeApiServer
from tests.dra.kubefixtures import connect, kube, server, sleeps
from tests.dra.serving import free_port
from tests.dra.test_kube import BAD_ANSWERS, BAD_WATCHES

__all__ = ["kube", "server", "sleeps"]

pytestmark = pytest.mark.asyncio

CLAIM_PATH = f"{CLAIMS}ns/resourceclaims/c"

ANSWER_RESULTS = {
    "an HTML 503 page": "5xx",
    "a body without end": "timeout",
    "no answer at all": "timeout",
    "a 500 that is not a Status": "5xx",
    "a chunk header of 15000 bytes": "connection-error",
    "a reason phrase and a content type of 15000 bytes": "5xx",
}
WATCH_RESULTS = {
    "410 Expired": "410",
    "a watch answered 500": "5xx",
    "an HTML 502 page": "5xx",
    "a silent connection": "timeout",
    "a stream without end": "timeout",
    "a bookmark of a version 5000 characters long": "ok",  # an answer whose content is refused
}


class Requests(list[tuple[str, str]]):
    """What the client reports: (verb, result) of each request (the rest of Report is not used)."""

    def api_request(self, verb: str, result: str) -> None:
        self.append((verb, result))

    def serving(self, yes: bool) -> None:
        raise AssertionError("not the client's")

    def prepare(self, results: Iterable[PrepareResult], seconds: float) -> None:
        raise AssertionError("not the client's")

    def unprepare(self, results: Iterable[UnprepareResult], seconds: float) -> None:
        raise AssertionError("not the client's")

    def claims_prepared(self, count: int) -> None:
        raise AssertionError("not the client's")

    def registered(self, yes: bool, why: str = "") -> None:
        raise AssertionError("not the client's")

    def published(self, result: PublishResult, why: str = "") -> None:
        raise AssertionError("not the client's")


def _reported(kube: KubeApi) -> Requests:
    kube.rest.report = requests = Requests()
    return requests


@pytest.mark.parametrize("answer", BAD_ANSWERS)
async def test_a_bad_answer_is_counted_as_a_status_class_a_timeout_or_not_an_answer(
    kube: KubeApi, server: FakeApiServer, answer: str
) -> None:
    requests = _reported(kube)
    server.misbehave("GET", NODES, BAD_ANSWERS[answer][0])
    with pytest.raises(ApiServerError):
        await kube.rest.request("GET", f"{NODES}{NODE}", timeout=1.0)
    await kube.read_node_uid()
    assert requests == [("get", ANSWER_RESULTS.get(answer, "bad-answer")), ("get", "ok")]


@pytest.mark.parametrize(
    "stream", [s for s in BAD_WATCHES if s != "a slice without metadata.resourceVersion"]
)  # that one is an answer of the API whose content the driver refuses: see the next test
async def test_a_bad_watch_is_counted_once_when_it_ends(
    kube: KubeApi, server: FakeApiServer, stream: str
) -> None:
    requests = _reported(kube)
    server.misbehave("GET", SLICES, BAD_WATCHES[stream][0], watch=True)
    events = kube.watch_slices(str(server.revision), timeout=1, read_timeout=1.0)
    with pytest.raises(ApiServerError):
        async for _ in events:
            pass
    assert requests == [("watch", WATCH_RESULTS.get(stream, "bad-answer"))]


async def test_an_answer_whose_content_the_driver_refuses_is_a_request_that_succeeded(
    kube: KubeApi, server: FakeApiServer
) -> None:
    requests = _reported(kube)
    server.misbehave("GET", NODES, faults.body(200, b'{"metadata": {"uid": 5}}'))
    with pytest.raises(ApiServerError, match=r"metadata\.uid: 5 is not a string"):
        await kube.read_node_uid()
    assert requests == [("get", "ok")]


async def test_a_stream_cut_in_the_middle_of_an_event_is_not_an_answer(
    kube: KubeApi, server: FakeApiServer
) -> None:
    requests = _reported(kube)
    server.misbehave("GET", SLICES, faults.stream(b'{"type": "ADDED", "obj'), watch=True)
    with pytest.raises(ApiServerError, match="in the middle of an event"):
        async for _ in kube.watch_slices(str(server.revision), timeout=1, read_timeout=1.0):
            pass
    assert requests == [("watch", "bad-answer")]


@pytest.mark.parametrize(
    ("code", "result"),
    [(400, "400"), (401, "401"), (403, "403"), (409, "409"), (410, "410"), (422, "422"), (429, "429"),
     (405, "4xx"), (418, "4xx"), (500, "5xx"), (503, "5xx")],
)  # fmt: skip
async def test_a_status_is_counted_by_its_code_or_its_class(
    kube: KubeApi, server: FakeApiServer, code: int, result: str
) -> None:
    requests = _reported(kube)
    server.fail("GET", NODES, code)
    with pytest.raises(ApiServerError):
        await kube.rest.request("GET", f"{NODES}{NODE}")
    assert requests == [("get", result)]
    assert result in get_args(ApiResult)


async def test_each_verb_is_counted_and_a_missing_claim_is_a_404(
    kube: KubeApi, server: FakeApiServer
) -> None:
    requests = _reported(kube)
    await kube.read_node_uid()
    assert await kube.read_claim("ns", "c") is None
    items, version = await kube.list_slices()
    stored = await kube.create_slice(build_pool(DRIVER, NODE, {}, taints=True).slices(0)[0])
    stored = await kube.replace_slice(stored)
    await kube.delete_slice(stored)
    assert [kind async for kind, _ in kube.watch_slices(version, timeout=1, read_timeout=2.0)] == [
        "ADDED", "MODIFIED", "DELETED", "BOOKMARK",
    ]  # fmt: skip
    assert requests == [
        ("get", "ok"), ("get", "404"), ("list", "ok"), ("create", "ok"), ("update", "ok"), ("delete", "ok"),
        ("watch", "ok"),
    ]  # fmt: skip
    assert (items, [c.path for c in server.calls if c.path == CLAIM_PATH]) == ([], [CLAIM_PATH])


async def test_a_watch_left_early_is_counted_as_it_ends(kube: KubeApi, server: FakeApiServer) -> None:
    requests = _reported(kube)
    events = kube.watch_slices(str(server.revision), timeout=30, read_timeout=60.0)
    server.put_slice(build_pool(DRIVER, NODE, {}, taints=True).slices(0)[0])
    async with contextlib.aclosing(events):
        assert (await anext(events))[0] == "ADDED"
        assert requests == []  # still open
    assert requests == [("watch", "ok")]


async def test_an_api_server_that_cannot_be_reached_is_a_connection_error(tmp_path: Path) -> None:
    kube = connect(tmp_path, f"http://127.0.0.1:{free_port()}")
    try:
        requests = _reported(kube)
        with pytest.raises(ApiServerError):
            await kube.rest.request("GET", f"{NODES}{NODE}")
        with pytest.raises(ApiServerError):
            await anext(kube.watch_slices("1", timeout=1, read_timeout=1.0))
        assert requests == [("get", "connection-error"), ("watch", "connection-error")]
    finally:
        await kube.close()
