"""The DaemonSet's own command line, with the ConfigMap's configuration, as `kubectl apply -k`
sends them for the device plugin alone and with the DRA component, run for real against the fake
kubelet (and, with DRA, the fake API server): only the node's paths are pointed at a temporary
directory and the host's devices at a recorded fixture. The example pod's request is then
allocated the way the kubelet would."""

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

import pytest
import yaml

from tests.deploy.kustomize import DEPLOY, kustomize_build, one
from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import Layout, run
from tests.dra.conftest import DRIVER
from tests.dra.fakeapiserver import running
from tests.dra.fakekubelet import FakeKubelet as DraKubelet
from tests.dra.serving import DraNode, kubeconfig, published, sockets
from tests.metrics.scrape import get, ready_until

VENV_BIN = Path(sys.executable).parent
NODE_NAME = "node-a"
POD_UID = "4f1c2d3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"

pytestmark = pytest.mark.timeout(180)


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


@pytest.mark.parametrize("dra", [False, True], ids=["device-plugin", "with-dra"])
def test_the_daemonset_command_serves_what_the_example_pod_requests(tmp_path: Path, dra: bool) -> None:
    objects = kustomize_build(DEPLOY / "with-dra" if dra else DEPLOY)
    layout = Layout.under(tmp_path)
    node = layout.dev / "fuse"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    fixture = tmp_path / "host.json"
    _fuse_fixture(fixture, node)
    config = tmp_path / "config.yaml"
    config.write_text(one(objects, "ConfigMap")["data"]["config.yaml"])

    (container,) = one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    args = list(container["args"])
    args[args.index("--config") + 1] = str(config)
    args[args.index("--metrics-address") + 1] = "127.0.0.1:0"
    kubelet_dir = Path(tempfile.mkdtemp(prefix="cdi-k-"))  # short: unix socket paths
    driver = DraNode(layout.etc, layout.dev, kubelet_dir, tmp_path / "kubeconfig")
    node_paths = [
        "--spec-dir", str(layout.etc), "--spec-dir", str(layout.run), "--plugin-dir", str(layout.plugin_dir),
        "--sysfs-root", str(layout.sysfs), "--source", f"fixture:{fixture}",
    ]  # fmt: skip
    env = dict(os.environ)
    registration = driver.registration_socket
    if dra:  # the DRA driver's paths and its API server; its node's name and pod UID from the downward API
        node_paths += ["--kubelet-plugins-dir", str(driver.plugins), "--kubelet-registry-dir",
                       str(driver.registry), "--kubeconfig", str(driver.config)]  # fmt: skip
        downward = {"spec.nodeName": NODE_NAME, "metadata.uid": POD_UID}
        for variable in container["env"]:
            env[variable["name"]] = downward[variable["valueFrom"]["fieldRef"]["fieldPath"]]
        assert set(env.values()) >= set(downward.values())
        registration = driver.registry / f"{DRIVER}-{POD_UID}-reg.sock"  # named after the pod
    else:  # the device plugin alone, which touches no kubelet directory but its own
        assert not [a for a in args if a.startswith("--api")]
        assert "env" not in container
    driver.api.add_node(NODE_NAME, "v1.36.2")
    pod = yaml.safe_load((DEPLOY / "examples" / "pod-fuse.yaml").read_text())
    ((resource, count),) = pod["spec"]["containers"][0]["resources"]["limits"].items()

    async def scenario() -> None:
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            proc = await asyncio.create_subprocess_exec(
                str(VENV_BIN / "cdi-plugin"), *args, *node_paths, stderr=asyncio.subprocess.PIPE, env=env,
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
                if not dra:
                    assert await asyncio.to_thread(get, base + "/readyz") == (200, "ok (1 ready)\n")
                else:  # --api=both: the same device published to the API server for DRA
                    deadline = asyncio.get_running_loop().time() + 60
                    while "fuse-fuse" not in published(driver):
                        assert proc.returncode is None
                        assert asyncio.get_running_loop().time() < deadline, published(driver)
                        await asyncio.sleep(0.05)
                    # ready once the kubelet registered the DRA driver too
                    waiting = f"waiting for: DRA driver {DRIVER}: registration with the kubelet"
                    await ready_until(base, 503, waiting)
                    await DraKubelet(driver.registry).register(registration, DRIVER)
                    await ready_until(base, 200, "ok (3 ready)")
                proc.send_signal(signal.SIGTERM)
                assert await asyncio.wait_for(proc.wait(), 60) == 0
                assert sockets(kubelet_dir) == []
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()

    try:
        with running(driver.api):
            kubeconfig(driver.config, driver.api.url)
            run(scenario(), timeout=150)
    finally:
        shutil.rmtree(kubelet_dir)
