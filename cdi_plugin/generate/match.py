"""Which discovered devices belong to which device class, and what discovery must look for.

Every key of a match must hold (and); a list of values matches if any value does (or). Globs are
shell patterns (``*``, ``?``, ``[abc]``, ``[!abc]``, see :mod:`cdi_plugin.globs`) matched
case-sensitively; in ``devnode`` globs ``*`` and ``?`` stop at ``/`` and skip a leading dot, as
they do in a shell. ``driver`` matches the driver of the device or
of any of its parents (udev's ``DRIVERS``); ``parent`` holds when one parent has all it asks for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from cdi_plugin.discovery.model import Ancestor, DiscoveredDevice, Query
from cdi_plugin.generate.config import DeviceClass, GlobMap, Match, ParentMatch
from cdi_plugin.generate.template import Template
from cdi_plugin.globs import match_any

_NEEDS_ANCESTORS = frozenset({"driver", "pci_slot", "serial"})


def _map_match(values: Mapping[str, str], wanted: GlobMap) -> bool:
    for key, globs in wanted:
        value = values.get(key)
        if value is None or not match_any(globs, value):
            return False
    return True


def _parent_match(parent: Ancestor, want: ParentMatch) -> bool:
    return (
        (not want.subsystems or parent.subsystem in want.subsystems)
        and (not want.kernel or match_any(want.kernel, parent.sys_name))
        and (not want.driver or (parent.driver is not None and match_any(want.driver, parent.driver)))
        and _map_match(parent.properties, want.properties)
        and _map_match(parent.attributes, want.attributes)
    )


def matches(match: Match, device: DiscoveredDevice) -> bool:
    """Whether ``device`` has everything ``match`` asks for."""
    if match.subsystems and device.subsystem not in match.subsystems:
        return False
    if match.kernel and not match_any(match.kernel, device.sys_name):
        return False
    if match.devnode and not (device.devnode and match_any(match.devnode, device.devnode, path=True)):
        return False
    if match.devtypes and device.devtype not in match.devtypes:
        return False
    if match.driver:
        drivers = [device.driver, *(a.driver for a in device.ancestors)]
        if not any(d is not None and match_any(match.driver, d) for d in drivers):
            return False
    if not _map_match(device.properties, match.properties):
        return False
    if not _map_match(device.attributes, match.attributes):
        return False
    return match.parent is None or any(_parent_match(a, match.parent) for a in device.ancestors)


def _drop_glob_duplicates(devices: Sequence[DiscoveredDevice]) -> list[DiscoveredDevice]:
    """Drop a node found only by a ``/dev`` glob when udev reported the same node."""
    udev_nodes = {d.devnode for d in devices if d.subsystem and d.devnode}
    return [d for d in devices if d.subsystem or d.devnode not in udev_nodes]


def match_devices(
    classes: Sequence[DeviceClass], devices: Sequence[DiscoveredDevice]
) -> dict[str, list[DiscoveredDevice]]:
    """The devices of each enabled class, by kind (a device may belong to several classes)."""
    unique = _drop_glob_duplicates(devices)
    return {c.kind: [d for d in unique if matches(c.match, d)] for c in classes if c.enabled}


# -- what to discover ---------------------------------------------------------------------------


def _templates(cls: DeviceClass) -> list[Template]:
    out = [s.template for s in cls.naming] + [cls.node.path]
    return out + cls.edits.templates() + cls.class_edits.templates()


def _as_glob(tmpl: Template) -> str | None:
    """A host path template as a glob for discovery: each placeholder becomes ``*``."""
    text = "".join(re.sub(r"([\[\]?*])", r"[\1]", p) if isinstance(p, str) else "*" for p in tmpl.parts)
    return text if text.startswith("/") else None


def query_for(classes: Sequence[DeviceClass]) -> Query:
    """The least discovery that finds every device and companion node the enabled classes use."""
    enabled = [c for c in classes if c.enabled]
    subsystems: set[str] = set()
    everything = False
    globs: list[str] = []
    attributes: set[str] = set()
    ancestors = False
    for cls in enabled:
        m = cls.match
        if m.subsystems:
            subsystems.update(m.subsystems)
        elif m.devnode:
            globs.extend(m.devnode)
        else:
            everything = True
        attributes.update(k for k, _ in m.attributes)
        if m.parent is not None:
            attributes.update(k for k, _ in m.parent.attributes)
        ancestors = ancestors or m.parent is not None or bool(m.driver)
        for tmpl in _templates(cls):
            for p in tmpl.placeholders:
                if p.key == "attribute":
                    attributes.add(p.arg)
                elif p.key == "serial":
                    attributes.add("serial")
                ancestors = ancestors or p.key in _NEEDS_ANCESTORS
        for edits in (cls.edits, cls.class_edits):
            for node in edits.device_nodes:
                glob = _as_glob(node.host)
                if glob is not None:
                    globs.append(glob)
    return Query(
        subsystems=frozenset() if everything else frozenset(subsystems),
        devnode_globs=tuple(dict.fromkeys(globs)),
        attributes=frozenset(attributes),
        with_ancestors=ancestors,
    )
