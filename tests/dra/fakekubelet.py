"""A fake kubelet: the plugin watcher's registration and the DRA manager's calls, over real sockets.

As strict as the 1.36 kubelet: it ignores dot-files and non-sockets in the registry directory,
wants GetInfo answered within 1 s of connecting (trying again with the kubelet's backoff), requires
type DRAPlugin, a driver name equal to the one it expects, an absolute endpoint, and a
known version (taking the first it knows in the plugin's order); it tells the plugin the outcome
with NotifyRegistrationStatus, and checks that every requested claim UID is answered.

Several instances of the driver (a rolling update, kubelet >= 1.33): every registered endpoint is
kept, in the order of registration; an endpoint whose registration socket is gone or was created
again is de-registered first (the plugin watcher sees the removal); a second registration of an
endpoint path still registered is refused; each call goes to the newest endpoint that accepts a
connection, else to the newest (:attr:`FakeKubelet.called` records which).

Device health: :meth:`FakeKubelet.watch_health` opens a ``NodeWatchResources`` stream, by
default of the health version the kubelet chose at registration as a 1.37 kubelet does (v1 when
advertised, else v1alpha1 when advertised; the 1.36 kubelet calls v1alpha1 whatever is
advertised: pass it). Every message is checked as the kubelet reads it (:func:`health_problems`)
and kept with its arrival time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from cdi_plugin.aio.sockets import someone_listens
from cdi_plugin.dra import api
from cdi_plugin.dra.health import HEALTHY, MESSAGE_MAX, UNHEALTHY, DeviceHealth

KNOWN_VERSIONS = (api.V1, api.V1BETA1)
KNOWN_HEALTH = (api.HEALTH_V1, api.HEALTH_V1ALPHA1)
#: Each channel connects on its own, as the kubelet's do: gRPC's process-wide pool would hand a new
#: channel a connection still backing off after the driver's previous instance went away.
OPTIONS = [("grpc.use_local_subchannel_pool", 1)]


class RegistrationRefused(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A registered instance of the driver."""

    path: str
    version: str
    health_version: str
    registration: Path
    registration_id: tuple[int, int, int]  # device, inode, ctime: a socket created again differs

    def registered(self) -> bool:
        """Whether its registration socket is still the one registered (else the plugin watcher
        has seen it removed, and the kubelet de-registered the endpoint)."""
        return _file_id(self.registration) == self.registration_id


