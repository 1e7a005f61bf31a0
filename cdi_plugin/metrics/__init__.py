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
  serves is registered with the kubelet; a node with nothing to serve is ready; for the DRA
  driver: registered with the kubelet, its pool published once), 503 and what it waits for
  otherwise.

Public names, each imported from its module on first use (prometheus_client only once metrics
are exported):

* the metrics of each half (:mod:`.counters`): ``PluginMetrics``, ``ScanMetrics`` and the label
  values ``AllocationResult``, ``RegistrationResult``, ``ValidationSubject``;
* the metrics of the DRA driver and its part of readiness (:mod:`.dra`): ``DraMetrics``;
* liveness and readiness (:mod:`.probes`): ``Probes``, ``Check``, ``STALE_AFTER``, ``STARTING``;
* the endpoint (:mod:`.server`): ``MetricsServer``, ``make_app``, ``parse_address`` and the paths
  ``METRICS``, ``HEALTHZ``, ``READYZ``.
"""

from typing import TYPE_CHECKING

from cdi_plugin.lazy import exports

__all__ = [
    "HEALTHZ",
    "METRICS",
    "READYZ",
    "STALE_AFTER",
    "STARTING",
    "AllocationResult",
    "Check",
    "DraMetrics",
    "MetricsServer",
    "PluginMetrics",
    "Probes",
    "RegistrationResult",
    "ScanMetrics",
    "ValidationSubject",
    "make_app",
    "parse_address",
]

if TYPE_CHECKING:
    from cdi_plugin.metrics.counters import (
        AllocationResult,
        PluginMetrics,
        RegistrationResult,
        ScanMetrics,
        ValidationSubject,
    )
    from cdi_plugin.metrics.dra import DraMetrics
    from cdi_plugin.metrics.probes import STALE_AFTER, STARTING, Check, Probes
    from cdi_plugin.metrics.server import HEALTHZ, METRICS, READYZ, MetricsServer, make_app, parse_address
else:
    __getattr__ = exports(
        __name__,
        {
            "counters": [
                "AllocationResult",
                "PluginMetrics",
                "RegistrationResult",
                "ScanMetrics",
                "ValidationSubject",
            ],
            "dra": ["DraMetrics"],
            "probes": ["STALE_AFTER", "STARTING", "Check", "Probes"],
            "server": ["HEALTHZ", "METRICS", "READYZ", "MetricsServer", "make_app", "parse_address"],
        },
    )
