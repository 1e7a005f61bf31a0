"""``cdi-gen watch`` and ``cdi-plugin serve --scan`` as real processes: signals, logs, errors."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdi_plugin.store.dirlock import LOCK_NAME
from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import Layout, run
from tests.generate.hosts import WORKSTATION
from tests.scan.helpers import CDI_GEN as CDI_GEN_BIN
from tests.watch.helpers import write_host
from tests.watch.loops import AVAILABLE, Loops, free_numbers, loop_class

CDI_GEN = [str(CDI_GEN_BIN)]
CDI_PLUGIN = [sys.executable, "-m", "cdi_plugin.cli.plugin"]
KIND = "cdi-plugin.io/loop"

pytestmark = pytest.mark.timeout(180)


class Logs:
    """The JSON log lines of a running process, read as they come."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        self.stream = proc.stderr
        self.lines: list[dict[str, Any]] = []

    async def until(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60.0
    ) -> dict[str, Any]:
        async def read() -> dict[str, Any]:
            while True:
                raw = await self.stream.readline()
                if not raw:
                    raise AssertionError(f"the process ended; its log: {[e['msg'] for e in self.lines]}")
                entry = json.loads(raw)
                self.lines.append(entry)
                if predicate(entry):
                    return entry

        return await asyncio.wait_for(read(), timeout)

    async def rest(self) -> list[str]:
        for raw in (await self.stream.read()).decode().splitlines():
            self.lines.append(json.loads(raw))
        return [e["msg"] for e in self.lines]


def _starts(text: str) -> Callable[[dict[str, Any]], bool]:
    return lambda entry: str(entry["msg"]).startswith(text)


