"""The HTTP endpoint: ``/metrics``, ``/healthz`` and ``/readyz`` on one address, in its own thread."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from cdi_plugin.httpserver import BoundedHttpServer
from cdi_plugin.metrics.probes import Probes

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
HEALTHZ, READYZ, METRICS = "/healthz", "/readyz", "/metrics"


def parse_address(text: str) -> tuple[str, int]:
    """``(host, port)`` from ``PORT`` (on 127.0.0.1), ``HOST:PORT`` or ``[IPv6]:PORT``.

    HOST is an IP address or ``localhost``; an empty host is refused rather than read as "every
    address", which must be asked for explicitly (``0.0.0.0:PORT``, ``[::]:PORT``).
    """
    raw = text.strip()
    if raw.isdigit():
        host, port_text = DEFAULT_HOST, raw
    elif raw.startswith("[") or raw.count(":") > 1:
        host, sep, port_text = raw[1:].partition("]:")
        if not sep or not raw.startswith("["):
            raise ValueError(f"{text!r}: write an IPv6 address as [ADDRESS]:PORT, e.g. [::1]:9402")
    else:
        host, sep, port_text = raw.rpartition(":")
        if not sep or not host:
            raise ValueError(
                f"{text!r}: give HOST:PORT, e.g. 127.0.0.1:9402 (0.0.0.0:9402 listens on every address)"
            )
    if host == "localhost":
        host = DEFAULT_HOST
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{text!r}: {host!r} is not an IP address (or localhost)") from None
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number from 0 to 65535")
    return host, int(port_text)


def _text(start_response: Callable[..., Any], status: str, body: str) -> list[bytes]:
    data = (body + "\n").encode()
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))]
    )
    return [data]


def make_app(registry: CollectorRegistry, probes: Probes) -> Callable[..., Iterable[bytes]]:
    """The WSGI application: /metrics, /healthz, /readyz."""
    from prometheus_client import make_wsgi_app

    exposition = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "GET":
            return _text(start_response, "405 Method Not Allowed", "only GET")
        path = environ.get("PATH_INFO", "")
        if path == METRICS:
            result: Iterable[bytes] = exposition(environ, start_response)
            return result
        if path in (HEALTHZ, READYZ):
            check = probes.liveness() if path == HEALTHZ else probes.readiness()
            return _text(start_response, "200 OK" if check.ok else "503 Service Unavailable", check.detail)
        return _text(start_response, "404 Not Found", f"not found; try {METRICS}, {HEALTHZ} or {READYZ}")

    return app


class MetricsServer:
    """Serves :func:`make_app` on exactly one address, in a background thread
    (:class:`~cdi_plugin.httpserver.BoundedHttpServer`: bounded connections and idle time)."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry, probes: Probes) -> None:
        self.host = host
        self.requested_port = port
        self._http = BoundedHttpServer(host, port, make_app(registry, probes))
        self._started = False

    @property
    def started(self) -> bool:
        return self._started

    @property
    def port(self) -> int:
        return int(self._http.address[1]) if self._started else self.requested_port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        """Bind and serve; raises OSError (address in use, not an address of this host)."""
        self._http.start()
        self._started = True
        log.info("serving metrics on %s%s, health on %s and %s", self.url, METRICS, HEALTHZ, READYZ)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MetricsServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
