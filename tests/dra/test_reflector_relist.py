"""When the list and watch of the node's slices lists again, and when it only watches again,
against the fake API server over real HTTP: a proxy's refusal of a watch, and a version newer
than the server has seen."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from cdi_plugin.dra.kube import SLICES, KubeApi
from tests.deviceplugin.helpers import eventually
from tests.dra import faults
from tests.dra.fakeapiserver import FakeApiServer
from tests.dra.kubefixtures import Sleeps, kube, lists, reflecting, server, sleeps, watches

__all__ = ["kube", "server", "sleeps"]

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize("code", [400, 401, 403, 404])
async def test_a_proxys_page_refusing_the_watch_lists_again(
    kube: KubeApi, server: FakeApiServer, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    """An HTML page of a 4xx status in answer to a watch (a proxy in front of the API server) is a
    refusal as a Status is: the slices are listed again, not watched again from the same version
    for ever."""
    server.misbehave("GET", SLICES, faults.html(code), watch=True, times=2)
    sleeps = Sleeps()
    with caplog.at_level(logging.DEBUG, "cdi_plugin"):  # the second failure in a row: at debug level
        async with reflecting(kube, sleeps) as cache:
            await eventually_watching(server, lists=3, watches=3)
            assert cache.synced.is_set()
    assert len(sleeps) == 2  # each list again after the loop's backoff
    assert f"GET {SLICES} (watch): {code} " in caplog.text
    assert caplog.text.count("(text/html, not a Status); listing them again in ") == 2


@pytest.mark.parametrize("code", [408, 429])
async def test_a_proxys_page_asking_to_wait_watches_again_from_the_same_version(
    kube: KubeApi, server: FakeApiServer, code: int
) -> None:
    server.misbehave("GET", SLICES, faults.html(code), watch=True, times=2)
    async with reflecting(kube, Sleeps()):
        await eventually_watching(server, lists=1, watches=3)
    assert len(set(watches(server))) == 1
    assert lists(server) == 1


def too_large(**details: Any) -> dict[str, Any]:
    """A Status as kube-apiserver sends it for a version newer than its cache has seen."""
    status = faults.status_body(504, "Timeout", "Timeout: Too large resource version: 205, current: 100")
    return {**status, "details": details}


TOO_LARGE = too_large(
    causes=[{"type": "ResourceVersionTooLarge", "message": "Too large resource version"}], retryAfterSeconds=1
)

#: Servers 1.17.0 to 1.18.5: the cause's message, no type.
MESSAGE_ALONE = "Too large resource version"


@pytest.mark.parametrize(
    "action",
    [
        faults.watch_lines({"type": "ERROR", "object": TOO_LARGE}),
        faults.body(504, json.dumps(TOO_LARGE).encode()),
        faults.watch_lines({"type": "ERROR", "object": too_large(causes=[{"message": MESSAGE_ALONE}])}),
    ],
    ids=["an ERROR event", "the answer to the watch", "the message alone"],
)
async def test_a_version_too_large_for_the_server_lists_again(
    kube: KubeApi, server: FakeApiServer, caplog: pytest.LogCaptureFixture, action: faults.Action
) -> None:
    """A server behind the one that gave the version (client-go lists again, without the version)."""
    server.misbehave("GET", SLICES, action, watch=True)
    with caplog.at_level(logging.WARNING):
        async with reflecting(kube, Sleeps()):
            await eventually_watching(server, lists=2, watches=2)
    assert "504 Timeout: Timeout: Too large resource version: 205, current: 100; listing them again in " in (
        caplog.text
    )


async def test_a_timeout_of_another_cause_watches_again(kube: KubeApi, server: FakeApiServer) -> None:
    other = too_large(causes=[{"type": "Other"}, "garbage", 5])
    other["message"] = "Timeout: the request took too long"
    server.misbehave("GET", SLICES, faults.watch_lines({"type": "ERROR", "object": other}), watch=True)
    async with reflecting(kube, Sleeps()):
        await eventually_watching(server, lists=1, watches=2)
    assert lists(server) == 1


async def eventually_watching(server: FakeApiServer, *, lists: int, watches: int) -> None:
    """Wait for ``lists`` lists and ``watches`` watches of the slices."""

    def done() -> bool:
        listed = server.count("GET", SLICES, watch=False)
        watched = server.count("GET", SLICES, watch=True)
        return listed >= lists and watched >= watches

    await eventually(done, f"{lists} lists and {watches} watches of the slices")
