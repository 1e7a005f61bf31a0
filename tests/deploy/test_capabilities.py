"""The deployment runs both programs as uid 0 with every capability dropped (the DaemonSet's
``capabilities: drop: [ALL]``, the units' empty ``CapabilityBoundingSet=``). Checked here for real:
``setpriv`` takes every capability away, and the scan writes its specs and the plugin registers,
allocates and serves its metrics, because root owns the directories involved."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cdi_plugin.store.ownership import RECORD_NAME
from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import Layout, make_node, run, spec_of, write_spec
from tests.metrics.scrape import get, samples, value

pytestmark = [pytest.mark.root, pytest.mark.timeout(180)]

NO_CAPABILITIES = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs"]
VENV_BIN = Path(sys.executable).parent
KIND = "cdi-plugin.io/test"


def _effective_capabilities(pid: int | str) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^CapEff:\s*([0-9a-f]+)$", status, re.MULTILINE)
    assert found
    return found.group(1)


def test_without_capabilities_root_cannot_write_what_it_does_not_own(tmp_path: Path) -> None:
    """What makes the other tests here mean something: the capabilities really are gone."""
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o755)
    subprocess.run(["chown", "65534:65534", str(foreign)], check=True)
    denied = subprocess.run(
        [*NO_CAPABILITIES, "touch", str(foreign / "x")], capture_output=True, text=True, check=False
    )
    assert denied.returncode != 0
    assert "Permission denied" in denied.stderr
    effective = subprocess.run(
        [*NO_CAPABILITIES, "sh", "-c", "grep CapEff /proc/self/status"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert effective.split() == ["CapEff:", "0000000000000000"]


def test_cdi_gen_scan_writes_its_specs_without_capabilities(tmp_path: Path) -> None:
    out = tmp_path / "etc-cdi"
    command = [*NO_CAPABILITIES, str(VENV_BIN / "cdi-gen"), "scan", "--source", "simulated"]
    first = subprocess.run(
        [*command, "--output-dir", str(out), "--json"], capture_output=True, text=True, check=False
    )
    assert first.returncode == 0, first.stderr
    written = {Path(f["path"]).name for f in json.loads(first.stdout)["files"]}
    assert written
    assert written <= {p.name for p in out.iterdir()}
    assert (out / RECORD_NAME).is_file()
    # a second scan with fewer classes: it removes its own specs of the other kinds
    config = tmp_path / "config.yaml"
    config.write_text(
        "classes:\n  - {vendor: cdi-plugin.io, class: fuse, match: {subsystem: misc, kernel: fuse}}\n"
    )
    again = subprocess.run(
        [*command, "--output-dir", str(out), "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    actions = {Path(f["path"]).name: f["action"] for f in json.loads(again.stdout)["files"]}
    assert set(actions.values()) >= {"removed"}
    assert {p.name for p in out.glob("*.json")} == {n for n, a in actions.items() if a != "removed"}


def test_the_plugin_serves_without_capabilities(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "a")]}))

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            proc = await asyncio.create_subprocess_exec(
                *NO_CAPABILITIES, str(VENV_BIN / "cdi-plugin"), "serve",
                "--spec-dir", str(layout.etc), "--spec-dir", str(layout.run),
                "--plugin-dir", str(layout.plugin_dir), "--sysfs-root", str(layout.sysfs),
                "--metrics-address", "127.0.0.1:0",
                stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert proc.stderr is not None
            try:
                line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
                found = re.search(r"(http://127\.0\.0\.1:\d+)/metrics", line)
                assert found, line
                assert _effective_capabilities(proc.pid) == "0000000000000000"
                client = await kubelet.wait_registered(KIND)
                await client.wait_until(lambda d: len(d) == 1)
                answer = await client.allocate(["a"])
                assert [d.name for d in answer.cdi_devices] == [f"{KIND}=a"]
                status, body = await asyncio.to_thread(get, found.group(1) + "/metrics")
                assert status == 200
                assert value(samples(body), "cdi_plugin_allocations_total", resource=KIND, result="ok") == 1
                proc.terminate()
                assert await asyncio.wait_for(proc.wait(), 60) == 0
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            assert layout.sockets() == {"kubelet.sock"}

    run(scenario())
