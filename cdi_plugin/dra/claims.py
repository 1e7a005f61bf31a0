"""The ResourceClaims allocated on this node's pool by this driver, kept by a watch.

NodePrepareResources names a claim only by namespace, name and UID, so its allocation must come
from the API server; reading it there on every call costs a round trip on the kubelet's path.
:class:`ClaimCache` lists the claims once, then follows a watch of them, and keeps (by UID,
trimmed to what Prepare reads) only those with an allocation result of this driver in this
node's pool (the pool is named after the node). A claim the cache does not hold, or any claim
while the cache is not in step with the server (before the first list, after the watch broke,
while it lists again), is read with a GET instead, so the cache only ever saves a round trip.

A watch that breaks is taken up once from the last version seen. A watch whose version the
server no longer keeps (410 Expired) lists again at once; other failures list again after a
backoff, the kubelet side answering with GETs meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

from cdi_plugin.dra.kube import ApiServerError, Backoff, WatchExpired

log = logging.getLogger(__name__)

#: Between failed attempts to list and watch the claims.
RETRY = Backoff(initial=0.5, maximum=30.0)


class ClaimSource(Protocol):
    async def list_claims(self) -> tuple[list[Mapping[str, Any]], str]:
        """Every claim and the list's resourceVersion; ApiServerError when it keeps failing."""
        ...

    def watch_claims(self, since: str) -> AsyncIterator[tuple[str, Mapping[str, Any]]]:
        """(event type, claim) after ``since``; WatchExpired (410) or ApiServerError when it breaks."""
        ...


def allocated_here(claim: Mapping[str, Any], driver: str, pool: str) -> dict[str, Any] | None:
    """What Prepare reads of ``claim`` when some result is ``driver``'s in ``pool``, else None."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    if not any(r.get("driver") == driver and r.get("pool") == pool for r in results):
        return None
    meta = claim.get("metadata") or {}
    return {
        "metadata": {k: meta.get(k) for k in ("namespace", "name", "uid")},
        "status": {"allocation": allocation},
    }


class ClaimCache:
    def __init__(
        self,
        driver: str,
        pool: str,
        source: ClaimSource,
        *,
        backoff: Backoff = RETRY,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.driver = driver
        self.pool = pool
        self.source = source
        self.backoff = backoff
        self.sleep = sleep
        self.synced = False
        self._claims: dict[str, dict[str, Any]] = {}

    def get(self, namespace: str, name: str, uid: str) -> Mapping[str, Any] | None:
        """The claim allocated here with this UID, namespace and name; None when not known for sure."""
        if not self.synced:
            return None
        claim = self._claims.get(uid)
        if claim is None or (claim["metadata"]["namespace"], claim["metadata"]["name"]) != (namespace, name):
            return None
        return claim

    def _apply(self, kind: str, claim: Mapping[str, Any]) -> None:
        uid = str((claim.get("metadata") or {}).get("uid"))
        kept = allocated_here(claim, self.driver, self.pool) if kind in ("ADDED", "MODIFIED") else None
        if kept is None:
            self._claims.pop(uid, None)
        else:
            self._claims[uid] = kept

    async def _follow(self, version: str) -> None:
        """Apply the watch's events after ``version``. A watch that breaks (a dropped connection,
        an API server restart) is taken up once from the last version seen; only when that fails
        too, before any event came, does the caller list again."""
        resumed = False
        while True:
            try:
                async for kind, claim in self.source.watch_claims(version):
                    version = str((claim.get("metadata") or {}).get("resourceVersion") or version)
                    self._apply(kind, claim)
                    resumed = False
                return
            except WatchExpired:
                raise
            except ApiServerError as exc:
                if resumed:
                    raise
                resumed = True
                log.debug("%s; watching again from version %s", exc, version)

    async def run(self) -> None:
        """List, then follow the watch; again whenever it breaks. Until cancelled."""
        attempt = 0
        while True:
            try:
                items, version = await self.source.list_claims()
                self._claims = {}
                for claim in items:
                    self._apply("ADDED", claim)
                self.synced, attempt = True, 0
                log.debug(
                    "ResourceClaims listed at version %s: %d allocated here", version, len(self._claims)
                )
                await self._follow(version)
                self.synced = False
            except WatchExpired as exc:
                self.synced = False
                log.info("%s; listing the claims again", exc)
            except ApiServerError as exc:
                self.synced = False
                delay = self.backoff.delay(attempt)
                attempt += 1
                log.warning("%s; reading claims with GETs, listing again in %.1f s", exc, delay)
                await self.sleep(delay)
