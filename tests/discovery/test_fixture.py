"""The JSON fixture source and the bundled simulated workstation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdi_plugin.discovery.fixture import (
    FixtureSource,
    device_to_obj,
    dumps,
    load,
    loads,
    simulated,
    simulated_source,
)
from cdi_plugin.discovery.model import DeviceSource, DiscoveredDevice, NodeInfo, Query
from cdi_plugin.errors import DiscoveryError
from tests.discovery.test_query import RECORDED


def test_round_trip_keeps_every_field() -> None:
    hostile = DiscoveredDevice(
        subsystem="tty",
        sys_name="ttyUSB2",
        devnode="/dev/ttyUSB2",
        node=NodeInfo(type="c", major=188, minor=2, mode=0o2660, uid=0, gid=20),
        properties={"ID_SERIAL_SHORT": "../$(x)\n--opt \\xff", "ID_FS_LABEL": "Ünïcødé ✓"},
        attributes={"serial": "line one\nline two"},
    )
    devices = (*RECORDED, hostile)
    text = dumps(devices)
    assert loads(text, "mem") == devices
    assert dumps(loads(text, "mem")) == text
    assert '"mode": "2660"' in text


def test_output_leaves_out_empty_fields() -> None:
    assert device_to_obj(DiscoveredDevice(subsystem="misc", sys_name="fuse")) == {
        "subsystem": "misc",
        "sys_name": "fuse",
    }


def test_fixture_source_is_a_device_source_answering_queries(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    path.write_text(dumps(RECORDED))
    source: DeviceSource = FixtureSource(path)
    found = source.discover(Query(subsystems=frozenset({"misc"}), devnode_globs=("/dev/nvidia*",)))
    assert [(d.subsystem, d.sys_name) for d in found.devices] == [("misc", "fuse"), ("", "nvidia0")]


def test_fixture_file_is_read_again_on_each_discover(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    path.write_text("[]")
    source = FixtureSource(path)
    assert source.discover(Query()).devices == ()
    path.write_text(dumps(RECORDED))
    assert len(source.discover(Query()).devices) == 4


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "host.json: line 1 column 2: not JSON"),
        ('{"devices": []}', "host.json: must be a JSON list of devices"),
        ("[1]", "host.json: [0]: must be an object"),
        ('[{"subsystem": "misc"}]', "host.json: [0]: missing key 'sys_name'"),
        ('[{"subsystem": "misc", "sys_name": "x", "colour": 1}]', "host.json: [0]: unknown key 'colour'"),
        ('[{"subsystem": 1, "sys_name": "x"}]', "host.json: [0].subsystem: must be a string"),
        (
            '[{"subsystem": "misc", "sys_name": "x", "devnode": 5}]',
            "host.json: [0].devnode: must be a string or null",
        ),
        (
            '[{"subsystem": "misc", "sys_name": "x", "properties": {"A": 1}}]',
            "[0].properties: must be an object of strings",
        ),
        (
            '[{"subsystem": "misc", "sys_name": "x", "devlinks": "/dev/x"}]',
            "[0].devlinks: must be a list of strings",
        ),
        ('[{"subsystem": "misc", "sys_name": "x", "node": {"type": "c"}}]', "[0].node: missing key 'gid'"),
        (
            '[{"subsystem": "misc", "sys_name": "x", "node": {"type": "p", "major": 1, "minor": 2, '
            '"mode": "0600", "uid": 0, "gid": 0}}]',
            "[0].node.type: must be 'c' or 'b'",
        ),
        (
            '[{"subsystem": "misc", "sys_name": "x", "node": {"type": "c", "major": 1, "minor": 2, '
            '"mode": 384, "uid": 0, "gid": 0}}]',
            "[0].node.mode: must be an octal string such as '0660'",
        ),
        (
            '[{"subsystem": "misc", "sys_name": "x", "node": {"type": "c", "major": -1, "minor": 2, '
            '"mode": "0600", "uid": 0, "gid": 0}}]',
            "[0].node.major: must be a non-negative integer",
        ),
        (
            '[{"subsystem": "misc", "sys_name": "x", "ancestors": [{"subsystem": "pci", "sys_name": "p"}]}]',
            "[0].ancestors[0]: missing key 'sys_path'",
        ),
        (
            '[{"subsystem": "", "sys_name": "nvidia0"}]',
            "[0]: an entry without subsystem (a devnode-glob node) needs",
        ),
    ],
)
def test_bad_fixture_gives_one_line_error_naming_file_and_entry(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "host.json"
    path.write_text(text)
    with pytest.raises(DiscoveryError) as info:
        FixtureSource(path).discover(Query())
    assert message in str(info.value)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_fixture_file(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match=r"nope\.json: cannot read: No such file or directory"):
        load(tmp_path / "nope.json")


def test_bundled_simulated_workstation_has_the_default_class_devices() -> None:
    found = simulated_source().discover(
        Query(
            subsystems=frozenset(
                {"misc", "drm", "tty", "hidraw", "vfio", "video4linux", "infiniband_verbs", "kfd"}
            ),
            attributes=frozenset({"vendor", "serial"}),
        )
    )
    by_node = {d.devnode: d for d in found.devices if d.devnode}
    for path in (
        "/dev/fuse", "/dev/net/tun", "/dev/kvm", "/dev/vhost-net", "/dev/dri/card0", "/dev/dri/renderD128",
        "/dev/dri/renderD129", "/dev/kfd", "/dev/ttyUSB0", "/dev/ttyUSB1", "/dev/ttyACM0", "/dev/video0",
        "/dev/infiniband/uverbs0", "/dev/binder", "/dev/hidraw0", "/dev/vfio/42", "/dev/vfio/vfio",
    ):  # fmt: skip
        assert by_node[path].node is not None, path
    render = by_node["/dev/dri/renderD128"]
    assert render.ancestors[0].attributes["vendor"] == "0x8086"
    usb_serials = [by_node[p].properties["ID_SERIAL_SHORT"] for p in ("/dev/ttyUSB0", "/dev/ttyUSB1")]
    assert usb_serials == ["A50285BI", "A50285BI"]  # a naming collision for the generator to resolve
    assert [d.sys_name for d in found.devices if d.subsystem == "drm" and d.devnode is None] == [
        "card0-HDMI-A-1"
    ]


def test_bundled_files_are_package_data() -> None:
    assert simulated("workstation.umockdev").is_file()
    assert isinstance(json.loads(simulated().read_text()), list)
