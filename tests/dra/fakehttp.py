"""The fake API server's HTTP side: requests parsed, recorded, misbehaved or answered; watches
streamed (chunked, one JSON event per line)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.dra.fakeapiserver import ApiStatus, Call, FakeApiServer, Watch


def _handler(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # connections kept open, as a client of a real server sees them

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in two writes: without this, Nagle's algorithm holds the body
            # until the client's delayed ACK (40 ms). Real API servers (Go) set it too.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _answer(self) -> tuple[int, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if raw and self.headers.get("Content-Type", "").split(";")[0] != "application/json":
                raise ApiStatus(
                    415, f"the body's media type {self.headers.get('Content-Type')!r} is not supported"
                )
            try:
                body = json.loads(raw) if raw else None
            except ValueError as exc:
                raise ApiStatus(400, f"the body is not JSON: {exc}") from None
            return api.handle(self.command, self.path, body)

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            query = parse_qs(parts.query)
            with api.lock:
                api.calls.append(Call(self.command, parts.path, query))
            action = api.take_fault(self.command, parts.path, query)
            if action is not None:
                if int(self.headers.get("Content-Length") or 0):
                    self.rfile.read(int(self.headers["Content-Length"]))
                action(self, api.stopping)
                return
            try:
                code, answer = self._answer()
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
            """Chunked, one event a line; the connection stays open for the next request once the
            stream ended, as with a real API server."""
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
                self.close_connection = True

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@contextmanager
def running(api: FakeApiServer, port: int = 0) -> Iterator[FakeApiServer]:
    """Serve ``api`` on 127.0.0.1:``port`` (0: any free port) while inside."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(api))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    api.stopping.clear()
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield api
    finally:
        api.stopping.set()
        api.break_watches()
        server.shutdown()
        server.server_close()
        thread.join()
