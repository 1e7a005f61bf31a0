"""The Prometheus metrics of ``cdi-plugin serve`` and of a scanner, each in the registry it is given.

prometheus_client is imported only where metrics are exported: a :class:`PluginMetrics` made with
``export=False`` (``cdi-plugin serve`` without ``--metrics-address``) keeps only its
:class:`Probes` and counts nothing, and the process never loads the library (2.8 MiB of
resident memory with the metrics).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from cdi_plugin import __version__
from cdi_plugin.metrics.probes import STARTING, Probes

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

#: Allocate takes about a millisecond (bench/bench_plugin.py); the kubelet sets no deadline.
ALLOCATE_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
#: A whole scan of a host takes tens of milliseconds; 1000 devices about 100 ms (bench/bench_scan.py).
SCAN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

RegistrationResult = Literal["ok", "refused", "unreachable"]
AllocationResult = Literal["ok", "invalid-argument", "failed-precondition"]
ValidationSubject = Literal["config", "spec"]


class _Unexported:
    """Stands for every metric of a :class:`PluginMetrics` that exports nothing."""

    def labels(self, *values: str) -> _Unexported:
        return self

    def set(self, value: float) -> None:
        pass

    def inc(self, amount: float = 1) -> None:
        pass

    def observe(self, value: float) -> None:
        pass

    def remove(self, *values: str) -> None:
        pass


_UNEXPORTED = _Unexported()


class PluginMetrics:
    """What ``cdi-plugin serve`` counts, and its :class:`Probes`. All methods are cheap and
    thread-safe; a resource that goes away loses its series. With ``export=False`` there is no
    :attr:`registry` (None) and only the probes are kept."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        spec_dirs: Sequence[Path] = (),
        probes: Probes | None = None,
        export: bool = True,
    ) -> None:
        self.probes = probes if probes is not None else Probes(spec_dirs)
        self.probes.require([STARTING])
        self._device_series: set[str] = set()
        self._endpoint_series: set[str] = set()
        self._lock = threading.Lock()
        self.registry: CollectorRegistry | None = None
        self._devices: Any = _UNEXPORTED
        self._registered: Any = _UNEXPORTED
        self._registrations: Any = _UNEXPORTED
        self._allocations: Any = _UNEXPORTED
        self._allocate_seconds: Any = _UNEXPORTED
        self._spec_problems: Any = _UNEXPORTED
        if not export:
            return
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = r = registry if registry is not None else CollectorRegistry(auto_describe=True)
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
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
            "Devices left out of the last successful scan because their udev data is hostile or no naming "
            "strategy tells them apart.",
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
