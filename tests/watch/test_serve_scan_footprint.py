"""``cdi-plugin serve --scan --config`` as a real process: its configuration is checked in a child
process and the specs it builds without the JSON Schema, so neither jsonschema-rs nor OpenSSL is
mapped into it, even after it has written specs; a bad edit is refused with the message of the check
in the process, keeping the configuration in force."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from cdi_plugin.errors import ConfigError
from cdi_plugin.store.configfile import parse_config
from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import Layout, make_node, run, spec_of, write_spec
from tests.watch.helpers import replace_file

pytestmark = pytest.mark.timeout(300)

#: The native libraries the process must not map.
LEFT_OUT = ("jsonschema_rs", "/libcrypto", "/libssl")


def _config(class_: str, extra: str = "") -> str:
    return (
        f"classes:\n  - vendor: cdi-plugin.io\n    class: {class_}\n"
        f"    match: {{subsystem: misc, kernel: '*binder*'}}\n    naming: [kernel]\n{extra}"
        "plugin:\n  gracePeriod: 1m\n"
    )


def _binders(dev: Path, n: int) -> list[dict[str, Any]]:
    return [
        {
            "subsystem": "misc",
            "sys_name": f"binder{i}",
            "sys_path": f"/sys/devices/virtual/misc/binder{i}",
            "devnode": str(dev / f"binder{i}"),
            "node": {"type": "c", "major": 1, "minor": 3, "mode": "0666", "uid": 0, "gid": 0},
            "properties": {"MAJOR": "1", "MINOR": "3"},
        }
        for i in range(n)
    ]


def _mapped(pid: int) -> list[str]:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return [name for name in LEFT_OUT if name in maps]


class _Log:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        self.stream = proc.stderr
        self.messages: list[str] = []

    async def until(self, wanted: str, timeout: float = 60.0) -> str:
        async def read() -> str:
            while True:
                raw = await self.stream.readline()
                if not raw:
                    raise AssertionError(f"the process ended; its log: {self.messages}")
                self.messages.append(str(json.loads(raw)["msg"]))
                if wanted in self.messages[-1]:
                    return self.messages[-1]

        return await asyncio.wait_for(read(), timeout)


def test_serve_scan_keeps_the_schema_validator_and_openssl_out_and_refuses_a_bad_edit(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    # a vendor's spec, served with --kind, registers the plugin before the scanner writes any spec
    node = make_node(layout.dev / "thing0")
    write_spec(layout.run, spec_of("vendor.example/thing", {"thing0": [node]}), owned=False)
    host = tmp_path / "host.json"
    host.write_text("[]")
    config = tmp_path / "config.yaml"
    config.write_text(_config("androidbinder"))
    bad = _config("binder", extra="    bogus: 1\n")
    with pytest.raises(ConfigError) as in_process:
        parse_config(bad.encode(), str(config))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "cdi_plugin.cli.plugin", "serve", "--scan", "--config", str(config),
                "--spec-dir", str(layout.etc), "--spec-dir", str(layout.run), "--kind", "vendor.example/*",
                "--plugin-dir", str(layout.plugin_dir), "--sysfs-root", str(layout.sysfs),
                "--source", f"fixture:{host}", "--log-format", "json", stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            log = _Log(proc)
            try:
                await log.until("initial scan in ")
                vendor = await kubelet.wait_registered("vendor.example/thing")
                await vendor.wait_until(lambda d: set(d) == {"thing0"})
                assert _mapped(proc.pid) == []

                replace_file(config, bad)
                refused = await log.until("keeping the last good configuration")
                assert refused == f"{in_process.value}; keeping the last good configuration"
                assert _mapped(proc.pid) == []

                make_node(layout.dev / "binder0")
                replace_file(host, json.dumps(_binders(layout.dev, 1)))
                kept = await kubelet.wait_registered("cdi-plugin.io/androidbinder")
                await kept.wait_until(lambda d: set(d) == {"binder0"})
                assert (layout.etc / "cdi-plugin.io-androidbinder.json").exists()
                assert _mapped(proc.pid) == []  # a spec built, checked and written

                replace_file(config, _config("binder"))
                await log.until("reloaded, 1 device classes")
                renamed = await kubelet.wait_registered("cdi-plugin.io/binder")
                await renamed.wait_until(lambda d: set(d) == {"binder0"})
                assert _mapped(proc.pid) == []
            finally:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        await asyncio.wait_for(proc.wait(), 60)
                    finally:
                        if proc.returncode is None:
                            proc.kill()
                            await proc.wait()
            assert proc.returncode == 0

    run(scenario(), timeout=240)
