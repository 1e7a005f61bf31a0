"""A fake Kubernetes API server at the HTTP boundary: real HTTP on 127.0.0.1, strict where the
real one is, and able to misbehave in every way a real one, or what stands in front of it, does.

Serves nodes (get), ResourceClaims (get; list and watch in all namespaces) and ResourceSlices
(list and watch with field selectors, get, create, replace, delete) of ``resource.k8s.io/v1``.
Like the real server it: numbers every change with one cluster-wide resourceVersion; lists claims
page by page (``limit``, ``continue``); streams watch events after the version asked for, sends
bookmarks with the current version when asked (``allowWatchBookmarks``: every
``bookmark_every`` seconds and just before the watch ends), ends a watch after its integer
``timeoutSeconds``, answers a version older than it keeps with an ERROR event 410 Expired (history
is forgotten by ``compact``, or beyond the last ``keep`` versions); refuses field selectors other
than ``spec.nodeName``/``spec.driver``/``metadata.name``; answers a replace whose
``metadata.resourceVersion`` is missing or stale, and a delete whose preconditions do not hold,
with 409 Conflict; refuses changes to immutable fields and every slice that breaks the validation
rules (422 Invalid) and bodies that are not JSON (415, 400); answers Status objects.

Misbehaving: ``fail`` queues Status errors for the next matching requests; ``misbehave`` answers
matching requests with an action of :mod:`tests.dra.faults` (an HTML page, garbage, a body too
large or without end, no answer, a silent or broken watch), once, a number of times or always.
With ``drop_taints`` device taints are dropped as by a server with the gate off. It serves the
discovery documents of :mod:`tests.dra.fakediscovery` for the versions of ``resource.k8s.io`` in
``resource_versions`` (``()``: a cluster before 1.34 or with DRA off, where everything under
``/apis/resource.k8s.io/v1`` is a 404 NotFound Status). Every request is recorded in ``calls``
(method, path, query, time). :mod:`tests.dra.fakehttp` serves it.
"""

from __future__ import annotations

import bisect
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.dra import fakediscovery
from tests.dra.faults import Action, status_body
from tests.dra.rules import slice_problems

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/"
ALL_CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
NODES = "/api/v1/nodes/"
SELECTABLE = {"spec.nodeName", "spec.driver", "metadata.name"}
IMMUTABLE = (("driver",), ("nodeName",), ("pool", "name"))
REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
           405: "MethodNotAllowed", 409: "Conflict", 415: "UnsupportedMediaType", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}  # fmt: skip


class ApiStatus(Exception):
    def __init__(self, code: int, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.code, self.message, self.reason = code, message, reason or REASONS.get(code, "")

    def body(self) -> dict[str, Any]:
        return status_body(self.code, self.reason, self.message)


@dataclass
class Watch:
    """A watch request: the events of ``resource`` matching ``terms`` after ``since``."""

    resource: str
    terms: list[tuple[str, str]]
    since: int
    deadline: float
    generation: int
    bookmarks: bool


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, list[str]]
    time: float = field(default_factory=time.monotonic)

    @property
    def watch(self) -> bool:
        return self.query.get("watch", [""])[0] in ("true", "1")


@dataclass
class Fault:
    method: str
    prefix: str
    watch: bool | None  # None: watches and other requests alike
    action: Action
    times: int | None  # None: always


def _field(obj: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        obj = (obj or {}).get(part)  # type: ignore[assignment]
    return obj


def _terms(selector: str) -> list[tuple[str, str]]:
    terms = [tuple(t.split("=", 1)) for t in selector.split(",") if t]
    for term in terms:
        if len(term) != 2 or term[0] not in SELECTABLE:
            raise ApiStatus(400, f"field label not supported: {term[0]}")
    return terms  # type: ignore[return-value]


def _copy(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


class FakeApiServer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.stopping = threading.Event()
        self.revision = 100  # the last resourceVersion given out
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []  # (version, resource, type, object)
        self.oldest = 0  # a watch from before this version gets 410 Expired
        self.keep: int | None = None  # versions of history kept; None: all (until compact)
        self.bookmark_every = 60.0
        self.watch_generation = 0  # bumped to end every open watch
        self._pages: dict[str, tuple[str, int, list[dict[str, Any]]]] = {}  # continue token -> rest
        self.nodes: dict[str, dict[str, Any]] = {}
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self.calls: list[Call] = []
        self.failures: list[tuple[str, str, int]] = []  # (method, path prefix, code)
        self.faults: list[Fault] = []
        self.drop_taints = False  # as with the DRADeviceTaints gate off: taints silently dropped
        self.mutate: Callable[[dict[str, Any]], None] | None = None  # a mutating admission webhook
        self.resource_versions: tuple[str, ...] = ("v1",)  # of resource.k8s.io; (): no DRA
        self.before: Any = None  # called (method, path) before each request is handled, under the lock
        self.url = ""

    # -- test API ---------------------------------------------------------------------------
    @property
    def requests(self) -> list[tuple[str, str]]:
        return [(c.method, c.path) for c in self.calls]

    @property
    def watches(self) -> int:
        return sum(c.watch for c in self.calls)

    def count(self, method: str, path: str, *, watch: bool | None = None) -> int:
        return sum(c.method == method and c.path == path and watch in (None, c.watch) for c in self.calls)

    def add_node(self, name: str, kubelet_version: str = "") -> str:
        """A Node; ``kubelet_version`` goes to status.nodeInfo.kubeletVersion (as the kubelet reports it)."""
        uid = str(uuid.uuid4())
        node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": uid}}
        if kubelet_version:
            node["status"] = {"nodeInfo": {
                "machineID": uid.replace("-", ""), "systemUUID": uid, "bootID": str(uuid.uuid4()),
                "kernelVersion": "6.1.0-28-amd64", "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.24", "kubeletVersion": kubelet_version,
                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
            }}  # fmt: skip
        self.nodes[name] = node
        return uid

    def recreate_node(self, name: str) -> str:
        """The node deleted and registered again by its kubelet: same name, a new UID. The garbage
        collector then deletes the slices it owned (an owner of another UID is an absent owner)."""
        with self.lock:
            node = self.nodes[name]
            node["metadata"] = {**node["metadata"], "uid": str(uuid.uuid4())}
            for slice_name in [n for n, s in self.slices.items() if self._orphan(s)]:
                self._delete(slice_name)
            return str(node["metadata"]["uid"])

    def _orphan(self, obj: dict[str, Any]) -> bool:
        """Whether the garbage collector deletes ``obj``: it names Node owners and none of them
        exists with the UID it names."""
        owners = [o for o in obj["metadata"].get("ownerReferences") or [] if o.get("kind") == "Node"]
        live = {(n["metadata"]["name"], n["metadata"]["uid"]) for n in self.nodes.values()}
        return bool(owners) and all((o.get("name"), o.get("uid")) not in live for o in owners)

    def add_claim(self, obj: dict[str, Any]) -> None:
        """Create or replace a claim (an ADDED or MODIFIED event)."""
        meta = obj["metadata"]
        key = meta["namespace"], meta["name"]
        with self.lock:
            stored = {**obj, "metadata": {**meta, "resourceVersion": str(self._next())}}
            self._event("claims", "MODIFIED" if key in self.claims else "ADDED", stored)
            self.claims[key] = stored

    def delete_claim(self, namespace: str, name: str) -> None:
        with self.lock:
            stored = self.claims.pop((namespace, name))
            rv = str(self._next())
            self._event(
                "claims", "DELETED", {**stored, "metadata": {**stored["metadata"], "resourceVersion": rv}}
            )

    def compact(self) -> None:
        """Forget every event so far: a watch from any version before now gets 410 Expired."""
        with self.lock:
            self.oldest = self.revision + 1
            self.events.clear()

    def break_watches(self) -> None:
        """End every open watch stream (a dropped connection, an API server restart)."""
        with self.lock:
            self.watch_generation += 1
            self.changed.notify_all()

    def fail(self, method: str, prefix: str, *codes: int) -> None:
        with self.lock:
            self.failures += [(method, prefix, c) for c in codes]

    def misbehave(
        self, method: str, prefix: str, action: Action, *, watch: bool | None = None, times: int | None = 1
    ) -> Fault:
        """Answer the next ``times`` requests (None: all) matching with ``action``."""
        fault = Fault(method, prefix, watch, action, times)
        with self.lock:
            self.faults.append(fault)
        return fault

    def behave(self) -> None:
        """Misbehave no more."""
        with self.lock:
            self.faults.clear()
            self.failures.clear()

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.requests if m != "GET"]

    def put_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a slice directly (another writer: another node, driver, or a concurrent update).

        Call it without the lock held, or from ``before`` (which runs under it) as ``_store``."""
        with self.lock:
            return self._store(_copy(obj))

    def delete_slices(self, **fields: str) -> int:
        """Delete the slices whose fields (``nodeName=...``) match, as the kubelet's DeleteCollection."""
        with self.lock:
            gone = [
                n for n, s in self.slices.items() if all(s["spec"].get(k) == v for k, v in fields.items())
            ]
            for name in gone:
                self._delete(name)
            return len(gone)

    # -- server -----------------------------------------------------------------------------
    def _next(self) -> int:
        self.revision += 1
        return self.revision

    def _event(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self.events.append((rv, resource, kind, _copy(obj)))
        if self.keep is not None and rv - self.keep > self.oldest:
            self.oldest = rv - self.keep
            del self.events[: bisect.bisect_left(self.events, self.oldest, key=lambda e: e[0])]
        self.changed.notify_all()

    def _watch(self, resource: str, query: dict[str, list[str]]) -> Watch:
        since = query.get("resourceVersion", [""])[0]
        if not since.isdigit():  # a watch without a version starts with every object; not used here
            raise ApiStatus(400, f"resourceVersion {since!r}: this fake watches from a given version only")
        timeout = query.get("timeoutSeconds", ["1800"])[0]
        if not timeout.isdigit():
            raise ApiStatus(400, f"timeoutSeconds: invalid value {timeout!r}: an integer number of seconds")
        bookmarks = query.get("allowWatchBookmarks", ["false"])[0]
        if bookmarks not in ("true", "false"):
            raise ApiStatus(400, f"allowWatchBookmarks: invalid value {bookmarks!r}")
        terms = _terms(query.get("fieldSelector", [""])[0])
        deadline = time.monotonic() + int(timeout)
        return Watch(resource, terms, int(since), deadline, self.watch_generation, bookmarks == "true")

    def _claim_page(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """A page of the claims (``limit``), the next one named by ``continue``, as the real server."""
        token = query.get("continue", [""])[0]
        if token:
            version, start, snapshot = self._pages.pop(token)
        else:
            version, start = str(self.revision), 0
            snapshot = sorted(self.claims.values(), key=lambda c: int(c["metadata"]["resourceVersion"]))
        limit = int(query.get("limit", ["0"])[0]) or len(snapshot)
        meta: dict[str, Any] = {"resourceVersion": version}
        if start + limit < len(snapshot):
            meta["continue"] = token = str(uuid.uuid4())
            self._pages[token] = (version, start + limit, snapshot)
        items = snapshot[start : start + limit]
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimList",
            "metadata": meta,
            "items": items,
        }

    def _matches(self, watch: Watch, resource: str, obj: dict[str, Any]) -> bool:
        return resource == watch.resource and all(_field(obj, k) == v for k, v in watch.terms)

    def stream(self, watch: Watch) -> Iterator[dict[str, Any]]:
        """The events of ``watch`` as the server sends them, one line each, until it ends."""
        if watch.since < self.oldest:
            yield {"type": "ERROR", "object": ApiStatus(410, f"too old resource version: {watch.since} "
                                                        f"({self.oldest})", "Expired").body()}  # fmt: skip
            return
        sent = watch.since
        start = time.monotonic()
        pretimeout = watch.deadline - min(2.0, (watch.deadline - start) / 2)
        next_bookmark = min(pretimeout, start + self.bookmark_every)
        kind = "ResourceSlice" if watch.resource == "slices" else "ResourceClaim"
        while True:
            with self.lock:
                while True:
                    if watch.generation != self.watch_generation:
                        return  # broken: nothing more goes out on it, not even what is pending
                    first = bisect.bisect_right(self.events, sent, key=lambda e: e[0])
                    pending = [e for e in self.events[first:] if self._matches(watch, e[1], e[3])]
                    sent = self.events[-1][0] if self.events[first:] else sent
                    now = time.monotonic()
                    ending = now >= watch.deadline
                    bookmark = watch.bookmarks and now >= next_bookmark
                    if pending or ending or bookmark or self.stopping.is_set():
                        break
                    wake = min(watch.deadline, next_bookmark) if watch.bookmarks else watch.deadline
                    self.changed.wait(wake - now)
                version = self.revision
            for _, _, event, obj in pending:
                yield {"type": event, "object": obj}
            if bookmark and not ending:
                now = time.monotonic()
                next_bookmark = min(
                    pretimeout if now < pretimeout else watch.deadline, now + self.bookmark_every
                )
                sent = max(sent, version)
                meta = {"resourceVersion": str(version)}
                yield {"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": "resource.k8s.io/v1",
                                                      "metadata": meta}}  # fmt: skip
            if ending or self.stopping.is_set():
                return

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.mutate is not None:
            self.mutate(obj)
        for device in obj["spec"].get("devices") or []:
            if self.drop_taints:
                device.pop("taints", None)
            for taint in device.get("taints") or []:
                taint.setdefault("timeAdded", "2026-01-01T00:00:00Z")  # the server fills it in
        problems = slice_problems(obj)
        if problems:
            raise ApiStatus(422, f'ResourceSlice.resource.k8s.io "{obj["metadata"].get("name")}" is invalid: '
                            + "; ".join(problems))  # fmt: skip
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._next())
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        self._event("slices", "MODIFIED" if meta["name"] in self.slices else "ADDED", obj)
        self.slices[meta["name"]] = obj
        if self._orphan(obj):  # the garbage collector comes by at once
            self._delete(meta["name"])
        return obj

    def _delete(self, name: str) -> dict[str, Any]:
        stored = self.slices.pop(name)
        gone = {**stored, "metadata": {**stored["metadata"], "resourceVersion": str(self._next())}}
        self._event("slices", "DELETED", gone)
        return gone

    def take_fault(self, method: str, path: str, query: dict[str, list[str]]) -> Action | None:
        watch = query.get("watch", [""])[0] in ("true", "1")
        with self.lock:
            for fault in self.faults:
                if fault.method == method and path.startswith(fault.prefix) and fault.watch in (None, watch):
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self.faults.remove(fault)
                    return fault.action
        return None

    def handle(self, method: str, url: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        parts = urlsplit(url)
        path, query = parts.path, parse_qs(parts.query)
        with self.lock:
            if self.before is not None:
                self.before(method, path)
            for i, (m, prefix, code) in enumerate(self.failures):
                if m == method and path.startswith(prefix):
                    del self.failures[i]
                    raise ApiStatus(code, f"injected {code}")
            discovered = fakediscovery.answer(method, path, self.resource_versions)
            if discovered is not None:
                return discovered
            watching = query.get("watch", [""])[0] in ("true", "1")
            if path.startswith(NODES) and method == "GET":
                node = self.nodes.get(path[len(NODES) :])
                if node is None:
                    raise ApiStatus(404, f'nodes "{path[len(NODES) :]}" not found')
                return 200, node
            if path == ALL_CLAIMS and method == "GET":
                if query.get("fieldSelector") or query.get("labelSelector"):
                    raise ApiStatus(400, "selectors are not supported by this fake for resourceclaims")
                return 200, self._watch("claims", query) if watching else self._claim_page(query)
            if path.startswith(CLAIMS) and "/resourceclaims/" in path and method == "GET":
                ns, _, name = path[len(CLAIMS) :].partition("/resourceclaims/")
                claim = self.claims.get((ns, name))
                if claim is None:
                    raise ApiStatus(404, f'resourceclaims.resource.k8s.io "{name}" not found')
                return 200, claim
            if path == SLICES and method == "GET":
                if watching:
                    return 200, self._watch("slices", query)
                terms = _terms(query.get("fieldSelector", [""])[0])
                items = [s for s in self.slices.values() if all(_field(s, k) == v for k, v in terms)]
                return 200, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList",
                             "metadata": {"resourceVersion": str(self.revision)}, "items": items}  # fmt: skip
            if path == SLICES and method == "POST":
                if body is None:
                    raise ApiStatus(400, "no body")
                name = body.get("metadata", {}).get("name", "")
                if "resourceVersion" in body.get("metadata", {}):
                    raise ApiStatus(400, "resourceVersion should not be set on objects to be created")
                if name in self.slices:
                    raise ApiStatus(
                        409, f'resourceslices.resource.k8s.io "{name}" already exists', "AlreadyExists"
                    )
                return 201, self._store(body)
            if path.startswith(SLICES + "/"):
                return self._one(method, path[len(SLICES) + 1 :], body)
            raise ApiStatus(404, f"the server could not find the requested resource ({method} {path})")

    def _one(self, method: str, name: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        stored = self.slices.get(name)
        if stored is None:
            raise ApiStatus(404, f'resourceslices.resource.k8s.io "{name}" not found')
        if method == "GET":
            return 200, stored
        if method == "DELETE":
            pre = (body or {}).get("preconditions") or {}
            for key in ("uid", "resourceVersion"):
                if pre.get(key) is not None and pre[key] != stored["metadata"][key]:
                    raise ApiStatus(409, f"Precondition failed: {key} in precondition: {pre[key]}, "
                                    f"{key} in object meta: {stored['metadata'][key]}")  # fmt: skip
            return 200, self._delete(name)
        if method != "PUT":
            raise ApiStatus(405, f"{method} not allowed")
        if body is None:
            raise ApiStatus(400, "no body")
        if body["metadata"].get("name") != name:
            raise ApiStatus(400, "the name of the object does not match the name on the URL")
        rv = body["metadata"].get("resourceVersion")
        if not rv:
            raise ApiStatus(422, "metadata.resourceVersion: Invalid value: must be specified for an update")
        if rv != stored["metadata"]["resourceVersion"]:
            raise ApiStatus(409, f'Operation cannot be fulfilled on resourceslices.resource.k8s.io "{name}": '
                            "the object has been modified")  # fmt: skip
        for path in IMMUTABLE:
            old, new = stored["spec"], body["spec"]
            for part in path:
                old, new = old.get(part), new.get(part)
            if old != new:
                raise ApiStatus(422, f"spec.{'.'.join(path)}: Invalid value: field is immutable")
        body["metadata"]["uid"] = stored["metadata"]["uid"]
        body["metadata"]["creationTimestamp"] = stored["metadata"]["creationTimestamp"]
        return 200, self._store(body)


from tests.dra.fakehttp import running  # noqa: E402  (serves the fake; it imports this module)

__all__ = ["ALL_CLAIMS", "CLAIMS", "NODES", "SLICES", "FakeApiServer", "running"]
