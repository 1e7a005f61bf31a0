"""The API server: this node's ResourceSlices for this driver, and the claims to prepare.

The only module that imports the Kubernetes client (lightkube), and only the DRA driver imports
this module, so the device plugin alone never loads it. lightkube was chosen for its footprint
and its asyncio client that knows ``resource.k8s.io/v1`` (see docs/dra.md).

Every slice this module lists, replaces or deletes is one whose ``spec.nodeName`` and
``spec.driver`` are this node and driver: the list asks the server for exactly those (field
selectors) and checks again what comes back. Updates carry the stored ``resourceVersion``
(optimistic concurrency). Conflicts (409), throttling (429), server errors (5xx) and transport
errors are retried with exponential backoff; a conflict re-reads the slices and plans again.
ResourceClaims are read one at a time, or listed and watched in every namespace (the driver
keeps those allocated on its node: :mod:`cdi_plugin.dra.claims`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import httpx2
import yaml
from lightkube import ALL_NS, ApiError, AsyncClient, ConfigError, KubeConfig
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from cdi_plugin.dra.kubelet import ClaimReadError
from cdi_plugin.dra.names import DraConfigError
from cdi_plugin.dra.rolling import kubelet_version
from cdi_plugin.dra.slices import Obj, Plan, Pool, plan
from cdi_plugin.errors import CdiPluginError

log = logging.getLogger(__name__)

RETRYABLE = frozenset({409, 429, 500, 502, 503, 504})
#: The API server ends a watch after this long (seconds); it is taken up again from where it was.
WATCH_TIMEOUT = 300
#: ResourceClaims asked for per page when listing them.
LIST_CHUNK = 500
FIELD_MANAGER = "cdi-plugin"
T = TypeVar("T")


class ApiServerError(CdiPluginError):
    """The API server refused a request for good, or kept failing after every retry."""


class WatchExpired(ApiServerError):
    """A watch's resourceVersion is older than the API server keeps (410): list again."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between attempts: ``initial`` doubling up to ``maximum``, with +-20 % jitter."""

    initial: float = 0.2
    maximum: float = 10.0
    attempts: int = 6

    def delay(self, attempt: int) -> float:
        return min(self.maximum, self.initial * 2.0**attempt) * random.uniform(0.8, 1.2)


def _code(exc: Exception) -> int | None:
    """The HTTP status of a failed request; None for a transport error (no answer at all)."""
    return exc.status.code if isinstance(exc, ApiError) else None


