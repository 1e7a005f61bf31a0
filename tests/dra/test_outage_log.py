"""An API server that fails for a long while costs a few log lines, not one per attempt: the first
failure, a summary every ``log_every`` seconds, and one line when it works again; against the fake
API server over real HTTP, in the time the loop waits (its sleeps recorded, not slept)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from cdi_plugin.dra.kube import SLICES, KubeApi
from cdi_plugin.dra.publisher import SlicePublisher
from cdi_plugin.dra.reflector import SliceCache, SliceWatch
from cdi_plugin.dra.report import PublishResult, Report
from tests.deviceplugin.helpers import eventually
from tests.dra import faults
from tests.dra.fakeapiserver import FakeApiServer
from tests.dra.kubefixtures import Sleeps, inventory_of, kube, lists, ours, publishing, server, sleeps
from tests.dra.test_rest_report import Requests

__all__ = ["kube", "server", "sleeps"]

pytestmark = pytest.mark.asyncio

SINCE = r"since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
STILL = re.compile(rf"still failing to follow the ResourceSlices \((\d+) times {SINCE}, for [\d.]+ (s|min)\)")


async def test_a_long_outage_is_logged_when_it_starts_every_few_minutes_and_when_it_ends(
    kube: KubeApi, server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.misbehave("GET", SLICES, faults.status(503, "ServiceUnavailable", "down"), watch=False, times=None)
    sleeps = Sleeps()
    cache = SliceCache()
    reflector = SliceWatch(
        kube, cache, sleep=sleeps, log_every=60.0, clock=lambda: sum(sleeps), watch_timeout=(1, 1)
    )
    with caplog.at_level(logging.DEBUG, "cdi_plugin"):
        task = asyncio.create_task(reflector.run())
        try:
            await eventually(lambda: lists(server) >= 15, "15 failed lists")
            server.behave()
            # the end: a list, then a watch that lasts as asked
            await eventually(lambda: "recovered after " in caplog.text, "the end of the outage logged")
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    failed = lists(server) - 1
    records = [r for r in caplog.records if r.name == "cdi_plugin.dra.reflector"]
    loud = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert loud[0] == (
        f"failing to follow the ResourceSlices: GET {SLICES}: 503 ServiceUnavailable: down; "
        f"listing them again in {sleeps[0]:.1f} s"
    )
    still = [STILL.fullmatch(m) for m in loud[1:]]
    assert all(still), loud
    # one every 60 s of the time the loop waited (15 attempts: some 4 min), or a little more
    waited = sum(sleeps[: failed - 1])
    assert max(1, int(waited // 120)) <= len(still) <= int(waited // 60)
    counts = [int(m.group(1)) for m in still if m]
    assert counts == sorted(set(counts))
    between = [
        r for r in records if r.levelno == logging.DEBUG and "503 ServiceUnavailable" in r.getMessage()
    ]
    assert len(between) == failed - len(loud)
    [ended] = [r.getMessage() for r in records if r.levelno == logging.INFO]
    after = rf"recovered after [\d.]+ (s|min) \({failed} times {SINCE}\)"
    assert re.fullmatch(rf"{after}: failing to follow the ResourceSlices", ended)


async def test_a_publisher_that_fails_then_works_logs_two_lines(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.misbehave("POST", SLICES, faults.html(502), times=4)
    publisher = SlicePublisher(kube, sleep=Sleeps())
    with caplog.at_level(logging.DEBUG, "cdi_plugin.dra.publisher"):
        async with publishing(publisher, inventory_of(spec_dir, host_nodes, 1)):
            await eventually(lambda: len(ours(server)) == 1, "published after 4 failures")
            await eventually(lambda: any("recovered" in r.getMessage() for r in caplog.records), "the end")
    lines = [
        (r.levelno, r.getMessage()) for r in caplog.records if "publish ResourceSlices" in r.getMessage()
    ]
    assert [level for level, _ in lines] == [
        logging.ERROR,
        logging.DEBUG,
        logging.DEBUG,
        logging.DEBUG,
        logging.INFO,
    ]
    first = f"failing to publish ResourceSlices: POST {SLICES}: 502 Bad Gateway (text/html, not a Status); "
    assert lines[0][1].startswith(first + "trying again in ")
    assert re.fullmatch(
        rf"recovered after [\d.]+ s \(4 times {SINCE}\): failing to publish ResourceSlices", lines[-1][1]
    )


@pytest.mark.parametrize("action", [faults.expired(), faults.html(403)], ids=["410 Expired", "a proxy's 403"])
async def test_a_watch_refused_after_every_list_is_one_condition_not_one_per_cycle(
    kube: KubeApi, server: FakeApiServer, caplog: pytest.LogCaptureFixture, action: faults.Action
) -> None:
    """Each list works and each watch after it fails: the slices are not followed, so the lists
    that work do not end the condition (a recovery then a failure in full at every cycle)."""
    server.misbehave("GET", SLICES, action, watch=True, times=None)
    sleeps = Sleeps()
    # no summary, however many cycles run before the task is cancelled
    reflector = SliceWatch(kube, SliceCache(), sleep=sleeps, log_every=1e9, clock=lambda: sum(sleeps))
    with caplog.at_level(logging.DEBUG, "cdi_plugin"):
        task = asyncio.create_task(reflector.run())
        try:
            await eventually(lambda: lists(server) >= 6, "six lists")
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    records = [r for r in caplog.records if r.name == "cdi_plugin.dra.reflector"]
    assert not [r.getMessage() for r in records if r.levelno == logging.INFO]
    [first] = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert first.startswith(f"failing to follow the ResourceSlices: GET {SLICES} (watch): ")


class Huge(RuntimeError):
    """A fault of the driver's own whose text is a megabyte, with lines of its own."""


