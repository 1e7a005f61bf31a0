"""The DevicePlugin servicer called in-process, with a fake context: no sockets, no server.

The socket tests (test_plugin.py, test_registration.py) cover the wire; these call each handler
directly, as the kubelet's requests would arrive, over a real inventory of spec files in a
temporary directory.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NoReturn

import grpc
import pytest

from cdi_plugin.deviceplugin import api
from cdi_plugin.deviceplugin.allocate import annotation_key
from cdi_plugin.deviceplugin.servicer import OPTIONS, DevicePluginService
from cdi_plugin.deviceplugin.state import DeviceState
from cdi_plugin.inventory import NumaLocator, SpecSource
from tests.deviceplugin.helpers import Layout, make_node, spec_of, write_spec

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

KIND = "cdi-plugin.io/test"
EMPTY = api.Empty()


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code, self.details = code, details


class FakeContext:
    """What the handlers use of grpc.aio's ServicerContext: abort raises, as it does there."""

    def __init__(self) -> None:
        self.aborted: list[tuple[grpc.StatusCode, str]] = []

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> NoReturn:
        self.aborted.append((code, details))
        raise Aborted(code, details)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout.under(tmp_path)


def _state(layout: Layout, **overrides: Any) -> DeviceState:
    settings = layout.settings(**overrides)
    state = DeviceState(settings, SpecSource(settings.spec_dirs), NumaLocator(layout.sysfs))
    state.sync()
    return state


def _service(state: DeviceState, strategy: Any = "both") -> DevicePluginService:
    return DevicePluginService(KIND, state, strategy)


def _allocate(*containers: list[str]) -> api.AllocateRequest:
    return api.AllocateRequest(
        container_requests=[api.ContainerAllocateRequest(devices_ids=c) for c in containers]
    )


def _listed(response: bytes) -> dict[str, str]:
    return {d.ID: d.health for d in api.ListAndWatchResponse.FromString(response).devices}


async def test_options_and_prestart(layout: Layout) -> None:
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "a")]}))
    service = _service(_state(layout))
    assert await service.GetDevicePluginOptions(EMPTY, FakeContext()) == OPTIONS
    assert OPTIONS.get_preferred_allocation_available
    assert not OPTIONS.pre_start_required
    started = await service.PreStartContainer(api.PreStartContainerRequest(devices_ids=["a"]), FakeContext())
    assert started == api.PreStartContainerResponse()


async def test_allocate_answers_with_cdi_names_only(layout: Layout) -> None:
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    write_spec(layout.etc, spec_of(KIND, {"a": [a], "b": [b]}))
    context = FakeContext()
    answer = await _service(_state(layout, replicas=2)).Allocate(_allocate(["a#0", "a#1"], ["b#1"]), context)
    first, second = answer.container_responses
    assert [d.name for d in first.cdi_devices] == [f"{KIND}=a"]
    assert dict(first.annotations) == {annotation_key(KIND, ["a#0", "a#1"]): f"{KIND}=a"}
    assert [d.name for d in second.cdi_devices] == [f"{KIND}=b"]
    assert (len(first.devices), len(first.mounts), len(first.envs)) == (0, 0, 0)
    assert context.aborted == []
    cri = await _service(_state(layout, replicas=2), "cri").Allocate(_allocate(["b#0"]), context)
    assert dict(cri.container_responses[0].annotations) == {}


