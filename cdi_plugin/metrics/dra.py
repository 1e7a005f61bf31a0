"""The Prometheus metrics of the DRA driver, and its part of readiness.

:class:`DraMetrics` is what the driver reports to (the protocol ``cdi_plugin.dra.report.Report``,
whose label values it counts as given: each is one of a few fixed strings, or a kind served).
Only ``serve --api dra|both --metrics-address`` makes one; the device plugin alone never imports
this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from cdi_plugin.metrics.probes import Probes
from cdi_plugin.wording import escape_controls

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

#: A Prepare takes a few milliseconds with its GET of the claim (bench/bench_dra.py); the GETs of a
#: claim the API server does not answer take up to 28 s, and the kubelet gives a call 45 s.
CALL_BUCKETS = (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 45.0)
PREPARE_RESULTS = (
    "ok", "not-found", "invalid-claim", "device-unavailable", "device-in-use", "api-error", "state-error",
    "lock-error",
)  # fmt: skip
UNPREPARE_RESULTS = ("ok", "state-error", "lock-error")
PUBLISH_RESULTS = ("changed", "unchanged", "failed")
#: The longest reason readiness quotes (an API server's or a kubelet's message can be long).
WHY_MAX = 200


def _short(why: str) -> str:
    """``why`` on one line, cut to :data:`WHY_MAX` characters."""
    why = escape_controls(why)
    return why if len(why) <= WHY_MAX else why[: WHY_MAX - 3] + "..."


class DraMetrics:
    """The driver's metrics in ``registry``, and what readiness waits for in ``probes``: the
    kubelet's registration of the driver, and a first publish of its pool (nothing while the
    driver is not started). Thread-safe."""

    def __init__(self, registry: CollectorRegistry, probes: Probes, driver: str) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.probes = probes
        self.registration = f"DRA driver {driver}: registration with the kubelet"
        self.first_publish = f"DRA driver {driver}: first publish of its ResourceSlices"
        self.serving(True)
        self._published_once = False
        r = registry
        self._prepares = Counter(
            "cdi_plugin_dra_prepare_claims",
            "Claims answered by NodePrepareResources, by result.",
            ["result"],
            registry=r,
        )
        self._prepare_seconds = Histogram(
            "cdi_plugin_dra_prepare_duration_seconds",
            "Time to answer a NodePrepareResources call, its claims' GETs included.",
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self._unprepares = Counter(
            "cdi_plugin_dra_unprepare_claims",
            "Claims answered by NodeUnprepareResources, by result.",
            ["result"],
            registry=r,
        )
        self._unprepare_seconds = Histogram(
            "cdi_plugin_dra_unprepare_duration_seconds",
            "Time to answer a NodeUnprepareResources call.",
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self._prepared = Gauge(
            "cdi_plugin_dra_claims_prepared",
            "Claims prepared on the node now, as the prepared-claims file last read or written holds them.",
            registry=r,
        )
        self._registered = Gauge(
            "cdi_plugin_dra_registered",
            "1 while the kubelet has the driver registered, 0 while it does not.",
            registry=r,
        )
        self._publishes = Counter(
            "cdi_plugin_dra_slice_publishes",
            "Passes bringing the stored ResourceSlices to the pool, by result (changed, unchanged, failed).",
            ["result"],
            registry=r,
        )
        self._pool_published = Gauge(
            "cdi_plugin_dra_pool_published",
            "1 while the stored ResourceSlices match the pool (its last pass succeeded), 0 otherwise.",
            registry=r,
        )
        self._devices = Gauge(
            "cdi_plugin_dra_devices",
            "Devices the driver publishes, by kind and health (Healthy, Unhealthy).",
            ["kind", "health"],
            registry=r,
        )
        self._kinds: set[str] = set()
        self._requests = Counter(
            "cdi_plugin_dra_api_requests",
            "Requests to the API server, by verb and result (a watch counted when it ends).",
            ["verb", "result"],
            registry=r,
        )
        # Every result known from the start, so that the first failure is an increase.
        for counter, results in (
            (self._prepares, PREPARE_RESULTS),
            (self._unprepares, UNPREPARE_RESULTS),
            (self._publishes, PUBLISH_RESULTS),
        ):
            for result in results:
                counter.labels(result)

    def prepare(self, results: Iterable[str], seconds: float) -> None:
        for result in results:
            self._prepares.labels(result).inc()
        self._prepare_seconds.observe(seconds)

    def unprepare(self, results: Iterable[str], seconds: float) -> None:
        for result in results:
            self._unprepares.labels(result).inc()
        self._unprepare_seconds.observe(seconds)

    def claims_prepared(self, count: int) -> None:
        self._prepared.set(count)

    def serving(self, yes: bool) -> None:
        self.probes.require([self.registration, self.first_publish] if yes else [], group="dra")

    # Readiness first: a scrape that shows a change finds readiness changed too.
    def registered(self, yes: bool, why: str = "") -> None:
        self.probes.satisfy(self.registration, yes, _short(why))
        self._registered.set(1 if yes else 0)

    def published(self, result: str, why: str = "") -> None:
        ok = result != "failed"
        if ok:
            self._published_once = True
            self.probes.satisfy(self.first_publish)
        elif not self._published_once:
            self.probes.satisfy(self.first_publish, False, _short(why))
        self._pool_published.set(1 if ok else 0)
        self._publishes.labels(result).inc()

    def api_request(self, verb: str, result: str) -> None:
        self._requests.labels(verb, result).inc()

    def devices(self, health: Mapping[str, Sequence[bool]]) -> None:
        """Called on the event loop alone."""
        for kind in self._kinds - set(health):
            for label in ("Healthy", "Unhealthy"):
                self._devices.remove(kind, label)
        for kind, states in health.items():
            healthy = sum(states)
            self._devices.labels(kind, "Healthy").set(healthy)
            self._devices.labels(kind, "Unhealthy").set(len(states) - healthy)
        self._kinds = set(health)
