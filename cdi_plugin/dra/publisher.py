"""Keeps the node's ResourceSlices following the inventory, with the least traffic.

What the API server holds comes from a :class:`SliceWatch` (this node's slices of this driver,
listed once, then watched), so comparing it with the pool costs no request. The pool is compared
again whenever the inventory changes, the watch shows a change (someone edited or deleted a
slice: a starting kubelet deletes its node's slices), or the kubelet registers the driver
(:meth:`SlicePublisher.wake`), and written only when it differs: in a steady state nothing is
sent but the watch's renewals. The answers to the writes go into the cache at once, so the next
comparison sees them before the watch brings them. Slices no longer wanted are deleted after the
others are written, so no deletion takes the pool from readers (:func:`~cdi_plugin.dra.slices.plan`).

Each pass, and each failure, goes to the driver's :class:`~cdi_plugin.dra.report.Report`.
A failed write is tried again, with the inventory's latest state, after a delay growing from 1 s
to 30 s, or as long as the server's ``Retry-After`` asks when that is longer (at most 30 s, with
jitter upwards); a conflict (the cache was behind) lists the slices once before. Failures in a
row are logged as one lasting condition (:class:`~cdi_plugin.recurring.Recurring`): the first as
an error, then a summary every 5 minutes, and its end when a publish works again.
Device taints are used until the API server shows it drops them (the DRADeviceTaints gate is
off): from then on unhealthy devices are withdrawn instead. The kubelet side keeps serving
whatever happens here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from cdi_plugin.aio.pulse import Pulse
from cdi_plugin.aio.run import run_until
from cdi_plugin.dra.backoff import Backoff, Failures
from cdi_plugin.dra.inventory import Inventory, ServedDevice
from cdi_plugin.dra.kube import KubeApi
from cdi_plugin.dra.names import DraConfigError
from cdi_plugin.dra.reflector import READ_TIMEOUT, WATCH_TIMEOUT, SliceCache, SliceWatch
from cdi_plugin.dra.report import UNREPORTED, Report
from cdi_plugin.dra.rest import ApiServerError
from cdi_plugin.dra.shapes import Obj
from cdi_plugin.dra.slices import Plan, Pool, build_pool, content, plan, taints_dropped
from cdi_plugin.recurring import Recurring
from cdi_plugin.wording import fault

log = logging.getLogger(__name__)

#: Between failed publishes.
RETRY = Backoff(initial=1.0, maximum=30.0)
#: The condition of failures in a row (each failure is its detail).
FAILING = "failing to publish ResourceSlices"


def _untainted(slice_content: Any) -> Any:
    """A slice's :func:`~cdi_plugin.dra.slices.content` without the devices' taints."""
    name, (count, devices) = slice_content
    return name, (count, [{k: v for k, v in d.items() if k != "taints"} for d in devices])


class SlicePublisher:
    def __init__(
        self,
        kube: KubeApi,
        *,
        taints: bool = True,
        backoff: Backoff = RETRY,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_publish: Callable[[Plan], None] | None = None,
        watch_timeout: tuple[int, int] = WATCH_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
        report: Report = UNREPORTED,
    ) -> None:
        self.kube = kube
        self.report = report
        self.taints = taints
        self.failures = Failures(backoff)
        self.failing = Recurring(log)
        self.sleep = sleep
        self.on_publish = on_publish
        self._wake = Pulse()
        self.cache = SliceCache(on_change=self._wake.fire)
        self.watch = SliceWatch(
            kube, self.cache, watch_timeout=watch_timeout, read_timeout=read_timeout, sleep=sleep
        )
        self._stale = False  # a write met a conflict: list before the next
        self._published = False  # once: the node's UID read at start is not read again at once
        #: Slices the API server stored otherwise than written, by name: (the spec written,
        #: the content stored). Such a slice counts as written while it is stored so.
        self._adopted: dict[str, tuple[Obj, Any]] = {}

    def _pool(self, devices: Mapping[str, ServedDevice], *, taints: bool) -> Pool:
        pool = build_pool(self.kube.driver, self.kube.node, devices, taints=taints)
        return dataclasses.replace(pool, node_uid=self.kube.node_uid)

    async def publish(self, devices: Mapping[str, ServedDevice]) -> Plan:
        """Bring the stored slices to the pool of ``devices``; what was sent (empty when nothing)."""
        if self._stale:
            self.cache.replace(*await self.kube.list_slices())
            self._stale = False
        pool = self._pool(devices, taints=self.taints)
        done = await self._apply(pool)
        wrote = not done.empty
        tainted = self.taints and any(e.get("taints") for chunk in pool.chunks for e in chunk)
        if tainted and taints_dropped(pool, self.cache.objects()):
            log.warning(
                "the API server dropped the device taints (feature gate DRADeviceTaints off?): "
                "unhealthy devices are withdrawn from the pool instead"
            )
            self.taints = False
            done = await self._apply(self._pool(devices, taints=False))
            wrote = wrote or not done.empty
        self.report.published("changed" if wrote else "unchanged")
        if self.on_publish is not None:
            self.on_publish(done)
        return done

    def _stored(self) -> list[Obj]:
        """The stored slices, each one the API server stored otherwise than written as written."""
        out = []
        for obj in self.cache.objects():
            adopted = self._adopted.get(obj["metadata"]["name"])
            out.append({**obj, "spec": adopted[0]} if adopted and content(obj) == adopted[1] else obj)
        return out

    def _written(self, sent: Obj, answer: Obj) -> None:
        """Take the answer to a write into the cache. One the API server stored otherwise (a
        mutating admission webhook, a field its version drops) is adopted as it is, with one line:
        writing it again would only bring the same answer, and its watch event another pass."""
        self.cache.put(answer)
        name, stored = answer["metadata"]["name"], content(answer)
        if stored == content(sent):
            self._adopted.pop(name, None)
            return
        # dropped taints have a line of their own (publish), and unhealthy devices are withdrawn
        if self._adopted.get(name, ({}, None))[1] != stored and _untainted(stored) != _untainted(
            content(sent)
        ):
            log.warning(
                "the API server stored ResourceSlice %s otherwise than written (a mutating admission "
                "webhook, or a field it drops?); kept as stored until the pool changes",
                name,
            )
        self._adopted[name] = (sent["spec"], stored)

    async def _apply(self, pool: Pool) -> Plan:
        changes = plan(pool, self._stored())
        try:
            if changes.create and self.kube.node_uid and self._published:
                pool = await self._owned_by_current_node(pool)
                changes = plan(pool, self._stored())
            for obj in changes.update:
                self._written(obj, await self.kube.replace_slice(obj))
            for obj in changes.create:
                self._written(obj, await self.kube.create_slice(obj))
            # last: readers ignore them from the first write of the new generation on, and until
            # then they still hold the pool (surplus slices, a slice's second name, leftovers)
            for obj in changes.delete:
                await self.kube.delete_slice(obj)
                self.cache.remove(obj["metadata"]["name"])
        except ApiServerError as exc:
            self._stale = self._stale or exc.code == 409
            raise
        self._published = True
        if not changes.empty:
            log.info(
                "published pool %s generation %d: %d created, %d updated, %d deleted",
                pool.node, changes.generation, len(changes.create), len(changes.update), len(changes.delete),
            )  # fmt: skip
        return changes

    async def _owned_by_current_node(self, pool: Pool) -> Pool:
        """``pool`` owned by the node's UID read again. Slices are created again when someone
        deleted them: the garbage collector does when the node was deleted and registered again
        (same name, a new UID), and slices owned by the old UID would be collected as soon as
        they are created, again and again."""
        try:
            uid = await self.kube.read_node_uid()
        except DraConfigError:
            node = f"GET /api/v1/nodes/{self.kube.node}"
            raise ApiServerError(node, "not found (deleted, not registered again yet?)", code=404) from None
        if uid != pool.node_uid:
            log.warning("node %s has a new UID, %s: its slices are owned by it from now on", pool.node, uid)
        return dataclasses.replace(pool, node_uid=uid)

    def wake(self) -> None:
        """Compare the pool with the stored slices again now, whether or not anything changed."""
        self._wake.fire()

    async def run(self, inventory: Inventory) -> None:
        """Follow the stored slices and publish every state of ``inventory``, until cancelled."""

        async def follow() -> None:
            async for _ in inventory.changes():
                self._wake.fire()

        await run_until(asyncio.Event(), follow(), self.watch.run(), self._publish_on_wake(inventory))

    async def _publish_on_wake(self, inventory: Inventory) -> None:
        await self._wake.wait_after(0)  # the inventory's first state
        await self.cache.synced.wait()  # and the stored slices
        while True:
            seen = self._wake.count
            try:
                await self.publish(inventory.devices())
            except Exception as exc:  # ApiServerError; anything else is a fault of the driver's own
                api = exc if isinstance(exc, ApiServerError) else None
                problem = str(exc) if api else f"unexpected {fault(exc)}"
                self.report.published("failed", problem)
                delay = self.failures.next_delay(api.retry_after if api else None)
                self.failing.report(logging.ERROR, FAILING, f": {problem}; trying again in {delay:.0f} s")
                await self.sleep(delay)
                continue
            self.failures.reset()
            self.failing.recovered()
            await self._wake.wait_after(seen)
