"""A fake kubelet for device plugin tests: the kubelet's side of the v1beta1 API, over real gRPC.

It serves ``Registration`` on ``<plugin dir>/kubelet.sock`` and, like the kubelet's device manager:

* refuses a registration whose version is not ``v1beta1`` or whose resource name is not an
  extended resource name (its own copy of the kubelet's check, independent of the plugin's), with
  the kubelet's messages;
* dials the plugin back at ``<plugin dir>/<endpoint>``, calls ``GetDevicePluginOptions`` before
  answering, then follows ``ListAndWatch``, each response replacing the resource's device list;
  a re-registration of the same resource replaces the old connection;
* allocates the way the kubelet does: ``GetPreferredAllocation`` (when advertised) and then one
  ``Allocate`` with exactly one container request, using ``container_responses[0]``;
* restarts like the kubelet: every socket in the plugin directory is deleted, then kubelet.sock
  is created again.

Reusable from any test: ``async with FakeKubelet(plugin_dir) as kubelet: ...``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import stat
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from cdi_plugin.deviceplugin import api

SUPPORTED_VERSIONS = ["v1beta1"]
DIAL_TIMEOUT = 10.0

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def is_extended_resource_name(name: str) -> bool:
    """The kubelet's ``v1helper.IsExtendedResourceName``."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    parts = f"requests.{name}".split("/")
    if len(parts) != 2:
        return False
    prefix, rest = parts
    return bool(
        prefix
        and len(prefix) <= 253
        and _DNS1123_SUBDOMAIN.match(prefix)
        and 0 < len(rest) <= 63
        and _NAME.match(rest)
    )


@dataclass(frozen=True)
class DeviceEntry:
    health: str
    numa: tuple[int, ...]


