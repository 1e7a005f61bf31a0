"""Two instances of the driver on one node during an update: the pod UID and the kubelet's version.

Pure. A kubelet from 1.33 on keeps every registered endpoint of a driver and calls the newest
connected one, so the new pod's instance can serve beside the old one if each has sockets of its
own: they are named after the pod's UID (``dra-<uid>.sock``, ``<driver>-<uid>-reg.sock``), as the
kubelet plugin helper names them. An older kubelet drops the driver when the old pod's socket goes,
so there the fixed names stay (``dra.sock``, ``<driver>-reg.sock``) and the new instance takes
them over once the old one has stopped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cdi_plugin.dra.names import DraConfigError
from cdi_plugin.wording import clipped, shown

#: The first kubelet that keeps several endpoints of one driver (the helper's rolling update).
ROLLING_SINCE = (1, 33)
#: A pod UID is a UUID (36 characters); a name given by hand may be any of these characters.
POD_UID_MAX = 64
_POD_UID = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?")
_VERSION = re.compile(r"v?(\d{1,4})\.(\d{1,4})(?:[.+-]|$)")
#: A kubelet version longer than this is not one (``v1.36.2-eks-1234abc`` is 20).
VERSION_MAX = 64


def check_pod_uid(uid: str) -> str:
    """The pod UID, or DraConfigError saying why it cannot name a socket."""
    if len(uid) > POD_UID_MAX or not _POD_UID.fullmatch(uid):
        raise DraConfigError(
            f"pod UID {shown(uid, POD_UID_MAX)}: not a UID (at most {POD_UID_MAX} letters, digits and "
            "inner '-'; the DaemonSet sets $POD_UID from metadata.uid)"
        )
    return uid


def kubelet_version(node: Mapping[str, Any]) -> str:
    """``status.nodeInfo.kubeletVersion`` of a Node object, or "" when it has none."""
    status = node.get("status")
    info = status.get("nodeInfo") if isinstance(status, Mapping) else None
    version = info.get("kubeletVersion") if isinstance(info, Mapping) else None
    return version if isinstance(version, str) and len(version) <= VERSION_MAX else ""


def parse_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of a kubelet version such as ``v1.33.2`` or ``v1.34.1-gke.1200``, else None."""
    found = _VERSION.match(text)
    return (int(found[1]), int(found[2])) if found else None


def fixed_names_reason(version: str) -> str | None:
    """Why the fixed socket names must stay with a kubelet of ``version`` (one line), or None when
    it serves two instances of a driver side by side."""
    parsed = parse_version(version)
    since = ".".join(map(str, ROLLING_SINCE))
    if parsed is None:
        given = shown(version) if version else "not given"
        return f"its version is unknown (status.nodeInfo.kubeletVersion {given}); {since} or later is needed"
    if parsed < ROLLING_SINCE:
        return f"kubelet {clipped(version, 40)} is older than {since}"
    return None
