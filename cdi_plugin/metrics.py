"""Prometheus metrics, liveness and readiness, and the HTTP endpoint that serves them.

Nothing here is global: every :class:`PluginMetrics` and :class:`ScanMetrics` registers its
metrics in the ``CollectorRegistry`` it is given (a fresh one by default), and
:class:`MetricsServer` serves one registry and one :class:`Probes`. The device plugin and the
scanner update their metrics on the event loop; the server answers from its own thread and event
loop (the metrics and :class:`Probes` are thread-safe), so a blocked main event loop is seen as a
stale heartbeat on ``/healthz`` instead of a probe that hangs, and idle connections cost neither
threads nor much memory (:mod:`cdi_plugin.httpserver`).

Endpoints (GET only, as the kubelet's probes and Prometheus ask; other methods 405, other paths 404):

* ``/metrics``: the Prometheus text exposition (OpenMetrics when asked for);
* ``/healthz``: 200 while the event loop beats and every spec directory that exists can be
  listed and is not a deleted directory still mounted into the container; 503 and why otherwise;
* ``/readyz``: 200 when everything required is satisfied (for the plugin: every resource it
  serves is registered with the kubelet; a node with nothing to serve is ready), 503 and what it
  waits for otherwise.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from cdi_plugin import __version__
from cdi_plugin.httpserver import BoundedHttpServer

log = logging.getLogger(__name__)

#: ``/healthz`` fails when the event loop has not beaten for this long.
STALE_AFTER = 30.0
DEFAULT_HOST = "127.0.0.1"
HEALTHZ, READYZ, METRICS = "/healthz", "/readyz", "/metrics"
#: What readiness waits for until the plugin has first read the spec directories.
STARTING = "start-up (the first read of the spec directories)"

#: Allocate takes about a millisecond (bench/bench_plugin.py); the kubelet sets no deadline.
ALLOCATE_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
#: A whole scan of a host takes tens of milliseconds; 1000 devices about 100 ms (bench/bench_scan.py).
SCAN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

RegistrationResult = Literal["ok", "refused", "unreachable"]
AllocationResult = Literal["ok", "invalid-argument", "failed-precondition"]
ValidationSubject = Literal["config", "spec"]


# -- liveness and readiness -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    detail: str


def _directory_problem(directory: Path) -> str | None:
    """Why ``directory`` is unusable, or None. A directory that does not exist is fine: it is
    watched for. One that was deleted while mounted (``st_nlink`` 0) is not: the container keeps
    the deleted directory until it restarts."""
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{directory}: {exc.strerror or exc}"
    if not os.path.isdir(directory):
        return f"{directory}: not a directory"
    if st.st_nlink == 0:
        return f"{directory}: deleted on the host while mounted here; a restart mounts the new one"
    try:
        with os.scandir(directory) as entries:
            next(entries, None)
    except OSError as exc:
        return f"{directory}: cannot be listed: {exc.strerror or exc}"
    return None


class Probes:
    """Liveness and readiness state: written from the event loop, read from the server's threads.

    * Liveness: :meth:`beat` was called within ``stale_after`` seconds (the loop runs; it beats
      every :attr:`interval` seconds), every directory of ``dirs`` that exists can be listed, and
      no work given to :meth:`track` has been stalled for longer than ``stale_after``.
    * Readiness: every name given to :meth:`require` was :meth:`satisfy`-ed (and not unsatisfied
      since). Nothing required means ready.
    """

    def __init__(
        self,
        dirs: Sequence[Path] = (),
        *,
        stale_after: float = STALE_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dirs = tuple(dirs)
        self.stale_after = stale_after
        self.clock = clock
        self._lock = threading.Lock()
        self._last_beat = clock()
        self._required: tuple[str, ...] = ()
        self._satisfied: set[str] = set()
        self._tracked: list[tuple[str, Callable[[], float | None]]] = []

    @property
    def interval(self) -> float:
        """How often the event loop should :meth:`beat`."""
        return self.stale_after / 6

    def beat(self) -> None:
        with self._lock:
            self._last_beat = self.clock()

    def require(self, names: Iterable[str]) -> None:
        """What readiness waits for, replacing what it waited for before."""
        with self._lock:
            self._required = tuple(sorted(set(names)))

    def track(self, what: str, stalled_since: Callable[[], float | None]) -> None:
        """Fail liveness while ``stalled_since()`` (a time of :attr:`clock`, or None when all is
        well; called from the server's thread) lies more than ``stale_after`` seconds back: work
        that runs off the event loop (a rescan in a worker thread) can stall while the loop beats."""
        with self._lock:
            self._tracked.append((what, stalled_since))

    def satisfy(self, name: str, ok: bool = True) -> None:
        with self._lock:
            if ok:
                self._satisfied.add(name)
            else:
                self._satisfied.discard(name)

    def liveness(self) -> Check:
        with self._lock:
            now = self.clock()
            silent = now - self._last_beat
            tracked = list(self._tracked)
        if silent > self.stale_after:
            return Check(False, f"the event loop has not run for {silent:.0f}s")
        for what, stalled_since in tracked:
            since = stalled_since()
            if since is not None and now - since > self.stale_after:
                return Check(False, f"{what} stalled for {now - since:.0f}s")
        problems = [p for p in map(_directory_problem, self.dirs) if p]
        if problems:
            return Check(False, "; ".join(problems))
        return Check(True, "ok")

    def readiness(self) -> Check:
        with self._lock:
            waiting = [n for n in self._required if n not in self._satisfied]
            required = len(self._required)
        if waiting:
            return Check(False, "waiting for: " + ", ".join(waiting))
        return Check(True, f"ok ({required} ready)" if required else "ok (nothing to serve)")


# -- metrics --------------------------------------------------------------------------------------


class PluginMetrics:
    """What ``cdi-plugin serve`` counts, and its :class:`Probes`. All methods are cheap and
    thread-safe; a resource that goes away loses its series."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        spec_dirs: Sequence[Path] = (),
        probes: Probes | None = None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.probes = probes if probes is not None else Probes(spec_dirs)
        self.probes.require([STARTING])
        r = self.registry
        info = Gauge("cdi_plugin_build_info", "The running cdi-plugin version.", ["version"], registry=r)
        info.labels(__version__).set(1)
        self._devices = Gauge(
            "cdi_plugin_devices",
            "Device IDs advertised to the kubelet, by resource and health (capacity = both).",
            ["resource", "health"],
            registry=r,
        )
        self._registered = Gauge(
            "cdi_plugin_registered",
            "1 while the resource is registered with the kubelet, 0 while it is not.",
            ["resource"],
            registry=r,
        )
        self._registrations = Counter(
            "cdi_plugin_registrations",
            "Registration attempts with the kubelet, by resource and result (ok, refused, unreachable).",
            ["resource", "result"],
            registry=r,
        )
        self._allocations = Counter(
            "cdi_plugin_allocations",
            "Allocate calls answered, by resource and result (ok, invalid-argument, failed-precondition).",
            ["resource", "result"],
            registry=r,
        )
        self._allocate_seconds = Histogram(
            "cdi_plugin_allocate_duration_seconds",
            "Time to answer Allocate, from the request to the answer, including re-resolving the names.",
            ["resource"],
            buckets=ALLOCATE_BUCKETS,
            registry=r,
        )
        self._spec_problems = Gauge(
            "cdi_plugin_spec_problems",
            "Spec files skipped as broken, and devices skipped as defined twice at the same priority.",
            ["problem"],
            registry=r,
        )
        self._device_series: set[str] = set()
        self._endpoint_series: set[str] = set()
        self._lock = threading.Lock()

    def beat(self) -> None:
        self.probes.beat()

    def serving(self, resources: Iterable[str]) -> None:
        """The resources being served; readiness waits until each is registered."""
        self.probes.require(resources)

    def set_devices(self, health: Mapping[str, Sequence[bool]]) -> None:
        """The health (True: Healthy) of every device ID of every advertised resource; resources
        not given lose their series."""
        with self._lock:
            for resource in self._device_series - set(health):
                for label in ("Healthy", "Unhealthy"):
                    self._devices.remove(resource, label)
            for resource, states in health.items():
                healthy = sum(states)
                self._devices.labels(resource, "Healthy").set(healthy)
                self._devices.labels(resource, "Unhealthy").set(len(states) - healthy)
            self._device_series = set(health)

    def registration(self, resource: str, result: RegistrationResult) -> None:
        self._registrations.labels(resource, result).inc()
        if result == "ok":
            self.registered(resource, True)

    def registered(self, resource: str, yes: bool) -> None:
        with self._lock:
            self._endpoint_series.add(resource)
            self._registered.labels(resource).set(1 if yes else 0)
        self.probes.satisfy(resource, yes)

    def endpoint_closed(self, resource: str) -> None:
        """The resource is no longer served: drop its registration series."""
        with self._lock:
            if resource in self._endpoint_series:
                self._endpoint_series.discard(resource)
                self._registered.remove(resource)
        self.probes.satisfy(resource, False)

    def allocation(self, resource: str, result: AllocationResult, seconds: float) -> None:
        self._allocations.labels(resource, result).inc()
        self._allocate_seconds.labels(resource).observe(seconds)

    def spec_problems(self, broken_files: int, conflicts: int) -> None:
        self._spec_problems.labels("broken_file").set(broken_files)
        self._spec_problems.labels("conflict").set(conflicts)


class ScanMetrics:
    """What a scanner (``cdi-gen watch``, ``cdi-plugin serve --scan``) counts.

    Call :meth:`record_scan` after every scan, successful or not, and
    :meth:`record_validation_failure` when a configuration or a built spec is refused.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._scans = Counter(
            "cdi_gen_scans", "Scans run, by result (success, failure).", ["result"], registry=r
        )
        self._duration = Histogram(
            "cdi_gen_scan_duration_seconds",
            "Time a scan took: discovery, building, validation and writing.",
            buckets=SCAN_BUCKETS,
            registry=r,
        )
        self._last_success = Gauge(
            "cdi_gen_last_successful_scan_timestamp_seconds",
            "Unix time the last successful scan finished (0: none yet).",
            registry=r,
        )
        self._writes = Counter(
            "cdi_gen_spec_writes",
            "Spec files written or removed, by action (created, changed, removed).",
            ["action"],
            registry=r,
        )
        self._validation = Counter(
            "cdi_gen_validation_failures",
            "Configurations and specs refused as invalid, by subject (config, spec).",
            ["subject"],
            registry=r,
        )
        self._devices = Gauge(
            "cdi_gen_devices",
            "Devices in the specs of the last successful scan, by kind.",
            ["kind"],
            registry=r,
        )
        self._refused = Gauge(
            "cdi_gen_refused_devices",
            "Devices left out of the last successful scan because their udev data is hostile.",
            registry=r,
        )
        self._kinds: set[str] = set()
        self._lock = threading.Lock()

    def record_scan(
        self,
        seconds: float,
        *,
        ok: bool,
        devices: Mapping[str, int] | None = None,
        writes: Mapping[str, int] | None = None,
        refused: int = 0,
        finished_at: float | None = None,
    ) -> None:
        """One scan that took ``seconds``. On success: devices per kind (kinds not given lose
        their series), spec files per action (created, changed, removed) and refused devices."""
        self._scans.labels("success" if ok else "failure").inc()
        self._duration.observe(seconds)
        if not ok:
            return
        self._last_success.set(time.time() if finished_at is None else finished_at)
        for action, count in (writes or {}).items():
            if action != "unchanged" and count:
                self._writes.labels(action).inc(count)
        self._refused.set(refused)
        kinds = dict(devices or {})
        with self._lock:
            for kind in self._kinds - set(kinds):
                self._devices.remove(kind)
            for kind, count in kinds.items():
                self._devices.labels(kind).set(count)
            self._kinds = set(kinds)

    def record_validation_failure(self, subject: ValidationSubject, count: int = 1) -> None:
        self._validation.labels(subject).inc(count)


# -- the HTTP endpoint ----------------------------------------------------------------------------


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
