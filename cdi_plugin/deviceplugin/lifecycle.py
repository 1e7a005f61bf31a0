"""One resource's endpoint: its gRPC server on ``<plugin dir>/<socket>`` and its kubelet registration.

:meth:`Endpoint.run` loops: serve (bind the socket, mode 0600), wait for kubelet.sock, register,
then wait until the kubelet restarts. A kubelet restart shows as our socket being deleted (the
kubelet removes the sockets in its directory when it starts) or kubelet.sock being replaced; both
are seen through the plugin directory's inotify watch, and lead to serving afresh and registering
again at once. Failures are logged with their reason and retried with exponential backoff (cut
short when kubelet.sock is recreated). A failure or a wait for the kubelet (its directory or
kubelet.sock missing) is logged once, then summarised every few minutes while it lasts, and its
end is logged once (:class:`~cdi_plugin.recurring.Recurring`); a new reason is logged at once,
one that comes back while the failure lasts only summarised.
The endpoint unlinks only the socket it bound itself, recognised by its inode.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

import grpc

from cdi_plugin.aio.dirwatch import DirWatch
from cdi_plugin.aio.sockets import (
    MAX_SOCKET_PATH,
    Identity,
    bind_refusal,
    identity,
    serve_private,
    someone_listens,
    stop_serving,
)
from cdi_plugin.cdi.names import short_hash
from cdi_plugin.deviceplugin import api
from cdi_plugin.deviceplugin.registration import RegistrationError, register
from cdi_plugin.deviceplugin.servicer import DevicePluginService
from cdi_plugin.deviceplugin.settings import Settings
from cdi_plugin.errors import CdiPluginError
from cdi_plugin.metrics import PluginMetrics
from cdi_plugin.recurring import Recurring
from cdi_plugin.wording import file_type

log = logging.getLogger(__name__)

SOCKET_PREFIX = "cdi-plugin-"
BACKOFF_FIRST = 0.1
BACKOFF_MAX = 10.0
STOP_GRACE = 0.5


def socket_name(resource: str, plugin_dir: Path) -> str:
    """``cdi-plugin-<vendor>_<class>.sock``, hashed when the path would be too long for a socket."""
    name = f"{SOCKET_PREFIX}{resource.replace('/', '_')}.sock"
    if len(os.fsencode(plugin_dir / name)) > MAX_SOCKET_PATH:
        name = f"{SOCKET_PREFIX}{short_hash(resource, 16)}.sock"
    return name


def _file_type(path: Path, *, follow: bool = False) -> str:
    try:
        return file_type((os.stat if follow else os.lstat)(path).st_mode)
    except OSError:
        return "gone"


def _not_yet(path: Path, wanted: str, *, follow: bool = False) -> str:
    """How a path the plugin waits for falls short: it does not exist yet, or is of another kind."""
    found = _file_type(path, follow=follow)
    return f"{path} does not exist yet" if found == "gone" else f"{path} is {found}, not {wanted}"


class EndpointError(CdiPluginError):
    pass


class Backoff:
    def __init__(self, first: float = BACKOFF_FIRST, maximum: float = BACKOFF_MAX) -> None:
        self.first, self.maximum = first, maximum
        self._next = first

    def next(self) -> float:
        delay, self._next = self._next, min(self._next * 2, self.maximum)
        return delay

    def reset(self) -> None:
        self._next = self.first


class Endpoint:
    def __init__(
        self,
        resource: str,
        settings: Settings,
        servicer_factory: Callable[[], DevicePluginService],
        plugin_dir_watch: DirWatch,
        options: api.DevicePluginOptions,
        *,
        metrics: PluginMetrics | None = None,
    ) -> None:
        self.resource = resource
        self.settings = settings
        self.path = settings.plugin_dir / socket_name(resource, settings.plugin_dir)
        self._factory = servicer_factory
        self._watch = plugin_dir_watch
        self._options = options
        self._server: grpc.aio.Server | None = None
        self._servicer: DevicePluginService | None = None
        self._bound: Identity | None = None
        self._extra = {"resource": resource}
        #: What keeps the endpoint from being registered, while it lasts.
        self._problem = Recurring(log, extra=self._extra, prefix=f"{resource}: ")
        self._metrics = metrics if metrics is not None else PluginMetrics()

    def _log(self, level: int, message: str, *args: object) -> None:
        log.log(level, "%s: " + message, self.resource, *args, extra=self._extra)

    # -- serving ----------------------------------------------------------------------------------

    def serving(self) -> bool:
        return self._server is not None and self._bound is not None and identity(self.path) == self._bound

    async def _serve(self) -> None:
        if self.serving():
            return
        if self._server is not None:
            self._log(logging.INFO, "socket %s was removed; serving on a new one", self.path)
            await self._stop_server()
        directory = self.settings.plugin_dir
        try:
            mode = os.stat(directory).st_mode
        except FileNotFoundError:
            raise EndpointError(f"the device plugin directory {directory} does not exist") from None
        except OSError as exc:
            raise EndpointError(f"the device plugin directory {directory}: {exc.strerror or exc}") from None
        if not stat.S_ISDIR(mode):
            raise EndpointError(
                f"the device plugin directory {directory} is {file_type(mode)}, not a directory"
            )
        if os.path.lexists(self.path):
            if (found := _file_type(self.path)) != "a socket":
                raise EndpointError(f"{self.path} is {found}, not a socket; not replacing it")
            try:
                in_use = someone_listens(self.path)
            except OSError as exc:  # a datagram socket, say
                raise EndpointError(f"{self.path}: cannot listen: {exc.strerror or exc}") from None
            if in_use:
                raise EndpointError(
                    f"another process is serving {self.path} (another cdi-plugin on this node: the "
                    "pod this one replaces, during an update?); taking it over once it is gone"
                )
            self._log(logging.INFO, "removing stale socket %s (nothing listens on it)", self.path)
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            except OSError as exc:  # a read-only directory, say
                raise EndpointError(
                    f"cannot remove the stale socket {self.path}: {exc.strerror or exc}"
                ) from None
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", self.settings.max_message_bytes),
                ("grpc.max_send_message_length", self.settings.max_message_bytes),
            ]
        )
        servicer = self._factory()
        api.add_device_plugin_servicer(servicer, server)
        try:
            bound = await serve_private(server, self.path)
            if bound is None:
                raise EndpointError(f"cannot listen on {self.path}: {bind_refusal(self.path)}")
        except (RuntimeError, OSError, EndpointError) as exc:
            await server.stop(None)
            if isinstance(exc, EndpointError):
                raise
            raise EndpointError(f"cannot listen on {self.path}: {exc}") from None
        self._server, self._servicer = server, servicer
        self._bound = bound
        self._log(logging.INFO, "serving the device plugin API on %s", self.path)

    async def _stop_server(self) -> None:
        server, self._server = self._server, None
        if self._servicer is not None:
            self._servicer.shutdown()
            self._servicer = None
        if server is not None:
            await stop_serving(server, self.path, self._bound, STOP_GRACE)
        self._bound = None

    async def close(self) -> bool:
        """Stop serving and remove the socket, if it is still the one this endpoint bound; True if
        there was such a socket."""
        bound = self._bound
        ours = bound is not None and identity(self.path) == bound
        self._metrics.endpoint_closed(self.resource)
        await self._stop_server()
        return ours

    # -- the loop ---------------------------------------------------------------------------------

    def _kubelet_side(self) -> tuple[bool, Identity | None, Identity | None]:
        """What ends a pause: the plugin directory, kubelet.sock and the endpoint's socket path."""
        plugin_dir = self.settings.plugin_dir
        return plugin_dir.is_dir(), identity(self.settings.kubelet_socket), identity(self.path)

    async def _pause(self, delay: float, before: tuple[bool, Identity | None, Identity | None]) -> None:
        """Sleep ``delay`` seconds, less if the plugin directory, kubelet.sock or the endpoint's
        socket (another process's, which it lets go) differs from ``before``."""
        loop_time = asyncio.get_running_loop().time
        deadline = loop_time() + delay
        while (remaining := deadline - loop_time()) > 0:
            seen = self._watch.pulse.count
            if self._kubelet_side() != before:
                return
            await self._watch.pulse.wait_after(seen, remaining)

    def _report(self, level: int, problem: str, delay: float) -> None:
        """Log a failure and the retry (:meth:`Recurring.report`)."""
        self._problem.report(level, problem, f"; retrying in {delay:.1f}s")

    async def _wait_for_kubelet(self, waiting: str, seen: int) -> None:
        """Say what the endpoint waits for (:meth:`Recurring.report`) and wait until the plugin
        directory changes or the next summary is due, so that a log shows the plugin is alive."""
        self._problem.report(logging.INFO, waiting)
        await self._watch.pulse.wait_after(seen, self._problem.due())

    async def run(self) -> None:
        """Serve and stay registered until cancelled."""
        backoff = Backoff()
        kubelet_sock = self.settings.kubelet_socket
        while True:
            seen = self._watch.pulse.count
            side = self._kubelet_side()
            kubelet = side[1]
            if not side[0]:
                if self._server is not None:
                    # Its socket went with the directory; while it listens, the directory's inode
                    # stays referenced, the kernel never reports it deleted, and the watch would
                    # miss the directory being created again.
                    await self._stop_server()
                missing = _not_yet(self.settings.plugin_dir, "a directory", follow=True)
                await self._wait_for_kubelet(f"waiting for the kubelet: {missing}", seen)
                continue
            try:
                await self._serve()
            except EndpointError as exc:
                delay = backoff.next()
                self._report(logging.WARNING, str(exc), delay)
                await self._pause(delay, side)
                continue
            if kubelet is None:
                missing = _not_yet(kubelet_sock, "a socket")
                await self._wait_for_kubelet(f"waiting for the kubelet: {missing}", seen)
                continue
            try:
                await register(kubelet_sock, self.path.name, self.resource, self._options)
            except RegistrationError as exc:
                self._metrics.registration(self.resource, "refused" if exc.refused else "unreachable")
                delay = backoff.next()
                problem = f"registration failed: {exc}"
                self._report(logging.ERROR if exc.refused else logging.WARNING, problem, delay)
                await self._pause(delay, (*side[:2], identity(self.path)))  # the socket is ours now
                continue
            backoff.reset()
            self._metrics.registration(self.resource, "ok")
            self._problem.recovered()
            self._log(
                logging.INFO, "registered with the kubelet (API %s, endpoint %s)", api.VERSION, self.path.name
            )
            while True:
                seen = self._watch.pulse.count
                if not self.serving():
                    self._log(
                        logging.INFO,
                        "our socket was removed (kubelet restart?); serving and registering again",
                    )
                    self._metrics.registered(self.resource, False)
                    break
                if identity(kubelet_sock) != kubelet:
                    self._log(
                        logging.INFO, "%s was replaced (kubelet restart); registering again", kubelet_sock
                    )
                    self._metrics.registered(self.resource, False)
                    break
                await self._watch.pulse.wait_after(seen)
