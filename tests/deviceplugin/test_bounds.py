"""What a client can make the plugin hold or compute, over real gRPC on real unix sockets: the
ListAndWatch streams open at once, and the IDs one GetPreferredAllocation names."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from typing import Any

import grpc
import pytest

from cdi_plugin.deviceplugin import api
from cdi_plugin.deviceplugin.servicer import MAX_STREAMS, MIN_OFFERED
from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import Layout, make_node, run, running_plugin, spec_of, write_spec

KIND = "cdi-plugin.io/test"

pytestmark = pytest.mark.timeout(180)


class Stream:
    """One ListAndWatch stream, read in the background: the lists it got, and how it ended."""

    def __init__(self, stub: Any) -> None:
        self.call = stub.ListAndWatch(api.Empty())
        self.lists: list[set[str]] = []
        self.changed = asyncio.Condition()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for response in self.call:
            async with self.changed:
                self.lists.append({d.ID for d in response.devices})
                self.changed.notify_all()

    async def listed(self, ids: set[str]) -> None:
        async with self.changed:
            await asyncio.wait_for(
                self.changed.wait_for(lambda: bool(self.lists) and self.lists[-1] == ids), 60
            )

    async def ended(self) -> grpc.aio.AioRpcError:
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await asyncio.wait_for(self.task, 60)
        return ended.value

    async def close(self) -> None:
        self.call.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await self.task


def test_a_stream_beyond_the_bound_is_refused_and_the_kubelets_stays_served(layout: Layout) -> None:
    # The kubelet takes its stream's end as the plugin gone, and opens none again until the
    # plugin registers anew: the open streams are kept, and one more is refused.
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "a")]}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings()):
            ours = await kubelet.wait_registered(KIND)  # the kubelet's stream
            await ours.wait_until(lambda d: set(d) == {"a"})
            others = [Stream(ours.stub) for _ in range(MAX_STREAMS - 1)]
            try:
                for stream in others:
                    await stream.listed({"a"})
                for _ in range(2 * MAX_STREAMS):  # a client opening streams in a loop
                    refused = await Stream(ours.stub).ended()
                    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    assert refused.details() == (
                        f"ListAndWatch of {KIND} refused: {MAX_STREAMS} streams are open, "
                        "the most served at once (the kubelet keeps one)"
                    )
                write_spec(
                    layout.etc, spec_of(KIND, {"a": [layout.dev / "a"], "b": [make_node(layout.dev / "b")]})
                )
                await ours.wait_until(lambda d: set(d) == {"a", "b"})
                assert not ours.stream_ended
                for stream in others:
                    await stream.listed({"a", "b"})
                await others.pop().close()  # a stream closed frees its place
                deadline = asyncio.get_running_loop().time() + 60
                while True:
                    again = Stream(ours.stub)
                    others.append(again)
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(asyncio.shield(again.listed({"a", "b"})), 5)
                        break
                    assert asyncio.get_running_loop().time() < deadline, (
                        "a closed stream's place is never freed"
                    )
                    await others.pop().close()
            finally:
                for stream in others:
                    await stream.close()

    run(scenario())


def test_the_places_of_a_client_whose_connection_drops_are_freed(layout: Layout) -> None:
    # A restarted kubelet's old streams end with its connection, not by a call of its own: their
    # places must be freed, or the new kubelet's stream would be refused for ever.
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "a")]}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings()):
            ours = await kubelet.wait_registered(KIND)
            await ours.wait_until(lambda d: set(d) == {"a"})
            gone = grpc.aio.insecure_channel(f"unix://{ours.endpoint}")
            dropped = [Stream(api.DevicePluginStub(gone)) for _ in range(MAX_STREAMS - 1)]
            for stream in dropped:
                await stream.listed({"a"})
            refused = await Stream(ours.stub).ended()
            assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            await gone.close()  # the connection closes under the open streams
            for stream in dropped:
                await stream.close()
            served: list[Stream] = []
            deadline = asyncio.get_running_loop().time() + 60
            try:
                while len(served) < MAX_STREAMS - 1:
                    stream = Stream(ours.stub)
                    listed = asyncio.ensure_future(stream.listed({"a"}))
                    await asyncio.wait((listed, stream.task), return_when=asyncio.FIRST_COMPLETED)
                    if listed.done():
                        served.append(stream)
                        continue
                    listed.cancel()
                    assert (await stream.ended()).code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    if asyncio.get_running_loop().time() > deadline:
                        pytest.fail("the dropped streams' places are never freed")
                    await asyncio.sleep(0.05)
            finally:
                for stream in served:
                    await stream.close()

    run(scenario())


def test_preferred_allocation_refuses_more_ids_than_the_resource_has(layout: Layout) -> None:
    write_spec(layout.etc, spec_of(KIND, {f"d{i}": [make_node(layout.dev / f"d{i}")] for i in range(3)}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings(replicas=2)):
            client = await kubelet.wait_registered(KIND)
            advertised = await client.wait_until(lambda d: len(d) == 6)
            # what the kubelet offers, with IDs it has not seen go yet, is answered
            offered = [*advertised, *(f"gone{i}" for i in range(MIN_OFFERED - 6))]
            assert len(await client.preferred(offered, [], 2)) == 2
            for available, must_include in (
                ([*advertised, *(f"x{i}" for i in range(300_000))], []),
                (list(advertised), [f"x{i}" for i in range(MIN_OFFERED + 1)]),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await client.preferred(available, must_include, 1)
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                named = "available" if len(available) > MIN_OFFERED else "must-include"
                count = max(len(available), len(must_include))
                assert refused.value.details() == (
                    f"GetPreferredAllocation for {KIND} names {count} {named} device IDs, more than "
                    f"the {MIN_OFFERED} the plugin takes (it advertises 6 IDs)"
                )
            assert await client.preferred(list(advertised), [], 1) == ["d0#0"]  # still served

    run(scenario())


def test_preferred_allocation_is_answered_while_the_shared_threads_are_all_busy(layout: Layout) -> None:
    """The kubelet waits for GetPreferredAllocation without a deadline, while admitting a pod:
    its thread is not one of those the process's other blocking work (a read stuck on a device)
    may hold, nor does a flood of calls take those."""
    write_spec(layout.etc, spec_of(KIND, {f"d{i}": [make_node(layout.dev / f"d{i}")] for i in range(3)}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet, running_plugin(layout.settings()):
            client = await kubelet.wait_registered(KIND)
            advertised = await client.wait_until(lambda d: len(d) == 3)
            loop = asyncio.get_running_loop()
            release = threading.Event()
            started: asyncio.Queue[None] = asyncio.Queue()

            def stuck() -> None:
                loop.call_soon_threadsafe(started.put_nowait, None)
                release.wait()

            workers = min(32, (os.cpu_count() or 1) + 4)  # the default executor's
            held = [loop.run_in_executor(None, stuck) for _ in range(workers)]
            try:
                for _ in range(workers):
                    await asyncio.wait_for(started.get(), 60)
                answers = await asyncio.wait_for(
                    asyncio.gather(*(client.preferred(list(advertised), [], 1) for _ in range(8))), 30
                )
                assert answers == [["d0"]] * 8
            finally:
                release.set()
                await asyncio.gather(*held)

    run(scenario())
