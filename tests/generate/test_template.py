"""Templates: parsing, placeholders and rendering in each place a value can land."""

from __future__ import annotations

import pytest

from cdi_plugin.discovery.model import Ancestor, DiscoveredDevice
from cdi_plugin.generate.template import Context, Placeholder, TemplateError, device_lookup, parse, render
from tests.generate.hosts import AMD_GPU, WORKSTATION, drm, props, usb_tty

TTY = usb_tty("ttyUSB0", 0, "1", serial="FT4ZK0A1")


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("plain", ("plain",)),
        ("{kernel}", (Placeholder("kernel"),)),
        ("pci-{pci_slot}-render", ("pci-", Placeholder("pci_slot"), "-render")),
        ("{property:ID_SERIAL}", (Placeholder("property", "ID_SERIAL"),)),
        ("{{literal}}", ("{literal}",)),
        ("a{attribute:index}b", ("a", Placeholder("attribute", "index"), "b")),
    ],
)
def test_parse(text: str, parts: tuple[object, ...]) -> None:
    assert parse(text).parts == parts


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{nope}", "unknown placeholder {nope}"),
        ("{env:X}", "unknown placeholder {env:X}"),
        ("{property:A B}", "invalid property name"),
        ("{attribute:../vendor}", "invalid attribute name"),
        ("open{", "unmatched '{'"),
        ("close}", "unmatched '}'"),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message.replace("{", r"\{").replace("}", r"\}")):
        parse(text)


@pytest.mark.parametrize(
    ("placeholder", "value"),
    [
        ("kernel", "ttyUSB0"),
        ("devnode", "/dev/ttyUSB0"),
        ("subsystem", "tty"),
        ("driver", "ftdi_sio"),
        ("major", "188"),
        ("minor", "0"),
        ("pci_slot", "0000:00:14.0"),
        ("serial", "FT4ZK0A1"),
        ("path", "pci-0000:00:14.0-usb-0:1:1.0"),
        ("property:ID_SERIAL", "FTDI_FT232R_USB_UART_FT4ZK0A1"),
        ("name", "my-port"),
        ("index", "3"),
        ("devtype", None),
        ("property:MISSING", None),
        ("attribute:index", None),
    ],
)
def test_device_facts(placeholder: str, value: str | None) -> None:
    key, _, arg = placeholder.partition(":")
    assert device_lookup(TTY, name="my-port", index=3)(Placeholder(key, arg)) == value


def test_serial_falls_back_to_the_usb_device_attribute_without_udev_database() -> None:
    bare = usb_tty("ttyUSB0", 0, "1", serial="FT4ZK0A1", udev=False)
    assert "ID_SERIAL_SHORT" not in bare.properties
    assert device_lookup(bare)(Placeholder("serial")) == "FT4ZK0A1"
    no_serial = usb_tty("ttyUSB1", 1, "2", serial=None, udev=False)
    assert device_lookup(no_serial)(Placeholder("serial")) is None, "never a hub's or controller's serial"


def test_pci_slot_of_a_gpu_render_node_is_its_parent() -> None:
    render_node = drm("renderD128", 128, AMD_GPU, 109)
    assert device_lookup(render_node)(Placeholder("pci_slot")) == "0000:03:00.0"
    fuse = next(d for d in WORKSTATION if d.sys_name == "fuse")
    assert device_lookup(fuse)(Placeholder("pci_slot")) is None


HOSTILE = DiscoveredDevice(
    subsystem="tty",
    sys_name="ttyUSB9",
    devnode="/dev/ttyUSB9",
    properties=props(ID_SERIAL_SHORT="../../etc/x\n--rm", ID_MODEL="a b;rm -rf /"),
    ancestors=(Ancestor("usb", "1-1", "/sys/x", properties=props(DEVTYPE="usb_device")),),
)


@pytest.mark.parametrize(
    ("text", "context", "expected"),
    [
        ("SERIAL={serial}", Context.VALUE, "SERIAL=__.._etc_x_--rm"),
        ("--port={devnode}", Context.VALUE, "--port=/dev/ttyUSB9"),
        ("{property:ID_MODEL}", Context.VALUE, "a_b_rm_-rf_"),
        ("/dev/serial/by-id/{serial}", Context.PATH, "/dev/serial/by-id/__.._etc_x_--rm"),
        ("/run/{property:ID_MODEL}/sock", Context.PATH, "/run/a_b_rm_-rf_/sock"),
        ("{devnode}", Context.PATH, "/dev/ttyUSB9"),
        ("{serial}", Context.NAME, "../../etc/x\n--rm"),
        ("/x/{property:MISSING}", Context.PATH, None),
    ],
)
def test_render_sanitises_device_values_for_where_they_land(
    text: str, context: Context, expected: str | None
) -> None:
    assert render(parse(text), device_lookup(HOSTILE), context) == expected


def test_an_unclean_devnode_renders_nothing() -> None:
    odd = DiscoveredDevice(subsystem="tty", sys_name="x", devnode="/dev/../etc/shadow")
    assert render(parse("{devnode}"), device_lookup(odd), Context.PATH) is None
    assert render(parse("N={devnode}"), device_lookup(odd), Context.VALUE) is None
