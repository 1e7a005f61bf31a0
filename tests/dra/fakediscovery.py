"""The fake API server's discovery documents, as kube-apiserver serves them to a client that asks
for JSON: ``/apis`` (an APIGroupList), ``/apis/resource.k8s.io`` (an APIGroup) and
``/apis/resource.k8s.io/<version>`` (an APIResourceList), for the versions of ``resource.k8s.io``
the server is said to serve.

Every path under a version it does not serve (the group version itself, its objects, its
watches) is answered as kube-apiserver's last handler answers it: a ``Status`` 404 NotFound
"the server could not find the requested resource". A 1.33 cluster with DRA on serves
``("v1beta2", "v1beta1")`` (only their discovery documents here), one with DRA off none.
"""

from __future__ import annotations

from typing import Any

from tests.dra.faults import status_body

GROUP = "resource.k8s.io"
#: Other groups /apis lists, as any cluster has them.
OTHER_GROUPS = (("apps", "v1"), ("coordination.k8s.io", "v1"), ("storage.k8s.io", "v1"))
_ALL = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
#: name, kind, namespaced, verbs: the resources of resource.k8s.io/v1 (1.34 to 1.37).
RESOURCES = (
    ("deviceclasses", "DeviceClass", False, _ALL),
    ("resourceclaims", "ResourceClaim", True, _ALL),
    ("resourceclaims/status", "ResourceClaim", True, ["get", "patch", "update"]),
    ("resourceclaimtemplates", "ResourceClaimTemplate", True, _ALL),
    ("resourceslices", "ResourceSlice", False, _ALL),
)
NOT_FOUND = "the server could not find the requested resource"


def _versions(group: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": listed, "preferredVersion": listed[0]}


def answer(method: str, path: str, served: tuple[str, ...]) -> tuple[int, Any] | None:
    """The answer to a request of a discovery document, or of anything under a version of
    ``resource.k8s.io`` that is not ``served``; None for any other request."""
    parts = path.rstrip("/").split("/")[1:]
    if parts == ["apis"]:
        groups = [_versions(g, [v]) for g, v in OTHER_GROUPS]
        groups += [_versions(GROUP, list(served))] if served else []
        found: tuple[int, Any] = 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    elif parts[:2] != ["apis", GROUP]:
        return None
    elif not served or (len(parts) > 2 and parts[2] not in served):
        return 404, status_body(404, "NotFound", NOT_FOUND)
    elif len(parts) == 2:
        found = 200, {"kind": "APIGroup", "apiVersion": "v1", **_versions(GROUP, list(served))}
    elif len(parts) == 3:
        listed = [
            {"name": name, "singularName": "" if "/" in name else kind.lower(), "namespaced": namespaced,
             "kind": kind, "verbs": verbs}
            for name, kind, namespaced, verbs in RESOURCES
        ]  # fmt: skip
        found = 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{parts[2]}",
                      "resources": listed}  # fmt: skip
    else:
        return None
    if method != "GET":
        return 405, status_body(405, "MethodNotAllowed", f"the server does not allow this method on {path}")
    return found