async def _stop(proc: asyncio.subprocess.Process, sig: signal.Signals = signal.SIGTERM) -> int:
    try:
        proc.send_signal(sig)
        return await asyncio.wait_for(proc.wait(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_watch_follows_a_fixture_and_stops_cleanly_on_a_signal(tmp_path: Path, sig: signal.Signals) -> None:
    host = tmp_path / "host.json"
    write_host(host, WORKSTATION)
    out = tmp_path / "out"

    async def scenario() -> None:
        proc = await asyncio.create_subprocess_exec(
            *CDI_GEN, "watch", "--source", f"fixture:{host}", "--output-dir", str(out),
            "--spec-dir", str(out), "--log-format", "json", stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        logs = Logs(proc)
        try:
            initial = await logs.until(_starts("initial scan in "))
            assert initial["rescanned"] == "every class"
            assert (out / "cdi-plugin.io-tun.json").exists()
            write_host(host, [d for d in WORKSTATION if d.sys_name != "tun"])
            batch = await logs.until(_starts("rescanned every class after "))
            assert batch["removed"] == "cdi-plugin.io-tun.json"
            assert batch["devices_removed"] == 1
            assert not (out / "cdi-plugin.io-tun.json").exists()
        finally:
            code = await _stop(proc, sig)
        assert code == 0
        messages = await logs.rest()
        assert f"{sig.name} received, stopping" in messages
        assert messages[-1] == "stopped watching"
        assert all({"time", "level", "logger", "msg"} <= set(e) for e in logs.lines)

    run(scenario())


def test_watch_stops_at_once_on_a_signal_while_another_scan_holds_the_lock(tmp_path: Path) -> None:
    host = tmp_path / "host.json"
    write_host(host, WORKSTATION)
    out = tmp_path / "out"
    out.mkdir()
    lock = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    async def scenario() -> None:
        proc = await asyncio.create_subprocess_exec(
            *CDI_GEN, "watch", "--source", f"fixture:{host}", "--output-dir", str(out),
            "--spec-dir", str(out), "--lock-timeout", "3600", "--log-format", "json",
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        logs = Logs(proc)
        try:
            await logs.until(_starts("watching "))
        finally:
            code = await _stop(proc)  # within 60 s, not the hour the lock may be waited for
        assert code == 0
        messages = await logs.rest()
        assert f"{out / LOCK_NAME}: stopped while another scan held the lock; nothing was written" in messages
        assert messages[-1] == "stopped watching"
        assert not [e for e in logs.lines if e["level"] in ("WARNING", "ERROR")]

    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another scan, writing
        run(scenario())
    finally:
        os.close(lock)
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)


def test_watch_refuses_to_start_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("classes: [{vendor: cdi-plugin.io, class: x1, match: {kernel: '[a'}}]\n")
    done = _run(*CDI_GEN, "watch", "--config", str(bad), "--output-dir", str(tmp_path / "out"))
    assert done.returncode == 1
    assert done.stderr.startswith(f"cdi-gen: error: {bad}: classes[0].match.kernel: invalid 'kernel'")
    assert done.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()
    done = _run(*CDI_GEN, "watch", "--source", "simulated", "--output-dir", str(tmp_path / "out"))
    assert done.returncode == 2
    assert done.stderr.endswith(
        "Error: Invalid value for '--source': 'simulated': must be 'udev' or 'fixture:PATH' ('simulated' "
        "never changes: run cdi-gen scan --source simulated once)\n"
    )


def test_serve_checks_its_scanner_options(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    base = [*CDI_PLUGIN, "serve", "--spec-dir", str(layout.etc), "--plugin-dir", str(layout.plugin_dir)]
    done = _run(*base, "--output-dir", str(layout.etc), "--format", "yaml")
    assert done.returncode == 2
    assert "Error: --output-dir, --format need --scan" in done.stderr
    done = _run(*base, "--scan", "--output-dir", str(layout.run))
    assert done.returncode == 1
    assert done.stderr == (
        f"cdi-plugin: error: --output-dir {layout.run}: not one of the plugin's spec directories "
        f"({layout.etc}), so the plugin would never see the specs; add --spec-dir {layout.run}\n"
    )


def test_serve_scan_refuses_hooks_from_the_config_without_the_host_side_flag(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(
        "classes:\n  - vendor: cdi-plugin.io\n    class: fuse\n    match: {subsystem: misc, kernel: fuse}\n"
        "    edits: {hooks: [{hookName: createContainer, path: /usr/bin/true}]}\n"
    )
    base = [*CDI_PLUGIN, "serve", "--spec-dir", str(layout.etc), "--plugin-dir", str(layout.plugin_dir)]
    done = _run(*base, "--scan", "--config", str(config))
    assert done.returncode == 1
    assert done.stderr == (
        f"cdi-plugin: error: {config}: classes[0].edits.hooks: hooks and mounts run as root on every node, "
        "so cdi-plugin serve --scan accepts them only with --allow-hooks-and-mounts (given on the node's "
        "command line, not in the file)\n"
    )
    assert list(layout.etc.iterdir()) == []
    done = _run(*base, "--allow-hooks-and-mounts")
    assert done.returncode == 2
    assert "Error: --allow-hooks-and-mounts needs --scan" in done.stderr


@pytest.mark.root
@pytest.mark.skipif(not AVAILABLE, reason="needs root (CI runs as root)")
def test_a_silent_monitor_is_reported(tmp_path: Path) -> None:
    """udevd's events never reach another network namespace (and none are sent where udevd does
    not run): the watcher says so instead of waiting silently."""
    (n,) = free_numbers(1)
    config = tmp_path / "config.yaml"
    config.write_text(loop_class(n))

    async def scenario() -> None:
        proc = await asyncio.create_subprocess_exec(
            "unshare", "--net", *CDI_GEN, "watch", "--uevent-source", "udev", "--config", str(config),
            "--output-dir", str(tmp_path / "out"), "--log-format", "json", stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        logs = Logs(proc)
        try:
            warning = await logs.until(_starts("no uevent arrived within 3s"))
        finally:
            assert await _stop(proc) == 0
        assert warning["level"] == "warning"
        assert "(udev monitor)" in warning["msg"]
        assert "hostNetwork: true" in warning["msg"]
        assert "hot-plugged devices will not be noticed" in warning["msg"]

    run(scenario())


@pytest.mark.root
@pytest.mark.skipif(not AVAILABLE, reason="needs root and /dev/loop-control (CI runs as root)")
def test_serve_scan_is_one_process_for_a_node(tmp_path: Path) -> None:
    (n,) = free_numbers(1)
    layout = Layout.under(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(loop_class(n) + "plugin:\n  gracePeriod: 1m\n")
    name = f"loop{n}"

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            proc = await asyncio.create_subprocess_exec(
                *CDI_PLUGIN, "serve", "--scan", "--config", str(config), "--spec-dir", str(layout.etc),
                "--spec-dir", str(layout.run), "--plugin-dir", str(layout.plugin_dir),
                "--sysfs-root", str(layout.sysfs), "--log-format", "json", stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            logs = Logs(proc)
            try:
                await logs.until(_starts("initial scan in "))
                with Loops() as loops:
                    loops.add(n)
                    client = await kubelet.wait_registered(KIND)
                    await client.wait_until(
                        lambda d: {i: e.health for i, e in d.items()} == {name: "Healthy"}
                    )
                    loops.remove(n)
                    await client.wait_until(
                        lambda d: {i: e.health for i, e in d.items()} == {name: "Unhealthy"}
                    )
                    await logs.until(lambda e: e.get("removed") == "cdi-plugin.io-loop.json")
                    assert not (layout.etc / "cdi-plugin.io-loop.json").exists()
            finally:
                code = await _stop(proc)
            assert code == 0
            assert layout.sockets() == {"kubelet.sock"}, "the plugin's socket is removed"
            messages = await logs.rest()
            assert messages.count("SIGTERM received, stopping") == 1, "one signal handler"
            assert "stopped watching" in messages
            assert "stopped" in messages
            assert any(m.endswith(f"devices added: {KIND}={name}") for m in messages)

    run(scenario())
