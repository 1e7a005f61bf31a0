"""One device's container edits: its node, its siblings' nodes, companion nodes, env, mounts, hooks.

Device nodes carry what a non-root container needs from the host node: ``type``, ``fileMode``
(permission bits) and ``gid``. ``major``/``minor`` are left out, so a node renumbered after the
spec was written is still right (the runtime reads them from the host node when it creates the
container); ``uid`` is left out, so runtimes make the container's user the owner. ``hostPath`` is
written only when it differs from ``path`` (it needs cdiVersion 0.5.0 even when equal).
See docs/device-nodes.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cdi_plugin.cdi.model import ContainerEdits, DeviceNode, Hook, Mount
from cdi_plugin.discovery.model import DiscoveredDevice
from cdi_plugin.errors import CdiPluginError
from cdi_plugin.generate.config import DeviceClass, EditsTemplate, NodeEdit
from cdi_plugin.generate.naming import NamedDevice, describe, ordered
from cdi_plugin.generate.template import Context, Lookup, device_lookup, render
from cdi_plugin.globs import match_any

_PERMISSION_BITS = 0o777


class Refused(CdiPluginError):
    """The device (or class) cannot be given edits; the message says why."""


def node_from_host(
    path: str, host: DiscoveredDevice | None, host_path: str, permissions: str | None
) -> DeviceNode:
    """A device node for ``path`` in the container, backed by ``host_path`` on the host."""
    info = host.node if host is not None else None
    return DeviceNode(
        path=path,
        host_path=host_path if host_path != path else None,
        type=info.type if info is not None else None,
        file_mode=info.mode & _PERMISSION_BITS if info is not None else None,
        gid=info.gid if info is not None else None,
        permissions=permissions,
    )


def _no_value(_: object) -> None:
    return None


def _companion(edit: NodeEdit, lookup: Lookup, nodes: Mapping[str, DiscoveredDevice]) -> DeviceNode | None:
    host = render(edit.host, lookup, Context.PATH)
    path = render(edit.path, lookup, Context.PATH)
    found = nodes.get(host) if host is not None else None
    if host is None or path is None or found is None:
        if edit.optional:
            return None
        missing = host if host is not None else edit.host.source
        raise Refused(f"device node {missing} is not on the host (mark it optional: true to leave it out)")
    return node_from_host(path, found, host, edit.permissions)


def render_edits(
    edits: EditsTemplate,
    lookup: Lookup,
    nodes: Mapping[str, DiscoveredDevice],
    own: Sequence[DeviceNode] = (),
) -> ContainerEdits:
    """The edits of a class for one device (or for the whole kind, with a lookup that has no values).

    An env entry, mount or hook whose template has no value for the device is left out; a
    companion node that is missing refuses the device unless it is optional.
    """
    device_nodes = list(own)
    for edit in edits.device_nodes:
        node = _companion(edit, lookup, nodes)
        if node is not None:
            device_nodes.append(node)
    env = [f"{e.name}={v}" for e in edits.env if (v := render(e.value, lookup, Context.VALUE)) is not None]
    mounts = []
    for m in edits.mounts:
        host = render(m.host_path, lookup, Context.PATH)
        container = render(m.container_path, lookup, Context.PATH)
        if host is not None and container is not None:
            mounts.append(Mount(host_path=host, container_path=container, options=m.options, type=m.type))
    hooks = []
    for h in edits.hooks:
        args = [render(a, lookup, Context.VALUE) for a in h.args or ()]
        hook_env = [(e.name, render(e.value, lookup, Context.VALUE)) for e in h.env or ()]
        if any(a is None for a in args):
            continue
        hooks.append(
            Hook(
                hook_name=h.hook_name,
                path=h.path,
                args=tuple(a for a in args if a is not None) if h.args is not None else None,
                env=tuple(f"{n}={v}" for n, v in hook_env if v is not None) if h.env is not None else None,
                timeout=h.timeout,
            )
        )
    return ContainerEdits(
        env=tuple(dict.fromkeys(env)) or None,
        device_nodes=_one_node_per_path(device_nodes) or None,
        mounts=tuple(dict.fromkeys(mounts)) or None,
        hooks=tuple(dict.fromkeys(hooks)) or None,
    )


def _one_node_per_path(nodes: Iterable[DeviceNode]) -> tuple[DeviceNode, ...]:
    """One node per container path, the first one given."""
    out: dict[str, DeviceNode] = {}
    for n in nodes:
        out.setdefault(n.path, n)
    return tuple(out.values())


def _agreed_mounts(mounts: Iterable[Mount]) -> tuple[Mount, ...]:
    """Each distinct mount once, but none on a container path that two different mounts claim."""
    by_path: dict[str, set[Mount]] = {}
    for m in mounts:
        by_path.setdefault(m.container_path, set()).add(m)
    return tuple(dict.fromkeys(m for group in by_path.values() if len(group) == 1 for m in group))


def siblings_of(
    cls: DeviceClass, device: DiscoveredDevice, candidates: Sequence[DiscoveredDevice]
) -> list[DiscoveredDevice]:
    """Devices of the same subsystem under the same parent whose kernel name matches ``siblings``."""
    if not cls.siblings or not device.ancestors:
        return []
    parent = device.ancestors[0].sys_path
    return ordered(
        [
            d
            for d in candidates
            if d is not device
            and d.devnode
            and d.subsystem == device.subsystem
            and d.ancestors
            and d.ancestors[0].sys_path == parent
            and match_any(cls.siblings, d.sys_name)
        ]
    )


@dataclass(frozen=True, slots=True)
class DeviceEdits:
    edits: ContainerEdits
    host_nodes: tuple[str, ...]


def device_edits(
    cls: DeviceClass,
    named: NamedDevice,
    nodes: Mapping[str, DiscoveredDevice],
    siblings: Sequence[DiscoveredDevice],
) -> DeviceEdits:
    """The edits of one named device; raises :class:`Refused` when it cannot have any."""
    dev = named.device
    lookup = device_lookup(dev, name=named.name, index=named.index)
    own: list[DeviceNode] = []
    if cls.node.attach and dev.devnode:
        path = render(cls.node.path, lookup, Context.PATH)
        if path is None:
            raise Refused(f"node.path {cls.node.path.source!r} has no value for it")
        own.append(node_from_host(path, dev, dev.devnode, cls.node.permissions))
    for sib in siblings:
        assert sib.devnode is not None
        own.append(node_from_host(sib.devnode, sib, sib.devnode, cls.node.permissions))
    edits = render_edits(cls.edits, lookup, nodes, own)
    if edits.is_empty():
        raise Refused("it has no device node and the class gives it no edits")
    hosts = tuple(n.host_path or n.path for n in edits.device_nodes or ())
    return DeviceEdits(edits, hosts)


def class_edits(cls: DeviceClass, nodes: Mapping[str, DiscoveredDevice]) -> ContainerEdits | None:
    """The kind's top-level edits (applied once when any of its devices is used), or None."""
    edits = render_edits(cls.class_edits, _no_value, nodes)
    return None if edits.is_empty() else edits


def merged(all_edits: Sequence[ContainerEdits]) -> ContainerEdits:
    """The edits of the ``all`` device: every device's nodes, mounts and hooks.

    An env variable set to different values by different devices is left out, and so is a
    container path that different devices mount differently: no single value would be right for
    all of them (a runtime would keep only the last mount on a path).
    """
    env_values: dict[str, set[str]] = {}
    env_order: list[str] = []
    for e in all_edits:
        for entry in e.env or ():
            name = entry.partition("=")[0]
            if name not in env_values:
                env_order.append(name)
            env_values.setdefault(name, set()).add(entry)
    env = tuple(next(iter(env_values[n])) for n in env_order if len(env_values[n]) == 1)
    nodes = _one_node_per_path(n for e in all_edits for n in e.device_nodes or ())
    mounts = _agreed_mounts(m for e in all_edits for m in e.mounts or ())
    hooks = tuple(dict.fromkeys(h for e in all_edits for h in e.hooks or ()))
    return ContainerEdits(
        env=env or None, device_nodes=nodes or None, mounts=mounts or None, hooks=hooks or None
    )


def refuse_message(cls: DeviceClass, device: DiscoveredDevice, reason: str) -> str:
    return f"{cls.kind}: skipping {describe(device)}: {reason}"
