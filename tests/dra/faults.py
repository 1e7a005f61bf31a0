"""Ways the fake API server misbehaves, as a load balancer, a proxy or a sick API server does.

Each is an action that writes the whole answer to a request itself (or none at all), given the
request handler of :mod:`tests.dra.fakeapiserver` and an event set when the server stops. Actions
that wait (a hanging request, a silent watch, an endless body) end when the client closes the
connection or the server stops, so nothing is left behind.
"""

from __future__ import annotations

import gzip
import json
import select
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

Action = Callable[[BaseHTTPRequestHandler, threading.Event], None]

HTML_503 = (
    b"<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n<body>\r\n"
    b"<center><h1>503 Service Temporarily Unavailable</h1></center>\r\n<hr><center>nginx</center>\r\n"
    b"</body>\r\n</html>\r\n"
)


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip


def _closed(h: BaseHTTPRequestHandler, stopping: threading.Event, seconds: float | None = None) -> bool:
    """Wait until the client closed the connection (True), the server stops, or ``seconds`` passed."""
    end = None if seconds is None else time.monotonic() + seconds
    while not stopping.is_set() and (end is None or time.monotonic() < end):
        readable, _, _ = select.select([h.connection], [], [], 0.05)
        if readable:
            try:
                if h.connection.recv(1, 0x02) == b"":  # MSG_PEEK: EOF
                    return True
            except OSError:
                return True
    return False


def _start(
    h: BaseHTTPRequestHandler,
    code: int,
    content_type: str,
    length: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> None:
    """The head of an answer after which the connection is closed (and the client told so)."""
    h.send_response(code)
    h.send_header("Connection", "close")
    h.send_header("Content-Type", content_type)
    for name, value in (headers or {}).items():
        h.send_header(name, value)
    if length is None:
        h.send_header("Transfer-Encoding", "chunked")
    else:
        h.send_header("Content-Length", str(length))
    h.end_headers()
    h.wfile.flush()


def _chunk(h: BaseHTTPRequestHandler, data: bytes) -> None:
    h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
    h.wfile.flush()


def _done(h: BaseHTTPRequestHandler) -> None:
    h.close_connection = True


def body(
    code: int, data: bytes, content_type: str = "application/json", headers: Mapping[str, str] | None = None
) -> Action:
    """An answer with this status, body and ``headers`` (a JSON array, garbage, a document of the
    wrong shape)."""

    def act(h: BaseHTTPRequestHandler, stopping: threading.Event) -> None:
        _start(h, code, content_type, len(data), headers)
        h.wfile.write(data)
        _done(h)

    return act


def raw(data: bytes) -> Action:
    """These bytes, status line and headers included, then the connection closed."""

    def act(h: BaseHTTPRequestHandler, stopping: threading.Event) -> None:
        h.wfile.write(data)
        _done(h)

    return act


def gzip_bomb(size: int) -> Action:
    """A 200 answer sent compressed though the client asked for none: a JSON object of ``size``
    bytes once inflated (mostly spaces), a few KiB on the wire, ``Content-Encoding: gzip``."""
    data = gzip.compress(b"{" + b" " * (size - 2) + b"}", 9)

    def act(h: BaseHTTPRequestHandler, stopping: threading.Event) -> None:
        h.send_response(200)
        h.send_header("Connection", "close")
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Encoding", "gzip")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
        _done(h)

    return act


def html(code: int = 503, headers: Mapping[str, str] | None = None) -> Action:
    """A load balancer's error page."""
    return body(code, HTML_503, "text/html", headers)


def status(
    code: int, reason: str = "", message: str = "injected", headers: Mapping[str, str] | None = None
) -> Action:
    """A Status, as the API server sends it."""
    return body(code, json.dumps(status_body(code, reason, message)).encode(), headers=headers)


def huge(size: int, *, declared: bool = False) -> Action:
    """A 200 answer of ``size`` bytes (a JSON object padded with spaces), chunked or with its length."""

    def act(h: BaseHTTPRequestHandler, stopping: threading.Event) -> None:
        _start(h, 200, "application/json", size if declared else None)
        block = b" " * 65536
        sent = 0
        try:
            while sent < size and not stopping.is_set():
                part = block[: size - sent]
                if declared:
                    h.wfile.write(part)
                else:
                    _chunk(h, part)
                sent += len(part)
        except OSError:
            pass
        _done(h)

    return act


def drip(interval: float = 0.2) -> Action:
    """A 200 answer whose body never ends: a byte every ``interval`` seconds."""

    def act(h: BaseHTTPRequestHandler, stopping: threading.Event) -> None:
        _start(h, 200, "application/json")
        try:
            _chunk(h, b"{")
            while not _closed(h, stopping, interval):
                _chunk(h, b" ")
        except OSError:
            pass
        _done(h)

    return act


def hang() -> Action:
    """No answer at all, not even headers, until the client gives up."""

    def act(h: BaseHTTPRequestHandler, stopping: threading.Event) -> None:
        _closed(h, stopping)
        _done(h)

    return act


def stream(*chunks: bytes, then: str = "end", on_close: Callable[[], None] = lambda: None) -> Action:
    """A 200 answer streamed in these chunks, then ``end`` or ``silent``: the connection stays
    open and nothing more comes (a dropped connection no one told) until the client closes it
    (``on_close()`` is called then)."""

    def act(h: BaseHTTPRequestHandler, stopping: threading.Event) -> None:
        _start(h, 200, "application/json")
        try:
            for chunk in chunks:
                _chunk(h, chunk)
            if then == "silent":
                if _closed(h, stopping):
                    on_close()
            else:
                h.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
        _done(h)

    return act


def watch_lines(*lines: bytes | dict[str, Any], then: str = "end") -> Action:
    """A watch stream of these lines (dicts are sent as JSON), then as :func:`stream`."""
    return stream(
        *((ln if isinstance(ln, bytes) else json.dumps(ln).encode()) + b"\n" for ln in lines), then=then
    )


def silent(on_close: Callable[[], None] = lambda: None) -> Action:
    """A watch that answers 200 and then never sends a byte more."""
    return stream(then="silent", on_close=on_close)


def expired() -> Action:
    """A watch whose version the server no longer keeps: one ERROR event, 410 Expired."""
    return watch_lines({"type": "ERROR", "object": status_body(410, "Expired", "too old resource version")})
