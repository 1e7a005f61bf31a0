"""The image users deploy, built from ``Containerfile`` and run for real with podman: cdi-gen and
cdi-plugin in it, a scan of this machine through the DaemonSet's mounts, and the DaemonSet's own
command registering with a kubelet through the mounted device plugin directory.

The node's directories (/etc/cdi, /var/run/cdi, the kubelet's) are temporary directories; /dev
and /sys are the host's, read-only, as the DaemonSet mounts them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdi_plugin import __version__
from cdi_plugin.cdi.validate import validate_bytes
from cdi_plugin.store.ownership import read_record
from tests.deploy.image import (
    DEPLOY,
    NODE_NAME,
    build_image,
    container_of,
    daemonset_pod,
    host_path,
    run_options,
)
from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import run
from tests.dra.serving import free_port
from tests.e2e.podman import PodmanEnv, podman_env
from tests.metrics.scrape import get

pytestmark = [pytest.mark.image, pytest.mark.podman, pytest.mark.root, pytest.mark.timeout(900)]

__all__ = ["podman_env"]

TAG = "localhost/cdi-plugin:test"
KUBELET_DIR = "/var/lib/kubelet/"
#: what the example pod asks for: one device of this resource
EXAMPLE_POD = yaml.safe_load((DEPLOY / "examples" / "pod-fuse.yaml").read_text())
((RESOURCE, COUNT),) = EXAMPLE_POD["spec"]["containers"][0]["resources"]["limits"].items()


@pytest.fixture(scope="module")
def image(podman_env: PodmanEnv, tmp_path_factory: pytest.TempPathFactory) -> PodmanEnv:
    """The image, built once for this module (the session's podman storage goes with it)."""
    build_image(podman_env, TAG, tmp_path_factory.mktemp("image"))
    return podman_env


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[dict[str, Any], dict[str, Path]]]:
    """The DaemonSet's pod, and stand-ins for the node's directories and the ConfigMap. The
    kubelet's directories are short-named: a unix socket's path has at most 107 bytes."""
    pod = daemonset_pod()
    sources = {name: tmp_path / name for name in ("etc-cdi", "var-run-cdi", "config")}
    if not Path(host_path(pod, "run-udev")).is_dir():  # DirectoryOrCreate, without creating it
        sources["run-udev"] = tmp_path / "run-udev"
    for directory in sources.values():
        directory.mkdir()
    configmap = yaml.safe_load((DEPLOY / "configmap.yaml").read_text())
    for name, content in configmap["data"].items():
        (sources["config"] / name).write_text(content)
    kubelet = {
        v["name"]: Path(tempfile.mkdtemp(prefix="cdi-k-"))
        for v in pod["volumes"]
        if v.get("hostPath", {}).get("path", "").startswith(KUBELET_DIR)
    }
    assert "device-plugins" in kubelet
    sources |= kubelet
    try:
        yield pod, sources
    finally:
        for directory in kubelet.values():
            shutil.rmtree(directory)


def test_the_image_holds_both_programs(image: PodmanEnv) -> None:
    gen = image.podman("run", "--rm", "--entrypoint", "cdi-gen", TAG, "--version")
    assert (gen.returncode, gen.stdout) == (0, f"cdi-gen, version {__version__}\n"), gen.stderr
    plugin = image.podman("run", "--rm", TAG, "--version")
    assert (plugin.returncode, plugin.stdout) == (0, f"cdi-plugin, version {__version__}\n"), plugin.stderr
    inspected = image.podman("image", "inspect", "--format", "{{json .Config}}", TAG)
    config = json.loads(inspected.stdout)
    assert config["User"] == "0:0"
    assert config["Entrypoint"] == ["/opt/cdi-plugin/bin/cdi-plugin"]
    assert config["Labels"]["org.opencontainers.image.version"] == __version__


def test_cdi_gen_scan_in_the_image_writes_valid_specs_of_the_hosts_devices(
    image: PodmanEnv, node: tuple[dict[str, Any], dict[str, Path]]
) -> None:
    pod, sources = node
    args = container_of(pod)["args"]
    config = args[args.index("--config") + 1]
    scan = image.podman("run", "--rm", *run_options(pod, sources), "--entrypoint", "cdi-gen", TAG, "scan",
                        "--config", config)  # fmt: skip
    assert scan.returncode == 0, scan.stderr

    written = sources["etc-cdi"]
    files = sorted(p.name for p in written.glob("*.json"))
    assert "cdi-plugin.io-fuse.json" in files, scan.stdout
    assert sorted(read_record(written)) == files  # recorded as cdi-gen's own
    assert not list(sources["var-run-cdi"].iterdir())
    for name in files:
        result = validate_bytes((written / name).read_bytes(), name)
        assert result.valid, result.problems
        assert not result.problems
        assert result.spec is not None
        # the nodes as the container saw them through the mounted /dev: the host's
        for device in result.spec.devices:
            for edit in device.container_edits.device_nodes or ():
                seen = os.stat(edit.host_path or edit.path)
                assert stat.S_ISCHR(seen.st_mode), edit
                assert (edit.file_mode, edit.gid) == (stat.S_IMODE(seen.st_mode), seen.st_gid), edit