async def test_allocate_refuses_unknown_unhealthy_and_vanished_devices(layout: Layout) -> None:
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    spec = write_spec(layout.etc, spec_of(KIND, {"a": [a], "b": [b]}))
    state = _state(layout)
    service = _service(state)
    cases = [
        (["zz"], grpc.StatusCode.INVALID_ARGUMENT, f"unknown device ID 'zz' for {KIND}"),
        ([], grpc.StatusCode.INVALID_ARGUMENT, f"a container request for {KIND} names no device IDs"),
    ]
    for ids, code, message in cases:
        with pytest.raises(Aborted) as info:
            await service.Allocate(_allocate(ids), FakeContext())
        assert (info.value.code, info.value.details) == (code, message)

    b.unlink()  # gone, and no health watch told the state: Allocate stats it itself
    with pytest.raises(Aborted) as info:
        await service.Allocate(_allocate(["a", "b"]), FakeContext())
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.details == f"device 'b' ({KIND}=b) is Unhealthy: host device node {b} is missing"
    assert state.status(KIND, "b").healthy is False  # the state learnt it too

    spec.unlink()  # the spec goes, no watch told the state: its directory's stat moved, Allocate waits
    # for a reading of the directories (in a worker thread)
    with pytest.raises(Aborted) as info:
        await service.Allocate(_allocate(["a"]), FakeContext())
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.details == f"device 'a' of {KIND} is Unhealthy: its CDI spec entry is gone"


async def test_allocate_names_both_files_of_a_device_defined_twice(layout: Layout) -> None:
    a = make_node(layout.dev / "a")
    first = write_spec(layout.etc, spec_of(KIND, {"a": [a]}))
    state = _state(layout)
    # a second file of the same directory defines it too: a runtime resolves neither
    second = write_spec(layout.etc, spec_of(KIND, {"a": [a]}), name="zz-copy.json", owned=False)
    with pytest.raises(Aborted) as info:
        await _service(state).Allocate(_allocate(["a"]), FakeContext())
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.details == (
        f"device 'a' of {KIND} is Unhealthy: defined in both {first} and {second} at the same "
        "priority, so no runtime resolves it"
    )
    assert state.inventory.problem(f"{KIND}=a") == (
        f"is defined in both {first} and {second} at the same priority, so no runtime resolves it"
    )


async def test_preferred_allocation_spreads_over_physical_devices(layout: Layout) -> None:
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    write_spec(layout.etc, spec_of(KIND, {"a": [a], "b": [b]}))
    request = api.PreferredAllocationRequest(
        container_requests=[
            api.ContainerPreferredAllocationRequest(
                available_deviceIDs=["a#0", "a#1", "b#0", "b#1"],
                must_include_deviceIDs=["a#1"],
                allocation_size=2,
            )
        ]
    )
    answer = await _service(_state(layout, replicas=2)).GetPreferredAllocation(request, FakeContext())
    assert [list(c.deviceIDs) for c in answer.container_responses] == [["a#1", "b#0"]]


async def _next(stream: AsyncIterator[bytes]) -> dict[str, str]:
    return _listed(await asyncio.wait_for(anext(stream), 60))


async def test_list_and_watch_follows_the_state_then_ends_with_its_endpoint(layout: Layout) -> None:
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    spec = write_spec(layout.etc, spec_of(KIND, {"a": [a], "b": [b]}))
    state = _state(layout, grace_period=0.0)
    service = _service(state)
    stream = service.ListAndWatch(EMPTY, FakeContext())
    assert await _next(stream) == {"a": api.HEALTHY, "b": api.HEALTHY}
    b.unlink()
    state.recheck_health()
    assert await _next(stream) == {"a": api.HEALTHY, "b": api.UNHEALTHY}
    spec.unlink()
    state.sync()  # the resource is gone: one empty list, then open until the endpoint stops
    assert await _next(stream) == {}
    waiting = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)
    assert not waiting.done()
    service.shutdown()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, 60)


async def test_list_and_watch_ends_when_the_servicer_shuts_down(layout: Layout) -> None:
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "a")]}))
    service = _service(_state(layout))
    stream = service.ListAndWatch(EMPTY, FakeContext())
    assert await _next(stream) == {"a": api.HEALTHY}
    waiting = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)
    assert not waiting.done()
    service.shutdown()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, 60)