def huge_once() -> Callable[..., None]:
    """A callback that raises :class:`Huge` the first time it is called, and does nothing after."""
    raised: list[bool] = []

    def call(*_: object) -> None:
        if not raised:
            raised.append(True)
            raise Huge("x" * (1 << 20) + "\nforged line")

    return call


def assert_cut(message: str, start: str, then: str) -> None:
    assert message.startswith(f"{start}: unexpected Huge: xxx"), message[:200]
    assert len(message) < 600
    assert f"... ({(1 << 20) + 12} characters); {then} in " in message
    assert "forged" not in message


async def test_an_unexpected_fault_of_the_list_and_watch_is_logged_cut(
    kube: KubeApi, server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    sleeps = Sleeps()
    reflector = SliceWatch(kube, SliceCache(on_change=huge_once()), sleep=sleeps)
    with caplog.at_level(logging.WARNING, "cdi_plugin.dra.reflector"):
        task = asyncio.create_task(reflector.run())
        try:
            await eventually(lambda: "unexpected Huge" in caplog.text, "the fault logged")
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    [message] = [r.getMessage() for r in caplog.records if "unexpected" in r.getMessage()]
    assert_cut(message, "failing to follow the ResourceSlices", "watching them again")


async def test_an_unexpected_fault_of_a_publish_is_logged_and_reported_cut(
    kube: KubeApi, server: FakeApiServer, spec_dir: Path, host_nodes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reasons: list[str] = []

    class Seen(Report):
        def published(self, result: PublishResult, why: str = "") -> None:
            reasons.append(why)

    publisher = SlicePublisher(kube, sleep=Sleeps(), on_publish=huge_once(), report=Seen())
    with caplog.at_level(logging.ERROR, "cdi_plugin.dra.publisher"):
        async with publishing(publisher, inventory_of(spec_dir, host_nodes, 1)):
            await eventually(lambda: "unexpected Huge" in caplog.text, "the fault logged")
    [message] = [r.getMessage() for r in caplog.records if "unexpected" in r.getMessage()]
    assert_cut(message, "failing to publish ResourceSlices", "trying again")
    assert max(len(why) for why in reasons) < 600


@pytest.mark.parametrize("watch", [False, True], ids=["the list", "the watch's start"])
async def test_the_end_of_an_outage_is_logged_when_what_failed_works_not_when_the_watch_ends(
    kube: KubeApi, server: FakeApiServer, caplog: pytest.LogCaptureFixture, watch: bool
) -> None:
    """The list (or the watch's start) fails, then works: the outage's end is logged then, while
    the first watch after it is still open (it lasts 45 s or more)."""
    server.misbehave("GET", SLICES, faults.status(503, "ServiceUnavailable", "down"), watch=watch, times=3)
    kube.rest.report = requests = Requests()
    reflector = SliceWatch(kube, SliceCache(), sleep=Sleeps(), watch_timeout=(45, 55))
    with caplog.at_level(logging.INFO, "cdi_plugin.dra.reflector"):
        task = asyncio.create_task(reflector.run())
        try:
            await eventually(lambda: "recovered after " in caplog.text, "the end of the outage logged")
            ended = [result for verb, result in requests if verb == "watch"]
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    failed = 3 if watch else 0
    assert ended == ["5xx"] * failed  # the watch after the outage not ended yet
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    after = rf"recovered after [\d.]+ s \(3 times {SINCE}\)"
    assert re.fullmatch(rf"{after}: failing to follow the ResourceSlices", line)
