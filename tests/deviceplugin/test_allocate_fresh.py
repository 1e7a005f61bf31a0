"""Allocate answers from the inventory: no listing or parsing of the spec directories per call, the
directories read off the event loop, and a change still pending (an inotify event not yet applied)
waited for rather than missed."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest

from cdi_plugin.aio.dirwatch import FILES, DirWatch
from cdi_plugin.aio.pulse import Pulse
from cdi_plugin.cdi import codec
from cdi_plugin.deviceplugin import api
from cdi_plugin.deviceplugin.servicer import DevicePluginService
from cdi_plugin.deviceplugin.state import DeviceState
from cdi_plugin.inventory import NumaLocator, SpecSource, spec_inventory
from cdi_plugin.inventory.health import check
from tests.deviceplugin.helpers import Layout, make_node, spec_of, write_spec
from tests.deviceplugin.test_servicer import Aborted, FakeContext

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

KIND = "cdi-plugin.io/test"


def _request(*ids: str) -> api.AllocateRequest:
    return api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devices_ids=list(ids))])


def _state(layout: Layout, **overrides: Any) -> DeviceState:
    settings = layout.settings(**overrides)
    state = DeviceState(settings, SpecSource(settings.spec_dirs), NumaLocator(layout.sysfs))
    state.sync()
    return state


class Readings:
    """Counts directory listings and records the threads the spec directories are read on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, source: SpecSource) -> None:
        self.listings = 0
        self.threads: list[threading.Thread] = []
        scandir, listdir, current = os.scandir, os.listdir, source.current

        def counted_scandir(path: Any = ".") -> Any:
            self.listings += 1
            return scandir(path)

        def counted_listdir(path: Any = ".") -> list[str]:
            self.listings += 1
            return listdir(path)

        def recorded_current() -> Any:
            self.threads.append(threading.current_thread())
            return current()

        monkeypatch.setattr(os, "scandir", counted_scandir)
        monkeypatch.setattr(os, "listdir", counted_listdir)
        monkeypatch.setattr(source, "current", recorded_current)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout.under(tmp_path)


async def test_allocate_lists_nothing_while_nothing_changed(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = {f"d{i}": [make_node(layout.dev / f"d{i}")] for i in range(50)}
    write_spec(layout.etc, spec_of(KIND, nodes))
    state = _state(layout)
    service = DevicePluginService(KIND, state, "both")
    readings = Readings(monkeypatch, state.source)
    for i in range(20):
        answer = await service.Allocate(_request(f"d{i}"), FakeContext())
        assert [d.name for d in answer.container_responses[0].cdi_devices] == [f"{KIND}=d{i}"]
    assert (readings.listings, readings.threads) == (0, [])


async def test_a_change_is_read_in_a_worker_thread_once_for_concurrent_calls(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    write_spec(layout.etc, spec_of(KIND, {"a": [a]}))
    state = _state(layout)
    service = DevicePluginService(KIND, state, "both")
    readings = Readings(monkeypatch, state.source)
    write_spec(layout.etc, spec_of(KIND, {"a": [a], "b": [b]}))  # renamed into place: no watch here
    answers = await asyncio.gather(*(service.Allocate(_request("b"), FakeContext()) for _ in range(5)))
    assert {a.container_responses[0].cdi_devices[0].name for a in answers} == {f"{KIND}=b"}
    assert len(readings.threads) == 1
    assert readings.threads[0] is not threading.current_thread()


async def test_allocate_waits_for_a_pending_inotify_event(layout: Layout) -> None:
    """A file rewritten in place leaves its directory's stat alone: only the watch tells."""
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    spec = write_spec(layout.etc, spec_of(KIND, {"a": [a]}), owned=False)
    state = _state(layout, kinds=(KIND,))
    service = DevicePluginService(KIND, state, "both")
    async with DirWatch(state.source.dirs, name="spec dirs", events=FILES) as watch:
        state.inventory.watch_with(watch)
        await state.settled()
        assert not state.inventory.pending()

        with spec.open("wb") as out:  # in place: no rename, the directory does not change
            out.write(codec.encode(spec_of(KIND, {"a": [a], "b": [b]}), "json"))
        assert not state.source.moved()
        answer = await service.Allocate(_request("b"), FakeContext())
        assert [d.name for d in answer.container_responses[0].cdi_devices] == [f"{KIND}=b"]

        with spec.open("wb") as out:
            out.write(codec.encode(spec_of(KIND, {"b": [b]}), "json"))
        with pytest.raises(Aborted) as info:
            await service.Allocate(_request("a"), FakeContext())
        assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert info.value.details == f"device 'a' of {KIND} is Unhealthy: its CDI spec entry is gone"


class QuietWatch:
    """A directory watch that reports only what a test tells it (no inotify)."""

    def __init__(self) -> None:
        self.pulse = Pulse()

    def unread(self) -> bool:
        return False


async def test_one_device_is_answered_from_a_prebuilt_response_until_the_resource_changes(
    layout: Layout,
) -> None:
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    write_spec(layout.etc, spec_of(KIND, {"a": [a], "b": [b]}))
    state = _state(layout)
    service = DevicePluginService(KIND, state, "both")
    first = await service.Allocate(_request("a"), FakeContext())
    assert await service.Allocate(_request("a"), FakeContext()) is first
    assert await service.Allocate(_request("a", "b"), FakeContext()) is not first
    assert [d.name for d in first.container_responses[0].cdi_devices] == [f"{KIND}=a"]

    b.unlink()
    state.recheck_health()  # the resource changed: every prebuilt answer is dropped
    again = await service.Allocate(_request("a"), FakeContext())
    assert again is not first
    assert again == first
    with pytest.raises(Aborted) as info:
        await service.Allocate(_request("b"), FakeContext())
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION


async def test_allocate_does_no_io_while_the_watches_have_nothing_pending(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = make_node(layout.dev / "a")
    write_spec(layout.etc, spec_of(KIND, {"a": [a]}))
    state = _state(layout)
    service = DevicePluginService(KIND, state, "both")
    nodes = QuietWatch()
    state.inventory.watch_with(QuietWatch())
    state.inventory.watch_nodes_with(nodes)
    state.recheck_health()  # what the daemon does after the node watch's events
    stats: list[str] = []
    real_stat = os.stat

    def counted_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        stats.append(str(path))
        return real_stat(path, *args, **kwargs)

    def counted_check(nodes: Any) -> Any:
        stats.extend(n.path for n in nodes)
        return check(nodes)

    monkeypatch.setattr(os, "stat", counted_stat)
    monkeypatch.setattr(spec_inventory, "check", counted_check)
    for _ in range(3):
        await service.Allocate(_request("a"), FakeContext())
    assert stats == []

    a.unlink()
    nodes.pulse.fire()  # an event not handled yet: Allocate stats the node itself
    with pytest.raises(Aborted) as info:
        await service.Allocate(_request("a"), FakeContext())
    assert info.value.details == f"device 'a' of {KIND} is Unhealthy: host device node {a} is missing"
    assert str(a) in stats
