"""DeviceClass, RBAC and admission policy objects, valid against the Kubernetes schema (offline,
strict); the policy's CEL evaluated on the requests the API server would hand it."""

from __future__ import annotations

import dataclasses
from typing import Any

import kubernetes_validate
import pytest

from cdi_plugin.cdi.names import short_hash
from cdi_plugin.dra.inventory import ServedDevice, UdevFacts
from cdi_plugin.dra.names import DraConfigError
from cdi_plugin.dra.objects import (
    NODE_NAME_EXTRA,
    admission_policy,
    claim_template,
    device_class,
    device_class_name,
    example_pod,
    example_pod_name,
    example_pod_names,
    kind_problem,
    rbac,
)
from cdi_plugin.dra.slices import build_pool
from cdi_plugin.errors import InvalidNameError
from tests.dra.admission import Decision, decide, request
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


#: Kinds CDI allows whose <class>.<vendor> is no DNS subdomain, and what their names start with.
UNPLAIN = {
    "acme.com/net..dev": "net.dev.acme.com",
    "acme.com/Net..Dev": "net.dev.acme.com",
    "acme.com/net-.dev": "net.dev.acme.com",
    "acme.com/net.-dev": "net.dev.acme.com",
    "acme.com/net_.dev": "net.dev.acme.com",
    "acme.com/net._-.dev": "net.dev.acme.com",
    "acme..com/net.dev": "net.dev.acme.com",
    "acme_.com/net": "net.acme.com",
}


def test_a_kind_that_is_no_subdomain_gets_its_own_name_ending_in_its_hash() -> None:
    """Each run of '.' and '-' around a dot becomes a dot; the hash keeps the kinds apart."""
    names = {kind: device_class_name(kind) for kind in UNPLAIN}
    assert len(set(names.values())) == len(UNPLAIN)
    for kind, name in names.items():
        assert is_subdomain(name), name
        assert name == f"{UNPLAIN[kind]}-{short_hash(kind)}"
    assert device_class_name("acme.com/Net-_-X") == "net---x.acme.com", "'_' and '-' away from a dot: no hash"
    for kind in ["acme.com/net..dev", "acme.com/Net..Dev"]:
        template, pod = claim_template(kind), example_pod(kind, ["/dev/net"])
        _valid(device_class(DRIVER, kind))
        _valid(template)
        _valid(pod)
        assert template["metadata"]["name"] == names[kind]
        assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == names[kind]


def test_what_keeps_a_kind_from_a_device_class() -> None:
    assert kind_problem("acme.com/net..dev") is None
    assert kind_problem("acme.com/" + "c" * 64) is None
    assert kind_problem("acme.com/" + "c" * 65) == (
        "its class has 65 characters, more than a ResourceSlice attribute value may have (64): "
        "the driver publishes its devices without it, so no DeviceClass selector can match them"
    )
    assert kind_problem("v" * 65 + "/gpu") == (
        "its vendor has 65 characters, more than a ResourceSlice attribute value may have (64): "
        "the driver publishes its devices without it, so no DeviceClass selector can match them"
    )
    assert kind_problem("v" * 64 + ".w" * 63 + "/" + "c" * 63) == (
        "its DeviceClass name would have 254 characters, at most 253"
    )
    hashed = "v" * 63 + ".w" * 60 + "/a..b" + "c" * 59  # 246 characters before the hash
    assert kind_problem(hashed) == "its DeviceClass name would have 255 characters, at most 253"


