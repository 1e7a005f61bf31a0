"""The driver's side of the kubelet: registration through the plugin watcher, and the DRA service.

Sockets (absolute paths, the same inside and outside the container):

* ``<plugins>/<driver>/dra.sock`` serves ``v1.DRAPlugin`` and ``v1beta1.DRAPlugin``, and the
  device health service (:mod:`~cdi_plugin.dra.health_service`) in v1 and v1alpha1;
* ``<plugins_registry>/<driver>-reg.sock`` serves ``pluginregistration.Registration``;
* with a pod UID (two instances side by side during an update, :mod:`~cdi_plugin.dra.rolling`),
  ``dra-<uid>.sock`` and ``<driver>-<uid>-reg.sock`` instead.

The DRA socket starts first, so the kubelet never registers an endpoint that does not answer;
on stop the registration socket goes first. A stale socket is removed before listening.

The DRA service itself, NodePrepareResources and NodeUnprepareResources, is
:class:`~cdi_plugin.dra.service.DraService`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from cdi_plugin.aio.sockets import (
    bind_refusal,
    identity,
    serve_private,
    someone_listens,
    stop_serving,
)
from cdi_plugin.dra import api
from cdi_plugin.dra.health_service import HealthService
from cdi_plugin.dra.names import DEFAULT_PLUGINS_DIR, DEFAULT_REGISTRY_DIR
from cdi_plugin.dra.report import UNREPORTED, Report
from cdi_plugin.dra.serialize import LOCK_NAME
from cdi_plugin.dra.service import DraService
from cdi_plugin.errors import CdiPluginError
from cdi_plugin.recurring import Recurring
from cdi_plugin.wording import clipped, file_type

log = logging.getLogger(__name__)

#: How much of the kubelet's reason for a refusal is kept and logged (one line).
MAX_REASON = 400


@dataclass(frozen=True, slots=True)
class Paths:
    driver: str
    registry_dir: Path = DEFAULT_REGISTRY_DIR
    plugins_dir: Path = DEFAULT_PLUGINS_DIR
    #: Names the sockets of this instance when not empty (checked: :func:`~.rolling.check_pod_uid`).
    pod_uid: str = ""

    @property
    def plugin_dir(self) -> Path:
        return self.plugins_dir / self.driver

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / (f"dra-{self.pod_uid}.sock" if self.pod_uid else "dra.sock")

    @property
    def registration_socket(self) -> Path:
        uid = f"-{self.pod_uid}" if self.pod_uid else ""
        return self.registry_dir / f"{self.driver}{uid}-reg.sock"

    @property
    def state_file(self) -> Path:
        return self.plugin_dir / "prepared.json"

    @property
    def lock_file(self) -> Path:
        return self.plugin_dir / LOCK_NAME


class Registrar:
    """The Registration service the kubelet's plugin watcher calls. The driver counts as registered
    (:attr:`registered`, and to ``report``) from the kubelet's confirmation until the kubelet
    refuses it or the socket stops being served (:meth:`unregistered`). The plugin watcher tries
    again every second or so: a refusal for the same reason is logged once, then summarised every
    few minutes, and the registration that ends it says so (:class:`~cdi_plugin.recurring.Recurring`)."""

    def __init__(
        self,
        driver: str,
        endpoint: Path,
        on_registered: Callable[[], None] | None = None,
        report: Report = UNREPORTED,
    ) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.on_registered = on_registered
        self.report = report
        self.registered = asyncio.Event()
        self.error = ""
        self._refused = Recurring(log)

    def unregistered(self, why: str = "") -> None:
        self.registered.clear()
        self.report.registered(False, why)

    async def GetInfo(self, request: Any, context: Any) -> Any:
        return api.PluginInfo(
            type=api.PLUGIN_TYPE,
            name=self.driver,
            endpoint=str(self.endpoint),
            supported_versions=list(api.ADVERTISED),
        )

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        if request.plugin_registered:
            self.error = ""
            self.registered.set()
            self.report.registered(True)
            self._refused.recovered()
            log.info("registered with the kubelet as DRA driver %s", self.driver)
            if self.on_registered is not None:
                self.on_registered()
        else:
            # the kubelet's words, on one line of a bounded length
            self.error = reason = clipped(request.error or "no reason given", MAX_REASON)
            self.unregistered(f"refused: {reason}")
            self._refused.report(logging.ERROR, f"the kubelet refused DRA driver {self.driver}: {reason}")
        return api.RegistrationStatusResponse()


class SocketInUseError(CdiPluginError):
    """Another process serves a socket this plugin would bind (another instance of the driver)."""


async def _listen(path: Path, add: Any) -> grpc.aio.Server:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = Path(exc.filename or path.parent)
        found = file_type(os.lstat(where).st_mode) if isinstance(exc, FileExistsError) else None
        why = f" is {found}, not a directory" if found else f": {exc.strerror or exc}"
        raise OSError(f"{where}{why}; cannot listen on {path}") from None
    try:
        in_use = someone_listens(path)
    except OSError as exc:
        raise OSError(f"{path}: cannot listen: {exc.strerror or exc}") from None
    if in_use:
        raise SocketInUseError(
            f"{path}: another process is serving it (another instance of the driver?); not replacing it"
        )
    with contextlib.suppress(FileNotFoundError):
        mode = os.lstat(path).st_mode
        if not stat.S_ISSOCK(mode):  # never a socket of ours: left as it is
            raise OSError(f"{path} is {file_type(mode)}, not a socket; not replacing it (move it away)")
        path.unlink()  # stale: nothing listens on it
    server = grpc.aio.server()
    add(server)
    if await serve_private(server, path) is None:
        raise OSError(f"{path}: cannot listen: {bind_refusal(path)}")
    return server


class KubeletPlugin:
    """Both sockets, started DRA first and stopped registration first; use ``async with``.

    A socket another process serves is never replaced (SocketInUseError), nor anything but a
    socket at its path (OSError); on stop a socket is removed only while it is the one this plugin
    bound, and another process's bound at its path since stays. When a socket disappears (a
    kubelet restart that wiped its directories), :meth:`recover` starts both again, and the
    kubelet's plugin watcher registers the driver anew; the prepared claims are written again too.
    """

    def __init__(
        self, paths: Paths, service: DraService, on_registered: Callable[[], None] | None = None
    ) -> None:
        """``on_registered()`` is called each time the kubelet confirms the registration."""
        self.paths = paths
        self.service = service
        self.health = HealthService(service.pool, service.inventory)

        def registered() -> None:
            self.health.registered()
            if on_registered is not None:
                on_registered()

        self.registrar = Registrar(paths.driver, paths.dra_socket.absolute(), registered, service.report)
        self._servers: list[tuple[Path, grpc.aio.Server, tuple[int, int] | None]] = []

    async def start(self) -> None:
        def add_dra(server: grpc.aio.Server) -> None:
            for version in api.VERSIONS:
                api.add_dra_servicer(version, self.service, server)
            for version in api.HEALTH_VERSIONS:
                api.add_health_servicer(version, self.health, server)

        try:
            for path, add in (
                (self.paths.dra_socket, add_dra),
                (self.paths.registration_socket, lambda s: api.add_registration_servicer(self.registrar, s)),
            ):
                server = await _listen(path, add)
                self._servers.append((path, server, identity(path)))
        except BaseException:
            await self.stop()
            raise

    async def stop(self, grace: float = 1.0) -> None:
        self.health.shutdown()
        self.registrar.unregistered()
        while self._servers:
            path, server, bound = self._servers.pop()
            await stop_serving(server, path, bound, grace)

    async def recover(self) -> bool:
        """Start when not serving (the first time, or a socket is gone or replaced, or a start
        failed); True when it did. Then write the prepared claims again if their file is gone
        (StateWriteError if it fails, SerializeError if the node's lock cannot be taken)."""
        intact = len(self._servers) == 2 and all(identity(p) == inode for p, _, inode in self._servers)
        if not intact:
            if self._servers:
                log.warning(
                    "a DRA plugin socket of %s disappeared; serving and registering again", self.paths.driver
                )
            await self.stop()
            await self.start()
        await self.service.restore()
        return not intact

    async def __aenter__(self) -> KubeletPlugin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
