"""A small HTTP server for a WSGI application, bounded against clients that connect and wait.

Every connection is a coroutine on one asyncio event loop in one background thread, not a thread
of its own: an idle connection costs a few kilobytes. At most ``max_connections`` are open (a new
one closes the oldest), a connection that has not sent its whole request head within
``idle_timeout`` seconds (or whose head exceeds :data:`MAX_HEAD` bytes) is closed, and every answer
closes its connection (``Connection: close``; probes and Prometheus open one per request).
Only the request line and headers are read: a request body is never read (GET has none).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

MAX_HEAD = 8192
#: Connections the kernel queues until they are accepted: a burst beyond it costs a client a
#: second (its SYN is dropped and sent again).
BACKLOG = 1024
MAX_CONNECTIONS = 128
IDLE_TIMEOUT = 10.0


def _environ(head: bytes, server: tuple[str, int]) -> dict[str, Any] | None:
    """The WSGI environ of a request head; None when it is not HTTP/1.x."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    method, target, protocol = parts
    path, _, query = target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_PROTOCOL": protocol,
        "SERVER_NAME": server[0],
        "SERVER_PORT": str(server[1]),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            key = name.strip().upper().replace("-", "_")
            if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                key = "HTTP_" + key
            environ[key] = value.strip()
    return environ


def _respond(app: WsgiApp, environ: dict[str, Any]) -> bytes:
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        started[:] = [status, headers]

    body = b"".join(app(environ, start_response))
    status, headers = started
    lines = [f"HTTP/1.1 {status}"]
    lines += [f"{k}: {v}" for k, v in headers if k.lower() not in ("content-length", "connection")]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


class BoundedHttpServer:
    """Serves ``app`` on ``(host, port)``; :meth:`start` binds (raising ``OSError``) and returns."""

    def __init__(
        self,
        host: str,
        port: int,
        app: WsgiApp,
        *,
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self.app = app
        self.address = (host, port)
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self._open: dict[asyncio.StreamWriter, None] = {}  # oldest first
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def connections(self) -> int:
        return len(self._open)

    def start(self) -> None:
        host, port = self.address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(BACKLOG)
        except OSError:
            sock.close()
            raise
        self.address = sock.getsockname()[:2]
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(sock, ready), name="metrics", daemon=True)
        self._thread.start()
        ready.wait(10)

    def _run(self, sock: socket.socket, ready: threading.Event) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(
            asyncio.start_server(self._client, sock=sock, limit=MAX_HEAD, backlog=BACKLOG)
        )
        ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            for writer in list(self._open):
                writer.transport.abort()  # each connection's coroutine then ends by itself
            loop.run_until_complete(asyncio.sleep(0))
            tasks = asyncio.all_tasks(loop)
            if tasks:
                loop.run_until_complete(asyncio.wait(tasks, timeout=1))
            loop.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open[writer] = None
        if len(self._open) > self.max_connections:
            oldest = next(iter(self._open))
            del self._open[oldest]
            oldest.transport.abort()
        try:
            async with asyncio.timeout(self.idle_timeout):
                head = await reader.readuntil(b"\r\n\r\n")
                environ = _environ(head, self.address)
                if environ is None:
                    return
                writer.write(_respond(self.app, environ))
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            return
        except Exception:
            log.debug("a request from %s failed", writer.get_extra_info("peername"), exc_info=True)
        finally:
            self._open.pop(writer, None)
            writer.close()

    def close(self) -> None:
        loop, thread, self._thread = self._loop, self._thread, None
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
