"""KEP-5004 end to end, the driver's side for real: a pod asking only for ``cdi-plugin.io/fuse: 1``
in its limits, on a node that serves FUSE through DRA alone, gets the device. The DeviceClass is
what ``cdi-plugin dra-objects --extended-resource`` prints; the node is a real ``serve --api
both``; the cluster's part (defaulting, the scheduler's choice and claim, the kubelet's mapping)
is :mod:`tests.dra.extended`, as kube-scheduler and the kubelet do it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cdi_plugin.dra import api
from cdi_plugin.dra.objects import device_class_name
from tests.deviceplugin.fake_kubelet import FakeKubelet as DevicePluginKubelet
from tests.deviceplugin.fake_kubelet import is_extended_resource_name
from tests.deviceplugin.helpers import make_node, run
from tests.dra.conftest import NODE, write_spec
from tests.dra.extended import (
    ANNOTATION,
    container_cdi_devices,
    defaulted,
    extended_resource_claim,
    through_dra,
)
from tests.dra.fakeapiserver import running
from tests.dra.serving import CDI_PLUGIN, DraNode, Serve, dra_node, published, register

__all__ = ["dra_node"]

pytestmark = pytest.mark.timeout(120)

FUSE, TTY = "cdi-plugin.io/fuse", "cdi-plugin.io/tty"
EXAMPLE_POD = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "pod-fuse.yaml"
#: resource.k8s.io/v1 is served from 1.34; the newest schema kubernetes-validate has.
VERSIONS = ["1.34", "1.35", "1.36", "1.37"]


def _classes(*args: str | Path) -> list[dict[str, Any]]:
    """The DeviceClasses ``cdi-plugin dra-objects --only classes --extended-resource`` prints."""
    done = subprocess.run(
        [str(CDI_PLUGIN), "dra-objects", "--only", "classes", "--extended-resource", *map(str, args)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _fuse_by_dra_tty_by_the_device_plugin(node: DraNode) -> list[str]:
    make_node(node.dev / "fuse")
    make_node(node.dev / "ttyUSB0")
    write_spec(node.specs, FUSE, {"fuse": str(node.dev / "fuse")})
    write_spec(node.specs, TTY, {"ttyUSB0": str(node.dev / "ttyUSB0")})
    node.api.add_node(NODE)
    config = node.config.with_name("config.yaml")
    config.write_text(f'plugin: {{resources: {{"{FUSE}": {{api: dra}}}}}}\n')
    return ["--config", str(config)]


def test_a_pod_asking_only_for_the_extended_resource_gets_the_device_through_dra(dra_node: DraNode) -> None:
    config = _fuse_by_dra_tty_by_the_device_plugin(dra_node)
    classes = _classes("--spec-dir", dra_node.specs, "--kind", "cdi-plugin.io/*", *config, "--api", "both")
    assert [(c["metadata"]["name"], c["spec"]["extendedResourceName"]) for c in classes] == [
        (device_class_name(FUSE), FUSE)
    ]
    pod = defaulted(yaml.safe_load(EXAMPLE_POD.read_text()))
    (container,) = pod["spec"]["containers"]
    assert container["resources"] == {"limits": {FUSE: 1}, "requests": {FUSE: 1}}

    async def scenario() -> None:
        async with DevicePluginKubelet(dra_node.device_plugins) as dp_kubelet:
            serve = await Serve.start(dra_node.args("both", *config))
            try:
                kubelet = await register(dra_node, serve)
                tty = await dp_kubelet.wait_registered(TTY, timeout=30)
                await tty.wait_until(lambda d: "ttyUSB0" in d)
                await serve.logged(f"not advertising kind {FUSE}: plugin.resources.{FUSE}.api is dra")
                await serve.wait_for(lambda: published(dra_node) == {"fuse-fuse": FUSE}, "the pool")

                # the scheduler: the node's allocatable has no FUSE, a class maps it: DRA
                allocatable = {name: len(c.healthy()) for name, c in dp_kubelet.clients.items()}
                assert allocatable == {TTY: 1}
                assert through_dra(FUSE, allocatable, classes)
                assert not through_dra(FUSE, {FUSE: 8}, classes)  # the device plugin would take precedence
                made = extended_resource_claim(
                    pod, NODE, classes, list(dra_node.api.slices.values()), allocatable
                )
                assert made is not None
                claim, status = made
                dra_node.api.add_claim(claim)
                pod["status"] = {"phase": "Pending", "extendedResourceClaimStatus": status}

                # the kubelet prepares the claim the pod's status names, through the DRA socket
                ref = api.Claim(
                    pod["metadata"]["namespace"], status["resourceClaimName"], claim["metadata"]["uid"]
                )
                prepared = await kubelet.prepare(ref)
                expected = api.PreparedDevice(
                    ("container-0-request-0",), NODE, "fuse-fuse", (f"{FUSE}=fuse",)
                )
                assert prepared == {ref.uid: (expected,)}
                assert container_cdi_devices(pod, "shell", prepared[ref.uid]) == [f"{FUSE}=fuse"]
                assert await kubelet.unprepare(ref) == {ref.uid: ""}
            finally:
                assert await serve.stop() == 0, serve.lines
            assert [r.resource_name for r in dp_kubelet.requests] == [TTY]

    with running(dra_node.api):
        run(scenario(), timeout=90)
    # what the test made is what a 1.36 cluster holds: the claim and the pod with its status
    stored = dra_node.api.claims[(pod["metadata"]["namespace"], pod["status"]["extendedResourceClaimStatus"]
                                  ["resourceClaimName"])]  # fmt: skip
    assert stored["metadata"]["annotations"] == {ANNOTATION: "true"}
    assert stored["spec"]["devices"]["requests"] == [{"name": "container-0-request-0", "exactly": {
        "deviceClassName": device_class_name(FUSE), "allocationMode": "ExactCount", "count": 1}}]  # fmt: skip
    for obj in (stored, pod):
        assert kubernetes_validate.validate(obj, "1.36", strict=True) == "1.36", obj["kind"]


@pytest.mark.parametrize("kind", [FUSE, "cdi-plugin.io/usb-serial", "example.com/gpu"])
def test_the_device_class_of_extended_resource_is_valid_from_1_34(tmp_path: Path, kind: str) -> None:
    """Valid against the schemas (strict: no field they do not know), and its
    ``extendedResourceName`` is a valid extended resource name (the API server's check, the one
    the kubelet applies to the device plugin's resource names): the kind, the name pods ask the
    device plugin for."""
    write_spec(tmp_path / "cdi", kind, {"dev0": "/dev/null"})
    (device_class,) = _classes("--spec-dir", tmp_path / "cdi", "--kind", kind)
    assert device_class["spec"]["extendedResourceName"] == kind
    assert is_extended_resource_name(kind)
    for version in VERSIONS:
        assert kubernetes_validate.validate(device_class, version, strict=True) == version
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):  # no resource.k8s.io/v1 before 1.34
        kubernetes_validate.validate(device_class, "1.33", strict=True)
