"""Matching devices to classes, and the discovery query the classes need."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest

from cdi_plugin.discovery.model import DiscoveredDevice
from cdi_plugin.generate.config import default_classes, parse_classes
from cdi_plugin.generate.match import match_devices, matches, query_for
from tests.generate.hosts import AMD_GPU, INTEL_GPU, WORKSTATION, drm, usb_tty

RENDER_AMD = drm("renderD128", 128, AMD_GPU, 109)
RENDER_INTEL = drm("renderD129", 129, INTEL_GPU, 109)
TTY = usb_tty("ttyUSB0", 0, "1", serial="FT4ZK0A1")
GLOB_NODE = DiscoveredDevice(subsystem="", sys_name="cdi-null", devnode="/dev/shm/cdi-null")


def one_class(match: dict[str, Any], **extra: Any) -> Any:
    config = {"classes": [{"vendor": "example.com", "class": "thing", "match": match, **extra}]}
    return parse_classes(config, "test.yaml")[0]


@pytest.mark.parametrize(
    ("match", "device", "expected"),
    [
        ({"subsystem": "drm"}, RENDER_AMD, True),
        ({"subsystem": ["tty", "drm"]}, RENDER_AMD, True),
        ({"subsystem": "tty"}, RENDER_AMD, False),
        ({"kernel": "renderD*"}, RENDER_AMD, True),
        ({"kernel": "renderD12[0-8]"}, RENDER_AMD, True),
        ({"kernel": "renderD12[!8]"}, RENDER_AMD, False),
        ({"kernel": "card?"}, RENDER_AMD, False),
        ({"devnode": "/dev/dri/*"}, RENDER_AMD, True),
        ({"devnode": "/dev/*"}, RENDER_AMD, False),  # '*' stops at '/' in node globs
        ({"devnode": "/dev/shm/cdi-*"}, GLOB_NODE, True),
        ({"subsystem": "misc", "devnode": "/dev/shm/cdi-*"}, GLOB_NODE, False),
        ({"subsystem": "drm", "devtype": "drm_minor"}, RENDER_AMD, True),
        ({"subsystem": "drm", "devtype": "drm_connector"}, RENDER_AMD, False),
        ({"subsystem": "drm", "driver": "amdgpu"}, RENDER_AMD, True),  # the parent's driver
        ({"subsystem": "drm", "driver": "i915"}, RENDER_AMD, False),
        ({"subsystem": "tty", "driver": "ftdi_*"}, TTY, True),
        ({"subsystem": "tty", "properties": {"ID_SERIAL_SHORT": "FT4*"}}, TTY, True),
        ({"subsystem": "tty", "properties": {"ID_SERIAL_SHORT": ["X*", "FT4*"]}}, TTY, True),
        ({"subsystem": "tty", "properties": {"ID_SERIAL_SHORT": "X*"}}, TTY, False),
        ({"subsystem": "tty", "properties": {"ID_VENDOR_ID": "*"}}, TTY, False),  # missing: no match
        (
            {"subsystem": "drm", "parent": {"subsystem": "pci", "attributes": {"vendor": "0x1002"}}},
            RENDER_AMD,
            True,
        ),
        (
            {"subsystem": "drm", "parent": {"subsystem": "pci", "attributes": {"vendor": "0x1002"}}},
            RENDER_INTEL,
            False,
        ),
        ({"subsystem": "drm", "parent": {"driver": "amdgpu", "kernel": "0000:03:*"}}, RENDER_AMD, True),
        # every key of 'parent' must hold on the same parent
        ({"subsystem": "tty", "parent": {"subsystem": "usb", "driver": "xhci_hcd"}}, TTY, False),
        (
            {"subsystem": "tty", "parent": {"subsystem": "usb", "properties": {"DEVTYPE": "usb_device"}}},
            TTY,
            True,
        ),
    ],
)
def test_matches(match: dict[str, Any], device: DiscoveredDevice, expected: bool) -> None:
    assert matches(one_class(match).match, device) is expected


def test_default_classes_pick_the_right_devices_of_the_workstation() -> None:
    found = match_devices(default_classes(), WORKSTATION)
    nodes = {kind: sorted(d.devnode or d.sys_name for d in devs) for kind, devs in found.items()}
    assert nodes["cdi-plugin.io/dri-render"] == ["/dev/dri/renderD128", "/dev/dri/renderD129"]
    assert nodes["cdi-plugin.io/usb-serial"] == [
        "/dev/ttyACM0",
        "/dev/ttyUSB0",
        "/dev/ttyUSB1",
        "/dev/ttyUSB2",
    ]
    assert nodes["cdi-plugin.io/binder"] == [
        "/dev/binderfs/binder", "/dev/binderfs/hwbinder", "/dev/binderfs/vndbinder",
    ]  # fmt: skip
    assert "cdi-plugin.io/dri-card" not in found, "disabled classes match nothing"


def test_a_glob_hit_is_dropped_when_udev_reports_the_same_node() -> None:
    fuse = next(d for d in WORKSTATION if d.sys_name == "fuse")
    duplicate = DiscoveredDevice(subsystem="", sys_name="fuse", devnode="/dev/fuse", node=fuse.node)
    cls = one_class({"devnode": "/dev/fuse"})
    assert match_devices([cls], [duplicate, fuse])[cls.kind] == [fuse]


def test_query_asks_only_for_what_the_enabled_classes_use() -> None:
    query = query_for(default_classes())
    assert query.subsystems == {"misc", "drm", "kfd", "tty", "video4linux", "infiniband_verbs"}
    assert query.devnode_globs == ("/dev/infiniband/rdma_cm",)
    assert query.attributes == {"serial", "index", "ibdev"}
    assert query.with_ancestors


def test_query_for_a_node_glob_class_and_companions() -> None:
    node_only = one_class(
        {"devnode": "/dev/shm/cdi-*"},
        edits={"deviceNodes": [{"path": "/dev/dri/by-path/pci-{pci_slot}-render", "optional": True}]},
    )
    misc = one_class({"subsystem": "misc", "kernel": "fuse"})
    query = query_for([node_only, misc])
    assert query.subsystems == {"misc"}
    assert query.devnode_globs == ("/dev/shm/cdi-*", "/dev/dri/by-path/pci-*-render")
    assert query.with_ancestors


def test_query_without_subsystem_or_node_glob_enumerates_everything() -> None:
    cls = one_class({"kernel": "fuse"}, naming=["kernel"])
    query = query_for([cls])
    assert query.subsystems == frozenset()
    assert not query.with_ancestors, "nothing asks for parents"
    assert query_for([one_class({"kernel": "fuse"})]).with_ancestors, "the default naming tries {serial}"


@pytest.mark.timeout(30)
def test_a_glob_of_many_stars_matches_in_linear_time() -> None:
    """Sixteen '*' before a literal the value lacks: minutes per match for a backtracking matcher."""
    path = "pci-0000:00:14.0-usb-" + "0:1.2.3.4.5.6.7.8:1.0-" * 30
    properties = MappingProxyType({**TTY.properties, "ID_PATH": path})
    tty = replace(TTY, devnode="/dev/" + path, properties=properties)
    stars = "*" * 16
    assert not matches(one_class({"properties": {"ID_PATH": stars + "x"}}).match, tty)
    assert not matches(one_class({"devnode": "/dev/" + stars + "x"}).match, tty)
    assert matches(one_class({"properties": {"ID_PATH": stars + "1.0-"}}).match, tty)
