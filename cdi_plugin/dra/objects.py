"""Kubernetes objects a cluster needs to use the driver: a DeviceClass per kind, the driver's
RBAC and the admission policy that ties its slice writes to its node, and an example
ResourceClaimTemplate and pod per kind.

Pure functions returning plain dicts (printed as YAML or JSON by ``cdi-plugin dra-objects``). A
DeviceClass selects the devices of one CDI kind published by this driver; with
``extended_resource`` it also maps the kind's extended resource name (the device plugin's resource
name) to DRA (KEP-5004), so a pod asking for ``<kind>: 1`` can be served through DRA. Where the
device plugin serves the same kind on a node, the device plugin takes precedence for the extended
resource there.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from cdi_plugin.cdi.names import SHORT_HASH_LEN, parse_kind, short_hash
from cdi_plugin.dra.names import (
    LABEL_MAX,
    SUBDOMAIN_MAX,
    DraConfigError,
    check_driver_name,
    is_dns_label,
    is_dns_subdomain,
)
from cdi_plugin.dra.slices import ATTRIBUTE_VALUE_MAX
from cdi_plugin.wording import shown

Obj = dict[str, Any]

PART_OF = {"app.kubernetes.io/part-of": "cdi-plugin"}
#: The image of the example pods: small, with a shell and ``ls``, pinned.
EXAMPLE_IMAGE = "docker.io/library/busybox:1.36.1"


#: A run of ``.`` and ``-`` holding a dot: made one dot where a kind's name is not a DNS subdomain.
_AROUND_DOT = re.compile(r"[-.]*\.[-.]*")


def _class_name(kind: str) -> str:
    parsed = parse_kind(kind)
    name = f"{parsed.class_}.{parsed.vendor}".lower().replace("_", "-")
    mapped = _AROUND_DOT.sub(".", name)
    return name if mapped == name else f"{mapped}-{short_hash(kind)}"


def _name_problem(name: str) -> str | None:
    if len(name) > SUBDOMAIN_MAX:
        return f"its DeviceClass name would have {len(name)} characters, at most {SUBDOMAIN_MAX}"
    return None


def _selector_problem(kind: str) -> str | None:
    parsed = parse_kind(kind)
    for what, value in (("vendor", parsed.vendor), ("class", parsed.class_)):
        if len(value) > ATTRIBUTE_VALUE_MAX:
            return (
                f"its {what} has {len(value)} characters, more than a ResourceSlice attribute value "
                f"may have ({ATTRIBUTE_VALUE_MAX}): the driver publishes its devices without it, so no "
                "DeviceClass selector can match them"
            )
    return None


def kind_problem(kind: str) -> str | None:
    """Why ``kind`` can have no DeviceClass (its name would be too long, or no selector can match
    its devices), or None."""
    return _name_problem(_class_name(kind)) or _selector_problem(kind)


def device_class_name(kind: str) -> str:
    """``vendor/class`` to the DNS subdomain ``class.vendor`` (lower case, ``_`` to ``-``).

    Where that is no DNS subdomain (``..``, ``-.``, ``_.`` in the kind), each run of ``.`` and ``-``
    around a dot is made one dot and the name ends in ``-`` and a hash of the kind, so that kinds
    differing there still get names of their own."""
    name = _class_name(kind)
    problem = _name_problem(name)
    if problem is not None:
        raise DraConfigError(f"kind {shown(kind)}: {problem}")
    return name


def _label(kind: str) -> str:
    """A DNS label for the names local to a pod and a claim: the class, lower case, ``-`` between words."""
    label = re.sub(r"[^a-z0-9]+", "-", parse_kind(kind).class_.lower()).strip("-")[:63].rstrip("-")
    return label if is_dns_label(label) else "device"


def selector(driver: str, kind: str) -> str:
    """The CEL expression selecting this driver's devices of ``kind`` by their attributes
    (:func:`cdi_plugin.dra.slices.attributes`). Slices leave out a string longer than an attribute
    value may be, so such a kind is selected by its vendor and class."""
    problem = _selector_problem(kind)
    if problem is not None:
        raise DraConfigError(f"kind {shown(kind)}: {problem}")
    parsed = parse_kind(kind)
    attrs = f"device.attributes[{json.dumps(driver)}]"  # JSON strings are CEL string literals here
    if len(kind) <= ATTRIBUTE_VALUE_MAX:
        match = f"{attrs}.kind == {json.dumps(kind)}"
    else:
        vendor, class_ = json.dumps(parsed.vendor), json.dumps(parsed.class_)
        match = f'{attrs}.vendor == {vendor} && {attrs}["class"] == {class_}'
    return f"device.driver == {json.dumps(driver)} && {match}"


def device_class(driver: str, kind: str, *, extended_resource: bool = False) -> Obj:
    check_driver_name(driver)
    spec: Obj = {"selectors": [{"cel": {"expression": selector(driver, kind)}}]}
    if extended_resource:
        spec["extendedResourceName"] = kind
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": device_class_name(kind), "labels": dict(PART_OF)},
        "spec": spec,
    }


def _check_account(driver: str, namespace: str, service_account: str) -> None:
    check_driver_name(driver)
    if not is_dns_label(namespace):
        raise DraConfigError(f"namespace {namespace!r}: not a DNS label")
    if not is_dns_subdomain(service_account):
        raise DraConfigError(f"service account {service_account!r}: not a DNS subdomain")


def rbac(driver: str, namespace: str, service_account: str) -> list[Obj]:
    """ServiceAccount, ClusterRole and ClusterRoleBinding: what the driver does and nothing more.
    It GETs the claims the kubelet names and its own Node (for the slices' owner), and lists,
    watches and writes its node's slices (no patch: it replaces them whole)."""
    _check_account(driver, namespace, service_account)
    name = f"{driver}-dra"
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": service_account, "namespace": namespace, "labels": dict(PART_OF)},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": dict(PART_OF)},
            "rules": [
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceslices"],
                    "verbs": ["get", "list", "watch", "create", "update", "delete"],
                },
                {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": dict(PART_OF)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
        },
    ]


