"""UdevSource against simulated hardware: pyudev and libudev under ``umockdev-run``."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdi_plugin.discovery.fixture import load
from cdi_plugin.discovery.model import DiscoveredDevice, Discovery, Query
from tests.discovery.simhost import (
    DATA,
    IS_ROOT,
    NODE_OWNERS,
    RECORDED_ATTRIBUTES,
    WORKSTATION,
    WORKSTATION_JSON,
    binder_umockdev,
    discover,
)

pytestmark = pytest.mark.umockdev

DEFAULT_SUBSYSTEMS = frozenset(
    {"misc", "drm", "tty", "video4linux", "infiniband_verbs", "kfd", "hidraw", "vfio"}
)
QUERIES = {
    "defaults": Query(
        subsystems=DEFAULT_SUBSYSTEMS, attributes=frozenset({"vendor", "device", "numa_node", "serial"})
    ),
    "tty": Query(subsystems=frozenset({"tty"}), attributes=frozenset({"idVendor", "serial", "port_number"})),
    "drm_only": Query(subsystems=frozenset({"drm"})),
    "no_ancestors": Query(
        subsystems=frozenset({"drm"}), with_ancestors=False, attributes=frozenset({"vendor"})
    ),
    "usb_by_glob": Query(subsystems=frozenset({"misc"}), devnode_globs=("/dev/bus/usb/*/*", "/dev/fuse")),
    "bad_attribute": Query(attributes=frozenset({"../../etc/shadow"})),
}


def ok(result: Discovery | str) -> Discovery:
    assert isinstance(result, Discovery), result
    return result


@pytest.fixture(scope="module")
def workstation() -> dict[str, Discovery | str]:
    return discover([WORKSTATION], QUERIES)


def by_name(found: Discovery) -> dict[str, DiscoveredDevice]:
    return {d.sys_name: d for d in found.devices}


def test_only_the_asked_subsystems_are_returned(workstation: dict[str, Discovery | str]) -> None:
    drm = ok(workstation["drm_only"])
    assert {d.subsystem for d in drm.devices} == {"drm"}
    assert sorted(d.sys_name for d in drm.devices) == [
        "card0",
        "card0-HDMI-A-1",
        "card1",
        "renderD128",
        "renderD129",
    ]
    defaults = ok(workstation["defaults"])
    assert {d.subsystem for d in defaults.devices} == DEFAULT_SUBSYSTEMS
    assert not {"pci", "usb", "hid", "platform", "infiniband"} & {d.subsystem for d in defaults.devices}


def test_gpu_nodes_share_the_pci_parent_with_its_attributes(workstation: dict[str, Discovery | str]) -> None:
    devices = by_name(ok(workstation["defaults"]))
    card, render = devices["card0"], devices["renderD128"]
    assert card.node is not None
    assert (card.node.type, card.node.major, card.node.minor, card.node.mode) == ("c", 226, 0, 0o660)
    if IS_ROOT:  # owners are set with chown
        assert (card.node.uid, card.node.gid) == (0, 44)
    assert (render.node.major, render.node.minor) == (226, 128)
    assert card.devtype == render.devtype == "drm_minor"
    assert card.properties["ID_PATH"] == render.properties["ID_PATH"] == "pci-0000:00:02.0"
    pci = render.ancestors[0]
    assert pci.sys_path == "/sys/devices/pci0000:00/0000:00:02.0"
    assert (pci.subsystem, pci.driver) == ("pci", "i915")
    assert dict(pci.attributes) == {"vendor": "0x8086", "device": "0x3e92", "numa_node": "0"}
    assert pci.properties["PCI_ID"] == "8086:3E92"
    assert card.ancestors[0] == pci
    amd = devices["renderD129"]
    assert [(a.sys_name, a.attributes.get("vendor")) for a in amd.ancestors] == [
        ("0000:01:00.0", "0x1002"),
        ("0000:00:01.0", "0x8086"),
    ]


def test_attributes_are_read_only_when_asked(workstation: dict[str, Discovery | str]) -> None:
    devices = by_name(ok(workstation["drm_only"]))
    assert all(d.attributes == {} and all(a.attributes == {} for a in d.ancestors) for d in devices.values())


def test_without_ancestors(workstation: dict[str, Discovery | str]) -> None:
    found = ok(workstation["no_ancestors"])
    assert len(found.devices) == 5
    assert all(d.ancestors == () for d in found.devices)


def test_device_without_node_is_reported_with_none(workstation: dict[str, Discovery | str]) -> None:
    found = ok(workstation["drm_only"])
    connector = by_name(found)["card0-HDMI-A-1"]
    assert (connector.devnode, connector.node) == (None, None)
    assert connector.ancestors[0].sys_name == "card0"
    assert found.warnings == ()


def test_usb_serial_adapters_with_parent_chain(workstation: dict[str, Discovery | str]) -> None:
    devices = by_name(ok(workstation["tty"]))
    assert sorted(devices) == ["ttyACM0", "ttyS0", "ttyUSB0", "ttyUSB1"]
    usb0 = devices["ttyUSB0"]
    assert usb0.devnode == "/dev/ttyUSB0"
    assert (usb0.node.major, usb0.node.minor, usb0.node.mode) == (188, 0, 0o660)
    assert {k: usb0.properties[k] for k in ("ID_SERIAL_SHORT", "ID_VENDOR_ID", "ID_MODEL_ID", "ID_PATH")} == {
        "ID_SERIAL_SHORT": "A50285BI",
        "ID_VENDOR_ID": "0403",
        "ID_MODEL_ID": "6001",
        "ID_PATH": "pci-0000:00:14.0-usb-0:2:1.0",
    }
    assert usb0.devlinks == (
        "/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A50285BI-if00-port0",
        "/dev/serial/by-path/pci-0000:00:14.0-usb-0:2:1.0-port0",
    )
    chain = [(a.subsystem, a.sys_name, a.driver) for a in usb0.ancestors]
    assert chain == [
        ("usb-serial", "ttyUSB0", "ftdi_sio"),
        ("usb", "1-2:1.0", "ftdi_sio"),
        ("usb", "1-2", "usb"),
        ("usb", "usb1", "usb"),
        ("pci", "0000:00:14.0", "xhci_hcd"),
    ]
    assert dict(usb0.ancestors[2].attributes) == {"idVendor": "0403", "serial": "A50285BI"}
    assert usb0.ancestors[0].attributes == {"port_number": "0"}
    acm = devices["ttyACM0"]
    assert acm.properties["ID_SERIAL_SHORT"] == "75735313233351F0B1E1"
    assert [a.sys_name for a in acm.ancestors][:2] == ["1-4:1.0", "1-4"]


def test_same_serial_twice_is_reported_faithfully(workstation: dict[str, Discovery | str]) -> None:
    devices = by_name(ok(workstation["tty"]))
    one, two = devices["ttyUSB0"], devices["ttyUSB1"]
    assert one.properties["ID_SERIAL_SHORT"] == two.properties["ID_SERIAL_SHORT"] == "A50285BI"
    assert one.devlinks[0] == two.devlinks[0]  # both claim the same by-id link, as udev does
    assert (one.node.minor, two.node.minor) == (0, 1)
    assert one.properties["ID_PATH"] != two.properties["ID_PATH"]


def test_default_class_devices_are_all_found(workstation: dict[str, Discovery | str]) -> None:
    devices = {d.devnode: d for d in ok(workstation["defaults"]).devices if d.devnode}
    expected = {
        "/dev/fuse": ("misc", 10, 229),
        "/dev/net/tun": ("misc", 10, 200),
        "/dev/kvm": ("misc", 10, 232),
        "/dev/vhost-net": ("misc", 10, 238),
        "/dev/binder": ("misc", 10, 124),
        "/dev/vfio/vfio": ("misc", 10, 196),
        "/dev/vfio/42": ("vfio", 244, 0),
        "/dev/hidraw0": ("hidraw", 243, 0),
        "/dev/video0": ("video4linux", 81, 0),
        "/dev/infiniband/uverbs0": ("infiniband_verbs", 231, 192),
        "/dev/kfd": ("kfd", 235, 0),
        "/dev/dri/renderD129": ("drm", 226, 129),
    }
    for path, (subsystem, major, minor) in expected.items():
        device = devices[path]
        assert (device.subsystem, device.node.type, device.node.major, device.node.minor) == (
            subsystem,
            "c",
            major,
            minor,
        ), path
        mode, uid, gid = NODE_OWNERS[path]
        assert device.node.mode == mode, path
        if IS_ROOT:
            assert (device.node.uid, device.node.gid) == (uid, gid), path
    assert devices["/dev/hidraw0"].ancestors[0].properties["HID_NAME"] == "Logitech USB Receiver"
    assert devices["/dev/infiniband/uverbs0"].ancestors[0].attributes["vendor"] == "0x15b3"
    assert devices["/dev/infiniband/uverbs0"].ancestors[0].attributes["numa_node"] == "1"


def test_devnode_glob_adds_nodes_of_unasked_subsystems_once(workstation: dict[str, Discovery | str]) -> None:
    found = ok(workstation["usb_by_glob"])
    extra = [(d.devnode, d.node.major, d.node.minor) for d in found.devices if d.subsystem == ""]
    assert extra == [
        ("/dev/bus/usb/001/001", 189, 0),
        ("/dev/bus/usb/001/003", 189, 2),
        ("/dev/bus/usb/001/004", 189, 3),
        ("/dev/bus/usb/001/005", 189, 4),
        ("/dev/bus/usb/001/007", 189, 6),
        ("/dev/bus/usb/001/008", 189, 7),
    ]
    assert [d.sys_name for d in found.devices if d.devnode == "/dev/fuse"] == ["fuse"]  # udev's entry only


def test_unsafe_attribute_is_an_error(workstation: dict[str, Discovery | str]) -> None:
    error = workstation["bad_attribute"]
    assert isinstance(error, str)
    assert error.startswith("sysfs attribute '../../etc/shadow': must be a name relative to the device")


def test_uevent_properties_are_delivered_exactly(workstation: dict[str, Discovery | str]) -> None:
    """Without a udev database (here, and on hosts without udevd) properties are the uevent keys."""
    fuse = by_name(ok(workstation["defaults"]))["fuse"]
    assert dict(fuse.properties) == {
        "DEVNAME": "/dev/fuse",
        "DEVPATH": "/devices/virtual/misc/fuse",
        "MAJOR": "10",
        "MINOR": "229",
        "SUBSYSTEM": "misc",
    }


def test_bundled_fixture_is_what_udev_sees_on_the_simulated_workstation() -> None:
    """workstation.json must be re-recorded (python -m tests.discovery.simhost --write) when the
    .umockdev file or the recording changes."""
    fresh = ok(discover([WORKSTATION], {"all": Query(attributes=RECORDED_ATTRIBUTES)})["all"])
    recorded = load(WORKSTATION_JSON)
    assert fresh.warnings == ()
    if not IS_ROOT:  # node owners are applied with chown, which needs root
        fresh_nodes = [
            (d.devnode, d.node and (d.node.type, d.node.major, d.node.minor)) for d in fresh.devices
        ]
        assert fresh_nodes == [
            (d.devnode, d.node and (d.node.type, d.node.major, d.node.minor)) for d in recorded
        ]
        return
    assert fresh.devices == recorded


def test_hostile_text_arrives_verbatim_and_missing_node_is_a_warning() -> None:
    hostile_tty = "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-9/1-9:1.0/ttyUSB2/tty/ttyUSB2"
    results = discover(
        [DATA / "hostile.umockdev", DATA / "missing-node.umockdev"],
        {
            "q": Query(
                subsystems=frozenset({"tty", "hidraw"}),
                attributes=frozenset({"serial", "product", "manufacturer"}),
            )
        },
        prepare=f"printf 'ID_RAW=a\\377b\\303(\\n' >> \"$UMOCKDEV_DIR{hostile_tty}/uevent\"",
    )
    found = ok(results["q"])
    devices = by_name(found)
    tty = devices["ttyUSB2"]
    assert {
        k: v
        for k, v in tty.properties.items()
        if k.startswith("ID_") and k not in ("ID_VENDOR_ID", "ID_MODEL_ID")
    } == {
        "ID_SERIAL_SHORT": "../../etc/passwd",
        "ID_SERIAL": "--privileged --device=/dev/mem",
        "ID_MODEL": "$(touch /tmp/pwned) `id` ${HOME}",
        "ID_VENDOR": "name with   spaces and \"double\" and 'single' ; | & < > *",
        "ID_MODEL_ENC": "\\x2e\\x2e\\x2fetc",
        "ID_FS_LABEL": "Ünïcødé ✓ 日本語 🚀",
        "ID_PADDED": "  padded  ",
        "ID_EQUALS": "a=b=c",
        "ID_EMPTY": "",
        "ID_TAB": "before\tafter",
        "ID_PATH": "pci-0000:00:14.0-usb-0:9:1.0",
        "ID_RAW": "a\\xffb\\xc3(",  # bytes that are not UTF-8 become \xNN escapes
    }
    usb_device = tty.ancestors[2]
    assert dict(usb_device.attributes) == {
        "serial": "line one\nline two",  # libudev strips only the trailing newline
        "product": "$(reboot) `id` ; rm -rf / --privileged",
        "manufacturer": "A\\xff\nB\\xc3(",
    }
    hidraw1 = devices["hidraw1"]
    assert (hidraw1.devnode, hidraw1.node) == ("/dev/hidraw1", None)
    assert found.warnings == ("hidraw hidraw1: /dev/hidraw1 is announced by udev but missing",)


def test_a_thousand_binder_devices(tmp_path: Path) -> None:
    device_file = tmp_path / "binder1000.umockdev"
    device_file.write_text(binder_umockdev(1000))
    results = discover(
        [device_file],
        {
            "misc": Query(subsystems=frozenset({"misc"})),
            "glob": Query(subsystems=frozenset({"tty"}), devnode_globs=("/dev/binder*",)),
        },
        owners={},
    )
    misc = ok(results["misc"])
    assert len(misc.devices) == 1000
    numbers = {d.sys_name: (d.devnode, d.node.type, d.node.major, d.node.minor) for d in misc.devices}
    assert numbers == {f"binder{i}": (f"/dev/binder{i}", "c", 10, 1000 + i) for i in range(1000)}
    assert misc.warnings == ()
    glob = ok(results["glob"])
    assert sorted((d.subsystem, d.devnode) for d in glob.devices) == sorted(
        ("", f"/dev/binder{i}") for i in range(1000)
    )
