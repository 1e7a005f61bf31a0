"""The whole chain on this machine: cdi-gen scan -> spec files -> cdi-plugin serve -> a kubelet's
Allocate -> the returned CDI names -> podman run --device -> the device inside the container."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import run
from tests.e2e.podman import PodmanEnv
from tests.scan.helpers import run_cdi_gen

pytestmark = [pytest.mark.podman, pytest.mark.root]

CDI_PLUGIN = Path(sys.executable).parent / "cdi-plugin"
RESOURCES = {"cdi-plugin.io/fuse": ("fuse", "/dev/fuse"), "cdi-plugin.io/tun": ("tun", "/dev/net/tun")}


async def _allocate_through_the_plugin(specs: Path, plugins: Path) -> dict[str, Any]:
    """Start the real plugin process, let the kubelet allocate one device of each resource."""
    async with FakeKubelet(plugins) as kubelet:
        plugin = await asyncio.create_subprocess_exec(
            str(CDI_PLUGIN), "serve", "--spec-dir", str(specs), "--plugin-dir", str(plugins),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            answers = {}
            for resource, (device_id, _node) in RESOURCES.items():
                client = await kubelet.wait_registered(resource)
                await client.wait_until(lambda d, i=device_id: i in d and d[i].health == "Healthy")
                answers[resource] = await client.allocate([device_id])
            return answers
        finally:
            plugin.terminate()
            _, stderr = await plugin.communicate()
            assert plugin.returncode == 0, stderr.decode()


def test_scanned_devices_allocated_by_the_plugin_reach_a_podman_container(
    podman_env: PodmanEnv, tmp_path: Path
) -> None:
    specs, plugins = tmp_path / "cdi", tmp_path / "plugins"
    plugins.mkdir()
    run_cdi_gen("scan", "--output-dir", specs, check=0)

    answers = run(_allocate_through_the_plugin(specs, plugins), timeout=60)

    names: list[str] = []
    for resource, answer in answers.items():
        device_id = RESOURCES[resource][0]
        cdi_devices = [d.name for d in answer.cdi_devices]
        assert cdi_devices == [f"{resource}={device_id}"]
        assert not answer.envs
        assert not answer.mounts
        assert not answer.devices
        (value,) = answer.annotations.values()  # a runtime reading annotations gets the same names
        assert value.split(",") == cdi_devices
        names += cdi_devices

    nodes = [node for _id, node in RESOURCES.values()]
    ran = podman_env.run_container(names, "; ".join(f"stat -c '%n %t:%T' {n}" for n in nodes), spec_dir=specs)
    assert ran.returncode == 0, ran.stderr
    inside = dict(line.split() for line in ran.stdout.splitlines())
    for node in nodes:
        rdev = os.stat(node).st_rdev
        assert inside[node] == f"{os.major(rdev):x}:{os.minor(rdev):x}"
