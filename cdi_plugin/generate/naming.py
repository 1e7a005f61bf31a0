"""Device names: naming strategies, the order of devices, and collisions.

The kubelet remembers device IDs across restarts, so a name must keep pointing at the same
physical device: a serial number (follows the device to any port) beats a port path (follows the
port), which beats a kernel name or an index (renumbered when devices come and go).

Each device takes the first strategy of its class that gives it a name no other device of the
class gets from that same strategy; so two adapters sharing a serial number are both named by
the next strategy (their port), and a device without a serial number by its port, without
renaming any other device. Every name is sanitised (:func:`sanitize.device_name`). Devices
whose names still collide, and a device no strategy can name, are left out, each with a message
saying why: a silently renamed device would hand a pod someone else's device. Both sides of a
collision are left out, since a device chooses its own serial number: one that copies another
device's name must neither take that name nor stop the other devices from being written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from cdi_plugin.cdi.names import natural_key_uncached
from cdi_plugin.discovery.model import DiscoveredDevice
from cdi_plugin.generate.config import DeviceClass
from cdi_plugin.generate.sanitize import device_name
from cdi_plugin.generate.template import Context, Template, device_lookup, render

ALL_DEVICE = "all"


@dataclass(frozen=True, slots=True)
class NamedDevice:
    device: DiscoveredDevice
    name: str
    index: int
    strategy: str


def ordered(devices: Sequence[DiscoveredDevice]) -> list[DiscoveredDevice]:
    """Devices in index order: by node path, then sysfs path, numbers compared as numbers."""
    return sorted(
        devices,
        key=lambda d: (natural_key_uncached(d.devnode or ""), natural_key_uncached(d.sys_path), d.sys_name),
    )


def describe(device: DiscoveredDevice) -> str:
    """How messages refer to a device: its node, else its sysfs path."""
    return device.devnode or device.sys_path or device.sys_name


def candidate(cls: DeviceClass, tmpl: Template, device: DiscoveredDevice, index: int) -> str | None:
    raw = render(tmpl, device_lookup(device, index=index), Context.NAME)
    return None if raw is None else device_name(raw, cls.name_prefix)


def name_devices(
    cls: DeviceClass, devices: Sequence[DiscoveredDevice]
) -> tuple[list[NamedDevice], list[str], list[str]]:
    """Name every device of a class; returns the named devices (index order), warnings, and one
    message for each device left out because it has no name of its own."""
    devs = ordered(devices)
    candidates = [[candidate(cls, s.template, d, i) for s in cls.naming] for i, d in enumerate(devs)]
    counts = [Counter(c[j] for c in candidates if c[j] is not None) for j in range(len(cls.naming))]
    reserved = {ALL_DEVICE} if cls.all_device else set()
    named: list[NamedDevice] = []
    warnings: list[str] = []
    refused: list[str] = []
    for i, (dev, cands) in enumerate(zip(devs, candidates, strict=True)):
        shared: list[str] = []
        for j, value in enumerate(cands):
            if value is None:
                continue
            if value in reserved or counts[j][value] > 1:
                what = (
                    "reserved for the 'all' device"
                    if value in reserved
                    else f"shared by {counts[j][value]} devices"
                )
                shared.append(f"{cls.naming[j].source} gives {value!r}, {what}")
                continue
            named.append(NamedDevice(dev, value, i, cls.naming[j].source))
            if shared:
                warnings.append(
                    f"{cls.kind}: {describe(dev)} named {value!r} by {cls.naming[j].source}: "
                    + "; ".join(shared)
                )
            break
        else:
            why = "; ".join(shared) if shared else "no strategy has a value for it"
            refused.append(
                f"{cls.kind} ({cls.where}): skipping {describe(dev)}: cannot name it: {why} "
                f"(naming: {', '.join(s.source for s in cls.naming)}; add a strategy that tells the devices "
                "apart, e.g. path or kernel)"
            )
    by_name: dict[str, list[NamedDevice]] = {}
    for n in named:
        by_name.setdefault(n.name, []).append(n)
    for name, group in by_name.items():
        if len(group) > 1:
            listed = " and ".join(f"{describe(n.device)} ({n.strategy})" for n in group)
            each = "both" if len(group) == 2 else "all"
            refused += [
                f"{cls.kind} ({cls.where}): skipping {describe(n.device)}: {listed} are {each} named "
                f"{name!r}; change the naming strategies of the class"
                for n in group
            ]
    return [n for n in named if len(by_name[n.name]) == 1], warnings, refused
