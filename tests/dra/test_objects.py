"""DeviceClass and RBAC objects, valid against the Kubernetes schema (offline, strict)."""

from __future__ import annotations

import dataclasses
from typing import Any

import kubernetes_validate
import pytest

from cdi_plugin.dra.inventory import ServedDevice, UdevFacts
from cdi_plugin.dra.names import DraConfigError
from cdi_plugin.dra.objects import claim_template, device_class, device_class_name, example_pod, rbac
from cdi_plugin.dra.slices import build_pool
from cdi_plugin.errors import InvalidNameError
from tests.dra.cel import selects
from tests.dra.conftest import DRIVER, NODE
from tests.dra.rules import is_label, is_subdomain

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


def test_a_kind_longer_than_an_attribute_value_is_selected_by_vendor_and_class() -> None:
    """Slices leave out a string attribute longer than 64 characters (the kind's here), never cut it."""
    kind = "devices.a-very-long-vendor-domain.example.com/" + "c" * 30
    assert len(kind) > 64
    expression = device_class(DRIVER, kind)["spec"]["selectors"][0]["cel"]["expression"]
    other = "devices.other.example/" + "c" * 30
    devices = [ServedDevice(cdi_name=f"{kind}=d0"), ServedDevice(cdi_name=f"{other}=d1")]
    (published,) = build_pool(DRIVER, NODE, devices, taints=True).slices(1)
    assert "kind" not in published["spec"]["devices"][0]["attributes"]
    assert [selects(expression, d, DRIVER) for d in published["spec"]["devices"]] == [True, False]


def test_bad_input_is_refused() -> None:
    with pytest.raises(DraConfigError, match="not a DNS subdomain"):
        device_class("Bad_Driver", "cdi-plugin.io/fuse")
    with pytest.raises(InvalidNameError):
        device_class(DRIVER, "no-slash")
    with pytest.raises(DraConfigError, match="cannot name a DeviceClass"):
        device_class_name("acme.com/net..dev")
    with pytest.raises(DraConfigError, match="no selector can match it"):
        device_class(DRIVER, "acme.com/" + "c" * 65)
    with pytest.raises(DraConfigError, match="namespace 'Kube_System': not a DNS label"):
        rbac(DRIVER, "Kube_System", "cdi-plugin")
    with pytest.raises(DraConfigError, match="service account 'a/b': not a DNS subdomain"):
        rbac(DRIVER, "kube-system", "a/b")


@pytest.mark.parametrize(
    ("kind", "paths", "shown"),
    [
        ("cdi-plugin.io/fuse", ["/dev/fuse"], ["/dev/fuse"]),
        ("cdi-plugin.io/dri", ["/dev/dri/renderD128", "/dev/dri/renderD129"], ["/dev/dri"]),
        ("Acme.com/Net_Dev", [], ["/dev"]),
    ],
)
def test_examples(kind: str, paths: list[str], shown: list[str]) -> None:
    template, pod = claim_template(kind), example_pod(kind, paths)
    _valid(template)
    _valid(pod)
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {"deviceClassName": device_class_name(kind)}
    (claim,) = pod["spec"]["resourceClaims"]
    assert claim["resourceClaimTemplateName"] == template["metadata"]["name"]
    assert is_label(claim["name"])
    assert is_label(request["name"])
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["claims"] == [{"name": claim["name"]}]
    assert container["command"] == ["ls", "-l", *shown]


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
        ("resource.k8s.io", "resourceclaims"): {"get", "list", "watch"},  # claims read-only
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
