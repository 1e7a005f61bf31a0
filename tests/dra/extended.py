"""What the API server, the scheduler and the kubelet do for a pod that asks for an extended
resource a DeviceClass maps to DRA (KEP-5004, DRAExtendedResource: alpha in 1.34, beta and on in
1.36), as kube-scheduler's dynamicresources plugin (``extendeddynamicresources.go``) and the
kubelet do it: the cluster's side, so that the tests drive the driver's side with what a real
cluster would send it.

* The API server defaults a container's requests to its limits.
* The scheduler serves a request through DRA on a node when a DeviceClass maps the resource (its
  ``extendedResourceName``, or the implicit ``deviceclass.resource.kubernetes.io/<class>``) and
  the node's allocatable has none of it; where the device plugin advertises it (allocatable
  above 0) the device plugin takes precedence, and no claim is made.
* It then creates one claim for the pod: ``generateName: <pod>-extended-resources-``, the
  annotation ``resource.kubernetes.io/extended-resource-claim: "true"``, the pod as its
  controller owner, one request per container and resource named
  ``container-<index>-request-<index of the resource among the container's sorted requests>``
  (``exactly``: the class, ``ExactCount``, the quantity), allocated from the devices the class's
  selectors select, reserved for the pod; and records it in the pod's
  ``status.extendedResourceClaimStatus`` (the claim's name, and which container's resource is
  which request).
* The kubelet prepares that claim like any other, and gives each container the CDI devices of
  the requests mapped to it.

Init containers, and requests several containers could share, are left out: the tests' pods
have one container.
"""

from __future__ import annotations

import copy
import random
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from tests.dra.cel import selects

ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
FINALIZER = "resource.kubernetes.io/delete-protection"
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
#: The characters of the suffix the API server appends to a generateName.
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"

Obj = dict[str, Any]


def defaulted(pod: Obj, namespace: str = "default") -> Obj:
    """``pod`` as the API server stores it: a namespace, a UID, each container's requests
    defaulted to its limits."""
    out = copy.deepcopy(pod)
    out["metadata"] |= {"namespace": namespace, "uid": str(uuid.uuid4())}
    for container in out["spec"]["containers"]:
        resources = container.setdefault("resources", {})
        resources["requests"] = {**resources.get("limits", {}), **resources.get("requests", {})}
    return out


def device_class_for(resource: str, classes: Iterable[Obj]) -> Obj | None:
    for cls in classes:
        if resource in (cls["spec"].get("extendedResourceName"), IMPLICIT_PREFIX + cls["metadata"]["name"]):
            return cls
    return None


def through_dra(resource: str, allocatable: Mapping[str, int], classes: Iterable[Obj]) -> bool:
    """Whether the scheduler serves ``resource`` on a node of ``allocatable`` through DRA."""
    return device_class_for(resource, classes) is not None and allocatable.get(resource, 0) == 0


def _allocate(requests: list[Obj], classes: list[Obj], slices: list[Obj]) -> list[Obj]:
    """Each request's count of devices its class's selectors select, none tainted NoSchedule or
    NoExecute, a device at most once."""
    by_name = {c["metadata"]["name"]: c for c in classes}
    taken: list[tuple[str, str, str]] = []
    results = []
    for request in requests:
        exactly = request["exactly"]
        expressions = [
            s["cel"]["expression"] for s in by_name[exactly["deviceClassName"]]["spec"]["selectors"]
        ]
        free = [
            key
            for obj in slices
            for device in obj["spec"]["devices"]
            if (key := (obj["spec"]["driver"], obj["spec"]["pool"]["name"], device["name"])) not in taken
            and not any(t["effect"] in ("NoSchedule", "NoExecute") for t in device.get("taints", []))
            and all(selects(e, device, obj["spec"]["driver"]) for e in expressions)
        ][: exactly["count"]]
        assert len(free) == exactly["count"], f"request {request['name']}: cannot allocate"
        taken += free
        results += [{"request": request["name"], "driver": d, "pool": p, "device": n} for d, p, n in free]
    return results


def extended_resource_claim(
    pod: Obj, node: str, classes: list[Obj], slices: list[Obj], allocatable: Mapping[str, int]
) -> tuple[Obj, Obj] | None:
    """The claim the scheduler creates for ``pod`` on ``node``, allocated, and the pod's
    ``status.extendedResourceClaimStatus``; None when no request of the pod goes to DRA there."""
    meta = pod["metadata"]
    requests, mappings = [], []
    for index, container in enumerate(pod["spec"]["containers"]):
        asked = container["resources"].get("requests", {})
        for position, resource in enumerate(sorted(asked)):
            count, cls = int(asked[resource]), device_class_for(resource, classes)
            if not count or cls is None or allocatable.get(resource, 0):
                continue
            name = f"container-{index}-request-{position}"
            exactly = {
                "deviceClassName": cls["metadata"]["name"],
                "allocationMode": "ExactCount",
                "count": count,
            }
            requests.append({"name": name, "exactly": exactly})
            mappings.append(
                {"containerName": container["name"], "resourceName": resource, "requestName": name}
            )
    if not requests:
        return None
    requests.sort(key=lambda r: r["name"])
    prefix = f"{meta['name']}-extended-resources-"
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": prefix + "".join(random.choices(_NAME_CHARS, k=5)),
            "generateName": prefix,
            "namespace": meta["namespace"],
            "uid": str(uuid.uuid4()),
            "annotations": {ANNOTATION: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
            "finalizers": [FINALIZER],
        },
        "spec": {"devices": {"requests": requests}},
        "status": {
            "allocation": {
                "devices": {"results": _allocate(requests, classes, slices)},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
        },
    }
    status = {"resourceClaimName": claim["metadata"]["name"], "requestMappings": mappings}
    return claim, status


def container_cdi_devices(pod: Obj, container: str, prepared: Iterable[Any]) -> list[str]:
    """The CDI devices the kubelet gives ``container`` from the prepared devices of the pod's
    extended resource claim (each with ``request_names`` and ``cdi_device_ids``)."""
    mappings = pod["status"]["extendedResourceClaimStatus"]["requestMappings"]
    names = {m["requestName"] for m in mappings if m["containerName"] == container}
    return [cdi for device in prepared if names & set(device.request_names) for cdi in device.cdi_device_ids]
