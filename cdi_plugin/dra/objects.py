"""Kubernetes objects a cluster needs to use the driver: a DeviceClass per kind, and RBAC.

Pure functions returning plain dicts (to be printed as YAML). A DeviceClass selects the devices
of one CDI kind published by this driver; with ``extended_resource`` it also maps the kind's
extended resource name (the device plugin's resource name) to DRA (KEP-5004), so a pod asking
for ``<kind>: 1`` can be served through DRA. Where the device plugin serves the same kind on a
node, the device plugin takes precedence for the extended resource there.
"""

from __future__ import annotations

import json
from typing import Any

from cdi_plugin.cdi.names import parse_kind
from cdi_plugin.dra.names import check_driver_name

Obj = dict[str, Any]


def device_class_name(kind: str) -> str:
    """``vendor/class`` to the DNS subdomain ``class.vendor`` (lower case, ``_`` to ``-``)."""
    parsed = parse_kind(kind)
    return f"{parsed.class_}.{parsed.vendor}".lower().replace("_", "-")


def device_class(driver: str, kind: str, *, extended_resource: bool = False) -> Obj:
    check_driver_name(driver)
    parse_kind(kind)
    quoted = json.dumps(driver)  # a CEL string literal: driver names and kinds need no escapes
    selector = f"device.driver == {quoted} && device.attributes[{quoted}].kind == {json.dumps(kind)}"
    spec: Obj = {"selectors": [{"cel": {"expression": selector}}]}
    if extended_resource:
        spec["extendedResourceName"] = kind
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": device_class_name(kind), "labels": {"app.kubernetes.io/part-of": "cdi-plugin"}},
        "spec": spec,
    }


def rbac(driver: str, namespace: str, service_account: str) -> list[Obj]:
    """ServiceAccount, ClusterRole and ClusterRoleBinding: slices read-write, claims and nodes read."""
    check_driver_name(driver)
    name = f"{driver}-dra"
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": service_account, "namespace": namespace},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceslices"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                },
                {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
        },
    ]