#: The user extra of a pod's service account token that names the pod's node
#: (ServiceAccountTokenPodNodeInfo, GA).
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def admission_policy(driver: str, namespace: str, service_account: str) -> list[Obj]:
    """A ValidatingAdmissionPolicy and its binding: requests of the driver's service account that
    create, update or delete a ResourceSlice (any API version) are denied unless the slice is of
    this driver and its ``spec.nodeName`` is the node named in the requester's token (the stored
    slice on DELETE). A token naming no node is denied, and so is a slice of no single node
    (``nodeSelector``, ``allNodes``). Failing closed: an expression that cannot be evaluated denies."""
    _check_account(driver, namespace, service_account)
    name = f"{driver}-dra-node-slices"
    extra = f"request.userInfo.extra[{json.dumps(NODE_NAME_EXTRA)}]"
    user = f"system:serviceaccount:{namespace}:{service_account}"
    variables = {
        "requesterNode": f"has(request.userInfo.extra) && {json.dumps(NODE_NAME_EXTRA)} in "
        f'request.userInfo.extra && size({extra}) == 1 ? {extra}[0] : ""',
        "slice": 'request.operation == "DELETE" ? oldObject : object',
        "sliceNode": 'has(variables.slice.spec.nodeName) ? variables.slice.spec.nodeName : ""',
    }
    policy = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": ["resource.k8s.io"],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                    "resources": ["resourceslices"],
                }
            ]
        },
        "matchConditions": [
            {
                "name": "driver-service-account",
                "expression": f"request.userInfo.username == {json.dumps(user)}",
            }
        ],
        "variables": [{"name": k, "expression": v} for k, v in variables.items()],
        "validations": [
            {
                "expression": 'variables.requesterNode != ""',
                "message": f"{user} may write ResourceSlices only from a pod on a node: its token names "
                f"no node ({NODE_NAME_EXTRA})",
            },
            {
                "expression": f"variables.slice.spec.driver == {json.dumps(driver)}",
                "messageExpression": f'"{user} may write only ResourceSlices of driver {driver}, not of " + '
                "variables.slice.spec.driver",
            },
            {
                # a token naming no node is denied above, with its own message
                "expression": 'variables.requesterNode == "" || '
                "variables.sliceNode == variables.requesterNode",
                "messageExpression": '"the driver on node " + variables.requesterNode + " may not write " + '
                '(variables.sliceNode == "" ? "a ResourceSlice of no single node" : '
                '"a ResourceSlice of node " + variables.sliceNode)',
            },
        ],
    }
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": dict(PART_OF)},
            "spec": policy,
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": dict(PART_OF)},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    ]


def claim_template(kind: str) -> Obj:
    """A ResourceClaimTemplate asking for one device of the kind's DeviceClass, named after it."""
    name = device_class_name(kind)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "labels": dict(PART_OF)},
        "spec": {
            "spec": {"devices": {"requests": [{"name": _label(kind), "exactly": {"deviceClassName": name}}]}}
        },
    }


def example_pod_name(kind: str, *, qualified: bool = False, hashed: bool = False) -> str:
    """``<class>-dra-example``; ``qualified`` (for kinds of the same class): ``<class>-<vendor>-example``.

    The name is also the pod's label value, so it is a DNS label: a longer one (or any, if
    ``hashed``) is cut before its suffix and tagged with a hash of the kind."""
    if qualified:
        base, suffix = device_class_name(kind).replace(".", "-"), "-example"
    else:
        base, suffix = _label(kind), "-dra-example"
    if not hashed and len(base) + len(suffix) <= LABEL_MAX:
        return base + suffix
    head = base[: LABEL_MAX - len(suffix) - SHORT_HASH_LEN - 1].rstrip("-")
    return f"{head}-{short_hash(kind)}{suffix}"


def example_pod_names(kinds: Sequence[str]) -> dict[str, str]:
    """Each kind's :func:`example_pod_name`, qualified where another kind's is the same, and
    tagged with the hash where even qualified names meet (``a.io/gpu``, ``a-io/gpu``)."""
    names = {kind: example_pod_name(kind) for kind in kinds}
    for hashed in (False, True):
        taken = Counter(names.values())
        names = {
            kind: example_pod_name(kind, qualified=True, hashed=hashed) if taken[name] > 1 else name
            for kind, name in names.items()
        }
    return names


def example_pod(kind: str, paths: Sequence[str], *, name: str | None = None) -> Obj:
    """A pod (named ``name``, else :func:`example_pod_name`) whose container gets one device of
    ``kind`` through a claim from :func:`claim_template` and lists it: ``paths`` are the container
    paths of the kind's device nodes; when devices of the kind have different ones, the directory
    holding them all is listed."""
    label = _label(kind)
    name = name or example_pod_name(kind)
    listed = sorted(set(paths))
    if len(listed) > 1:
        listed = [posixpath.commonpath(listed)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": name}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "resourceClaims": [{"name": label, "resourceClaimTemplateName": device_class_name(kind)}],
            "containers": [
                {
                    "name": "shell",
                    "image": EXAMPLE_IMAGE,
                    "command": ["ls", "-l", *(listed or ["/dev"])],
                    "resources": {"claims": [{"name": label}]},
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }
