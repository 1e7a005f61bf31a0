"""A fake Kubernetes API server at the HTTP boundary: real HTTP on 127.0.0.1, strict where the
real one is.

Serves nodes (get), ResourceClaims (get; list and watch in all namespaces) and ResourceSlices
(list with field selectors, get, create, replace, delete) of ``resource.k8s.io/v1``. Like the
real server it: lists claims page by page (``limit``, ``continue``); streams watch events after
the ``resourceVersion`` asked for, answers a version older than it keeps (``compact``) with an
ERROR event 410 Expired, and ends watches after ``timeoutSeconds`` (or all at once:
``break_watches``); refuses field selectors other than ``spec.nodeName``/``spec.driver``/
``metadata.name``; answers a replace whose ``metadata.resourceVersion`` is missing or stale with
409 Conflict; refuses changes to immutable fields and every slice that breaks the validation
rules (422 Invalid); answers Status objects. With ``drop_taints`` it drops device taints as a
server with the gate off does; ``fail`` queues errors (409/429/500...) for the next matching
requests.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.dra.rules import slice_problems

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/"
ALL_CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
NODES = "/api/v1/nodes/"
SELECTABLE = {"spec.nodeName", "spec.driver", "metadata.name"}
IMMUTABLE = (("driver",), ("nodeName",), ("pool", "name"))
REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


class ApiStatus(Exception):
    def __init__(self, code: int, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.code, self.message, self.reason = code, message, reason or REASONS.get(code, "")

    def body(self) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}  # fmt: skip


@dataclass
class Watch:
    """A watch request: the events after ``since``, streamed until ``deadline`` or a break."""

    since: int
    deadline: float
    generation: int


def _field(obj: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        obj = (obj or {}).get(part)  # type: ignore[assignment]
    return obj


class FakeApiServer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.claim_events: list[tuple[int, str, dict[str, Any]]] = []  # (resourceVersion, type, claim)
        self.oldest = 0  # events before this resourceVersion are forgotten (410 Expired)
        self.watch_generation = 0  # bumped to end every open watch
        self.watches = 0  # watch requests served
        self._pages: dict[str, tuple[str, int, list[dict[str, Any]]]] = {}  # continue token -> rest
        self.nodes: dict[str, dict[str, Any]] = {}
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.failures: list[tuple[str, str, int]] = []  # (method, path prefix, code)
        self.drop_taints = False  # as with the DRADeviceTaints gate off: taints silently dropped
        self.before: Any = None  # called (method, path) before each request is handled, under the lock
        self._rv = itertools.count(100)
        self.url = ""

    # -- test API ---------------------------------------------------------------------------
    def add_node(self, name: str) -> str:
        uid = str(uuid.uuid4())
        self.nodes[name] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": uid}}
        return uid

    def add_claim(self, obj: dict[str, Any]) -> None:
        """Create or replace a claim (an ADDED or MODIFIED event)."""
        meta = obj["metadata"]
        key = meta["namespace"], meta["name"]
        with self.lock:
            rv = next(self._rv)
            stored = {**obj, "metadata": {**meta, "resourceVersion": str(rv)}}
            self._claim_event(rv, "MODIFIED" if key in self.claims else "ADDED", stored)
            self.claims[key] = stored

    def delete_claim(self, namespace: str, name: str) -> None:
        with self.lock:
            stored = self.claims.pop((namespace, name))
            rv = next(self._rv)
            self._claim_event(
                rv, "DELETED", {**stored, "metadata": {**stored["metadata"], "resourceVersion": str(rv)}}
            )

    def compact(self) -> None:
        """Forget every event so far: a watch from any version before now gets 410 Expired."""
        with self.lock:
            self.oldest = next(self._rv)
            self.claim_events.clear()

    def break_watches(self) -> None:
        """End every open watch stream (a dropped connection, an API server restart)."""
        with self.lock:
            self.watch_generation += 1
            self.changed.notify_all()

    def fail(self, method: str, prefix: str, *codes: int) -> None:
        with self.lock:
            self.failures += [(method, prefix, c) for c in codes]

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.requests if m != "GET"]

    def put_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a slice directly (another writer: another node, driver, or a concurrent update).

        Call it without the lock held, or from ``before`` (which runs under it) as ``_store``."""
        with self.lock:
            return self._store(json.loads(json.dumps(obj)))

    # -- server -----------------------------------------------------------------------------
    def _claim_event(self, rv: int, kind: str, obj: dict[str, Any]) -> None:
        self.claim_events.append((rv, kind, json.loads(json.dumps(obj))))
        self.changed.notify_all()

    def _claims_list_or_watch(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        if query.get("fieldSelector") or query.get("labelSelector"):
            raise ApiStatus(400, "selectors are not supported by this fake for resourceclaims")
        if query.get("watch", [""])[0] != "true":
            return 200, self._claim_page(query)
        since = query.get("resourceVersion", [""])[0]
        if not since.isdigit():  # a watch without a version starts with every claim; not used here
            raise ApiStatus(400, f"resourceVersion {since!r}: this fake watches from a given version only")
        timeout = float(query.get("timeoutSeconds", ["1800"])[0])
        self.watches += 1
        return 200, Watch(int(since), time.monotonic() + timeout, self.watch_generation)

    def _claim_page(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """A page of the claims (``limit``), the next one named by ``continue``, as the real server."""
        token = query.get("continue", [""])[0]
        if token:
            version, start, snapshot = self._pages.pop(token)
        else:
            version, start = str(next(self._rv)), 0
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

    def stream(self, watch: Watch) -> Iterator[dict[str, Any]]:
        """The events of ``watch`` as the server sends them, one line each, until it ends."""
        if watch.since < self.oldest:
            expired = ApiStatus(410, f"too old resource version: {watch.since} ({self.oldest})", "Expired")
            yield {"type": "ERROR", "object": expired.body()}
            return
        sent = watch.since
        while True:
            with self.lock:
                while True:
                    if watch.generation != self.watch_generation:
                        return  # broken: nothing more goes out on it, not even what is pending
                    pending = [e for e in self.claim_events if e[0] > sent]
                    now = time.monotonic()
                    if pending or now >= watch.deadline:
                        break
                    self.changed.wait(watch.deadline - now)
                if not pending:
                    return
            for rv, kind, obj in pending:
                sent = rv
                yield {"type": kind, "object": obj}

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
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
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        self.slices[meta["name"]] = obj
        return obj

    def handle(self, method: str, url: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        parts = urlsplit(url)
        path, query = parts.path, parse_qs(parts.query)
        with self.lock:
            self.requests.append((method, path))
            if self.before is not None:
                self.before(method, path)
            for i, (m, prefix, code) in enumerate(self.failures):
                if m == method and path.startswith(prefix):
                    del self.failures[i]
                    raise ApiStatus(code, f"injected {code}")
            if path.startswith(NODES) and method == "GET":
                node = self.nodes.get(path[len(NODES) :])
                if node is None:
                    raise ApiStatus(404, f'nodes "{path[len(NODES) :]}" not found')
                return 200, node
            if path == ALL_CLAIMS and method == "GET":
                return self._claims_list_or_watch(query)
            if path.startswith(CLAIMS) and "/resourceclaims/" in path and method == "GET":
                ns, _, name = path[len(CLAIMS) :].partition("/resourceclaims/")
                claim = self.claims.get((ns, name))
                if claim is None:
                    raise ApiStatus(404, f'resourceclaims.resource.k8s.io "{name}" not found')
                return 200, claim
            if path == SLICES and method == "GET":
                return 200, self._list(query.get("fieldSelector", [""])[0])
            if path == SLICES and method == "POST":
                assert body is not None
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

    def _list(self, selector: str) -> dict[str, Any]:
        terms = [t.split("=", 1) for t in selector.split(",") if t]
        for term in terms:
            if len(term) != 2 or term[0] not in SELECTABLE:
                raise ApiStatus(400, f"field label not supported: {term[0]}")
        items = [s for s in self.slices.values() if all(_field(s, k) == v for k, v in terms)]
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList",
                "metadata": {"resourceVersion": str(next(self._rv))}, "items": items}  # fmt: skip

    def _one(self, method: str, name: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        stored = self.slices.get(name)
        if stored is None:
            raise ApiStatus(404, f'resourceslices.resource.k8s.io "{name}" not found')
        if method == "GET":
            return 200, stored
        if method == "DELETE":
            del self.slices[name]
            return 200, stored
        if method != "PUT":
            raise ApiStatus(405, f"{method} not allowed")
        assert body is not None
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


def _handler(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # connections kept open, as a client of a real server sees them

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in two writes: without this, Nagle's algorithm holds the body
            # until the client's delayed ACK (40 ms). Real API servers (Go) set it too.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            try:
                code, answer = api.handle(self.command, self.path, body)
            except ApiStatus as status:
                code, answer = status.code, status.body()
            if isinstance(answer, Watch):
                self._stream(answer)
                return
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, watch: Watch) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in api.stream(watch):
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except OSError:  # the client went away
                pass
            self.close_connection = True

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@contextmanager
def running(api: FakeApiServer, port: int = 0) -> Iterator[FakeApiServer]:
    """Serve ``api`` on 127.0.0.1:``port`` (0: any free port) while inside."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(api))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield api
    finally:
        api.break_watches()
        server.shutdown()
        server.server_close()
        thread.join()
