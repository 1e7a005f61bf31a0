"""What a runtime's CDI library gives a container for the device names it is asked for.

The steps are the library's (``Cache.InjectDevices``, ``ContainerEdits.Apply``):

1. :func:`edits_in_order`: for each name in turn, the top-level ``containerEdits`` of its spec
   (once per spec file, before the first of its devices), then the device's own edits; all of
   them are appended into one set of edits (a later ``intelRdt`` replaces an earlier one);
2. :func:`inject` applies that set to the parts of an OCI runtime spec CDI edits
   (:class:`Container`), in the library's order: env (a name set again keeps its place and takes
   the new value), device nodes (one per container path, the later one moved last; a ``b`` or
   ``c`` node also gets a cgroup rule), net devices, mounts (one per container path, then sorted
   by depth, stably), hooks, intelRdt, additional groups (0 and repeats skipped).

A device node's missing type and numbers come from the host node at ``hostPath`` (else ``path``),
as the library reads them with ``lstat``; unless the node is "minimally specified" (a type and a
major number, or the type ``p``). Reading the host is the caller's: it passes what it read of
each host path (:data:`HostNodes`). No I/O here.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cdi_plugin.cdi.model import ContainerEdits, Device, DeviceNode, Hook, IntelRdt, Mount, Spec
from cdi_plugin.errors import CdiPluginError

Json = dict[str, Any]

#: The OCI hook lists, by CDI ``hookName``.
HOOK_STAGES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
#: The mode runc, crun and iSulad give a device node whose ``fileMode`` is not set.
DEFAULT_FILE_MODE = 0o666


@dataclass(frozen=True, slots=True)
class Origin:
    """Where an edit comes from: a spec file, and the device (None: the spec's top-level edits)."""

    path: str
    device: str | None = None


@dataclass(frozen=True, slots=True)
class Requested:
    """A device name as the spec directories resolve it."""

    qualified_name: str
    spec: Spec
    device: Device
    path: str


@dataclass(frozen=True, slots=True)
class HostNode:
    """What ``lstat`` says of a host path. ``type`` is ``c``, ``b`` or ``p``, or None when the path
    is no device node (``what`` says what it is)."""

    type: str | None
    major: int = 0
    minor: int = 0
    mode: int = 0  # st_mode
    uid: int = 0
    gid: int = 0
    what: str = ""


#: A host path's node, or why it cannot be read (``no such file or directory``).
HostNodes = Mapping[str, HostNode | str]


@dataclass(slots=True)
class Placed:
    """An entry of the OCI runtime spec: its JSON value and where it came from (None: the spec
    had it before); a device also keeps the CDI device node it was made from."""

    value: Any
    origin: Origin | None = None
    node: DeviceNode | None = None

    @property
    def host_path(self) -> str | None:
        return None if self.node is None else self.node.host_path or self.node.path

    @property
    def cgroup_access(self) -> str | None:
        """A device's cgroup rule: the access it grants (None: no rule, as for a FIFO)."""
        if self.node is None or self.value.get("type") not in ("b", "c"):
            return None
        permissions = self.node.permissions or ""
        return {"": "rwm", "none": ""}.get(permissions, permissions)


@dataclass(slots=True)
class Container:
    """The parts of an OCI runtime spec that CDI edits; empty by default."""

    uid: int = 0  # process.user
    gid: int = 0
    env: list[Placed] = field(default_factory=list)  # process.env
    devices: list[Placed] = field(default_factory=list)  # linux.devices
    device_rules: list[Placed] = field(default_factory=list)  # linux.resources.devices
    net_devices: dict[str, Placed] = field(default_factory=dict)  # linux.netDevices
    mounts: list[Placed] = field(default_factory=list)
    hooks: dict[str, list[Placed]] = field(default_factory=dict)
    intel_rdt: Placed | None = None  # linux.intelRdt
    additional_gids: list[Placed] = field(default_factory=list)  # process.user.additionalGids


def edits_in_order(requested: Iterable[Requested]) -> list[tuple[Origin, ContainerEdits]]:
    """The edits the library appends for these names, in its order (a name given twice counts
    twice, as in the library; runtimes and the kubelet pass each name once)."""
    out: list[tuple[Origin, ContainerEdits]] = []
    seen: set[str] = set()
    for r in requested:
        if r.path not in seen:
            seen.add(r.path)
            if r.spec.container_edits is not None:
                out.append((Origin(r.path), r.spec.container_edits))
        out.append((Origin(r.path, r.qualified_name), r.device.container_edits))
    return out


def _needs_host(node: DeviceNode) -> bool:
    return not (node.type and (node.major or node.type == "p"))


class InjectError(CdiPluginError):
    """A device node the runtime could not create; the message is the library's."""


def fill(node: DeviceNode, hosts: HostNodes) -> tuple[str, int, int]:
    """The node's type, major and minor as the library completes them from the host node."""
    host_path = node.host_path or node.path
    kind, major, minor = node.type or "", node.major or 0, node.minor or 0
    if not _needs_host(node):
        return kind, major, minor
    host = hosts.get(host_path, "not read")
    if isinstance(host, str) or host.type is None:
        reason = host if isinstance(host, str) else f"not a device node ({host.what})"
        raise InjectError(f"failed to stat CDI host device {_q(host_path)}: {reason}")
    if kind and kind != host.type:
        raise InjectError(
            f"CDI device ({_q(node.path)}, {_q(host_path)}), host type mismatch ({kind}, {host.type})"
        )
    kind = kind or host.type
    if major == 0 and kind != "p":
        major, minor = host.major, host.minor
    return kind, major, minor


def inject(
    container: Container, edits: Sequence[tuple[Origin, ContainerEdits]], hosts: HostNodes
) -> list[str]:
    """Apply ``edits`` to ``container`` as the library does; the errors of the device nodes that
    could not be created (the library stops at the first, and the container is not created)."""
    errors: list[str] = []
    env_at = {entry.value.partition("=")[0]: i for i, entry in enumerate(container.env)}
    for origin, e in edits:
        for entry in e.env or ():
            name = entry.partition("=")[0]
            if name in env_at:
                container.env[env_at[name]] = Placed(entry, origin)
            else:
                env_at[name] = len(container.env)
                container.env.append(Placed(entry, origin))
    for origin, e in edits:
        for node in e.device_nodes or ():
            try:
                _add_device(container, node, fill(node, hosts), origin)
            except InjectError as exc:
                errors.append(str(exc))
    for origin, e in edits:
        for net in e.net_devices or ():
            container.net_devices[net.host_interface_name] = Placed({"name": net.name}, origin)
    mounts = [(origin, m) for origin, e in edits for m in e.mounts or ()]
    for origin, m in mounts:
        _remove_first(container.mounts, lambda v, m=m: v.get("destination") == m.container_path)
        container.mounts.append(Placed(_oci_mount(m), origin))
    if mounts:
        container.mounts.sort(key=lambda p: _depth(p.value.get("destination", "")))
    for origin, e in edits:
        for hook in e.hooks or ():
            container.hooks.setdefault(hook.hook_name, []).append(Placed(_oci_hook(hook), origin))
    for origin, e in edits:
        if e.intel_rdt is not None:
            container.intel_rdt = Placed(_oci_intel_rdt(e.intel_rdt), origin)
    for origin, e in edits:
        for gid in e.additional_gids or ():
            if gid and all(p.value != gid for p in container.additional_gids):
                container.additional_gids.append(Placed(gid, origin))
    return errors


def _add_device(container: Container, node: DeviceNode, filled: tuple[str, int, int], origin: Origin) -> None:
    kind, major, minor = filled
    device: Json = {"path": node.path, "type": kind, "major": major, "minor": minor}
    if node.file_mode is not None:
        device["fileMode"] = node.file_mode
    uid = node.uid if node.uid is not None else container.uid or None
    gid = node.gid if node.gid is not None else container.gid or None
    if uid is not None:
        device["uid"] = uid
    if gid is not None:
        device["gid"] = gid
    _remove_first(container.devices, lambda v: v.get("path") == node.path)
    placed = Placed(device, origin, node)
    for i, p in enumerate(container.devices):
        if p.value.get("path") == node.path:
            container.devices[i] = placed
            break
    else:
        container.devices.append(placed)
    access = placed.cgroup_access
    if access is not None:
        rule: Json = {"allow": True, "type": kind, "major": major, "minor": minor}
        if access:
            rule["access"] = access
        container.device_rules.append(Placed(rule, origin))


@dataclass(frozen=True, slots=True)
class NonRootAccess:
    """What a container user other than root gets when opening a node (without extra groups).

    ``via`` is the class of the mode bits that apply: ``owner`` (a node without ``uid``, which the
    CDI library gives to the container's user when it is not root), ``group`` (a node without
    ``gid``: the container user's group) or ``other``. ``group`` names a group that would give
    read and write access when ``access`` lacks it.
    """

    mode: int
    access: str
    via: str
    group: int | None = None


def non_root_access(device: Json, cgroup: str | None) -> NonRootAccess:
    """For a device node of the OCI runtime spec and its cgroup rule's access."""
    mode = device.get("fileMode", DEFAULT_FILE_MODE) & 0o777
    allowed = cgroup if cgroup is not None else "rw"

    def bits(shift: int) -> str:
        b = mode >> shift
        return ("r" if b & 4 and "r" in allowed else "") + ("w" if b & 2 and "w" in allowed else "")

    if "uid" not in device:
        return NonRootAccess(mode, bits(6), "owner")
    if "gid" not in device:
        return NonRootAccess(mode, bits(3), "group")
    access = bits(0)
    group = device["gid"] if access != "rw" and bits(3) == "rw" else None
    return NonRootAccess(mode, access, "other", group)


def _remove_first(entries: list[Placed], match: Any) -> None:
    for i, p in enumerate(entries):
        if match(p.value):
            del entries[i]
            return


def _depth(destination: str) -> int:
    """The number of ``/`` in the cleaned path (Go's ``filepath.Clean``)."""
    clean = posixpath.normpath(destination)
    return (clean[1:] if clean.startswith("//") else clean).count("/")


def _oci_mount(m: Mount) -> Json:
    out: Json = {"destination": m.container_path}
    if m.type:
        out["type"] = m.type
    out["source"] = m.host_path
    if m.options:
        out["options"] = list(m.options)
    return out


def _oci_hook(h: Hook) -> Json:
    out: Json = {"path": h.path}
    if h.args:
        out["args"] = list(h.args)
    if h.env:
        out["env"] = list(h.env)
    if h.timeout is not None:
        out["timeout"] = h.timeout
    return out


def _oci_intel_rdt(r: IntelRdt) -> Json:
    out: Json = {}
    for key, value in (
        ("closID", r.clos_id),
        ("l3CacheSchema", r.l3_cache_schema),
        ("memBwSchema", r.mem_bw_schema),
        ("schemata", list(r.schemata) if r.schemata else None),
        ("enableMonitoring", r.enable_monitoring or None),
    ):
        if value:
            out[key] = value
    return out


def _q(text: str) -> str:
    """Quoted as Go's ``%q`` quotes it (for the printable text of paths)."""
    return json.dumps(text, ensure_ascii=False)