def test_example_pods_get_names_of_their_own() -> None:
    """Plain for a class of its own, qualified for kinds of one class, hashed where those meet
    (acme.io/gpu and acme-io/gpu are both gpu-acme-io-example qualified)."""
    kinds = ["acme.io/gpu", "acme-io/gpu", "other.io/gpu", "acme.io/fuse", "acme.io/net..dev", "b.io/net-dev"]
    names = example_pod_names(kinds)
    assert names == {
        "acme.io/gpu": f"gpu-acme-io-{short_hash('acme.io/gpu')}-example",
        "acme-io/gpu": f"gpu-acme-io-{short_hash('acme-io/gpu')}-example",
        "other.io/gpu": "gpu-other-io-example",
        "acme.io/fuse": "fuse-dra-example",
        "acme.io/net..dev": f"net-dev-acme-io-{short_hash('acme.io/net..dev')}-example",
        "b.io/net-dev": "net-dev-b-io-example",
    }
    assert all(is_label(name) for name in names.values())


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
    with pytest.raises(DraConfigError, match=r"^kind 'acme\.com/c+': its class has 65 characters"):
        device_class(DRIVER, "acme.com/" + "c" * 65)
    with pytest.raises(DraConfigError, match="its DeviceClass name would have 254 characters, at most 253"):
        claim_template("v" * 64 + ".w" * 63 + "/" + "c" * 63)
    with pytest.raises(DraConfigError, match="namespace 'Kube_System': not a DNS label"):
        rbac(DRIVER, "Kube_System", "cdi-plugin")
    with pytest.raises(DraConfigError, match="service account 'a/b': not a DNS subdomain"):
        rbac(DRIVER, "kube-system", "a/b")
    with pytest.raises(DraConfigError, match="namespace 'a\"b': not a DNS label"):
        admission_policy(DRIVER, 'a"b', "cdi-plugin")
    with pytest.raises(DraConfigError, match="not a DNS subdomain"):
        admission_policy('x" || true || "', "kube-system", "cdi-plugin")


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


def test_an_example_pod_name_is_cut_to_a_label_only_when_longer() -> None:
    """The name is also the pod's label value: at most 63 characters."""
    assert example_pod_name("a.io/" + "c" * 51) == "c" * 51 + "-dra-example"
    longer = "a.io/" + "c" * 52
    assert example_pod_name(longer) == "c" * 42 + f"-{short_hash(longer)}-dra-example"
    assert len(example_pod_name(longer)) == 63
    qualified = example_pod_name(longer, qualified=True)
    assert qualified == "c" * 46 + f"-{short_hash(longer)}-example"
    assert is_label(qualified)


def test_rbac_is_what_the_driver_uses() -> None:
    """Claims: a GET of each the kubelet names, never a list or watch; its Node: a GET; its node's
    slices: a watch and whole writes (no patch)."""
    objs = rbac(DRIVER, "kube-system", "cdi-plugin")
    for obj in objs:
        _valid(obj)
    role = next(o for o in objs if o["kind"] == "ClusterRole")
    grants = {(r["apiGroups"][0], res): set(r["verbs"]) for r in role["rules"] for res in r["resources"]}
    assert grants == {
        ("resource.k8s.io", "resourceslices"): {"get", "list", "watch", "create", "update", "delete"},
        ("resource.k8s.io", "resourceclaims"): {"get"},
        ("", "nodes"): {"get"},
    }
    assert all("resourceNames" not in rule for rule in role["rules"])
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


ACCOUNT = "system:serviceaccount:kube-system:cdi-plugin"
ON_NODE_A = {NODE_NAME_EXTRA: [NODE], "authentication.kubernetes.io/pod-name": ["cdi-plugin-x7k2p"]}
OTHER = "node-b"


def _slice(node: str | None = NODE, driver: str = DRIVER, **where: Any) -> dict[str, Any]:
    """A ResourceSlice as the API server holds it: of ``node``, else where ``where`` says
    (nodeSelector, allNodes)."""
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": node or "shared", "generation": 1, "resourceSliceCount": 1},
    }
    spec |= {"nodeName": node} if node else where
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node or 'shared'}-{driver}-abcde", "uid": "6f1c", "resourceVersion": "41"},
        "spec": spec,
    }
    _valid(obj)
    return obj


def _decide(
    operation: str,
    stored: dict[str, Any] | None,
    sent: dict[str, Any] | None,
    user: str = ACCOUNT,
    extra: dict[str, list[str]] | None = None,
    **resource: str,
) -> Decision:
    """The policy's answer to ``user`` (whose token carries ``extra``, by default node-a's) asking
    for ``operation``: ``sent`` is the object in the request (CREATE, UPDATE), ``stored`` the one it
    replaces or deletes (UPDATE, DELETE)."""
    policy, binding = admission_policy(DRIVER, "kube-system", "cdi-plugin")
    name = (sent or stored or {})["metadata"]["name"]
    req = request(operation, user, ON_NODE_A if extra is None else extra, name, **resource)
    return decide(policy, binding, req, sent, stored)


