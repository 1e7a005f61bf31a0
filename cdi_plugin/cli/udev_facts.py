"""The udev facts of a served device, for the DRA driver's attributes (``serve --api dra|both``).

The inventory knows each device's host nodes by device number; :func:`lookup` reads the device
that owns a number from udev (sysfs and the udev database) and :func:`facts_of` keeps what a
DeviceClass can select on:

- ``subsystem``: the device's own;
- ``driver``: the device's, else its nearest ancestor's that has one (a DRM card's PCI device);
- the *bus device*: the nearest of the device and its ancestors on a hardware bus (PCI, USB,
  SCSI...); virtio sits on its PCI function, so it is looked through;
- vendor and model IDs: the device's ``ID_VENDOR_ID``/``ID_MODEL_ID`` (udev's USB and similar
  builtins), else the bus device's (``PCI_ID`` of a PCI function, ``PRODUCT`` of a USB device or
  interface, ``HID_ID`` of a HID device); four lower-case hex digits, anything else is left out;
- ``serial``: ``ID_SERIAL_SHORT`` of the device, else of the bus device; without it ``ID_SERIAL``,
  unless udev made it up from the vendor and model names (``<ID_VENDOR>_<ID_MODEL>``, what it
  does when the device reports no serial). Values that are only zeros are placeholders and left
  out. Nothing else is taken (a USB root hub's serial is its PCI address, not the device's);
- ``pci_address``: ``PCI_SLOT_NAME`` (``domain:bus:device.function``) when the bus device is a PCI
  function.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Mapping

from cdi_plugin.discovery.model import DiscoveredDevice
from cdi_plugin.discovery.udev import UdevSource
from cdi_plugin.errors import DiscoveryError
from cdi_plugin.inventory import UdevFacts
from cdi_plugin.inventory.health import Rdev

log = logging.getLogger(__name__)

#: Subsystems of devices on a hardware bus; the first one met going up is the bus device.
BUSES = frozenset(
    {"pci", "usb", "scsi", "platform", "hid", "i2c", "spi", "serio", "mmc", "sdio", "thunderbolt",
     "pnp", "acpi", "ccw", "css", "vmbus", "xen", "amba", "mdio_bus", "gameport", "ieee1394", "pcmcia"}
)  # fmt: skip
_HEX_ID = re.compile(r"[0-9a-fA-F]{1,4}")
_PCI_ADDRESS = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


def _hex_id(value: str | None) -> str | None:
    if value is None or not _HEX_ID.fullmatch(value):
        return None
    return value.lower().rjust(4, "0")


def _ids(subsystem: str, props: Mapping[str, str]) -> tuple[str | None, str | None]:
    vendor, model = _hex_id(props.get("ID_VENDOR_ID")), _hex_id(props.get("ID_MODEL_ID"))
    if vendor is not None and model is not None:
        return vendor, model
    if subsystem == "pci" and "PCI_ID" in props:
        v, _, m = props["PCI_ID"].partition(":")
        return _hex_id(v), _hex_id(m)
    if subsystem == "usb" and "PRODUCT" in props:
        v, _, rest = props["PRODUCT"].partition("/")
        return _hex_id(v), _hex_id(rest.partition("/")[0])
    if subsystem == "hid" and "HID_ID" in props:  # bus:vendor:product, 8 hex digits each
        _, v, m = [*props["HID_ID"].split(":"), "", ""][:3]
        return _hex_id(v.lstrip("0") or "0"), _hex_id(m.lstrip("0") or "0")
    return None, None


def _serial(props: Mapping[str, str]) -> str | None:
    serial = props.get("ID_SERIAL_SHORT")
    if not serial:
        serial = props.get("ID_SERIAL")
        if serial and serial == f"{props.get('ID_VENDOR', '')}_{props.get('ID_MODEL', '')}":
            return None
    if not serial or not serial.strip("0"):
        return None
    return serial


def facts_of(device: DiscoveredDevice) -> UdevFacts:
    """What a DeviceClass can select on, by the rules above (the NUMA node comes from sysfs in the
    inventory)."""
    chain = [(device.subsystem, device.sys_name, device.properties)]
    chain += [(a.subsystem, a.sys_name, a.properties) for a in device.ancestors]
    bus = next((c for c in chain if c[0] in BUSES), None)
    driver = device.driver or next((a.driver for a in device.ancestors if a.driver), None)
    vendor, model = _ids(device.subsystem, device.properties)
    if (vendor is None or model is None) and bus is not None:
        vendor, model = _ids(bus[0], bus[2])
    serial = _serial(device.properties)
    if serial is None and bus is not None:
        serial = _serial(bus[2])
    pci = None
    if bus is not None and bus[0] == "pci":
        slot = bus[2].get("PCI_SLOT_NAME") or bus[1]
        pci = slot.lower() if _PCI_ADDRESS.fullmatch(slot) else None
    return UdevFacts(
        subsystem=device.subsystem,
        driver=driver,
        vendor_id=vendor,
        model_id=model,
        serial=serial,
        pci_address=pci,
    )


def lookup(source: UdevSource, rdev: Rdev) -> UdevFacts | None:
    """The facts of the device owning ``rdev``; None when udev knows no such device (its node
    vanished) or cannot be read (logged)."""
    try:
        device = source.lookup_number(rdev.block, rdev.major, rdev.minor)
    except DiscoveryError as exc:
        log.warning("%s", exc)
        return None
    return None if device is None else facts_of(device)


def udev_facts() -> Callable[[Rdev], UdevFacts | None]:
    """The inventory's facts callback, reading the live host."""
    return functools.partial(lookup, UdevSource())
