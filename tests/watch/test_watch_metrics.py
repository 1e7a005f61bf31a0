"""The watcher's metrics: what a scrape of cdi-gen watch or cdi-plugin serve --scan shows."""

from __future__ import annotations

import asyncio
import shutil
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from cdi_plugin.metrics import ScanMetrics
from cdi_plugin.scan.watcher import Watcher
from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import Layout, eventually, run
from tests.generate.hosts import WORKSTATION
from tests.metrics.scrape import metrics_until
from tests.metrics.scrape import value as scraped
from tests.watch.helpers import replace_file, running, watch_options, write_host

CDI_GEN = Path(sys.executable).parent / "cdi-gen"
CDI_PLUGIN = Path(sys.executable).parent / "cdi-plugin"
TWO = """classes:
  - {vendor: cdi-plugin.io, class: fuse, match: {subsystem: misc, kernel: fuse}}
  - {vendor: cdi-plugin.io, class: tun, match: {subsystem: misc, kernel: tun}}
"""


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(metrics: ScanMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_scans_writes_devices_and_invalid_edits_are_counted(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    config = tmp_path / "etc" / "config.yaml"
    config.write_text(TWO)
    host = tmp_path / "host.json"
    write_host(host, WORKSTATION)
    out = tmp_path / "out"
    metrics = ScanMetrics()

    async def scenario() -> None:
        watcher = Watcher(watch_options(out, config, source=f"fixture:{host}"), metrics=metrics)
        async with running(watcher):
            assert value(metrics, "cdi_gen_scans_total", result="success") == 1
            assert value(metrics, "cdi_gen_spec_writes_total", action="created") == 2
            assert value(metrics, "cdi_gen_devices", kind="cdi-plugin.io/fuse") == 1
            assert (value(metrics, "cdi_gen_last_successful_scan_timestamp_seconds") or 0) > 0
            replace_file(config, TWO.replace("kernel: tun", "kernel: 'tu[n'"))
            await eventually(
                lambda: value(metrics, "cdi_gen_validation_failures_total", subject="config") == 1,
                "the invalid edit counted",
            )
            replace_file(config, TWO.replace("  - {vendor: cdi-plugin.io, class: tun", "  # tun"))
            await eventually(
                lambda: value(metrics, "cdi_gen_spec_writes_total", action="removed") == 1, "tun removed"
            )
            assert value(metrics, "cdi_gen_devices", kind="cdi-plugin.io/tun") is None
            assert value(metrics, "cdi_gen_scans_total", result="success") == 2

    run(scenario())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except urllib.error.URLError:
        return 0, "not listening yet"


def test_cdi_gen_watch_serves_its_metrics_and_probes(tmp_path: Path) -> None:
    host = tmp_path / "host.json"
    write_host(host, WORKSTATION)
    config = tmp_path / "config.yaml"
    config.write_text(TWO)
    out = tmp_path / "out"
    port = _free_port()
    base = f"http://127.0.0.1:{port}"

    async def scenario() -> None:
        proc = await asyncio.create_subprocess_exec(
            str(CDI_GEN), "watch", "--source", f"fixture:{host}", "--config", str(config),
            "--output-dir", str(out), "--metrics-address", str(port),
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while (await asyncio.to_thread(_get, f"{base}/readyz"))[0] != 200:
                assert time.monotonic() < deadline, "never ready"
                await asyncio.sleep(0.1)
            assert (await asyncio.to_thread(_get, f"{base}/healthz"))[0] == 200
            status, text = await asyncio.to_thread(_get, f"{base}/metrics")
            assert status == 200
            got = samples(text)
            assert got[("cdi_gen_scans_total", (("result", "success"),))] == 1
            assert got[("cdi_gen_devices", (("kind", "cdi-plugin.io/tun"),))] == 1
            assert got[("cdi_gen_spec_writes_total", (("action", "created"),))] == 2
        finally:
            proc.terminate()
            _out, err = await proc.communicate()
            assert proc.returncode == 0, err.decode()

    run(scenario())


def test_serve_scan_exposes_the_scanner_and_the_plugin_on_one_endpoint(tmp_path: Path) -> None:
    host = tmp_path / "host.json"
    write_host(host, WORKSTATION)
    config = tmp_path / "config.yaml"
    config.write_text(TWO)
    short = Path(tempfile.mkdtemp(prefix="cdi-m-"))  # plugin sockets need a short directory
    layout = Layout.under(short)
    port = _free_port()

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            proc = await asyncio.create_subprocess_exec(
                str(CDI_PLUGIN), "serve", "--scan", "--source", f"fixture:{host}", "--config", str(config),
                "--spec-dir", str(layout.etc), "--plugin-dir", str(layout.plugin_dir),
                "--metrics-address", str(port), stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                client = await kubelet.wait_registered("cdi-plugin.io/tun")
                await client.wait_until(lambda d: "tun" in d)
                await client.allocate(["tun"])
                allocated = {"resource": "cdi-plugin.io/tun", "result": "ok"}
                got = await metrics_until(  # counted once the answer is on its way
                    f"http://127.0.0.1:{port}",
                    lambda s: scraped(s, "cdi_plugin_allocations_total", **allocated) == 1,
                )
                assert scraped(got, "cdi_gen_devices", kind="cdi-plugin.io/tun") == 1
            finally:
                proc.terminate()
                _out, err = await proc.communicate()
                assert proc.returncode == 0, err.decode()

    try:
        run(scenario())
    finally:
        shutil.rmtree(short)
