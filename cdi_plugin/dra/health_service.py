"""The kubelet's device health service (``DRAResourceHealth.NodeWatchResources``, v1 and v1alpha1).

Each stream sends the pool's devices (:func:`~cdi_plugin.dra.health.pool_health`) at once, then
again after every change of the inventory, and every :data:`~cdi_plugin.dra.health.REFRESH`
seconds when nothing changed, so the kubelet never takes them as Unknown. Up to
:data:`MAX_STREAMS` streams may be open (a kubelet that opens a second one while the first still
runs gets the same lists on both; one more ends the oldest, with RESOURCE_EXHAUSTED); one the
kubelet drops is closed, with a log line, and the others go on. :meth:`shutdown` ends the open
streams (the server is about to stop). A kubelet that registers the driver but opens no stream
within :data:`EXPECT_WITHIN` seconds gets one log line saying that pods will not show the
devices' health.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import grpc

from cdi_plugin.aio.streams import OpenStreams
from cdi_plugin.dra import api
from cdi_plugin.dra.health import REFRESH, TIMEOUT, pool_health
from cdi_plugin.dra.inventory import Inventory, ServedDevice
from cdi_plugin.dra.names import device_names
from cdi_plugin.wording import plural

log = logging.getLogger(__name__)

#: Streams open at once; a newer one ends the oldest, with RESOURCE_EXHAUSTED (the kubelet opens
#: one, and again every 5 s while it fails: a restarted kubelet's may come before the old one ends).
MAX_STREAMS = 4
#: Seconds after a registration within which a kubelet that shows device health opens a stream
#: (the 1.36 kubelet opens it at once, and again every 5 s while it fails).
EXPECT_WITHIN = 30.0


class HealthService:
    def __init__(
        self,
        pool: str,
        inventory: Inventory,
        *,
        timeout: int = TIMEOUT,
        refresh: float = REFRESH,
        expect_within: float = EXPECT_WITHIN,
    ) -> None:
        self.pool = pool
        self.inventory = inventory
        self.timeout = timeout
        self.refresh = refresh
        self.expect_within = expect_within
        self._streams = OpenStreams(MAX_STREAMS)
        self._closing = asyncio.Event()
        self._expecting: asyncio.TimerHandle | None = None
        self._names: tuple[Mapping[str, ServedDevice], Mapping[str, str]] | None = None

    @property
    def open(self) -> int:
        """The streams open now."""
        return len(self._streams)

    def registered(self) -> None:
        """The kubelet registered the driver: expect a stream within :attr:`expect_within` seconds."""
        if self._expecting is not None:
            self._expecting.cancel()
        if not self.open:
            self._expecting = asyncio.get_running_loop().call_later(self.expect_within, self._not_watched)

    def _not_watched(self) -> None:
        self._expecting = None
        log.info(
            "the kubelet registered the driver %gs ago but has not asked for device health: pods will "
            "not show the health of their claims' devices (a kubelet before 1.34, or with the "
            "ResourceHealthStatus feature gate off)",
            self.expect_within,
        )

    def shutdown(self) -> None:
        """End the open streams; streams opened later (after a restart of the server) are served."""
        self._closing.set()
        self._closing = asyncio.Event()

    def _message(self, version: str, devices: Mapping[str, ServedDevice]) -> Any:
        if self._names is None or self._names[0] is not devices:
            self._names = (devices, device_names(devices))
        health = pool_health(self.pool, devices, now=time.time(), timeout=self.timeout, names=self._names[1])
        return api.health_response(version, health)

    async def NodeWatchResources(self, request: Any, context: Any) -> AsyncIterator[Any]:
        version = api.health_version_of(request)
        ended = "failed"
        try:
            with self._streams.opened() as replaced:
                if self._expecting is not None:
                    self._expecting.cancel()
                    self._expecting = None
                log.info("the kubelet opened a device health stream (%s, %s open)", version, self._count())
                async with contextlib.aclosing(self._stream(version, replaced)) as messages:
                    async for message in messages:
                        yield message
                ended = (
                    f"newer streams were opened, and at most {MAX_STREAMS} are served at once"
                    if replaced.is_set()
                    else "the driver stops"
                )
        except (asyncio.CancelledError, GeneratorExit):
            ended = "the kubelet closed it"
            raise
        finally:
            log.info("a device health stream ended (%s, %s): %s open", version, ended, self._count())
        if replaced.is_set():
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"the device health stream ended: {ended}"
            )

    def _count(self) -> str:
        return plural(self.open, "stream")

    async def _stream(self, version: str, replaced: asyncio.Event) -> AsyncGenerator[Any, None]:
        """The messages of one stream until the driver stops or a newer stream ``replaced`` it."""
        stops = (asyncio.ensure_future(self._closing.wait()), asyncio.ensure_future(replaced.wait()))
        changes = aiter(self.inventory.changes())
        change: asyncio.Future[Mapping[str, ServedDevice]] = asyncio.ensure_future(anext(changes))
        try:
            devices = await change
            while True:
                yield self._message(version, devices)
                if change.done():
                    change = asyncio.ensure_future(anext(changes))
                await asyncio.wait(
                    (change, *stops), timeout=self.refresh, return_when=asyncio.FIRST_COMPLETED
                )
                if any(stop.done() for stop in stops):
                    return
                if change.done():
                    devices = change.result()
        finally:
            for future in (*stops, change):
                future.cancel()
