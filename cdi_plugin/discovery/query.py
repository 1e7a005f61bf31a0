"""Query checks and query evaluation over recorded devices (fixtures, tests). Pure: no I/O.

:func:`apply_query` gives a recorded device list the same shape :class:`~.udev.UdevSource` gives
the live host: devices of the asked subsystems, only the asked attributes, and nodes that a
``/dev`` glob matches but no selected device owns as subsystem-less entries.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType

from cdi_plugin.discovery.model import Ancestor, DiscoveredDevice, Discovery, NodeInfo, Query
from cdi_plugin.errors import DiscoveryError
from cdi_plugin.globs import match_any

DEV = "/dev"


def check_devnode_glob(pattern: str) -> None:
    """A devnode glob is an absolute, normalised path under /dev (no ``..``, no ``//``)."""
    if not pattern.startswith(DEV + "/") or posixpath.normpath(pattern) != pattern or "\0" in pattern:
        raise DiscoveryError(
            f"devnode glob {pattern!r}: must be an absolute path under /dev without '.', '..' or '//'"
        )


def check_attribute_name(name: str) -> None:
    """A sysfs attribute name is relative to the device directory and cannot leave it."""
    parts = name.split("/")
    if not name or name.startswith("/") or "\0" in name or any(p in ("", ".", "..") for p in parts):
        raise DiscoveryError(
            f"sysfs attribute {name!r}: must be a name relative to the device (e.g. 'vendor'), "
            "without '..' or a leading '/'"
        )


def check_query(query: Query) -> None:
    """Raise :class:`DiscoveryError` naming the first devnode glob or attribute that is unsafe."""
    for pattern in query.devnode_globs:
        check_devnode_glob(pattern)
    for name in sorted(query.attributes):
        check_attribute_name(name)


def node_key(node: NodeInfo) -> tuple[str, int, int]:
    return (node.type, node.major, node.minor)


def glob_entry(path: str, node: NodeInfo) -> DiscoveredDevice:
    """The entry for a node found only by a devnode glob."""
    return DiscoveredDevice(subsystem="", sys_name=posixpath.basename(path), devnode=path, node=node)


def add_glob_entries(devices: list[DiscoveredDevice], hits: Iterable[tuple[str, NodeInfo, bool]]) -> None:
    """Append glob hits ``(path, node, is_symlink)`` whose path and numbers no device has yet.

    Real nodes win over symlinks to them, then paths sort alphabetically, so the result does not
    depend on directory order.
    """
    paths = {d.devnode for d in devices if d.devnode}
    numbers = {node_key(d.node) for d in devices if d.node}
    for path, node, _ in sorted(hits, key=lambda hit: (hit[2], hit[0])):
        if path in paths or node_key(node) in numbers:
            continue
        paths.add(path)
        numbers.add(node_key(node))
        devices.append(glob_entry(path, node))


def _only(values: Mapping[str, str], names: frozenset[str]) -> Mapping[str, str]:
    return MappingProxyType({k: v for k, v in values.items() if k in names})


def _narrow(device: DiscoveredDevice, query: Query) -> DiscoveredDevice:
    ancestors: tuple[Ancestor, ...] = ()
    if query.with_ancestors:
        ancestors = tuple(
            replace(a, attributes=_only(a.attributes, query.attributes)) for a in device.ancestors
        )
    return replace(device, attributes=_only(device.attributes, query.attributes), ancestors=ancestors)


def apply_query(devices: Iterable[DiscoveredDevice], query: Query) -> Discovery:
    """Answer ``query`` from recorded devices as the udev source would answer it on that host."""
    check_query(query)
    selected: list[DiscoveredDevice] = []
    hits: list[tuple[str, NodeInfo, bool]] = []
    for d in devices:
        if d.subsystem and (not query.subsystems or d.subsystem in query.subsystems):
            selected.append(_narrow(d, query))
        elif d.node is not None and d.devnode is not None:
            hits.extend(
                (path, d.node, path != d.devnode)
                for path in (d.devnode, *d.devlinks)
                if match_any(query.devnode_globs, path, path=True)
            )
    add_glob_entries(selected, hits)
    return Discovery(tuple(selected))