def test_the_admission_policy_is_valid_and_fails_closed() -> None:
    policy, binding = admission_policy(DRIVER, "kube-system", "cdi-plugin")
    _valid(policy)
    _valid(binding)
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["apiVersions"] == ["*"]  # v1beta1 and v1beta2 too, where a cluster serves them
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    for expression in [c["expression"] for c in policy["spec"]["matchConditions"]] + [
        v["expression"] for v in policy["spec"]["variables"] + policy["spec"]["validations"]
    ]:
        assert len(expression) <= 5 * 1024


@pytest.mark.parametrize(
    ("operation", "stored", "sent"),
    [
        ("CREATE", None, _slice()),
        ("UPDATE", _slice(), _slice()),
        ("DELETE", _slice(), None),  # the request carries no object: the stored one is checked
    ],
)
def test_the_driver_writes_its_own_nodes_slices(
    operation: str, stored: dict[str, Any] | None, sent: dict[str, Any] | None
) -> None:
    assert _decide(operation, stored, sent) == Decision(True)
    # also through another version of the API, where a cluster serves one
    assert _decide(operation, stored, sent, version="v1beta2") == Decision(True)


@pytest.mark.parametrize(
    ("operation", "stored", "sent", "message"),
    [
        ("CREATE", None, _slice(OTHER),
         f"the driver on node {NODE} may not write a ResourceSlice of node {OTHER}"),
        ("UPDATE", _slice(OTHER), _slice(OTHER), f"may not write a ResourceSlice of node {OTHER}"),
        ("DELETE", _slice(OTHER), None, f"may not write a ResourceSlice of node {OTHER}"),
        ("CREATE", None, _slice(None, allNodes=True), "may not write a ResourceSlice of no single node"),
        ("CREATE", None, _slice(None, nodeSelector={"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}),
         "may not write a ResourceSlice of no single node"),
        ("DELETE", _slice(None, allNodes=True), None, "may not write a ResourceSlice of no single node"),
        ("CREATE", None, _slice(driver="gpu.example.com"),
         f"{ACCOUNT} may write only ResourceSlices of driver {DRIVER}, not of gpu.example.com"),
        ("DELETE", _slice(driver="gpu.example.com"), None, "not of gpu.example.com"),
    ],
)  # fmt: skip
def test_the_driver_may_not_write_other_slices(
    operation: str, stored: dict[str, Any] | None, sent: dict[str, Any] | None, message: str
) -> None:
    decision = _decide(operation, stored, sent)
    assert not decision.allowed
    (said,) = decision.messages
    assert message in said


@pytest.mark.parametrize(
    "extra",
    [
        {},  # a token of no pod (kubectl create token): the request has no extra at all
        {"authentication.kubernetes.io/credential-id": ["JTI=1f0c"]},
        {NODE_NAME_EXTRA: []},
        {NODE_NAME_EXTRA: [NODE, OTHER]},
    ],
)
def test_a_token_naming_no_single_node_writes_nothing(extra: dict[str, list[str]]) -> None:
    for operation, stored, sent in [("CREATE", None, _slice()), ("DELETE", _slice(), None)]:
        decision = _decide(operation, stored, sent, extra=extra)
        assert decision == Decision(False, (
            f"{ACCOUNT} may write ResourceSlices only from a pod on a node: its token names no node "
            f"({NODE_NAME_EXTRA})",
        ))  # fmt: skip


def test_the_policy_applies_to_the_drivers_account_and_slice_writes_only() -> None:
    """The kubelet (which deletes a node's slices), an admin, another service account or another
    namespace's account of the same name, and other resources are not this policy's business."""
    for user in ["system:node:node-a", "kubernetes-admin", "system:serviceaccount:kube-system:other",
                 "system:serviceaccount:devices:cdi-plugin"]:  # fmt: skip
        assert _decide("DELETE", _slice(OTHER), None, user=user, extra={}) == Decision(True)
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"}}
    assert _decide("UPDATE", claim, claim, resource="resourceclaims", kind="ResourceClaim") == Decision(True)


def test_the_policy_names_the_account_it_is_generated_for() -> None:
    policy, binding = admission_policy("gpu.example.com", "devices", "dra")
    req = request("CREATE", "system:serviceaccount:devices:dra", ON_NODE_A, "s")
    sent = _slice(OTHER, driver="gpu.example.com")
    assert not decide(policy, binding, req, sent, None).allowed
    assert decide(policy, binding, req, _slice(driver="gpu.example.com"), None).allowed
    assert not decide(policy, binding, req, _slice(), None).allowed  # cdi-plugin.io's slice
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] == "gpu.example.com-dra-node-slices"
