"""The HTTP endpoint: addresses, where it listens (only there), its paths, and the CLI flag."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from cdi_plugin.metrics import MetricsServer, PluginMetrics, Probes, parse_address
from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import Layout, make_node, run, spec_of, write_spec
from tests.metrics.scrape import get, metrics_until, samples, value

pytestmark = pytest.mark.timeout(180)

KIND = "cdi-plugin.io/test"


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("9402", ("127.0.0.1", 9402)),
        ("127.0.0.1:9402", ("127.0.0.1", 9402)),
        ("localhost:9402", ("127.0.0.1", 9402)),
        ("0.0.0.0:9402", ("0.0.0.0", 9402)),
        ("[::1]:9402", ("::1", 9402)),
        ("[::]:0", ("::", 0)),
        ("10.1.2.3:65535", ("10.1.2.3", 65535)),
    ],
)
def test_addresses(text: str, address: tuple[str, int]) -> None:
    assert parse_address(text) == address


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (":9402", "give HOST:PORT"),
        ("", "give HOST:PORT"),
        ("node.example:9402", "is not an IP address"),
        ("127.0.0.1:http", "the port must be a number"),
        ("127.0.0.1:65536", "the port must be a number"),
        ("::1:9402", "write an IPv6 address as [ADDRESS]:PORT"),
        ("[::1]9402", "write an IPv6 address as [ADDRESS]:PORT"),
    ],
)
def test_bad_addresses(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        parse_address(text)


def test_listens_only_on_the_address_given() -> None:
    with MetricsServer("127.0.0.1", 0, CollectorRegistry(), Probes()) as server:
        assert get(server.url + "/healthz") == (200, "ok\n")
        # 127.0.0.2 is this host too: a server bound to every address would answer there
        with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
            probe.connect(("127.0.0.2", server.port))
        port = server.port
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))


def test_ipv6_loopback() -> None:
    if not socket.has_ipv6:
        pytest.fail("this host has no IPv6 support")
    with MetricsServer("::1", 0, CollectorRegistry(), Probes()) as server:
        assert server.url.startswith("http://[::1]:")
        assert get(server.url + "/healthz") == (200, "ok\n")


def test_paths_and_methods() -> None:
    metrics = PluginMetrics()
    with MetricsServer("127.0.0.1", 0, metrics.registry, metrics.probes) as server:
        status, body = get(server.url + "/metrics")
        assert status == 200
        assert value(samples(body), "cdi_plugin_build_info", version="0.1.0") == 1
        assert get(server.url + "/metrics", method="HEAD")[0] == 405
        assert get(server.url + "/readyz") == (
            503,
            "waiting for: start-up (the first read of the spec directories)\n",
        )
        assert get(server.url + "/") == (404, "not found; try /metrics, /healthz or /readyz\n")
        assert get(server.url + "/healthz", method="POST") == (405, "only GET\n")


def _serve(layout: Layout, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "cdi_plugin.cli.plugin", "serve",
        "--spec-dir", str(layout.etc), "--plugin-dir", str(layout.plugin_dir),
        "--sysfs-root", str(layout.sysfs), *extra,
    ]  # fmt: skip


def test_the_serve_flag_serves_metrics_and_probes_until_sigterm(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "a")]}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            proc = await asyncio.create_subprocess_exec(
                *_serve(layout, "--metrics-address", "127.0.0.1:0"), stderr=asyncio.subprocess.PIPE
            )
            assert proc.stderr is not None
            try:
                line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
                found = re.search(r"serving metrics on (http://127\.0\.0\.1:\d+)/metrics", line)
                assert found, line
                base = found.group(1)
                client = await kubelet.wait_registered(KIND)
                await client.wait_until(lambda d: len(d) == 1)
                await client.allocate(["a"])
                scraped = await metrics_until(  # counted once the answer is on its way
                    base, lambda s: value(s, "cdi_plugin_allocations_total", resource=KIND, result="ok") == 1
                )
                assert value(scraped, "cdi_plugin_devices", resource=KIND, health="Healthy") == 1
                assert await asyncio.to_thread(get, base + "/readyz") == (200, "ok (1 ready)\n")
                proc.send_signal(signal.SIGTERM)
                assert await asyncio.wait_for(proc.wait(), 60) == 0
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            port = int(base.rsplit(":", 1)[1])
            with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
                probe.connect(("127.0.0.1", port))

    run(scenario())


def test_the_serve_flag_refuses_a_bad_or_busy_address(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    bad = subprocess.run(
        _serve(layout, "--metrics-address", ":9402"), capture_output=True, text=True, timeout=30, check=False
    )
    assert bad.returncode == 2
    assert "Invalid value for '--metrics-address': ':9402': give HOST:PORT" in bad.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = subprocess.run(
            _serve(layout, "--metrics-address", f"127.0.0.1:{port}"),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert busy.returncode == 1
    assert busy.stderr.splitlines()[-1] == (
        f"cdi-plugin: error: --metrics-address 127.0.0.1:{port}: cannot listen: Address already in use"
    )
    assert not list(layout.plugin_dir.iterdir())


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _open_idle(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that send half a request head and then nothing."""
    conns = []
    for _ in range(count):
        conn = socket.create_connection(("127.0.0.1", port), timeout=60)
        conn.sendall(b"GET /metrics HTTP/1.1\r\n")
        conns.append(conn)
    return conns


def test_thousands_of_idle_connections_cost_little_and_do_not_block_the_probes(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    proc = subprocess.Popen(
        _serve(layout, "--metrics-address", "127.0.0.1:0"), stderr=subprocess.PIPE, text=True
    )
    conns: list[socket.socket] = []
    try:
        assert proc.stderr is not None
        found = re.search(r"serving metrics on (http://127\.0\.0\.1:(\d+))/metrics", proc.stderr.readline())
        assert found
        base, port = found.group(1), int(found.group(2))
        assert get(base + "/healthz") == (200, "ok\n")
        before = _rss_mib(proc.pid)
        conns = _open_idle(port, 2000)
        assert get(base + "/healthz") == (200, "ok\n"), "a probe is answered among 2000 idle connections"
        during = _rss_mib(proc.pid)
        assert during - before < 20, f"RSS {before:.0f} -> {during:.0f} MiB with 2000 idle connections"
        for conn in conns:
            conn.close()
        conns = []
        assert get(base + "/healthz") == (200, "ok\n")
        after = _rss_mib(proc.pid)
        assert after - before < 20, f"RSS {before:.0f} -> {after:.0f} MiB after the connections closed"
    finally:
        for conn in conns:
            conn.close()
        proc.terminate()
        proc.communicate(timeout=60)
