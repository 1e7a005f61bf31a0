"""The scanner's metrics, as a watcher records them after each scan, read back from the exposition."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, generate_latest

from cdi_plugin.metrics import PluginMetrics, ScanMetrics
from tests.metrics.scrape import samples, value


def _read(metrics: ScanMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return samples(generate_latest(metrics.registry).decode())


def test_a_successful_scan() -> None:
    metrics = ScanMetrics()
    assert value(_read(metrics), "cdi_gen_last_successful_scan_timestamp_seconds") == 0
    before = time.time()
    metrics.record_scan(
        0.03,
        ok=True,
        devices={"cdi-plugin.io/fuse": 1, "cdi-plugin.io/usb-serial": 3},
        writes={"created": 2, "changed": 0, "unchanged": 5},
        refused=1,
    )
    found = _read(metrics)
    assert value(found, "cdi_gen_scans_total", result="success") == 1
    assert value(found, "cdi_gen_scan_duration_seconds_count") == 1
    assert value(found, "cdi_gen_scan_duration_seconds_bucket", le="0.05") == 1
    assert value(found, "cdi_gen_scan_duration_seconds_bucket", le="0.025") == 0
    assert value(found, "cdi_gen_spec_writes_total", action="created") == 2
    assert value(found, "cdi_gen_spec_writes_total", action="unchanged") is None
    assert value(found, "cdi_gen_devices", kind="cdi-plugin.io/usb-serial") == 3
    assert value(found, "cdi_gen_refused_devices") == 1
    stamp = value(found, "cdi_gen_last_successful_scan_timestamp_seconds")
    assert stamp is not None
    assert before <= stamp <= time.time()


def test_a_failed_scan_keeps_the_last_success_and_the_devices() -> None:
    metrics = ScanMetrics()
    metrics.record_scan(0.02, ok=True, devices={"cdi-plugin.io/fuse": 1}, finished_at=1700000000.0)
    metrics.record_validation_failure("config")
    metrics.record_scan(0.5, ok=False)
    found = _read(metrics)
    assert value(found, "cdi_gen_scans_total", result="failure") == 1
    assert value(found, "cdi_gen_scans_total", result="success") == 1
    assert value(found, "cdi_gen_scan_duration_seconds_count") == 2
    assert value(found, "cdi_gen_validation_failures_total", subject="config") == 1
    assert value(found, "cdi_gen_last_successful_scan_timestamp_seconds") == 1700000000.0
    assert value(found, "cdi_gen_devices", kind="cdi-plugin.io/fuse") == 1


def test_a_kind_that_is_gone_loses_its_series() -> None:
    metrics = ScanMetrics()
    metrics.record_scan(0.01, ok=True, devices={"cdi-plugin.io/fuse": 1, "cdi-plugin.io/kvm": 1})
    metrics.record_scan(0.01, ok=True, devices={"cdi-plugin.io/fuse": 1}, writes={"removed": 1})
    found = _read(metrics)
    assert value(found, "cdi_gen_devices", kind="cdi-plugin.io/kvm") is None
    assert value(found, "cdi_gen_devices", kind="cdi-plugin.io/fuse") == 1
    assert value(found, "cdi_gen_spec_writes_total", action="removed") == 1


def test_scanner_and_plugin_share_one_registry_and_nothing_is_global() -> None:
    registry = CollectorRegistry()
    plugin, scan = PluginMetrics(registry), ScanMetrics(registry)
    plugin.allocation("cdi-plugin.io/fuse", "ok", 0.001)
    scan.record_scan(0.01, ok=True)
    found = samples(generate_latest(registry).decode())
    assert value(found, "cdi_plugin_allocations_total", resource="cdi-plugin.io/fuse", result="ok") == 1
    assert value(found, "cdi_gen_scans_total", result="success") == 1
    # another pair on fresh registries starts from zero and does not clash with the first
    again = ScanMetrics()
    assert value(_read(again), "cdi_gen_scans_total", result="success") is None
