"""Templates with placeholders for the device's facts, and their safe rendering.

A template is text with placeholders in braces: ``/dev/dri/by-path/pci-{pci_slot}-render``,
``SERIAL={serial}``, ``{property:ID_PATH}``; ``{{`` and ``}}`` stand for literal braces. Rendering
inserts each value sanitised for where it lands (:mod:`cdi_plugin.generate.sanitize`), so a value a
device chose cannot add a path component, an option or a line. When a placeholder has no value
for a device (a property it does not have), the template has no value for it: the name strategy
or the edit is skipped for that device.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from cdi_plugin.discovery.model import DiscoveredDevice
from cdi_plugin.errors import CdiPluginError
from cdi_plugin.generate.sanitize import clean_node_path, hostile_reason, path_component, safe_value

#: Placeholders without an argument, with what they stand for (docs/config.md lists the same).
PLACEHOLDERS: Mapping[str, str] = {
    "name": "the CDI device name (not in naming strategies)",
    "index": "the device's position in its class, from 0, ordered by node path",
    "kernel": "the kernel name (sysfs name), e.g. ttyUSB0, renderD128",
    "devnode": "the host device node path, e.g. /dev/ttyUSB0",
    "subsystem": "the udev subsystem",
    "devtype": "the udev device type",
    "driver": "the driver of the device or, if it has none, of its nearest parent with one",
    "major": "the node's major number",
    "minor": "the node's minor number",
    "pci_slot": "the PCI address of the device or its nearest PCI parent, e.g. 0000:03:00.0",
    "serial": "udev's ID_SERIAL_SHORT, else the serial attribute of the USB device above it",
    "path": "udev's ID_PATH (the physical port or slot)",
}
#: Placeholders with an argument: ``{property:ID_SERIAL}``, ``{attribute:index}``.
ARG_PLACEHOLDERS: Mapping[str, str] = {
    "property": "a udev property of the device",
    "attribute": "a sysfs attribute of the device",
}

_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
_PROPERTY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ATTRIBUTE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class TemplateError(CdiPluginError, ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Placeholder:
    key: str
    arg: str = ""

    def __str__(self) -> str:
        return "{" + (f"{self.key}:{self.arg}" if self.arg else self.key) + "}"


Part = str | Placeholder


@dataclass(frozen=True, slots=True)
class Template:
    source: str
    parts: tuple[Part, ...]

    @property
    def placeholders(self) -> tuple[Placeholder, ...]:
        return tuple(p for p in self.parts if isinstance(p, Placeholder))

    @property
    def is_literal(self) -> bool:
        return not self.placeholders

    def literal(self) -> str:
        """The text of a template without placeholders."""
        return "".join(p for p in self.parts if isinstance(p, str))


def _placeholder(body: str) -> Placeholder:
    key, sep, arg = body.partition(":")
    if sep:
        if key not in ARG_PLACEHOLDERS:
            raise TemplateError(
                f"unknown placeholder {{{body}}}: known with an argument: property, attribute"
            )
        pattern = _PROPERTY_NAME if key == "property" else _ATTRIBUTE_NAME
        if not pattern.fullmatch(arg):
            raise TemplateError(f"invalid {key} name {arg!r} in {{{body}}}")
        return Placeholder(key, arg)
    if key not in PLACEHOLDERS:
        known = ", ".join(f"{{{k}}}" for k in PLACEHOLDERS)
        raise TemplateError(f"unknown placeholder {{{body}}}: known are {known}, {{property:NAME}}, "
                            "{attribute:NAME}")  # fmt: skip
    return Placeholder(key)


def parse(text: str) -> Template:
    """Parse a template; raises :class:`TemplateError` on an unknown placeholder or a lone brace."""
    parts: list[Part] = []
    literal = ""
    pos = 0
    for m in _TOKEN.finditer(text):
        literal += text[pos : m.start()]
        pos = m.end()
        token = m.group(0)
        if token in {"{{", "}}"}:
            literal += token[0]
        elif m.group(1) is None:
            raise TemplateError(f"unmatched {token!r} (write {token * 2} for a literal brace)")
        else:
            if literal:
                parts.append(literal)
                literal = ""
            parts.append(_placeholder(m.group(1)))
    literal += text[pos:]
    if literal:
        parts.append(literal)
    return Template(text, tuple(parts))


Lookup = Callable[[Placeholder], str | None]


class Context(Enum):
    """Where a rendered value lands, which decides how device-supplied text is sanitised."""

    NAME = "name"  # sanitised as a whole afterwards (naming)
    VALUE = "value"  # env value, hook argument
    PATH = "path"  # a path; each value becomes one path component


_TRUSTED = frozenset({"name", "index", "major", "minor"})


def render(template: Template, lookup: Lookup, context: Context) -> str | None:
    """The rendered text, or None if a placeholder has no value for this device."""
    out: list[str] = []
    for part in template.parts:
        if isinstance(part, str):
            out.append(part)
            continue
        value = lookup(part)
        if value is None:
            return None
        if context is Context.NAME or part.key in _TRUSTED:
            out.append(value)
        elif part.key == "devnode":
            if not clean_node_path(value):
                return None
            out.append(value)
        elif context is Context.PATH:
            out.append(path_component(value))
        else:
            out.append(safe_value(value))
    return "".join(out)


def hostile_values(templates: Iterable[Template], lookup: Lookup) -> list[str]:
    """Why the device-supplied values these templates would use are hostile (empty if none is)."""
    found: dict[str, str] = {}
    for tmpl in templates:
        for p in tmpl.placeholders:
            value = lookup(p)
            if p.key in _TRUSTED or value is None or str(p) in found:
                continue
            if p.key == "devnode":
                if not clean_node_path(value):
                    found[str(p)] = f"{p} is {value!r}, not a clean absolute path"
            elif reason := hostile_reason(value):
                found[str(p)] = f"{p} is {value!r}, which holds {reason}"
    return list(found.values())


# -- the facts of one device --------------------------------------------------------------------


def pci_slot(device: DiscoveredDevice) -> str | None:
    if device.subsystem == "pci":
        return device.sys_name
    for parent in device.ancestors:
        if parent.subsystem == "pci":
            return parent.sys_name
    return None


def driver(device: DiscoveredDevice) -> str | None:
    if device.driver:
        return device.driver
    return next((a.driver for a in device.ancestors if a.driver), None)


def serial(device: DiscoveredDevice) -> str | None:
    value = device.properties.get("ID_SERIAL_SHORT")
    if value:
        return value
    usb = next((a for a in device.ancestors if a.properties.get("DEVTYPE") == "usb_device"), None)
    return (usb.attributes.get("serial") or None) if usb is not None else None


def device_lookup(device: DiscoveredDevice, name: str | None = None, index: int | None = None) -> Lookup:
    """The values of every placeholder for ``device``; None where it has none (or empty)."""

    def lookup(p: Placeholder) -> str | None:
        value: str | None
        match p.key:
            case "name":
                value = name
            case "index":
                value = None if index is None else str(index)
            case "kernel":
                value = device.sys_name
            case "devnode":
                value = device.devnode
            case "subsystem":
                value = device.subsystem
            case "devtype":
                value = device.devtype
            case "driver":
                value = driver(device)
            case "major":
                value = None if device.node is None else str(device.node.major)
            case "minor":
                value = None if device.node is None else str(device.node.minor)
            case "pci_slot":
                value = pci_slot(device)
            case "serial":
                value = serial(device)
            case "path":
                value = device.properties.get("ID_PATH")
            case "property":
                value = device.properties.get(p.arg)
            case "attribute":
                value = device.attributes.get(p.arg)
            case _:
                value = None
        return value or None

    return lookup