def _file_id(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


async def _get_info(channel: grpc.aio.Channel, stub: api.RegistrationStub, within: float = 60.0) -> Any:
    """GetInfo as the plugin watcher calls it: a connection within 10 s (a socket that exists
    but does not listen yet is waited for: gRPC binds it before it listens), then an answer
    within 1 s; a failed attempt is made again after 0.5 s, doubling, until ``within`` seconds
    have passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    delay = 0.5
    while True:
        try:
            await asyncio.wait_for(channel.channel_ready(), 10)
            return await stub.GetInfo(api.InfoRequest(), timeout=1)
        except (TimeoutError, grpc.aio.AioRpcError):
            if loop.time() + delay > deadline:
                raise
        await asyncio.sleep(delay)  # the kubelet's backoff, not a wait for a state
        delay *= 2


class FakeKubelet:
    def __init__(self, registry_dir: Path, known_versions: Iterable[str] = KNOWN_VERSIONS) -> None:
        self.registry_dir = registry_dir
        self.known = tuple(known_versions)
        self.endpoints: list[Endpoint] = []  # in the order of registration
        self.called: list[str] = []  # the endpoint of each Prepare or Unprepare
        self.infos: list[api.PluginInfo] = []

    def _current(self) -> list[Endpoint]:
        self.endpoints = [e for e in self.endpoints if e.registered()]
        return self.endpoints

    @property
    def newest(self) -> Endpoint:
        current = self._current()
        assert current, "no endpoint of the driver is registered"
        return current[-1]

    @property
    def endpoint(self) -> str:
        return self.newest.path

    @endpoint.setter
    def endpoint(self, path: str) -> None:
        """Reach the newest endpoint at ``path`` (its path on this host, when the driver runs in a
        container whose paths differ)."""
        self.endpoints[-1] = dataclasses.replace(self.newest, path=path)

    @property
    def version(self) -> str:
        return self.newest.version

    @property
    def health_version(self) -> str:
        return self.newest.health_version

    def _target(self) -> Endpoint:
        """The newest connected endpoint, else the newest (the 1.33+ kubelet's choice)."""
        current = self._current()
        assert current, "no endpoint of the driver is registered"
        connected = [e for e in current if someone_listens(Path(e.path))]
        return connected[-1] if connected else current[-1]

    def sockets(self) -> list[Path]:
        return sorted(
            p
            for p in self.registry_dir.iterdir()
            if not p.name.startswith(".") and stat.S_ISSOCK(p.stat().st_mode)
        )

    async def register(self, socket: Path, driver: str) -> None:
        """GetInfo, check, then NotifyRegistrationStatus; RegistrationRefused when refused."""
        registration_id = _file_id(socket)
        assert registration_id is not None, f"{socket}: no such socket"
        async with grpc.aio.insecure_channel(f"unix://{socket}", options=OPTIONS) as channel:
            stub = api.RegistrationStub(channel)
            info = await _get_info(channel, stub)
            self.infos.append(info)
            error = ""
            version = next((v for v in info.supported_versions if v in self.known), "")
            if info.type != api.PLUGIN_TYPE:
                error = f"unknown plugin type {info.type!r}"
            elif info.name != driver:
                error = f"driver name {info.name!r}, expected {driver!r}"
            elif not info.endpoint.startswith("/"):
                error = f"endpoint {info.endpoint!r} is not absolute"
            elif not version:
                error = f"none of the versions {list(info.supported_versions)} is supported"
            elif any(e.path == info.endpoint for e in self._current()):
                error = f"endpoint {info.endpoint} already registered for DRA driver plugin {driver}"
            await stub.NotifyRegistrationStatus(
                api.RegistrationStatus(plugin_registered=not error, error=error), timeout=5
            )
        if error:
            raise RegistrationRefused(error)
        health = next((v for v in KNOWN_HEALTH if v in info.supported_versions), "")
        self.endpoints.append(Endpoint(info.endpoint, version, health, socket, registration_id))

    async def _call(self, method: str, claims: list[api.Claim]) -> object:
        build = api.prepare_request if method == "NodePrepareResources" else api.unprepare_request
        target = self._target()
        self.called.append(target.path)
        async with grpc.aio.insecure_channel(f"unix://{target.path}", options=OPTIONS) as channel:
            stub = api.dra_stub(target.version, channel)
            response = await getattr(stub, method)(build(target.version, claims), timeout=45)
        assert set(response.claims) == {c.uid for c in claims}, "every claim UID answered, no other"
        return response

    async def prepare(self, *claims: api.Claim) -> dict[str, tuple[api.PreparedDevice, ...] | str]:
        return api.prepared(await self._call("NodePrepareResources", list(claims)))

    async def unprepare(self, *claims: api.Claim) -> dict[str, str]:
        response = await self._call("NodeUnprepareResources", list(claims))
        return {uid: entry.error for uid, entry in response.claims.items()}  # type: ignore[attr-defined]

    def watch_health(self, version: str = "") -> HealthStream:
        """A NodeWatchResources stream of ``version`` (default: the one chosen at registration)."""
        chosen = version or self.health_version
        assert chosen, "the driver advertised no health version this kubelet knows"
        return HealthStream(self.endpoint, chosen)


def health_problems(devices: Sequence[DeviceHealth], previous: Sequence[DeviceHealth]) -> list[str]:
    """What the kubelet could not take as it is from a message: an entry without a pool or device
    name, a device listed twice (the kubelet keys by pool/device), a status it would show as
    Unknown, a message it would cut, no timeout of the driver's own (the kubelet's default then
    applies), a time of determination before the previous message's, and a device of the previous
    message missing (each message is the complete list)."""
    problems = []
    keys = [(d.pool_name, d.device_name) for d in devices]
    if len(set(keys)) != len(keys):
        problems.append(f"a device listed twice: {sorted(keys)}")
    before = {(d.pool_name, d.device_name): d for d in previous}
    for d in devices:
        if not d.pool_name or not d.device_name:
            problems.append(f"no pool or device name: {d}")
        if d.health not in (HEALTHY, UNHEALTHY):
            problems.append(f"{d.device_name}: health {d.health}")
        if len(d.message) > MESSAGE_MAX:
            problems.append(f"{d.device_name}: a message of {len(d.message)} characters")
        if d.timeout <= 0:
            problems.append(f"{d.device_name}: health check timeout {d.timeout}")
        last = before.get((d.pool_name, d.device_name))
        if d.last_updated <= 0 or (last is not None and d.last_updated < last.last_updated):
            problems.append(f"{d.device_name}: last updated {d.last_updated}")
    missing = before.keys() - set(keys)
    if missing:
        problems.append(f"devices missing from the list: {sorted(missing)}")
    return problems


class HealthStream:
    """One NodeWatchResources stream, read as the kubelet reads it; ``async with`` closes it (as
    the kubelet does when it drops the stream), :meth:`drop` too."""

    def __init__(self, endpoint: str, version: str) -> None:
        self.version = version
        self.messages: list[tuple[float, list[DeviceHealth]]] = []  # (arrival, monotonic; devices)
        self.problems: list[str] = []
        self.error: grpc.aio.AioRpcError | None = None
        self.ended = False
        self._channel = grpc.aio.insecure_channel(f"unix://{endpoint}")
        self._call = api.health_stub(version, self._channel).NodeWatchResources(api.health_request(version))
        self._arrived = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for response in self._call:
                at = time.monotonic()
                devices = api.health_of(response)
                previous = self.messages[-1][1] if self.messages else []
                self.problems += health_problems(devices, previous)
                self.messages.append((at, devices))
                self._arrived.set()
        except grpc.aio.AioRpcError as exc:
            self.error = exc
        except asyncio.CancelledError:
            pass
        finally:
            self.ended = True
            self._arrived.set()

    async def next(
        self, check: Callable[[dict[str, DeviceHealth]], bool], after: int = 0, timeout: float = 30.0
    ) -> tuple[int, float, dict[str, DeviceHealth]]:
        """The first message from index ``after`` on whose devices (by device name) pass ``check``:
        its index, arrival time and devices. AssertionError when the stream ends or ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        index = after
        while True:
            while index < len(self.messages):
                at, devices = self.messages[index]
                by_name = {d.device_name: d for d in devices}
                if check(by_name):
                    return index, at, by_name
                index += 1
            if self.ended:
                raise AssertionError(f"the health stream ended ({self.error}) before the message expected")
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), deadline - loop.time())
            except TimeoutError:
                raise AssertionError(
                    f"no such health message within {timeout}s; last: {self.messages[-1:]}"
                ) from None

    async def drop(self) -> None:
        """Cancel the stream and close the connection, as a kubelet that goes away."""
        self._call.cancel()
        await self._reader
        await self._channel.close()

    async def __aenter__(self) -> HealthStream:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.drop()
