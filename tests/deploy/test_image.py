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
from packaging.utils import canonicalize_name

from cdi_plugin import __version__
from cdi_plugin.cdi.validate import validate_bytes
from cdi_plugin.dra import api as dra_api
from cdi_plugin.store.ownership import read_record
from tests.deploy.image import (
    DEPLOY,
    LOCK,
    build_image,
    configmap_data,
    container_of,
    daemonset_pod,
    host_path,
    run_options,
)
from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import run
from tests.dra.conftest import DRIVER
from tests.dra.fakeapiserver import FakeApiServer, running
from tests.dra.fakekubelet import FakeKubelet as DraKubelet
from tests.dra.serving import kubeconfig as kubeconfig_file
from tests.dra.test_kubelet import claim_obj
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
    kubelet's directories are short-named: gRPC binds a unix socket path of at most 105 bytes."""
    pod = daemonset_pod()
    sources = {name: tmp_path / name for name in ("etc-cdi", "var-run-cdi", "config")}
    if not Path(host_path(pod, "run-udev")).is_dir():  # DirectoryOrCreate, without creating it
        sources["run-udev"] = tmp_path / "run-udev"
    for directory in sources.values():
        directory.mkdir()
    for name, content in configmap_data().items():
        (sources["config"] / name).write_text(content)
    kubelet = {
        v["name"]: Path(tempfile.mkdtemp(prefix="cdi-k-"))
        for v in pod["volumes"]
        if v.get("hostPath", {}).get("path", "").startswith(KUBELET_DIR)
    }
    assert {"device-plugins", "kubelet-plugins", "kubelet-plugins-registry"} <= set(kubelet)
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


def _locked(lock: Path) -> set[str]:
    return {canonicalize_name(n) for n in re.findall(r"^([A-Za-z0-9._-]+)==", lock.read_text(), re.MULTILINE)}


def test_the_images_environment_holds_the_lock_and_cdi_plugin_alone(image: PodmanEnv) -> None:
    """The build backend built cdi-plugin's wheel in an environment of its own: /opt/cdi-plugin
    holds the runtime lock's distributions, cdi-plugin, and the setuptools that venv puts in."""
    listed = image.podman(
        "run", "--rm", "--network", "none", "--entrypoint", "/opt/cdi-plugin/bin/python", TAG, "-c",
        "from importlib import metadata; print(*(d.metadata['Name'] for d in metadata.distributions()))",
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    installed = {canonicalize_name(n) for n in listed.stdout.split()}
    assert installed == _locked(LOCK) | {"cdi-plugin", "setuptools"}


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


def _kubeconfig(url: str, work: Path) -> list[str]:
    """``podman run`` options giving the container a kubeconfig naming the API server at ``url``
    (a pod would use its service account's token)."""
    kubeconfig = kubeconfig_file(work / "kubeconfig", url)
    return ["--volume", f"{kubeconfig}:/run/kubeconfig:ro", "--env", "KUBECONFIG=/run/kubeconfig"]


async def _dra(api: FakeApiServer, sources: dict[str, Path], node: str) -> None:
    """The DRA side: registered through the mounted registry directory, the fuse device published
    as a ResourceSlice of the node, a claim of it prepared with its CDI name."""
    registry = sources["kubelet-plugins-registry"] / f"{DRIVER}-reg.sock"
    for _ in range(600):
        if registry.exists():
            break
        await asyncio.sleep(0.05)
    kubelet = DraKubelet(registry.parent)
    await kubelet.register(registry, DRIVER)
    assert kubelet.endpoint == f"{KUBELET_DIR}plugins/{DRIVER}/dra.sock"  # the path inside and outside
    kubelet.endpoint = str(sources["kubelet-plugins"] / DRIVER / "dra.sock")  # this host's stand-in

    def fuse() -> str | None:
        return next(
            (d["name"] for s in list(api.slices.values()) if s["spec"]["nodeName"] == node
             for d in s["spec"]["devices"] if d["attributes"]["kind"]["string"] == RESOURCE),
            None,
        )  # fmt: skip

    for _ in range(600):
        if fuse() is not None:
            break
        await asyncio.sleep(0.05)
    device = fuse()
    assert device is not None, api.slices
    claim = dra_api.Claim("default", "fuse", "uid-fuse")
    api.add_claim(claim_obj(claim, ("fuse", node, device)))
    [(uid, prepared)] = (await kubelet.prepare(claim)).items()
    assert uid == claim.uid
    assert not isinstance(prepared, str), prepared
    assert [d.cdi_device_ids for d in prepared] == [(f"{RESOURCE}=fuse",)]


async def _serve(
    image: PodmanEnv, pod: dict[str, Any], sources: dict[str, Path], api: FakeApiServer
) -> list[str]:
    """The DaemonSet's command in the image against a fake kubelet and a fake API server: the
    example pod's request is allocated, every kind written is registered, the probes answer, the
    DRA side registers and prepares a claim of the same device, and SIGTERM stops it cleanly.
    Returns the log lines."""
    args = container_of(pod)["args"]
    args[args.index("--metrics-address") + 1] = "127.0.0.1:0"  # host network: any free port
    name = f"cdi-plugin-test-{os.getpid()}"
    plugins = sources["device-plugins"]
    node = next(v for v in run_options(pod, sources) if v.startswith("NODE_NAME=")).partition("=")[2]
    api.add_node(node)
    async with FakeKubelet(plugins) as kubelet:
        options = [*run_options(pod, sources), *_kubeconfig(api.url, sources["config"].parent)]
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

            client = await kubelet.wait_registered(RESOURCE)
            devices = await client.wait_until(lambda d: len(d) >= COUNT)
            chosen = sorted(devices)[:COUNT]
            answer = await client.allocate(chosen)
            names = [f"{RESOURCE}={i}" for i in chosen]
            assert [d.name for d in answer.cdi_devices] == names
            assert [v.split(",") for v in answer.annotations.values()] == [names]
            assert (list(answer.devices), list(answer.mounts), dict(answer.envs)) == ([], [], {})

            kinds = {json.loads(p.read_bytes())["kind"] for p in sources["etc-cdi"].glob("*.json")}
            for kind in kinds:
                await kubelet.wait_registered(kind)
            assert set(kubelet.clients) == kinds

            await _dra(api, sources, node)

            for probe in ("livenessProbe", "readinessProbe"):
                path = container_of(pod)[probe]["httpGet"]["path"]
                assert (await asyncio.to_thread(get, base + path))[0] == 200, probe

            stop = await asyncio.to_thread(image.podman, "stop", "--time", "10", name)
            assert stop.returncode == 0, stop.stderr
            rest = await asyncio.wait_for(proc.stderr.read(), 30)
            assert await asyncio.wait_for(proc.wait(), 60) == 0, rest.decode()
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
    # --api=both gives DRA only the kinds the configuration names: fuse, both ways, for this test
    config = sources["config"] / "config.yaml"
    contents = yaml.safe_load(config.read_text())
    contents["plugin"].update(resources={RESOURCE: {"api": "both"}}, allowExclusiveKindsOnBothApis=True)
    config.write_text(yaml.safe_dump(contents))
    with running(FakeApiServer()) as api:  # on the host's network, as the container
        lines = run(_serve(image, pod, sources, api), timeout=180)
    messages = [json.loads(line)["msg"] for line in lines]  # --log-format json, as the DaemonSet asks
    assert all(messages)
    assert "--api=both" in container_of(pod)["args"]
    assert f"registered with the kubelet as DRA driver {DRIVER}" in messages
