"""DeviceClass and RBAC objects, valid against the Kubernetes schema (offline, strict)."""

from __future__ import annotations

import dataclasses
from typing import Any

import kubernetes_validate
import pytest

from cdi_plugin.dra.inventory import ServedDevice, UdevFacts
from cdi_plugin.dra.names import DraConfigError
from cdi_plugin.dra.objects import device_class, device_class_name, rbac
from cdi_plugin.dra.slices import build_pool
from cdi_plugin.errors import InvalidNameError
from tests.dra.conftest import DRIVER, NODE
from tests.dra.rules import is_subdomain

KUBERNETES = "1.36"


def _valid(obj: dict[str, Any]) -> None:
    assert kubernetes_validate.validate(obj, KUBERNETES, strict=True) == KUBERNETES


@pytest.mark.parametrize("extended", [False, True])
def test_device_class(extended: bool) -> None:
    obj = device_class(DRIVER, "cdi-plugin.io/fuse", extended_resource=extended)
    _valid(obj)
    assert obj["metadata"]["name"] == "fuse.cdi-plugin.io"
    assert obj["spec"]["selectors"] == [
        {"cel": {"expression": 'device.driver == "cdi-plugin.io" && '
                 'device.attributes["cdi-plugin.io"].kind == "cdi-plugin.io/fuse"'}}
    ]  # fmt: skip
    assert obj["spec"].get("extendedResourceName") == ("cdi-plugin.io/fuse" if extended else None)


def test_device_class_names_are_subdomains() -> None:
    assert device_class_name("Acme.com/Net_Dev") == "net-dev.acme.com"
    assert is_subdomain(device_class_name("Acme.com/Net_Dev"))


def test_bad_input_is_refused() -> None:
    with pytest.raises(DraConfigError, match="not a DNS subdomain"):
        device_class("Bad_Driver", "cdi-plugin.io/fuse")
    with pytest.raises(InvalidNameError):
        device_class(DRIVER, "no-slash")


def test_rbac() -> None:
    objs = rbac(DRIVER, "kube-system", "cdi-plugin")
    for obj in objs:
        _valid(obj)
    role = next(o for o in objs if o["kind"] == "ClusterRole")
    grants = {(r["apiGroups"][0], res): set(r["verbs"]) for r in role["rules"] for res in r["resources"]}
    assert grants == {
        ("resource.k8s.io", "resourceslices"): {
            "get",
            "list",
            "watch",
            "create",
            "update",
            "patch",
            "delete",
        },
        ("resource.k8s.io", "resourceclaims"): {"get"},  # claims read-only
        ("", "nodes"): {"get"},
    }
    binding = next(o for o in objs if o["kind"] == "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "cdi-plugin", "namespace": "kube-system"}
    ]


def test_slices_match_the_published_schema() -> None:
    """The slice builder's output against the 1.36 OpenAPI schema, unknown fields refused."""
    devices = [
        ServedDevice(
            cdi_name="cdi-plugin.io/gpu=card0", numa_nodes=(0,), udev=UdevFacts(pci_address="0000:3b:00.0")
        ),
        ServedDevice(cdi_name="cdi-plugin.io/gpu=card1", healthy=False, reason="gone"),
    ]
    pool = dataclasses.replace(build_pool(DRIVER, NODE, devices, taints=True), node_uid="2f0f6c3e-node")
    for obj in pool.slices(3):
        _valid(obj)
