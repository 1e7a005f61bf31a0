"""What ``cdi-gen inspect`` prints for people (lines, coloured on a terminal) or scripts (JSON)."""

from __future__ import annotations

import json
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from cdi_plugin.cdi.inject import (
    HOOK_STAGES,
    Container,
    HostNode,
    HostNodes,
    NonRootAccess,
    Origin,
    Placed,
    Requested,
    non_root_access,
)
from cdi_plugin.cli.output import write_document
from cdi_plugin.store.registry import Snapshot
from cdi_plugin.wording import escape_controls

_TYPE_BITS = {"c": stat.S_IFCHR, "u": stat.S_IFCHR, "b": stat.S_IFBLK, "p": stat.S_IFIFO}
_CAN = {"rw": "reads and writes it", "r": "only reads it", "w": "only writes it"}
_VIA = {
    "owner": "as its owner (the container user, as the node has no uid)",
    "group": "through its group, the container user's (the node has no gid)",
    "other": "through the mode bits for others",
}


@dataclass(frozen=True, slots=True)
class Report:
    snapshot: Snapshot
    requested: Sequence[Requested]
    container: Container
    hosts: HostNodes
    errors: Sequence[str]
    oci: Path | None = None  # the OCI runtime spec the edits were written into


def _text(text: str) -> str:
    """Text from a spec or a host, for rich: control characters and markup escaped."""
    return escape(escape_controls(text))


def print_json(report: Report) -> None:
    write_document(json.dumps(to_json(report), indent=2) + "\n")


def to_json(report: Report) -> dict[str, Any]:
    c = report.container
    return {
        "dirs": [str(d) for d in report.snapshot.dirs],
        "devices": [_device_json(report, r) for r in report.requested],
        "env": [{"value": p.value, "from": _origin_json(p.origin)} for p in c.env],
        "deviceNodes": [_node_json(report, p) for p in c.devices],
        "mounts": [{**p.value, "from": _origin_json(p.origin)} for p in c.mounts],
        "hooks": [
            {"hookName": stage, **p.value, "from": _origin_json(p.origin)}
            for stage in HOOK_STAGES
            for p in c.hooks.get(stage, ())
        ],
        "intelRdt": None
        if c.intel_rdt is None
        else {**c.intel_rdt.value, "from": _origin_json(c.intel_rdt.origin)},
        "additionalGids": [{"gid": p.value, "from": _origin_json(p.origin)} for p in c.additional_gids],
        "netDevices": [
            {"hostInterfaceName": host, "name": p.value["name"], "from": _origin_json(p.origin)}
            for host, p in c.net_devices.items()
        ],
        "errors": list(report.errors),
        "ociSpec": None if report.oci is None else str(report.oci),
    }


def _device_json(report: Report, r: Requested) -> dict[str, Any]:
    resolved = report.snapshot.resolve(r.qualified_name)
    return {
        "qualifiedName": r.qualified_name,
        "path": r.path,
        "priority": resolved.priority if resolved is not None else None,
        "kind": r.spec.kind,
        "cdiVersion": r.spec.cdi_version,
    }


def _origin_json(origin: Origin | None) -> dict[str, Any] | None:
    return None if origin is None else {"path": origin.path, "device": origin.device}


def _node_json(report: Report, p: Placed) -> dict[str, Any]:
    access = non_root_access(p.value, p.cgroup_access)
    host = report.hosts.get(p.host_path or "", "not read")
    return {
        **p.value,
        "hostPath": p.host_path,
        "mode": _mode_text(p.value["type"], access.mode),
        "cgroupAccess": p.cgroup_access,
        "nonRoot": {"access": access.access, "via": access.via, "group": access.group},
        "host": {"error": host} if isinstance(host, str) else _host_json(host),
        "from": _origin_json(p.origin),
    }


def _host_json(h: HostNode) -> dict[str, Any]:
    return {
        "type": h.type,
        "major": h.major,
        "minor": h.minor,
        "mode": stat.filemode(h.mode),
        "uid": h.uid,
        "gid": h.gid,
    }


def _mode_text(kind: str, mode: int) -> str:
    return stat.filemode(_TYPE_BITS.get(kind, 0) | mode)