class _OneDevice:
    """A resource of one device, and a ListAndWatch stream of it."""

    def __init__(self, layout: Layout) -> None:
        self.layout, self.node = layout, make_node(layout.dev / "a")
        self.spec = write_spec(layout.etc, spec_of(KIND, {"a": [self.node]}))
        self.state = _state(layout, grace_period=0.0)
        self.stream = _service(self.state).ListAndWatch(EMPTY, FakeContext())

    def gone(self) -> None:
        self.spec.unlink()
        self.state.sync()

    def back(self) -> None:
        write_spec(self.layout.etc, spec_of(KIND, {"a": [self.node]}))
        self.state.sync()


async def test_list_and_watch_follows_a_resource_back_before_its_endpoint_stopped(layout: Layout) -> None:
    # The kubelet opens ListAndWatch once per registration: a stream that ended while the
    # endpoint stays registered would leave the resource without devices until the next one.
    one = _OneDevice(layout)
    assert await _next(one.stream) == {"a": api.HEALTHY}
    one.gone()
    one.back()  # before anything stopped the endpoint
    assert await _next(one.stream) == {}
    assert await _next(one.stream) == {"a": api.HEALTHY}


async def test_list_and_watch_looking_while_the_resource_is_gone_follows_it_back(layout: Layout) -> None:
    # The stream looks for the resource while it is gone (the daemon, busy stopping another
    # endpoint, has not stopped this one yet): it waits for it instead of ending.
    one = _OneDevice(layout)
    assert await _next(one.stream) == {"a": api.HEALTHY}
    one.gone()
    assert await _next(one.stream) == {}
    following = asyncio.ensure_future(anext(one.stream))
    await asyncio.sleep(0)  # the stream finds no resource, and waits
    assert not following.done()
    one.back()
    assert _listed(await asyncio.wait_for(following, 60)) == {"a": api.HEALTHY}


async def test_allocate_refuses_more_ids_than_the_resource_has_before_any_work(layout: Layout) -> None:
    # The kubelet names each allocated ID once; a request naming one device a million times
    # (4 MiB) held the event loop for seconds, a lookup and a check per ID.
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "a")]}))
    state = _state(layout)
    checked: list[str] = []
    problem = state.problem
    state.problem = lambda name: checked.append(name) or problem(name)  # type: ignore[method-assign]
    service, context = _service(state), FakeContext()
    with pytest.raises(Aborted) as refused:
        await service.Allocate(_allocate(["a"] * 600, ["a"] * 600), context)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details == (
        f"Allocate for {KIND} names 1200 device IDs, more than the 1024 the plugin takes (it advertises 1 ID)"
    )
    assert checked == []
    answer = await service.Allocate(_allocate(["a"] * 1024), context)  # duplicates, within the bound
    assert [[d.name for d in c.cdi_devices] for c in answer.container_responses] == [[f"{KIND}=a"]]


async def test_more_container_requests_than_the_bound_are_refused_before_any_work(layout: Layout) -> None:
    # The kubelet sends one container request a call; 600,000 empty ones (2.4 MB) kept the
    # preferred-allocation thread, which the kubelet's own calls wait for, busy for seconds.
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "a")]}))
    service = _service(_state(layout))
    many = api.PreferredAllocationRequest(
        container_requests=[api.ContainerPreferredAllocationRequest(allocation_size=1)] * 1025
    )
    allocation = api.AllocateRequest(container_requests=[api.ContainerAllocateRequest()] * 1025)
    for call, request in (("GetPreferredAllocation", many), ("Allocate", allocation)):
        with pytest.raises(Aborted) as refused:
            await getattr(service, call)(request, FakeContext())
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details == (
            f"{call} for {KIND} names 1025 container requests, more than the 1024 the plugin takes "
            "(it advertises 1 ID)"
        )
    del many.container_requests[1024]
    answer = await service.GetPreferredAllocation(many, FakeContext())
    assert len(answer.container_responses) == 1024