@dataclass
class PluginClient:
    """The kubelet's connection to one registered resource."""

    resource: str
    endpoint: Path
    options: Any
    channel: grpc.aio.Channel
    devices: dict[str, DeviceEntry] = field(default_factory=dict)
    lists: list[dict[str, DeviceEntry]] = field(default_factory=list)
    stream_ended: bool = False
    stream_error: str = ""
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _task: asyncio.Task[None] | None = None

    @property
    def stub(self) -> Any:
        return api.DevicePluginStub(self.channel)

    def healthy(self) -> set[str]:
        return {i for i, d in self.devices.items() if d.health == api.HEALTHY}

    async def _follow(self) -> None:
        try:
            async for response in self.stub.ListAndWatch(api.Empty()):
                devices = {
                    d.ID: DeviceEntry(d.health, tuple(n.ID for n in d.topology.nodes))
                    for d in response.devices
                }
                async with self._changed:
                    self.devices = devices
                    self.lists.append(devices)
                    self._changed.notify_all()
        except grpc.aio.AioRpcError as exc:
            self.stream_error = f"{exc.code().name}: {exc.details()}"
        finally:
            async with self._changed:
                self.stream_ended = True
                # the kubelet marks every device of a plugin whose stream ended as unhealthy
                self.devices = {i: DeviceEntry("Unhealthy", d.numa) for i, d in self.devices.items()}
                self._changed.notify_all()

    async def wait_until(
        self, predicate: Callable[[dict[str, DeviceEntry]], bool], timeout: float = 60.0
    ) -> dict[str, DeviceEntry]:
        """The device list once ``predicate`` holds for it; TimeoutError (with the last list) if not."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: predicate(self.devices)), timeout)
            except TimeoutError:
                raise TimeoutError(
                    f"{self.resource}: device list never matched; last: {self.devices}"
                ) from None
            return dict(self.devices)

    async def preferred(self, available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
        request = api.PreferredAllocationRequest(
            container_requests=[
                api.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available),
                    must_include_deviceIDs=list(must_include),
                    allocation_size=size,
                )
            ]
        )
        response = await self.stub.GetPreferredAllocation(request, timeout=60)
        return list(response.container_responses[0].deviceIDs)

    async def allocate(self, ids: Sequence[str], *, as_kubelet: bool = True) -> Any:
        """One container's allocation. ``as_kubelet`` only asks for IDs the kubelet would hand out
        (advertised and Healthy); pass False to send anything to the plugin."""
        if as_kubelet:
            unusable = set(ids) - self.healthy()
            if unusable:
                raise AssertionError(f"the kubelet would not allocate {sorted(unusable)}: not Healthy")
        request = api.AllocateRequest(
            container_requests=[api.ContainerAllocateRequest(devices_ids=list(ids))]
        )
        response = await self.stub.Allocate(request, timeout=60)
        if not response.container_responses:
            raise AssertionError("no containers return in allocation response")
        return response.container_responses[0]

    async def stop_following(self) -> None:
        """End the ListAndWatch stream and keep the connection (a benchmark that times another
        client's stream keeps this process from parsing every list meanwhile)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.channel.close(None)


class _Registration(api.RegistrationServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    async def Register(self, request: Any, context: Any) -> Any:
        k = self.kubelet
        k.requests.append(request)
        if request.version not in SUPPORTED_VERSIONS:
            message = (
                f'requested API version "{request.version}" is not supported by kubelet. '
                f"Supported version is {SUPPORTED_VERSIONS}"
            )
        elif not is_extended_resource_name(request.resource_name):
            message = f'the ResourceName "{request.resource_name}" is invalid'
        elif k.refusals_left > 0:
            k.refusals_left -= 1
            message = k.refusal
        else:
            message = ""
        if message:
            k.refused.append(message)
            await context.abort(grpc.StatusCode.UNKNOWN, message)
        endpoint = k.plugin_dir / request.endpoint
        channel = grpc.aio.insecure_channel(f"unix://{endpoint}")
        try:
            await asyncio.wait_for(channel.channel_ready(), k.dial_timeout)
            options = await api.DevicePluginStub(channel).GetDevicePluginOptions(
                api.Empty(), timeout=k.dial_timeout
            )
        except (TimeoutError, grpc.aio.AioRpcError) as exc:
            await channel.close(None)
            message = f"failed to dial device plugin: {exc}"
            k.refused.append(message)
            await context.abort(grpc.StatusCode.UNKNOWN, message)
        if k.before_watch is not None:
            await k.before_watch(channel)
        client = PluginClient(request.resource_name, endpoint, options, channel)
        async with k.registered:  # the client and the count change together for wait_registered
            old = k.clients.get(request.resource_name)
            k.clients[request.resource_name] = client
            if old is not None:
                k.background.append(asyncio.create_task(old.close()))
            client._task = asyncio.create_task(client._follow())
            k.registrations += 1
            k.registered.notify_all()
        return api.Empty()


class FakeKubelet:
    def __init__(
        self,
        plugin_dir: Path,
        *,
        refusal: str = "",
        refusals: int = 0,
        before_watch: Callable[[grpc.aio.Channel], Awaitable[None]] | None = None,
        dial_timeout: float = DIAL_TIMEOUT,
    ) -> None:
        """``refusals`` registrations are refused with ``refusal``; ``before_watch`` runs between
        GetDevicePluginOptions and opening ListAndWatch, given the channel to the plugin (to land a
        change exactly there)."""
        self.plugin_dir = plugin_dir
        self.dial_timeout = dial_timeout
        self.before_watch = before_watch
        self.socket = plugin_dir / "kubelet.sock"
        self.refusal = refusal
        self.refusals_left = refusals
        self.requests: list[Any] = []
        self.refused: list[str] = []
        self.clients: dict[str, PluginClient] = {}
        self.registrations = 0
        self.registered = asyncio.Condition()
        self.background: list[asyncio.Task[None]] = []
        self._server: grpc.aio.Server | None = None

    async def __aenter__(self) -> FakeKubelet:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server()
        api.add_registration_servicer(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        for client in list(self.clients.values()):
            await client.close()
        self.clients.clear()
        for task in self.background:
            with contextlib.suppress(Exception):
                await task
        if self._server is not None:
            await self._server.stop(0)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)

    async def restart(self, downtime: float = 0.0) -> None:
        """Stop, delete every socket in the plugin directory (as a starting kubelet does), start."""
        await self.stop()
        for entry in self.plugin_dir.iterdir():
            if stat.S_ISSOCK(entry.lstat().st_mode):
                entry.unlink()
        await asyncio.sleep(downtime)
        await self.start()

    async def wait_registered(self, resource: str, *, after: int = 0, timeout: float = 60.0) -> PluginClient:
        """The client of ``resource`` once more than ``after`` registrations happened in total."""
        async with self.registered:
            try:
                await asyncio.wait_for(
                    self.registered.wait_for(lambda: self.registrations > after and resource in self.clients),
                    timeout,
                )
            except TimeoutError:
                raise TimeoutError(
                    f"{resource} not registered within {timeout}s; requests: "
                    f"{[r.resource_name for r in self.requests]}, refused: {self.refused}"
                ) from None
            return self.clients[resource]