def print_report(report: Report) -> None:
    out = Console(highlight=False)

    def line(text: str) -> None:
        out.print(text, soft_wrap=True)

    for r in report.requested:
        resolved = report.snapshot.resolve(r.qualified_name)
        where = f"priority {resolved.priority}, " if resolved is not None else ""
        where += f"cdiVersion {_text(r.spec.cdi_version)}"
        line(f"[bold]{_text(r.qualified_name)}[/]: {_text(r.path)} ({where})")
    c = report.container
    sections: list[tuple[str, list[str]]] = [
        ("device nodes", [t for p in c.devices for t in _node_lines(report, p)]),
        ("env", [f"{_text(p.value)}{_from(p.origin)}" for p in c.env]),
        ("mounts", [_mount_line(p) for p in c.mounts]),
        ("hooks", [_hook_line(stage, p) for stage in HOOK_STAGES for p in c.hooks.get(stage, ())]),
        ("intelRdt", [] if c.intel_rdt is None else [_fields(c.intel_rdt.value) + _from(c.intel_rdt.origin)]),
        ("additional groups", [f"{p.value}{_from(p.origin)}" for p in c.additional_gids]),
        (
            "net devices",
            [f"{_text(h)} as {_text(p.value['name'])}{_from(p.origin)}" for h, p in c.net_devices.items()],
        ),
    ]
    for title, lines in sections:
        if lines:
            line(f"[bold]{title}[/]")
            for text in lines:
                line(f"  {text}")
    for error in report.errors:
        line(f"[red]error[/] {_text(error)}")
    if report.oci is not None:
        line(f"written into {_text(str(report.oci))}")


def _from(origin: Origin | None) -> str:
    if origin is None:
        return ""
    if origin.device is not None:
        return f"  [dim](from {_text(origin.device)})[/]"
    return f"  [dim](from the spec-level edits of {_text(origin.path)})[/]"


def _node_lines(report: Report, p: Placed) -> list[str]:
    v = p.value
    access = non_root_access(v, p.cgroup_access)
    mode = _mode_text(v["type"], access.mode)
    mode += "" if "fileMode" in v else " (no fileMode: the runtime's default)"
    owner = v.get("uid", "the container user")
    group = v.get("gid", "the container user's")
    cgroup = "" if p.cgroup_access is None else f", cgroup access {p.cgroup_access or 'none'}"
    host = report.hosts.get(p.host_path or "", "not read")
    if isinstance(host, str):
        seen = f"host {_text(p.host_path or '')} now: {_text(host)}"
    else:
        numbers = f" {host.major}:{host.minor}" if host.type in ("c", "b") else ""
        kind = host.type or host.what
        seen = (
            f"host {_text(p.host_path or '')} now: {kind}{numbers} {stat.filemode(host.mode)} "
            f"uid {host.uid} gid {host.gid}"
        )
    return [
        f"{_text(v['path'])}: {v['type']} {v['major']}:{v['minor']}, mode {mode}, owner {owner}, "
        f"group {group}{cgroup}{_from(p.origin)}",
        f"  {seen}",
        f"  a user other than root: {_non_root_text(access)}",
    ]


def _non_root_text(a: NonRootAccess) -> str:
    can = _CAN.get(a.access, "cannot open it")
    text = f"{can}, {_VIA[a.via]}" if a.access else f"{can} (mode {a.mode:04o}, {_VIA[a.via]})"
    if a.group is not None:
        text += f"; with group {a.group} added (--group-add, supplementalGroups) it reads and writes it"
    return text


def _mount_line(p: Placed) -> str:
    v = p.value
    extra = [f"type {v['type']}"] if "type" in v else []
    extra += [f"options {','.join(v['options'])}"] if "options" in v else []
    suffix = f" ({'; '.join(extra)})" if extra else ""
    return f"{_text(v.get('source', ''))} on {_text(v['destination'])}{_text(suffix)}{_from(p.origin)}"


def _hook_line(stage: str, p: Placed) -> str:
    v = p.value
    extra = [f"args {' '.join(v['args'])}"] if "args" in v else []
    extra += [f"env {' '.join(v['env'])}"] if "env" in v else []
    extra += [f"timeout {v['timeout']} s"] if "timeout" in v else []
    suffix = f" ({'; '.join(extra)})" if extra else ""
    return f"{stage}: {_text(v['path'])}{_text(suffix)}{_from(p.origin)}"


def _fields(value: dict[str, Any]) -> str:
    return _text(", ".join(f"{k} {v}" for k, v in value.items()))
