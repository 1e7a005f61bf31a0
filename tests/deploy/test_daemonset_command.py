"""The DaemonSet's own command line, with the ConfigMap's configuration, run for real against the
fake kubelet: only the node's paths are pointed at a temporary directory and the host's devices
at a recorded fixture. The example pod's request is then allocated the way the kubelet would."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import Layout, run
from tests.dra.fakeapiserver import running
from tests.dra.serving import DraNode, kubeconfig, published, sockets
from tests.metrics.scrape import get

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
VENV_BIN = Path(sys.executable).parent
NODE_NAME = "node-a"

pytestmark = pytest.mark.timeout(180)


def _daemonset_container() -> dict[str, Any]:
    daemonset = yaml.safe_load((DEPLOY / "daemonset.yaml").read_text())
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _fuse_fixture(path: Path, node: Path) -> None:
    path.write_text(
        json.dumps(
            [
                {
                    "subsystem": "misc",
                    "sys_name": "fuse",
                    "sys_path": "/sys/devices/virtual/misc/fuse",
                    "devnode": str(node),
                    "node": {"type": "c", "major": 1, "minor": 3, "mode": "0666", "uid": 0, "gid": 0},
                    "properties": {"MAJOR": "1", "MINOR": "3"},
                }
            ]
        )
    )


async def _logged(stderr: asyncio.StreamReader, text: str, timeout: float = 60) -> None:
    """Read the JSON log until a message containing ``text``; fail if the program ends first."""
    async with asyncio.timeout(timeout):
        while line := await stderr.readline():
            if text in json.loads(line)["msg"]:
                return
    raise AssertionError(f"the program ended without logging {text!r}")


def test_the_daemonset_command_serves_what_the_example_pod_requests(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    node = layout.dev / "fuse"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    fixture = tmp_path / "host.json"
    _fuse_fixture(fixture, node)
    configmap = yaml.safe_load((DEPLOY / "configmap.yaml").read_text())
    config = tmp_path / "config.yaml"
    config.write_text(configmap["data"]["config.yaml"])

    container = _daemonset_container()
    args = list(container["args"])
    args[args.index("--config") + 1] = str(config)
    args[args.index("--metrics-address") + 1] = "127.0.0.1:0"
    kubelet_dir = Path(tempfile.mkdtemp(prefix="cdi-k-"))  # short: unix socket paths
    dra = DraNode(layout.etc, layout.dev, kubelet_dir, tmp_path / "kubeconfig")
    node_paths = [
        "--spec-dir", str(layout.etc), "--spec-dir", str(layout.run), "--plugin-dir", str(layout.plugin_dir),
        "--sysfs-root", str(layout.sysfs), "--source", f"fixture:{fixture}",
        "--kubelet-plugins-dir", str(dra.plugins), "--kubelet-registry-dir", str(dra.registry),
        "--kubeconfig", str(dra.config),
    ]  # fmt: skip
    dra.api.add_node(NODE_NAME)
    pod = yaml.safe_load((DEPLOY / "examples" / "pod-fuse.yaml").read_text())
    ((resource, count),) = pod["spec"]["containers"][0]["resources"]["limits"].items()

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            proc = await asyncio.create_subprocess_exec(
                str(VENV_BIN / "cdi-plugin"), *args, *node_paths, stderr=asyncio.subprocess.PIPE,
                env={**os.environ, "NODE_NAME": NODE_NAME},  # the DaemonSet's, from the downward API
            )  # fmt: skip
            assert proc.stderr is not None
            try:
                first = json.loads(await asyncio.wait_for(proc.stderr.readline(), 60))
                found = re.search(r"(http://127\.0\.0\.1:\d+)/metrics", first["msg"])
                assert found, first
                base = found.group(1)
                client = await kubelet.wait_registered(resource)
                devices = await client.wait_until(lambda d: len(d) >= count)
                answer = await client.allocate(sorted(devices)[:count])
                assert [d.name for d in answer.cdi_devices] == [f"{resource}=fuse"]
                assert (layout.etc / "cdi-plugin.io-fuse.json").is_file()
                assert await asyncio.to_thread(get, base + "/healthz") == (200, "ok\n")
                await _logged(proc.stderr, "registered with the kubelet")  # counted ready before it logs
                assert await asyncio.to_thread(get, base + "/readyz") == (200, "ok (1 ready)\n")
                # --api=both: the same device published to the API server for DRA
                deadline = asyncio.get_running_loop().time() + 60
                while "fuse-fuse" not in published(dra):
                    assert proc.returncode is None
                    assert asyncio.get_running_loop().time() < deadline, published(dra)
                    await asyncio.sleep(0.05)
                assert dra.registration_socket.exists()
                proc.send_signal(signal.SIGTERM)
                assert await asyncio.wait_for(proc.wait(), 60) == 0
                assert sockets(kubelet_dir) == []
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()

    try:
        with running(dra.api):
            kubeconfig(dra.config, dra.api.url)
            run(scenario())
    finally:
        shutil.rmtree(kubelet_dir)
