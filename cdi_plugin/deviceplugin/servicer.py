"""The DevicePlugin gRPC service of one resource (grpc.aio handlers over :class:`DeviceState`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from cdi_plugin.aio.streams import OpenStreams
from cdi_plugin.deviceplugin import api
from cdi_plugin.deviceplugin.advertised import DeviceStatus
from cdi_plugin.deviceplugin.allocate import AllocationError, ContainerAllocation, Lookup, allocate
from cdi_plugin.deviceplugin.preferred import Candidate, preferred
from cdi_plugin.deviceplugin.settings import Strategy
from cdi_plugin.deviceplugin.state import Board, DeviceState, ResourceView
from cdi_plugin.grpcutil import KUBELET_MAX_MESSAGE
from cdi_plugin.wording import clipped, plural

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]

#: A prebuilt answer to Allocate of one device: the response, what it holds, the device's CDI name.
_Prebuilt = tuple[api.AllocateResponse, list[ContainerAllocation], str]

#: How much of a request's IDs, and of the names answered, the line logging an allocation shows.
MAX_LOGGED = 1000
#: ListAndWatch streams open at once per resource; one more is refused.
MAX_STREAMS = 4
#: GetPreferredAllocation and Allocate take as many IDs (and container requests) as the resource
#: advertises, and at least this many (a kubelet's list may still hold devices removed since).
MIN_OFFERED = 1024

#: The thread GetPreferredAllocation works in, one shared by every resource: the kubelet waits for it
#: without a deadline, so it never waits for the threads the process's other blocking work may
#: hold (a read stuck on a device), and a flood of calls is worked out in turn, never taking them.
_PREFERRING = ThreadPoolExecutor(1, thread_name_prefix="preferred-allocation")

OPTIONS = api.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

_STATUS = {
    "invalid-argument": grpc.StatusCode.INVALID_ARGUMENT,
    "failed-precondition": grpc.StatusCode.FAILED_PRECONDITION,
}


class ListBuilder:
    """ListAndWatch responses, serialized: each device's entry is encoded once while its status
    stays the same one, and a response is its devices' entries joined (entries of a repeated
    field, concatenated, are the message listing them all). A view that follows the one built
    last (:class:`~.advertised.Revision`) costs the entries of the IDs it touched and the join;
    another one, a look at each ID's status.

    A response never exceeds ``limit`` bytes (the kubelet takes at most 4 MiB per message, and
    gRPC refuses to send more): a longer list keeps, of every device, as many replicas as fit
    (``cut`` then says so), so that each device stays advertised."""

    def __init__(self, limit: int = KUBELET_MAX_MESSAGE) -> None:
        self._view = ResourceView("")
        self._entries: dict[str, bytes] = {}  # device ID -> its entry, in the order of the view
        self._data = b""
        self._limit = limit
        #: What the last response left out, when the list did not fit in one message; else None.
        self.cut: str | None = None

    def response(self, view: ResourceView) -> bytes:
        if view is self._view:
            return self._data
        last, entries = self._view.revision, self._entries
        if view.revision is not None and last is not None and view.revision.after == last.serial:
            came = False
            for device_id in view.revision.ids:
                status = view.devices.get(device_id)
                if status is None:
                    del entries[device_id]
                else:
                    came = came or device_id not in entries
                    entries[device_id] = _entry(status)
            if came:
                entries = dict(zip(view.devices, map(entries.__getitem__, view.devices), strict=True))
        else:
            kept, before = entries, self._view.devices
            entries = {i: kept[i] if before.get(i) is s else _entry(s) for i, s in view.devices.items()}
        data = b"".join(entries.values())
        self.cut = None
        if len(data) > self._limit:
            data = self._fit(view, entries)
        self._view, self._entries, self._data = view, entries, data
        return self._data

    def _fit(self, view: ResourceView, entries: dict[str, bytes]) -> bytes:
        """The entries of replicas 0 to R-1 of every device, R as large as fits; if not even one
        replica of each fits, the first devices' that do."""
        sizes: dict[int, int] = {}
        for device_id, entry in entries.items():
            replica = view.devices[device_id].replica
            sizes[replica] = sizes.get(replica, 0) + len(entry)
        total = replicas = 0
        while replicas in sizes and total + sizes[replicas] <= self._limit:
            total += sizes[replicas]
            replicas += 1
        kept: list[bytes] = []
        if replicas:
            kept = [e for i, e in entries.items() if view.devices[i].replica < replicas]
        else:
            for entry in entries.values():
                if total + len(entry) > self._limit:
                    break
                total += len(entry)
                kept.append(entry)
        self.cut = (
            f"its {len(entries)} device IDs take more than the {self._limit} bytes the kubelet "
            f"accepts in one message; ListAndWatch sends {len(kept)} of them"
            + (f" ({replicas} replicas of each device)" if replicas else "")
        )
        return b"".join(kept)


