"""The bounded HTTP server: idle connections time out, the oldest makes room, heads are capped."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from cdi_plugin.httpserver import MAX_HEAD, BoundedHttpServer
from tests.metrics.scrape import get

pytestmark = pytest.mark.timeout(120)


def _app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']} {environ['QUERY_STRING']}".encode()]


def _closed(conn: socket.socket, within: float = 60.0) -> bool:
    """True when the server closes ``conn`` (EOF or reset) within ``within`` seconds."""
    conn.settimeout(within)
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_an_idle_connection_is_closed_after_the_idle_timeout() -> None:
    server = BoundedHttpServer("127.0.0.1", 0, _app, idle_timeout=0.5)
    server.start()
    try:
        with socket.create_connection(server.address) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\n")
            started = time.monotonic()
            assert _closed(conn)
            assert time.monotonic() - started > 0.4, "not before the idle timeout"
        assert get(f"http://127.0.0.1:{server.address[1]}/x?a=1") == (200, "GET /x a=1"), "still serving"
    finally:
        server.close()


def test_beyond_the_limit_a_new_connection_closes_the_oldest() -> None:
    server = BoundedHttpServer("127.0.0.1", 0, _app, max_connections=3)
    server.start()
    try:
        conns = [socket.create_connection(server.address) for _ in range(5)]
        assert _closed(conns[0])
        assert _closed(conns[1])
        assert server.connections == 3  # the fifth was taken in: the second went
        conns[4].sendall(b"GET /newest HTTP/1.1\r\nHost: x\r\n\r\n")
        conns[4].settimeout(60)
        assert conns[4].recv(64).startswith(b"HTTP/1.1 200 "), "the newest is served"
        assert get(f"http://127.0.0.1:{server.address[1]}/ok")[0] == 200
        for conn in conns:
            conn.close()
    finally:
        server.close()


def test_a_head_larger_than_the_cap_is_refused() -> None:
    server = BoundedHttpServer("127.0.0.1", 0, _app)
    server.start()
    try:
        with socket.create_connection(server.address) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * (MAX_HEAD + 100) + b"\r\n\r\n")
            assert _closed(conn)
    finally:
        server.close()