def _api_server_down(pod: dict[str, Any], work: Path) -> list[str]:
    """``podman run`` options giving the container a kubeconfig naming an API server that does not
    answer (nothing listens on its port), and the node's name if the pod does not set it."""
    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "node",
        "clusters": [{"name": "node", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}],
        "contexts": [{"name": "node", "context": {"cluster": "node", "user": "node"}}],
        "users": [{"name": "node", "user": {"token": "t"}}],
    }))  # fmt: skip
    options = ["--volume", f"{kubeconfig}:/run/kubeconfig:ro", "--env", "KUBECONFIG=/run/kubeconfig"]
    if not any(v["name"] == "NODE_NAME" for v in container_of(pod).get("env", [])):
        options += ["--env", f"NODE_NAME={NODE_NAME}"]
    return options


async def _serve(image: PodmanEnv, pod: dict[str, Any], sources: dict[str, Path]) -> list[str]:
    """The DaemonSet's command in the image against a fake kubelet: the example pod's request is
    allocated, every kind written is registered, the probes answer, and SIGTERM stops it cleanly,
    while the DRA side, whose API server is down, retries. Returns the log lines."""
    args = container_of(pod)["args"]
    args[args.index("--metrics-address") + 1] = "127.0.0.1:0"  # host network: any free port
    name = f"cdi-plugin-test-{os.getpid()}"
    plugins = sources["device-plugins"]
    options = [*run_options(pod, sources), *_api_server_down(pod, sources["config"].parent)]
    async with FakeKubelet(plugins) as kubelet:
        proc = await asyncio.create_subprocess_exec(
            *image.podman_args(), "run", "--rm", "--name", name, *options, TAG, *args,
            env=image.env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stderr is not None
        try:
            first = await asyncio.wait_for(proc.stderr.readline(), 60)
            if not first.startswith(b"{"):
                pytest.fail((first + await asyncio.wait_for(proc.stderr.read(), 30)).decode())
            found = re.search(r"(http://127\.0\.0\.1:\d+)/metrics", json.loads(first)["msg"])
            assert found, first
            base = found.group(1)

            client = await kubelet.wait_registered(RESOURCE, timeout=30)
            devices = await client.wait_until(lambda d: len(d) >= COUNT)
            chosen = sorted(devices)[:COUNT]
            answer = await client.allocate(chosen)
            names = [f"{RESOURCE}={i}" for i in chosen]
            assert [d.name for d in answer.cdi_devices] == names
            assert [v.split(",") for v in answer.annotations.values()] == [names]
            assert (list(answer.devices), list(answer.mounts), dict(answer.envs)) == ([], [], {})

            kinds = {json.loads(p.read_bytes())["kind"] for p in sources["etc-cdi"].glob("*.json")}
            for kind in kinds:
                await kubelet.wait_registered(kind, timeout=10)
            assert set(kubelet.clients) == kinds

            for probe in ("livenessProbe", "readinessProbe"):
                path = container_of(pod)[probe]["httpGet"]["path"]
                assert (await asyncio.to_thread(get, base + path))[0] == 200, probe

            stop = await asyncio.to_thread(image.podman, "stop", "--time", "10", name)
            assert stop.returncode == 0, stop.stderr
            rest = await asyncio.wait_for(proc.stderr.read(), 30)
            assert await asyncio.wait_for(proc.wait(), 30) == 0, rest.decode()
        finally:
            if proc.returncode is None:
                await asyncio.to_thread(image.podman, "rm", "--force", name)
                await proc.wait()
    for volume, directory in sources.items():
        if directory.name.startswith("cdi-k-"):
            assert not [p for p in directory.rglob("*") if p.is_socket()], f"sockets left in {volume}"
    return [first.decode(), *rest.decode().splitlines()]


def test_the_daemonsets_command_in_the_image_registers_with_the_kubelet(
    image: PodmanEnv, node: tuple[dict[str, Any], dict[str, Path]]
) -> None:
    pod, sources = node
    lines = run(_serve(image, pod, sources), timeout=180)
    messages = [json.loads(line)["msg"] for line in lines]  # --log-format json, as the DaemonSet asks
    assert all(messages)
    assert "--api=both" in container_of(pod)["args"]
    assert any(m.startswith(f"DRA driver cdi-plugin.io on node {NODE_NAME}: ") for m in messages), messages
    assert any(m.startswith(f"reading node {NODE_NAME}: ") and "retrying in" in m for m in messages), messages
