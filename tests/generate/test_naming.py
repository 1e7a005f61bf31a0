"""Naming: strategies, their order, the fallback on shared values, collisions, the 'all' name."""

from __future__ import annotations

import pytest

from cdi_plugin.errors import GenerateError
from tests.generate.helpers import build_one
from tests.generate.hosts import usb_tty

TTYS = [usb_tty(f"ttyUSB{i}", i, f"{i + 1}", serial=None) for i in (10, 2, 1)]


def test_index_naming_follows_the_node_numbers_not_the_discovery_order() -> None:
    built = build_one({"match": {"subsystem": "tty"}, "naming": ["index"]}, TTYS)
    assert [(d.name, d.source) for d in built.devices] == [
        ("c0-0", "/dev/ttyUSB1"),
        ("c0-1", "/dev/ttyUSB2"),
        ("c0-2", "/dev/ttyUSB10"),
    ]


def test_a_template_strategy_and_a_property_strategy() -> None:
    built = build_one({"match": {"subsystem": "tty"}, "naming": ["port{minor}", "property:NOPE"]}, TTYS)
    assert sorted(d.name for d in built.devices) == ["port1", "port10", "port2"]
    built = build_one({"match": {"subsystem": "tty"}, "naming": ["property:ID_PATH"]}, TTYS[:1])
    assert built.devices[0].name == "pci-0000_00_14.0-usb-0_11_1.0"


def test_names_that_still_collide_are_an_error_naming_both_devices() -> None:
    twins = [usb_tty(f"ttyUSB{i}", i, "1", serial="SAME") for i in (0, 1)]
    with pytest.raises(GenerateError, match=r"cannot name /dev/ttyUSB0: serial gives 'SAME', shared by 2"):
        build_one({"match": {"subsystem": "tty"}, "naming": ["serial"]}, twins)
    with pytest.raises(
        GenerateError, match=r"cannot name /dev/ttyUSB0: .*path gives 'pci-0000_00_14.0-usb-0_1_1.0'"
    ):
        build_one({"match": {"subsystem": "tty"}, "naming": ["serial", "path"]}, twins)
    # two strategies producing the same text for different devices
    a = usb_tty("ttyUSB0", 0, "1", serial="ttyUSB1")
    b = usb_tty("ttyUSB1", 1, "2", serial=None)
    with pytest.raises(
        GenerateError, match=r"/dev/ttyUSB0 \(serial\) and /dev/ttyUSB1 \(kernel\) are both named"
    ):
        build_one({"match": {"subsystem": "tty"}, "naming": ["serial", "kernel"]}, [a, b])


def test_a_device_no_strategy_can_name_is_an_error() -> None:
    with pytest.raises(GenerateError, match="cannot name /dev/ttyUSB1: no strategy has a value for it"):
        build_one({"match": {"subsystem": "tty"}, "naming": ["serial"]}, TTYS)


def test_the_all_device_name_is_reserved() -> None:
    dev = usb_tty("ttyUSB0", 0, "1", serial="all")
    built = build_one(
        {"match": {"subsystem": "tty"}, "naming": ["serial", "kernel"], "allDevice": True}, [dev]
    )
    assert [d.name for d in built.devices] == ["all", "ttyUSB0"]


def test_a_long_serial_is_shortened_with_a_stable_hash() -> None:
    dev = usb_tty("ttyUSB0", 0, "1", serial="S" * 100)
    first = build_one({"match": {"subsystem": "tty"}, "naming": ["serial"]}, [dev])
    again = build_one({"match": {"subsystem": "tty"}, "naming": ["serial"]}, [dev])
    assert len(first.devices[0].name) == 63
    assert first.devices[0].name == again.devices[0].name
