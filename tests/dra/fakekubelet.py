"""A fake kubelet: the plugin watcher's registration and the DRA manager's calls, over real sockets.

As strict as the 1.36 kubelet: it ignores dot-files and non-sockets in the registry directory,
requires type DRAPlugin, a driver name equal to the one it expects, an absolute endpoint, and a
known version (taking the first it knows in the plugin's order); it tells the plugin the outcome
with NotifyRegistrationStatus, and checks that every requested claim UID is answered.
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from pathlib import Path

import grpc

from cdi_plugin.dra import api

KNOWN_VERSIONS = (api.V1, api.V1BETA1)


class RegistrationRefused(Exception):
    pass


class FakeKubelet:
    def __init__(self, registry_dir: Path, known_versions: Iterable[str] = KNOWN_VERSIONS) -> None:
        self.registry_dir = registry_dir
        self.known = tuple(known_versions)
        self.endpoint = ""
        self.version = ""
        self.infos: list[api.PluginInfo] = []

    def sockets(self) -> list[Path]:
        return sorted(
            p
            for p in self.registry_dir.iterdir()
            if not p.name.startswith(".") and stat.S_ISSOCK(p.stat().st_mode)
        )

    async def register(self, socket: Path, driver: str) -> None:
        """GetInfo, check, then NotifyRegistrationStatus; RegistrationRefused when refused."""
        async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
            stub = api.RegistrationStub(channel)
            # like the kubelet, wait for a socket that exists but does not listen yet (gRPC binds
            # it before it listens)
            info = await stub.GetInfo(api.InfoRequest(), timeout=60, wait_for_ready=True)
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
            await stub.NotifyRegistrationStatus(
                api.RegistrationStatus(plugin_registered=not error, error=error), timeout=5
            )
        if error:
            raise RegistrationRefused(error)
        self.endpoint, self.version = info.endpoint, version

    async def _call(self, method: str, claims: list[api.Claim]) -> object:
        build = api.prepare_request if method == "NodePrepareResources" else api.unprepare_request
        async with grpc.aio.insecure_channel(f"unix://{self.endpoint}") as channel:
            stub = api.dra_stub(self.version, channel)
            response = await getattr(stub, method)(build(self.version, claims), timeout=45)
        assert set(response.claims) == {c.uid for c in claims}, "every claim UID answered, no other"
        return response

    async def prepare(self, *claims: api.Claim) -> dict[str, tuple[api.PreparedDevice, ...] | str]:
        return api.prepared(await self._call("NodePrepareResources", list(claims)))

    async def unprepare(self, *claims: api.Claim) -> dict[str, str]:
        response = await self._call("NodeUnprepareResources", list(claims))
        return {uid: entry.error for uid, entry in response.claims.items()}  # type: ignore[attr-defined]
