"""What the driver asks of the API server: its node, whether it serves DRA, a claim, and its own
ResourceSlices.

Every answer comes checked through :mod:`cdi_plugin.dra.rest` and :mod:`cdi_plugin.dra.shapes`.
Names go into paths only after they passed the API's name rules, and as escaped path segments.

* The node: one GET at start, and one before slices are created anew (its UID makes the Node own them).
* ``resource.k8s.io/v1``: its discovery document, one GET at start (see :meth:`KubeApi.dra_api_problem`).
* A claim: one GET each, when the kubelet asks to prepare it, retried within a deadline well
  inside the kubelet's 45 s, each attempt with its own timeout, never sooner than the server's
  ``Retry-After`` asks (past the deadline, the read fails at once). No claim is ever listed or
  watched.
* The slices: listed and watched with the field selectors ``spec.driver`` and ``spec.nodeName``
  (only this node's slices of this driver; what comes back is checked again), created, replaced
  with their stored ``resourceVersion`` and deleted, one at a time by name. A create refused as
  the name exists reads the slice of that name once, to say whose it is.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from cdi_plugin.dra.backoff import Backoff
from cdi_plugin.dra.names import DraConfigError, claim_name_problem
from cdi_plugin.dra.prepare import ClaimReadError
from cdi_plugin.dra.rest import ApiServerError, RestClient
from cdi_plugin.dra.rolling import kubelet_version
from cdi_plugin.dra.shapes import (
    BadAnswer,
    Obj,
    list_of,
    node_uid,
    resource_names,
    resource_version,
    slice_holder,
    slice_problem,
)
from cdi_plugin.wording import joined, plural, shown

log = logging.getLogger(__name__)

GROUP_VERSION = "resource.k8s.io/v1"
RESOURCE_API = f"/apis/{GROUP_VERSION}"
SLICES = f"{RESOURCE_API}/resourceslices"
#: The resources of resource.k8s.io/v1 the driver uses.
NEEDED = ("resourceslices", "resourceclaims")
FIELD_MANAGER = "cdi-plugin"
#: One attempt at reading a claim; the attempts of one claim together (the kubelet waits 45 s).
CLAIM_ATTEMPT_TIMEOUT = 10.0
CLAIM_DEADLINE = 28.0
CLAIM_RETRY = Backoff()
#: Pages of a list followed at most. The driver asks for no pages (no ``limit``), so the API server
#: answers in one; pages held together cost up to some 35 MiB each once decoded (MAX_BODY).
MAX_PAGES = 4


def _segment(value: str) -> str:
    return quote(value, safe="")


class KubeApi:
    def __init__(
        self,
        driver: str,
        node: str,
        rest: RestClient,
        *,
        backoff: Backoff = CLAIM_RETRY,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        claim_deadline: float = CLAIM_DEADLINE,
        claim_attempt_timeout: float = CLAIM_ATTEMPT_TIMEOUT,
    ) -> None:
        self.driver = driver
        self.node = node
        self.rest = rest
        self.backoff = backoff
        self.sleep = sleep
        self.claim_deadline = claim_deadline
        self.claim_attempt_timeout = claim_attempt_timeout
        self.node_uid = ""
        #: The node's ``status.nodeInfo.kubeletVersion`` as last read ("" when it had none).
        self.kubelet_version = ""
        self._selector = {"fieldSelector": f"spec.driver={driver},spec.nodeName={node}"}

    @classmethod
    def connect(cls, driver: str, node: str, kubeconfig: Path | None = None, **kwargs: Any) -> KubeApi:
        """The API server of the credentials found (see RestClient.connect); DraConfigError."""
        return cls(driver, node, RestClient.connect(kubeconfig), **kwargs)

    async def close(self) -> None:
        await self.rest.close()

    async def read_node_uid(self) -> str:
        """The node's UID (kept as :attr:`node_uid`); DraConfigError when the API server says there
        is no such node, ApiServerError when it cannot tell."""
        path = f"/api/v1/nodes/{_segment(self.node)}"
        try:
            answer = await self.rest.request("GET", path)
        except ApiServerError as exc:
            if exc.code == 404 and exc.reason == "NotFound":
                raise DraConfigError(f"node {self.node!r}: not found in the API server") from exc
            raise
        self.node_uid = _checked(f"GET {path}", node_uid, answer)
        self.kubelet_version = kubelet_version(answer)
        return self.node_uid

    async def dra_api_problem(self) -> str | None:
        """Why this API server cannot serve the driver, from its discovery document of
        resource.k8s.io/v1 (which every authenticated client may read), or None when it serves
        the resources the driver uses.

        kube-apiserver answers a group version it does not serve (before 1.34, or turned off with
        ``--runtime-config``) with a ``Status`` 404 NotFound, the one answer taken for "no DRA";
        ApiServerError when it cannot tell (no answer, another error, a proxy's 404 page).
        """
        try:
            answer = await self.rest.request("GET", RESOURCE_API)
        except ApiServerError as exc:
            if exc.code == 404 and exc.reason == "NotFound":
                why = "Kubernetes before 1.34, or DRA turned off"
                return f"the API server does not serve {GROUP_VERSION} ({why})"
            raise
        served = _checked(f"GET {RESOURCE_API}", lambda obj: resource_names(obj, GROUP_VERSION), answer)
        missing = [name for name in NEEDED if name not in served]
        if missing:
            return f"the API server serves {GROUP_VERSION} without {joined(missing)} (turned off?)"
        return None

    async def read_claim(
        self, namespace: str, name: str, *, until: float | None = None
    ) -> Mapping[str, Any] | None:
        """A ResourceClaim as the API server holds it, None when it has none by that name.

        ClaimReadError naming the claim and the reason when it cannot be read: a name the API
        would refuse (nothing is sent), a refusal, or failures until the deadline or the last
        attempt. ``until`` (event loop time) is when the call reading it must have its answer:
        the read's deadline when that comes first, a ``Retry-After`` compared with what is left.
        """
        problem = claim_name_problem(namespace, name)
        if problem is not None:
            raise ClaimReadError(problem)
        path = f"{RESOURCE_API}/namespaces/{_segment(namespace)}/resourceclaims/{_segment(name)}"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.claim_deadline
        given, spent = f"the {self.claim_deadline:g} s given to reading it", f"in {self.claim_deadline:g} s"
        if until is not None and until < deadline:  # a read started late in a call of many claims
            deadline, given = until, "the time the kubelet gives the call"
            spent = f"within {given}"
        attempt = 0
        while True:
            attempt += 1
            timeout = max(0.0, min(self.claim_attempt_timeout, deadline - loop.time()))
            try:
                return await self.rest.request("GET", path, timeout=timeout)
            except ApiServerError as exc:
                if exc.code == 404 and exc.reason == "NotFound":
                    return None
                delay = self.backoff.delay(attempt - 1)
                if not exc.retryable or attempt >= self.backoff.attempts:
                    raise ClaimReadError(f"{exc} (attempt {attempt})") from None
                if exc.retry_after is not None:  # the server's wish, when the deadline allows it
                    left = deadline - loop.time()
                    if exc.retry_after >= left:
                        raise ClaimReadError(
                            f"{exc}; the API server asks to retry in {exc.retry_after:.0f} s, more than the "
                            f"{max(0.0, left):.1f} s left of {given} (attempt {attempt})"
                        ) from None
                    delay = max(delay, exc.retry_after)
                if loop.time() + delay >= deadline:
                    tried = plural(attempt, "attempt")
                    raise ClaimReadError(f"{exc} (gave up after {tried} {spent})") from None
                log.warning("%s; trying again in %.1f s", exc, delay)
                await self.sleep(delay)

    async def list_slices(self) -> tuple[list[Obj], str]:
        """This node's slices of this driver, checked, and the list's resourceVersion."""
        items: list[Obj] = []
        others = _Others()
        params = dict(self._selector)
        try:
            for _ in range(MAX_PAGES):
                answer = await self.rest.request("GET", SLICES, params=params, verb="list")
                found, version, more = _checked(f"GET {SLICES}", list_of, answer)
                items += self._ours(f"GET {SLICES}", found, others)
                if not more:
                    return items, version
                params["continue"] = more
        finally:
            others.warn(f"GET {SLICES}")
        raise ApiServerError(f"GET {SLICES}", f"still more pages after {MAX_PAGES}")

    async def watch_slices(
        self, since: str, *, timeout: int, read_timeout: float, on_start: Callable[[], None] = lambda: None
    ) -> AsyncGenerator[tuple[str, Obj], None]:
        """Changes to this node's slices after ``since`` (with bookmarks); the API server ends the
        watch after ``timeout`` seconds; ``on_start()`` once it accepted it. ApiServerError when it
        fails (code 410: list again)."""
        params = {
            **self._selector, "watch": "true", "resourceVersion": since,
            "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout),
        }  # fmt: skip
        what = f"GET {SLICES} (watch)"
        events = self.rest.watch(
            SLICES, params, read_timeout=read_timeout, longest=timeout + read_timeout, on_start=on_start
        )
        others = _Others()
        try:
            async for kind, obj in events:
                if kind == "BOOKMARK":
                    yield kind, {"metadata": {"resourceVersion": _checked(what, resource_version, obj)}}
                elif self._ours(what, [obj], others):
                    yield kind, obj
        finally:
            await events.aclose()
            others.warn(what)

    def _ours(self, what: str, objs: list[Obj], others: _Others | None = None) -> list[Obj]:
        """The slices of this node and driver, each checked; others (the server ignored the field
        selector) are left out, never touched, and counted in ``others``."""
        out = []
        for obj in objs:
            problem = slice_problem(obj)
            if problem is not None:
                raise ApiServerError(what, f"a ResourceSlice that is not one: {problem}")
            spec = obj["spec"]
            if (spec["driver"], spec["nodeName"]) == (self.driver, self.node):
                out.append(obj)
            elif others is not None:
                others.add(obj)
        return out

    async def create_slice(self, obj: Obj) -> Obj:
        """The slice as stored. A name that another driver's or node's slice holds (409
        AlreadyExists) fails with that slice's driver and node."""
        try:
            return await self._write("POST", SLICES, obj)
        except ApiServerError as exc:
            if exc.code != 409 or exc.reason != "AlreadyExists":
                raise
            raise await self._name_taken(obj["metadata"]["name"], exc) from None

    async def _name_taken(self, name: str, exc: ApiServerError) -> ApiServerError:
        """``exc`` saying whose slice holds ``name``, from one GET of it; ``exc`` as it is when the
        holder cannot be read or is this node's slice of this driver (the next list brings it)."""
        try:
            holder = await self.rest.request("GET", f"{SLICES}/{_segment(name)}")
            driver, node = slice_holder(holder)
        except (ApiServerError, BadAnswer):
            return exc
        if (driver, node) == (self.driver, self.node):
            return exc
        where = f"on node {shown(node, 253)}" if node else "bound to no single node"
        return ApiServerError(
            f"POST {SLICES}",
            f"the name {shown(name, 253)} is taken by a ResourceSlice of driver {shown(driver)} {where} "
            f"({exc.code} {exc.reason})",
            code=exc.code, reason=exc.reason, retryable=exc.retryable,
        )  # fmt: skip

    async def replace_slice(self, obj: Obj) -> Obj:
        return await self._write("PUT", f"{SLICES}/{_segment(obj['metadata']['name'])}", obj)

    async def delete_slice(self, obj: Obj) -> None:
        """Delete a stored slice if it is still the one stored (uid and resourceVersion); one
        already gone is fine."""
        meta = obj["metadata"]
        preconditions = {"uid": meta.get("uid"), "resourceVersion": meta["resourceVersion"]}
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions}
        try:
            await self.rest.request(
                "DELETE", f"{SLICES}/{_segment(meta['name'])}", body=json.dumps(body).encode()
            )
        except ApiServerError as exc:
            if exc.code != 404:
                raise

    async def _write(self, method: str, path: str, obj: Obj) -> Obj:
        answer = await self.rest.request(
            method, path, params={"fieldManager": FIELD_MANAGER}, body=json.dumps(obj).encode()
        )
        stored = self._ours(f"{method} {path}", [answer])
        if not stored:
            raise ApiServerError(f"{method} {path}", "the answer is another node's or driver's slice")
        return stored[0]


class _Others:
    """The slices of other nodes or drivers a list or a watch brought: one warning for them all,
    naming the first (a server that ignores the field selectors sends the whole cluster's)."""

    def __init__(self) -> None:
        self.count = 0
        self.first: Obj = {}

    def add(self, obj: Obj) -> None:
        self.count += 1
        self.first = self.first or obj

    def warn(self, what: str) -> None:
        if self.count:
            name, spec = self.first["metadata"]["name"], self.first["spec"]
            log.warning(
                "%s: %s of other drivers or nodes answered, not asked for (the first: %s of driver %s "
                "on node %s); left alone",
                what, plural(self.count, "ResourceSlice"), shown(name), shown(spec["driver"]),
                shown(spec["nodeName"]),
            )  # fmt: skip


def _checked(what: str, check: Callable[[Obj], Any], obj: Obj) -> Any:
    try:
        return check(obj)
    except BadAnswer as exc:
        raise ApiServerError(what, str(exc)) from None
