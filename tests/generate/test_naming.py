"""Naming: strategies, their order, the fallback on shared values, collisions, the 'all' name."""

from __future__ import annotations

from typing import Any

from cdi_plugin.generate.builder import build_specs
from tests.generate.helpers import build_one, classes
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


def refused_of(entry: dict[str, Any], devices: Any) -> tuple[list[str], list[str]]:
    """The names written and the refusals of one class."""
    result = build_specs(classes(entry), devices, "0.5.0")
    names = [d.name for s in result.specs for d in s.devices]
    return names, list(result.refused)


def test_devices_that_cannot_be_told_apart_are_left_out_naming_why() -> None:
    twins = [usb_tty(f"ttyUSB{i}", i, "1", serial="SAME") for i in (0, 1)]
    other = usb_tty("ttyUSB2", 2, "2", serial="OTHER")
    names, refused = refused_of({"match": {"subsystem": "tty"}, "naming": ["serial"]}, [*twins, other])
    assert names == ["OTHER"]
    assert len(refused) == 2
    assert "skipping /dev/ttyUSB0: cannot name it: serial gives 'SAME', shared by 2" in refused[0]
    assert "skipping /dev/ttyUSB1: cannot name it: serial gives 'SAME', shared by 2" in refused[1]
    names, refused = refused_of({"match": {"subsystem": "tty"}, "naming": ["serial", "path"]}, twins)
    assert names == []
    assert "path gives 'pci-0000_00_14.0-usb-0_1_1.0'" in refused[0]


def test_a_serial_copying_another_devices_name_takes_it_from_neither() -> None:
    """A device chooses its serial number: one equal to the name another device gets from
    another strategy leaves both out, and the class's other devices are still written."""
    evil = usb_tty("ttyUSB0", 0, "1", serial="ttyUSB1")
    victim = usb_tty("ttyUSB1", 1, "2", serial=None)
    honest = usb_tty("ttyUSB2", 2, "3", serial="FT4ZK0A1")
    names, refused = refused_of(
        {"match": {"subsystem": "tty"}, "naming": ["serial", "kernel"]}, [evil, victim, honest]
    )
    assert names == ["FT4ZK0A1"]
    both = "/dev/ttyUSB0 (serial) and /dev/ttyUSB1 (kernel) are both named 'ttyUSB1'"
    assert [r.split(": ", 2)[1:] for r in refused] == [
        ["skipping /dev/ttyUSB0", f"{both}; change the naming strategies of the class"],
        ["skipping /dev/ttyUSB1", f"{both}; change the naming strategies of the class"],
    ]


def test_a_device_no_strategy_can_name_is_left_out() -> None:
    names, refused = refused_of({"match": {"subsystem": "tty"}, "naming": ["serial"]}, TTYS)
    assert names == []
    assert len(refused) == 3
    assert "skipping /dev/ttyUSB1: cannot name it: no strategy has a value for it" in refused[0]


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