def _describe(exc: Exception) -> str:
    if isinstance(exc, ApiError):
        return f"{exc.status.code} {exc.status.reason or ''}: {exc.status.message or ''}".replace(" :", ":")
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _config_problem(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"{exc} missing"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _slice(obj: Obj) -> ResourceSlice:
    return cast(ResourceSlice, ResourceSlice.from_dict(obj))


class KubeApi:
    def __init__(
        self,
        driver: str,
        node: str,
        client: AsyncClient,
        *,
        backoff: Backoff = Backoff(),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.driver = driver
        self.node = node
        self.client = client
        self.backoff = backoff
        self.sleep = sleep
        self._node_uid = ""
        #: The node's ``status.nodeInfo.kubeletVersion`` as last read ("" when it had none).
        self.kubelet_version = ""

    @classmethod
    def connect(cls, driver: str, node: str, kubeconfig: Path | None = None, **kwargs: Any) -> KubeApi:
        """In-cluster credentials, else ``$KUBECONFIG`` or ``~/.kube/config``.

        An explicit ``kubeconfig`` overrides them and the environment altogether (proxies included).
        """
        try:
            config = KubeConfig.from_file(kubeconfig) if kubeconfig is not None else KubeConfig.from_env()
            client = AsyncClient(
                config, lazy=False, field_manager=FIELD_MANAGER, trust_env=kubeconfig is None
            )
        except (ConfigError, OSError, ValueError, KeyError, AttributeError, TypeError, yaml.YAMLError) as exc:
            where = (
                f"--kubeconfig {kubeconfig}"
                if kubeconfig is not None
                else "Kubernetes credentials (no service account, $KUBECONFIG or ~/.kube/config)"
            )
            raise DraConfigError(f"{where}: {_config_problem(exc)}") from exc
        return cls(driver, node, client, **kwargs)

    async def close(self) -> None:
        await self.client.close()

    async def _retry(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        for attempt in range(self.backoff.attempts):
            try:
                return await call()
            except (ApiError, httpx2.TransportError) as exc:
                code = _code(exc)
                if code is not None and code not in RETRYABLE:
                    raise ApiServerError(f"{what}: {_describe(exc)}") from exc
                if attempt + 1 == self.backoff.attempts:
                    raise ApiServerError(
                        f"{what}: {_describe(exc)} (gave up after {self.backoff.attempts} attempts)"
                    ) from exc
                delay = self.backoff.delay(attempt)
                log.warning("%s: %s; retrying in %.1f s", what, _describe(exc), delay)
                await self.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def node_uid(self) -> str:
        """The node's UID (and :attr:`kubelet_version`); DraConfigError when there is no such node."""

        async def get() -> str:
            try:
                node = await self.client.get(Node, self.node)
            except ApiError as exc:
                if exc.status.code == 404:
                    raise DraConfigError(f"node {self.node!r}: not found in the API server") from exc
                raise
            self.kubelet_version = kubelet_version(node.to_dict())
            return str(node.metadata.uid) if node.metadata is not None else ""

        self._node_uid = await self._retry(f"reading node {self.node}", get)
        return self._node_uid

    async def read_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A ResourceClaim as a dict, None when it does not exist (the kubelet side's ClaimReader)."""

        async def get() -> Mapping[str, Any] | None:
            try:
                claim = await self.client.get(ResourceClaim, name, namespace=namespace)
            except ApiError as exc:
                if exc.status.code == 404:
                    return None
                raise
            result: Mapping[str, Any] = claim.to_dict()
            return result

        try:
            return await self._retry(f"reading ResourceClaim {namespace}/{name}", get)
        except ApiServerError as exc:
            raise ClaimReadError(str(exc)) from exc

    async def list_claims(self) -> tuple[list[Mapping[str, Any]], str]:
        """Every ResourceClaim of every namespace, and the list's resourceVersion."""

        async def once() -> tuple[list[Mapping[str, Any]], str]:
            found = self.client.list(ResourceClaim, namespace=ALL_NS, chunk_size=LIST_CHUNK)
            items: list[Mapping[str, Any]] = []
            async for claim in found:
                items.append(claim.to_dict())
                if len(items) % 100 == 0:
                    await asyncio.sleep(0)  # decoding a large cluster's claims: let the sockets be served
            return items, found.resourceVersion

        return await self._retry("listing ResourceClaims", once)

    async def watch_claims(self, since: str) -> AsyncIterator[tuple[str, Mapping[str, Any]]]:
        """ResourceClaim events after ``since``, until the watch fails (WatchExpired on 410)."""
        watch = self.client.watch(
            ResourceClaim, namespace=ALL_NS, resource_version=since, server_timeout=WATCH_TIMEOUT
        )
        try:
            async for kind, claim in watch:
                yield kind, claim.to_dict()
        except httpx2.HTTPError as exc:  # an ApiError, the watch's own answer, or the transport
            code = _code(exc)
            if code is None and isinstance(exc, httpx2.HTTPStatusError):
                code = exc.response.status_code
            what = f"watching ResourceClaims (listed at version {since}): {_describe(exc)}"
            raise (WatchExpired if code == 410 else ApiServerError)(what) from exc

    def _ours(self, obj: Obj) -> bool:
        spec = obj.get("spec") or {}
        return spec.get("nodeName") == self.node and spec.get("driver") == self.driver

    async def _list(self) -> list[Obj]:
        found = self.client.list(
            ResourceSlice, fields={"spec.nodeName": self.node, "spec.driver": self.driver}
        )
        stored = [s.to_dict() async for s in found]
        return [obj for obj in stored if self._ours(obj)]

    async def slices(self) -> list[Obj]:
        """This node's slices of this driver, as stored."""
        return await self._retry("listing ResourceSlices", self._list)

    async def _apply(self, changes: Plan) -> None:
        for obj in changes.delete:
            try:
                await self.client.delete(ResourceSlice, obj["metadata"]["name"])
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
        for obj in changes.update:
            await self.client.replace(_slice(obj))
        for obj in changes.create:
            await self.client.create(_slice(obj))

    async def publish(self, pool: Pool) -> Plan:
        """Bring the stored slices to ``pool``, owned by the Node; what was sent (empty when nothing)."""
        if pool.driver != self.driver or pool.node != self.node:
            raise ValueError(f"pool of {pool.driver} on {pool.node}, not {self.driver} on {self.node}")
        pool = dataclasses.replace(pool, node_uid=self._node_uid or await self.node_uid())

        async def once() -> Plan:
            changes = plan(pool, await self._list())
            await self._apply(changes)
            return changes

        done = await self._retry(f"publishing ResourceSlices of {self.driver} on {self.node}", once)
        if not done.empty:
            log.info(
                "published pool %s generation %d: %d created, %d updated, %d deleted",
                pool.node, done.generation, len(done.create), len(done.update), len(done.delete),
            )  # fmt: skip
        return done