def _preferred(requests: Sequence[Any], devices: Mapping[str, DeviceStatus]) -> list[list[str]]:
    """The preferred IDs of each container request among ``devices`` (a view's: never changed)."""
    candidates = {
        s.id: Candidate(s.id, s.qualified_name, s.replica, s.numa, s.healthy) for s in devices.values()
    }
    return [
        preferred(r.available_deviceIDs, r.must_include_deviceIDs, r.allocation_size, candidates)
        for r in requests
    ]


def _entry(status: DeviceStatus) -> bytes:
    """One device as a serialized ListAndWatchResponse listing it alone."""
    device = api.device(status.id, status.healthy, status.numa)
    return api.ListAndWatchResponse(devices=[device]).SerializeToString()


class DevicePluginService:
    def __init__(self, resource: str, state: DeviceState, strategy: Strategy) -> None:
        self.resource = resource
        self.state = state
        self.strategy = strategy
        self._extra = {"resource": resource}
        self._closing = asyncio.Event()
        self._answers: dict[str, _Prebuilt] = {}
        self._board: Board | None = None
        self._version = -1
        self._max_bytes = min(KUBELET_MAX_MESSAGE, state.settings.max_message_bytes)
        self._lists = ListBuilder(self._max_bytes)
        self._cut_logged: str | None = None
        self._streams = OpenStreams(MAX_STREAMS)

    async def GetDevicePluginOptions(self, request: api.Empty, context: Context) -> api.DevicePluginOptions:
        return OPTIONS

    def shutdown(self) -> None:
        """End the open ListAndWatch streams (the server is about to stop)."""
        self._closing.set()

    async def ListAndWatch(self, request: api.Empty, context: Context) -> AsyncIterator[bytes]:
        """The resource's devices, then again after every change: a serialized ListAndWatchResponse.
        Once the resource is gone, an empty list; the stream then stays open until its endpoint
        stops, and goes on with the resource if it comes back first (the kubelet opens a stream
        only when the plugin registers, and the endpoint of a resource back stays registered).

        At most :data:`MAX_STREAMS` are open: one more is refused with RESOURCE_EXHAUSTED, as
        ending one that is open could end the kubelet's, which the kubelet takes as the plugin
        gone and does not open again until the plugin registers anew (a restarted kubelet's old
        stream closes with its connection)."""
        if len(self._streams) >= MAX_STREAMS:
            message = (
                f"ListAndWatch of {self.resource} refused: {MAX_STREAMS} streams are open, "
                "the most served at once (the kubelet keeps one)"
            )
            log.warning("%s", message, extra=self._extra)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, message)
        with self._streams.opened():
            board = self.state.board(self.resource)
            seen = -1
            closing = asyncio.ensure_future(self._closing.wait())
            waiting: asyncio.Future[tuple[int, ResourceView, bool]] | None = None
            try:
                while board is not None and not self._closing.is_set():
                    waiting = asyncio.ensure_future(board.next_view(seen))
                    await asyncio.wait((waiting, closing), return_when=asyncio.FIRST_COMPLETED)
                    if not waiting.done():
                        break
                    seen, view, closed = waiting.result()
                    yield self._list(view)
                    if closed:
                        board, seen = await self._back(closing), -1
            finally:
                closing.cancel()
                if waiting is not None:
                    waiting.cancel()

    async def _back(self, closing: asyncio.Future[Any]) -> Board | None:
        """The resource's board once it is back (a new one), or None once the servicer closes."""
        while not closing.done():
            seen = self.state.pulse.count  # boards change before the pulse fires
            if (board := self.state.board(self.resource)) is not None:
                return board
            changed = asyncio.ensure_future(self.state.pulse.wait_after(seen))
            try:
                await asyncio.wait((changed, closing), return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
        return None

    def _list(self, view: ResourceView) -> bytes:
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s: ListAndWatch sends %d device IDs (%d Healthy)",
                self.resource,
                len(view.devices),
                sum(1 for s in view.devices.values() if s.healthy),
                extra=self._extra,
            )
        data = self._lists.response(view)
        if self._lists.cut != self._cut_logged:
            self._cut_logged = self._lists.cut
            if self._lists.cut is not None:
                log.warning("%s: %s", self.resource, self._lists.cut, extra=self._extra)
        return data

    async def GetPreferredAllocation(
        self, request: api.PreferredAllocationRequest, context: Context
    ) -> api.PreferredAllocationResponse:
        """The preferred IDs of each container request, worked out in a thread of its own
        (:data:`_PREFERRING`): the event loop serves the other calls and streams meanwhile. A
        request naming more IDs or container requests than the resource advertises (or
        :data:`MIN_OFFERED`) is refused before any work (:meth:`_too_many`)."""
        await self.state.settled()
        board = self.state.board(self.resource)
        devices = board.view.devices if board else {}
        requests = request.container_requests
        too_many = self._too_many(
            "GetPreferredAllocation",
            ("container requests", len(requests)),
            ("available device IDs", sum(len(r.available_deviceIDs) for r in requests)),
            ("must-include device IDs", sum(len(r.must_include_deviceIDs) for r in requests)),
        )
        if too_many is not None:
            log.warning("%s", too_many, extra=self._extra)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, too_many)
        loop = asyncio.get_running_loop()
        answers = await loop.run_in_executor(_PREFERRING, _preferred, requests, devices)
        return api.preferred_response(answers)

    async def Allocate(self, request: api.AllocateRequest, context: Context) -> api.AllocateResponse:
        started = time.perf_counter()
        await self.state.settled()
        containers = request.container_requests
        # The usual request, one container and one device, is answered with a prebuilt response.
        ids = containers[0].devices_ids if len(containers) == 1 else None
        key = ids[0] if ids is not None and len(ids) == 1 else None
        found = self._prebuilt(key) if key is not None else None
        if key is not None and found is not None and self.state.problem(found[2]) is None:
            response, answers, _ = found
            requests = [[key]]
        else:
            try:
                too_many = self._too_many(
                    "Allocate",
                    ("container requests", len(containers)),
                    ("device IDs", sum(len(c.devices_ids) for c in containers)),
                )
                if too_many is not None:
                    raise AllocationError("invalid-argument", too_many)
                requests = [list(c.devices_ids) for c in containers]
                answers = allocate(self.resource, requests, self._lookup, self.state.problem, self.strategy)
                response = api.allocate_response((a.cdi_devices, a.annotations) for a in answers)
                if (size := response.ByteSize()) > self._max_bytes:
                    raise AllocationError(
                        "invalid-argument",
                        f"the answer to {plural(len(requests), 'container request')} for {self.resource} "
                        f"would take {size} bytes, more than the {self._max_bytes} the kubelet accepts",
                    )
            except AllocationError as exc:
                self.state.metrics.allocation(self.resource, exc.code, time.perf_counter() - started)
                log.warning("%s: Allocate refused: %s", self.resource, exc.message, extra=self._extra)
                await context.abort(_STATUS[exc.code], exc.message)
            status = self.state.status(self.resource, key) if key is not None else None
            if key is not None and status is not None:
                self._answers[key] = (response, answers, status.qualified_name)
        # Counted and logged once the answer is on its way: a log line is a write to stderr.
        asyncio.get_running_loop().call_soon(self._allocated, requests, answers, started)
        return response

    def _allocated(
        self, requests: list[list[str]], answers: list[ContainerAllocation], started: float
    ) -> None:
        self.state.metrics.allocation(self.resource, "ok", time.perf_counter() - started)
        for ids, answer in zip(requests, answers, strict=True):
            log.info(
                "%s: allocated %s -> %s",
                self.resource,
                clipped(",".join(ids), MAX_LOGGED),
                clipped(",".join(answer.cdi_devices or answer.annotations.values()), MAX_LOGGED),
                extra=self._extra,
            )

    def _too_many(self, call: str, *counts: tuple[str, int]) -> str | None:
        """Why a call naming ``counts`` (what, how many) is refused, or None: the kubelet names a
        subset of the advertised IDs for one container at a time, so no count may exceed their
        number (or :data:`MIN_OFFERED`); checked before any work, whose cost would follow it."""
        board = self.state.board(self.resource)
        advertised = len(board.view.devices) if board else 0
        bound = max(advertised, MIN_OFFERED)
        for what, count in counts:
            if count > bound:
                return (
                    f"{call} for {self.resource} names {count} {what}, more than the {bound} "
                    f"the plugin takes (it advertises {plural(advertised, 'ID')})"
                )
        return None

    def _lookup(self, device_id: str) -> Lookup | None:
        status = self.state.status(self.resource, device_id)
        return None if status is None else Lookup(status.qualified_name, status.healthy, status.reason)

    def _prebuilt(self, device_id: str) -> _Prebuilt | None:
        """The answer built before for a request of this one device, while the resource's devices
        (their IDs, names and health) have not changed since."""
        board = self.state.board(self.resource)
        if board is not self._board or (board is not None and board.version != self._version):
            self._board, self._version = board, board.version if board is not None else -1
            self._answers.clear()
        return self._answers.get(device_id)

    async def PreStartContainer(
        self, request: api.PreStartContainerRequest, context: Context
    ) -> api.PreStartContainerResponse:
        return api.PreStartContainerResponse()
