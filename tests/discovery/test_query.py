"""Query checks and the evaluation of queries over recorded devices (no I/O)."""

from __future__ import annotations

import pytest

from cdi_plugin.discovery.model import Ancestor, DiscoveredDevice, NodeInfo, Query
from cdi_plugin.discovery.query import apply_query, check_query
from cdi_plugin.errors import DiscoveryError


def node(major: int, minor: int, kind: str = "c") -> NodeInfo:
    return NodeInfo(type=kind, major=major, minor=minor, mode=0o660, uid=0, gid=44)


PCI = Ancestor(
    subsystem="pci",
    sys_name="0000:00:02.0",
    sys_path="/sys/devices/pci0000:00/0000:00:02.0",
    driver="i915",
    properties={"PCI_ID": "8086:3E92"},
    attributes={"vendor": "0x8086", "numa_node": "0", "class": "0x030000"},
)
CARD = DiscoveredDevice(
    subsystem="drm",
    sys_name="card0",
    sys_path=PCI.sys_path + "/drm/card0",
    devnode="/dev/dri/card0",
    node=node(226, 0),
    properties={"DEVNAME": "/dev/dri/card0"},
    attributes={"dev": "226:0", "status": "x"},
    ancestors=(PCI,),
)
FUSE = DiscoveredDevice(subsystem="misc", sys_name="fuse", devnode="/dev/fuse", node=node(10, 229))
SERIAL = DiscoveredDevice(
    subsystem="tty",
    sys_name="ttyUSB0",
    devnode="/dev/ttyUSB0",
    node=node(188, 0),
    devlinks=("/dev/serial/by-id/usb-FTDI-A50285BI-if00-port0",),
)
NVIDIA = DiscoveredDevice(subsystem="", sys_name="nvidia0", devnode="/dev/nvidia0", node=node(195, 0))
CONNECTOR = DiscoveredDevice(subsystem="drm", sys_name="card0-HDMI-A-1", ancestors=(PCI,))
RECORDED = (CARD, CONNECTOR, FUSE, SERIAL, NVIDIA)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (Query(devnode_globs=("dev/fuse",)), "devnode glob 'dev/fuse': must be an absolute path under /dev"),
        (Query(devnode_globs=("/etc/*",)), "devnode glob '/etc/*'"),
        (Query(devnode_globs=("/dev/../etc/shadow",)), "devnode glob '/dev/../etc/shadow'"),
        (Query(devnode_globs=("/dev//fuse",)), "devnode glob '/dev//fuse'"),
        (Query(devnode_globs=("/dev",)), "devnode glob '/dev'"),
        (Query(attributes=frozenset({"../../../../etc/shadow"})), "sysfs attribute '../../../../etc/shadow'"),
        (Query(attributes=frozenset({"/etc/shadow"})), "sysfs attribute '/etc/shadow'"),
        (Query(attributes=frozenset({"device/../x"})), "sysfs attribute 'device/../x'"),
        (Query(attributes=frozenset({""})), "sysfs attribute ''"),
    ],
)
def test_unsafe_queries_are_rejected_with_the_offending_value(query: Query, message: str) -> None:
    with pytest.raises(DiscoveryError) as info:
        check_query(query)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_safe_query_passes() -> None:
    check_query(
        Query(devnode_globs=("/dev/nvidia[0-9]*", "/dev/dri/*"), attributes=frozenset({"device/vendor"}))
    )


def test_subsystem_filter_returns_only_those_subsystems() -> None:
    found = apply_query(RECORDED, Query(subsystems=frozenset({"drm"})))
    assert [d.sys_name for d in found.devices] == ["card0", "card0-HDMI-A-1"]
    assert found.warnings == ()


def test_empty_subsystems_means_every_udev_device_but_no_glob_only_node() -> None:
    found = apply_query(RECORDED, Query())
    assert [d.sys_name for d in found.devices] == ["card0", "card0-HDMI-A-1", "fuse", "ttyUSB0"]


def test_only_asked_attributes_are_kept_on_device_and_ancestors() -> None:
    found = apply_query(
        RECORDED, Query(subsystems=frozenset({"drm"}), attributes=frozenset({"vendor", "dev"}))
    )
    card = found.devices[0]
    assert dict(card.attributes) == {"dev": "226:0"}
    assert dict(card.ancestors[0].attributes) == {"vendor": "0x8086"}
    assert dict(card.ancestors[0].properties) == {"PCI_ID": "8086:3E92"}


def test_without_ancestors() -> None:
    found = apply_query(RECORDED, Query(subsystems=frozenset({"drm"}), with_ancestors=False))
    assert all(d.ancestors == () for d in found.devices)


def test_glob_finds_glob_only_nodes_and_nodes_of_unasked_subsystems() -> None:
    found = apply_query(
        RECORDED, Query(subsystems=frozenset({"drm"}), devnode_globs=("/dev/nvidia*", "/dev/fuse"))
    )
    extra = [d for d in found.devices if d.subsystem == ""]
    assert [(d.sys_name, d.devnode, d.node) for d in extra] == [
        ("fuse", "/dev/fuse", node(10, 229)),
        ("nvidia0", "/dev/nvidia0", node(195, 0)),
    ]
    assert all(d.properties == {} and d.ancestors == () for d in extra)


def test_glob_does_not_repeat_a_node_a_selected_device_owns() -> None:
    found = apply_query(
        RECORDED, Query(subsystems=frozenset({"misc"}), devnode_globs=("/dev/fuse", "/dev/f*"))
    )
    assert [(d.subsystem, d.sys_name) for d in found.devices] == [("misc", "fuse")]


def test_glob_matches_devlinks_but_prefers_the_node_itself() -> None:
    by_link = apply_query(
        RECORDED, Query(subsystems=frozenset({"misc"}), devnode_globs=("/dev/serial/by-id/*",))
    )
    assert [(d.sys_name, d.devnode) for d in by_link.devices if not d.subsystem] == [
        ("usb-FTDI-A50285BI-if00-port0", "/dev/serial/by-id/usb-FTDI-A50285BI-if00-port0")
    ]
    both = apply_query(
        RECORDED, Query(subsystems=frozenset({"misc"}), devnode_globs=("/dev/serial/by-id/*", "/dev/tty*"))
    )
    assert [d.devnode for d in both.devices if not d.subsystem] == ["/dev/ttyUSB0"]


def test_apply_query_checks_the_query() -> None:
    with pytest.raises(DiscoveryError, match="devnode glob"):
        apply_query(RECORDED, Query(devnode_globs=("/proc/*",)))
