"""Keeps the node's ResourceSlices following the inventory.

Each state of the inventory becomes one publish of the whole pool (the inventory coalesces
changes, and a publish that finds nothing to change sends nothing). The pool is also published
again when :meth:`SlicePublisher.wake` is called (the kubelet registered the driver: a starting
kubelet deletes its node's slices) and every ``resync`` seconds, which brings back slices someone
else deleted. A failed publish is logged and tried again with backoff, with the inventory's
latest state; the kubelet side keeps serving meanwhile. Device taints are used until the API
server shows it drops them (the DRADeviceTaints gate is off): from then on unhealthy devices are
withdrawn instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from cdi_plugin.aio.pulse import Pulse
from cdi_plugin.aio.run import run_until
from cdi_plugin.dra.inventory import Inventory, ServedDevice
from cdi_plugin.dra.kube import ApiServerError, Backoff, KubeApi
from cdi_plugin.dra.slices import Plan, build_pool, taints_dropped

log = logging.getLogger(__name__)

#: Between failed publishes (each already retried within itself).
RETRY = Backoff(initial=1.0, maximum=30.0)
#: Between publishes when nothing else asks for one (what the kubelet's helper library does).
RESYNC = 30.0


class SlicePublisher:
    def __init__(
        self,
        kube: KubeApi,
        *,
        taints: bool = True,
        backoff: Backoff = RETRY,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_publish: Callable[[Plan], None] | None = None,
        resync: float = RESYNC,
    ) -> None:
        self.kube = kube
        self.resync = resync
        self._wake = Pulse()
        self.taints = taints
        self.backoff = backoff
        self.sleep = sleep
        self.on_publish = on_publish

    async def publish(self, devices: Mapping[str, ServedDevice]) -> Plan:
        pool = build_pool(self.kube.driver, self.kube.node, devices, taints=self.taints)
        done = await self.kube.publish(pool)
        tainted = self.taints and any(e.get("taints") for chunk in pool.chunks for e in chunk)
        if tainted and taints_dropped(pool, await self.kube.slices()):
            log.warning(
                "the API server dropped the device taints (feature gate DRADeviceTaints off?): "
                "unhealthy devices are withdrawn from the pool instead"
            )
            self.taints = False
            done = await self.kube.publish(
                build_pool(self.kube.driver, self.kube.node, devices, taints=False)
            )
        if self.on_publish is not None:
            self.on_publish(done)
        return done

    def wake(self) -> None:
        """Publish again now, whether or not the inventory changed."""
        self._wake.fire()

    async def run(self, inventory: Inventory) -> None:
        """Publish every state of ``inventory`` until cancelled."""

        async def follow() -> None:
            async for _ in inventory.changes():
                self._wake.fire()

        await run_until(asyncio.Event(), follow(), self._publish_on_wake(inventory))

    async def _publish_on_wake(self, inventory: Inventory) -> None:
        await self._wake.wait_after(0)  # the inventory's first state
        while True:
            seen, attempt = self._wake.count, 0
            while True:
                try:
                    await self.publish(inventory.devices())
                    break
                except ApiServerError as exc:
                    delay = self.backoff.delay(attempt)
                    log.error("%s; trying again in %.0f s", exc, delay)
                    attempt += 1
                    await self.sleep(delay)
            await self._wake.wait_after(seen, self.resync)
