"""Discovered devices and device classes to CDI specs: one spec per enabled class with devices.

Each spec declares the lowest ``cdiVersion`` its features need (no ``v`` prefix); a spec that
would need more than ``max_version`` is refused, naming the feature and the runtimes that would
drop it. Nothing else is added to a spec: ownership and other bookkeeping stay out of it (an
annotation alone would raise it to cdiVersion 0.6.0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cdi_plugin.cdi.model import Device, Spec
from cdi_plugin.cdi.version import EARLIEST, minimum_version, requirements, runtimes_below, version_key
from cdi_plugin.discovery.model import DiscoveredDevice
from cdi_plugin.errors import GenerateError
from cdi_plugin.generate.config import DeviceClass
from cdi_plugin.generate.edits import Refused, class_edits, device_edits, merged, refuse_message, siblings_of
from cdi_plugin.generate.match import match_devices
from cdi_plugin.generate.naming import ALL_DEVICE, describe, name_devices
from cdi_plugin.generate.sanitize import clean_node_path
from cdi_plugin.generate.template import Template, device_lookup, hostile_values


@dataclass(frozen=True, slots=True)
class BuiltDevice:
    name: str
    qualified_name: str
    host_nodes: tuple[str, ...]
    source: str  # the host device it stands for ("" for the 'all' device)
    naming: str  # the strategy that named it


@dataclass(frozen=True, slots=True)
class BuiltSpec:
    device_class: DeviceClass
    spec: Spec
    devices: tuple[BuiltDevice, ...]

    @property
    def kind(self) -> str:
        return self.spec.kind


@dataclass(frozen=True, slots=True)
class BuildResult:
    """``refused`` names the devices left out because their udev data is hostile or unclean, or
    because no naming strategy tells them apart;
    ``warnings`` the ones left out for ordinary reasons (a node that vanished, no name)."""

    specs: tuple[BuiltSpec, ...]
    warnings: tuple[str, ...]
    refused: tuple[str, ...] = ()


@dataclass
class Notes:
    warnings: list[str] = dataclasses.field(default_factory=list)
    refused: list[str] = dataclasses.field(default_factory=list)


def _check_version(spec: Spec, max_version: str | None) -> None:
    if max_version is None or version_key(spec.cdi_version) <= version_key(max_version):
        return
    needs = [r for r in requirements(spec) if version_key(r.version) > version_key(max_version)]
    features = ", ".join(dict.fromkeys(r.feature for r in needs))
    dropped = ", ".join(runtimes_below(spec.cdi_version))
    who = (
        f"runtimes that would drop it: {dropped}"
        if dropped
        else "no runtime in cdi-gen's table is known to drop it; raise the maximum to allow it"
    )
    raise GenerateError(
        f"{spec.kind}: the spec needs cdiVersion {spec.cdi_version} for {features}, above the maximum "
        f"{max_version} (--cdi-version-max); {who}"
    )


@dataclass(frozen=True, slots=True)
class Host:
    """Everything discovered: devices (for siblings) and device nodes by path (for companions)."""

    devices: tuple[DiscoveredDevice, ...]
    nodes: Mapping[str, DiscoveredDevice]

    @classmethod
    def of(cls, devices: Sequence[DiscoveredDevice]) -> Host:
        """Nodes are found by path and by udev's symlinks to them; udev devices win over glob hits."""
        nodes: dict[str, DiscoveredDevice] = {}
        for dev in sorted(devices, key=lambda d: bool(d.subsystem)):
            for path in (dev.devnode, *dev.devlinks) if dev.devnode else ():
                if path:
                    nodes[path] = dev
        return cls(tuple(devices), nodes)


def _device_templates(cls: DeviceClass) -> list[Template]:
    return [s.template for s in cls.naming] + [cls.node.path] + cls.edits.templates()


def build_spec(
    cls: DeviceClass,
    devices: Sequence[DiscoveredDevice],
    host: Host,
    max_version: str | None = None,
    notes: Notes | None = None,
) -> BuiltSpec | None:
    """The spec of one class from its matched devices; None when no device is left.

    Devices left out are explained in ``notes``: refused (hostile or unclean udev data, no name of
    their own) or warned about (a node udev announced but /dev lacks).
    """
    notes = notes if notes is not None else Notes()
    warnings = notes.warnings
    usable = []
    templates = _device_templates(cls)
    for dev in devices:
        if dev.devnode is not None and not clean_node_path(dev.devnode):
            notes.refused.append(
                refuse_message(cls, dev, f"node path {dev.devnode!r} is not a clean absolute path")
            )
        elif hostile := hostile_values(templates, device_lookup(dev)):
            notes.refused.append(refuse_message(cls, dev, "; ".join(hostile)))
        elif dev.devnode is not None and dev.node is None and cls.node.attach:
            warnings.append(refuse_message(cls, dev, f"{dev.devnode} is not a device node on the host"))
        else:
            usable.append(dev)
    if not usable:
        return None
    try:
        top = class_edits(cls, host.nodes)
    except Refused as exc:
        warnings.append(f"{cls.kind}: skipping the class: {exc}")
        return None
    named, naming_warnings, unnamed = name_devices(cls, usable)
    warnings += naming_warnings
    notes.refused += unnamed
    cdi_devices: list[Device] = []
    built: list[BuiltDevice] = []
    for n in named:
        try:
            result = device_edits(cls, n, host.nodes, siblings_of(cls, n.device, host.devices))
        except Refused as exc:
            warnings.append(refuse_message(cls, n.device, str(exc)))
            continue
        cdi_devices.append(Device(name=n.name, container_edits=result.edits))
        built.append(
            BuiltDevice(n.name, f"{cls.kind}={n.name}", result.host_nodes, describe(n.device), n.strategy)
        )
    if not cdi_devices:
        return None
    if cls.all_device:
        edits = merged([d.container_edits for d in cdi_devices])
        cdi_devices.append(Device(name=ALL_DEVICE, container_edits=edits))
        hosts = tuple(n.host_path or n.path for n in edits.device_nodes or ())
        built.append(BuiltDevice(ALL_DEVICE, f"{cls.kind}={ALL_DEVICE}", hosts, "", "all"))
    order = sorted(range(len(cdi_devices)), key=lambda i: cdi_devices[i].name)
    spec = Spec(
        cdi_version=EARLIEST,
        kind=cls.kind,
        devices=tuple(cdi_devices[i] for i in order),
        container_edits=top,
    )
    spec = dataclasses.replace(spec, cdi_version=minimum_version(spec))
    _check_version(spec, max_version)
    return BuiltSpec(cls, spec, tuple(built[i] for i in order))


def build_specs(
    classes: Sequence[DeviceClass], devices: Sequence[DiscoveredDevice], max_version: str | None = None
) -> BuildResult:
    """Specs for every enabled class that matched at least one usable device, in config order.

    Raises :class:`GenerateError` (a version above ``max_version``).
    """
    host = Host.of(devices)
    matched = match_devices(classes, devices)
    specs: list[BuiltSpec] = []
    notes = Notes()
    for cls in classes:
        if not cls.enabled:
            continue
        built = build_spec(cls, matched[cls.kind], host, max_version, notes)
        if built is not None:
            specs.append(built)
    return BuildResult(tuple(specs), tuple(notes.warnings), tuple(notes.refused))
