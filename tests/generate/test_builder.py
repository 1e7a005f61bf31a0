"""From devices and classes to specs: naming, node fields, edits, companions, versions."""

from __future__ import annotations

import dataclasses

import pytest

from cdi_plugin.cdi import codec
from cdi_plugin.cdi.validate import validate_object
from cdi_plugin.discovery.model import DiscoveredDevice
from cdi_plugin.errors import GenerateError
from cdi_plugin.generate.builder import build_specs
from cdi_plugin.generate.config import parse_classes
from tests.generate.helpers import build_one, classes, edits_of
from tests.generate.hosts import AMD_GPU, WORKSTATION, char, drm, misc, props, usb_tty

TTYS = [usb_tty(f"ttyUSB{i}", i, f"{i + 1}", serial=None) for i in (10, 2, 1)]


def test_device_node_carries_what_a_non_root_container_needs_and_nothing_stale() -> None:
    built = build_one({"match": {"subsystem": "misc", "kernel": "kvm"}}, WORKSTATION)
    assert edits_of(built, "kvm") == {
        "deviceNodes": [{"path": "/dev/kvm", "type": "c", "fileMode": 0o660, "gid": 108}]
    }
    assert built.spec.cdi_version == "0.3.0"


def test_setuid_and_sticky_bits_never_reach_the_file_mode() -> None:
    odd = misc("odd", 1, mode=0o4666)
    built = build_one({"match": {"subsystem": "misc", "kernel": "odd"}}, [odd])
    assert edits_of(built, "odd")["deviceNodes"][0]["fileMode"] == 0o666


def test_a_device_whose_node_is_missing_on_the_host_is_skipped() -> None:
    gone = DiscoveredDevice(subsystem="misc", sys_name="fuse", sys_path="/sys/x/fuse", devnode="/dev/fuse")
    result = build_specs(classes({"match": {"subsystem": "misc"}}), [gone, *WORKSTATION[1:2]], "0.5.0")
    assert [d.name for d in result.specs[0].devices] == ["tun"]
    assert result.warnings == (
        "example.com/c0: skipping /dev/fuse: /dev/fuse is not a device node on the host",
    )


def test_a_different_container_path_needs_host_path_and_version_0_5_0() -> None:
    entry = {"match": {"subsystem": "tty"}, "naming": ["kernel"], "node": {"path": "/dev/serial-{index}"}}
    built = build_one(entry, TTYS[2:])
    assert edits_of(built, "ttyUSB1")["deviceNodes"][0] == {
        "path": "/dev/serial-0", "hostPath": "/dev/ttyUSB1", "type": "c", "fileMode": 0o660, "gid": 20,
    }  # fmt: skip
    assert built.spec.cdi_version == "0.5.0"
    with pytest.raises(GenerateError) as info:
        build_one(entry, TTYS[2:], max_version="0.4.0")
    message = str(info.value)
    assert "needs cdiVersion 0.5.0 for deviceNode 'hostPath', above the maximum 0.4.0" in message
    assert "no runtime in cdi-gen's table is known to drop it" in message


def test_a_dot_in_the_class_needs_0_6_0_which_the_default_maximum_refuses() -> None:
    config = {"classes": [{"vendor": "example.com", "class": "gpu.render", "match": {"subsystem": "drm"}}]}
    dotted = parse_classes(config, "test.yaml")
    with pytest.raises(GenerateError, match=r"needs cdiVersion 0.6.0 for a '.' in the class") as info:
        build_specs(dotted, WORKSTATION, "0.5.0")
    assert "runtimes that would drop it: containerd 1.7.0-1.7.12, podman 4.3" in str(info.value)
    assert build_specs(dotted, WORKSTATION, "0.6.0").specs[0].spec.cdi_version == "0.6.0"


def test_mount_type_needs_0_4_0() -> None:
    entry = {
        "match": {"subsystem": "misc", "kernel": "fuse"},
        "edits": {"mounts": [{"hostPath": "tmpfs", "containerPath": "/run/fuse", "type": "tmpfs"}]},
    }
    assert build_one(entry, WORKSTATION).spec.cdi_version == "0.4.0"


def test_edits_with_placeholders() -> None:
    entry = {
        "match": {"subsystem": "tty", "kernel": "ttyUSB*"},
        "naming": ["serial", "kernel"],
        "edits": {
            "env": ["SERIAL_PORT={devnode}", "SERIAL_NAME={name}", "SERIAL_MODEL={property:ID_MODEL}"],
            "mounts": [
                {"hostPath": "/run/serial/{serial}", "containerPath": "/run/serial", "options": ["ro"]}
            ],
            "hooks": [
                {
                    "hookName": "createContainer",
                    "path": "/usr/libexec/serial-hook",
                    "args": ["serial-hook", "--port", "{devnode}", "{serial}"],
                    "env": ["PORT_INDEX={index}"],
                    "timeout": 5,
                }
            ],
        },
    }
    built = build_one(entry, [usb_tty("ttyUSB0", 0, "1", serial="FT4ZK0A1")])
    assert edits_of(built, "FT4ZK0A1") == {
        "env": ["SERIAL_PORT=/dev/ttyUSB0", "SERIAL_NAME=FT4ZK0A1"],  # no ID_MODEL: entry left out
        "deviceNodes": [{"path": "/dev/ttyUSB0", "type": "c", "fileMode": 0o660, "gid": 20}],
        "hooks": [
            {
                "hookName": "createContainer",
                "path": "/usr/libexec/serial-hook",
                "args": ["serial-hook", "--port", "/dev/ttyUSB0", "FT4ZK0A1"],
                "env": ["PORT_INDEX=0"],
                "timeout": 5,
            }
        ],
        "mounts": [{"hostPath": "/run/serial/FT4ZK0A1", "containerPath": "/run/serial", "options": ["ro"]}],
    }


HOSTILE_TEXT = "../../etc/ld.so.preload\n--privileged;$(reboot)"
HOSTILE_EDITS = {
    "env": ["MODEL={property:ID_MODEL}"],
    "mounts": [{"hostPath": "/srv/by-serial/{serial}", "containerPath": "/data/{property:ID_PATH}"}],
    "hooks": [{"hookName": "createContainer", "path": "/bin/hook", "args": ["hook", "{serial}"]}],
}


def serial_tty(name: str, minor: int, text: str) -> DiscoveredDevice:
    return DiscoveredDevice(
        subsystem="tty",
        sys_name=name,
        sys_path=f"/sys/devices/x/{name}",
        devnode=f"/dev/{name}",
        node=char(188, minor),
        properties=props(ID_SERIAL_SHORT=text, ID_MODEL=text, ID_PATH=text),
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (HOSTILE_TEXT, "a control character"),
        ("../../etc/passwd", "a path separator '/'"),
        ("--privileged", "a leading '-' (an option)"),
        ("..", "a relative path component"),
    ],
)
def test_a_device_with_hostile_udev_text_is_refused_and_the_others_kept(text: str, reason: str) -> None:
    good = serial_tty("ttyUSB6", 6, "FT4ZK0A1")
    result = build_specs(
        classes({"match": {"subsystem": "tty"}, "edits": HOSTILE_EDITS}),
        [good, serial_tty("ttyUSB7", 7, text)],
        "0.5.0",
    )
    assert [d.name for d in result.specs[0].devices] == ["FT4ZK0A1"]
    (refusal,) = result.refused
    assert refusal.startswith("example.com/c0: skipping /dev/ttyUSB7: {serial} is ")
    assert reason in refusal
    assert result.warnings == ()


def test_a_hostile_value_the_class_does_not_use_is_harmless() -> None:
    evil = serial_tty("ttyUSB7", 7, "FT4ZK0A1")
    evil = dataclasses.replace(evil, properties=props(ID_SERIAL_SHORT="FT4ZK0A1", ID_VENDOR="../x\n"))
    result = build_specs(classes({"match": {"subsystem": "tty"}}), [evil], "0.5.0")
    assert result.refused == ()
    assert [d.name for d in result.specs[0].devices] == ["FT4ZK0A1"]


def test_untidy_device_text_is_sanitised_wherever_it_lands() -> None:
    untidy = "Prolific USB--Serial $(id); x y"  # no '/', control character or leading '-'
    built = build_one(
        {"match": {"subsystem": "tty"}, "edits": HOSTILE_EDITS}, [serial_tty("ttyUSB7", 7, untidy)]
    )
    (device,) = built.spec.devices
    assert device.name == "Prolific_USB--Serial_id_x_y"
    edits = device.container_edits
    assert edits.env == ("MODEL=Prolific_USB--Serial_id_x_y",)
    (mount,) = edits.mounts or ()
    assert mount.host_path == "/srv/by-serial/Prolific_USB--Serial_id_x_y"
    assert mount.container_path == "/data/Prolific_USB--Serial_id_x_y"
    (hook,) = edits.hooks or ()
    assert hook.args == ("hook", "Prolific_USB--Serial_id_x_y")
    assert validate_object(codec.spec_to_obj(built.spec), "0.5.0").valid


def test_a_device_with_an_unclean_node_path_is_refused_and_the_others_kept() -> None:
    bad = DiscoveredDevice(
        subsystem="tty", sys_name="ttyUSB3", devnode="/dev/../etc/shadow", node=char(188, 3)
    )
    result = build_specs(
        classes({"match": {"subsystem": "tty"}, "naming": ["kernel"]}), [*TTYS, bad], "0.5.0"
    )
    assert [d.name for d in result.specs[0].devices] == ["ttyUSB1", "ttyUSB10", "ttyUSB2"]
    assert result.refused == ("example.com/c0: skipping /dev/../etc/shadow: node path '/dev/../etc/shadow' "
                              "is not a clean absolute path",)  # fmt: skip
    assert result.warnings == ()


def test_companion_nodes_present_missing_and_optional() -> None:
    entry = {
        "match": {"subsystem": "drm", "kernel": "renderD*"},
        "naming": ["pci-slot"],
        "edits": {"deviceNodes": [{"path": "/dev/dri/by-path/pci-{pci_slot}-render"}]},
    }
    link = DiscoveredDevice(
        subsystem="",
        sys_name="pci-0000:03:00.0-render",
        devnode="/dev/dri/by-path/pci-0000:03:00.0-render",
        node=char(226, 128, 0o660, 109),
    )
    result = build_specs(classes(entry), [*WORKSTATION, link], "0.5.0")
    (spec,) = result.specs
    assert [d.name for d in spec.devices] == ["pci-0000_03_00.0"], "the Intel GPU has no by-path link"
    assert result.warnings == (
        "example.com/c0: skipping /dev/dri/renderD129: device node /dev/dri/by-path/pci-0000:00:02.0-render "
        "is not on the host (mark it optional: true to leave it out)",
    )
    nodes = edits_of(spec, "pci-0000_03_00.0")["deviceNodes"]
    assert [n["path"] for n in nodes] == ["/dev/dri/renderD128", "/dev/dri/by-path/pci-0000:03:00.0-render"]
    entry["edits"]["deviceNodes"][0]["optional"] = True  # type: ignore[index]
    spec = build_specs(classes(entry), [*WORKSTATION, link], "0.5.0").specs[0]
    assert [d.name for d in spec.devices] == ["pci-0000_00_02.0", "pci-0000_03_00.0"]
    assert len(edits_of(spec, "pci-0000_00_02.0")["deviceNodes"]) == 1


def test_companion_found_through_a_udev_symlink() -> None:
    render = drm("renderD128", 128, AMD_GPU, 109)
    linked = dataclasses.replace(render, devlinks=("/dev/dri/by-path/pci-0000:03:00.0-render",))
    entry = {
        "match": {"subsystem": "drm", "kernel": "renderD*"},
        "naming": ["kernel"],
        "node": {"attach": False},
        "edits": {"deviceNodes": [{"path": "/dev/dri/by-path/pci-{pci_slot}-render"}]},
    }
    spec = build_one(entry, [linked])
    assert edits_of(spec, "renderD128")["deviceNodes"] == [
        {"path": "/dev/dri/by-path/pci-0000:03:00.0-render", "type": "c", "fileMode": 0o660, "gid": 109}
    ]


def test_siblings_come_with_their_device() -> None:
    entry = {
        "match": {"subsystem": "drm", "kernel": "card[0-9]*", "devtype": "drm_minor"},
        "siblings": "renderD*",
    }
    spec = build_one(entry, WORKSTATION)
    paths = {d.name: d.host_nodes for d in spec.devices}
    assert paths == {
        "pci-0000_03_00.0": ("/dev/dri/card0", "/dev/dri/renderD128"),
        "pci-0000_00_02.0": ("/dev/dri/card1", "/dev/dri/renderD129"),
    }


def test_class_edits_go_to_the_top_level_and_a_missing_required_node_skips_the_class() -> None:
    entry = {
        "match": {"subsystem": "vfio"},
        "naming": ["kernel"],
        "classEdits": {"env": ["VFIO=1"], "deviceNodes": [{"path": "/dev/vfio/vfio"}]},
    }
    spec = build_one(entry, WORKSTATION)
    top = codec.spec_to_obj(spec.spec)["containerEdits"]
    assert top == {
        "env": ["VFIO=1"],
        "deviceNodes": [{"path": "/dev/vfio/vfio", "type": "c", "fileMode": 0o666, "gid": 0}],
    }
    without = [d for d in WORKSTATION if d.devnode != "/dev/vfio/vfio"]
    result = build_specs(classes(entry), without, "0.5.0")
    assert result.specs == ()
    assert result.warnings == (
        "example.com/c0: skipping the class: device node /dev/vfio/vfio is not on the host "
        "(mark it optional: true to leave it out)",
    )


def test_the_all_device_has_every_node_and_only_env_all_devices_agree_on() -> None:
    entry = {
        "match": {"subsystem": "tty", "kernel": "ttyUSB*"},
        "naming": ["kernel"],
        "allDevice": True,
        "edits": {"env": ["PORT={devnode}", "KIND=serial"]},
    }
    spec = build_one(entry, TTYS)
    assert edits_of(spec, "all") == {
        "env": ["KIND=serial"],
        "deviceNodes": [
            {"path": f"/dev/ttyUSB{i}", "type": "c", "fileMode": 0o660, "gid": 20} for i in (1, 2, 10)
        ],
    }
    assert spec.devices[0].name == "all"
    assert spec.devices[0].source == ""


def test_the_all_device_leaves_out_a_container_path_the_devices_mount_differently() -> None:
    entry = {
        "match": {"subsystem": "tty", "kernel": "ttyUSB*"},
        "naming": ["kernel"],
        "allDevice": True,
        "edits": {
            "mounts": [
                {"hostPath": "/run/port-{kernel}", "containerPath": "/run/port"},
                {"hostPath": "/run/shared", "containerPath": "/run/shared"},
            ]
        },
    }
    mounts = edits_of(build_one(entry, TTYS), "all")["mounts"]
    assert mounts == [{"hostPath": "/run/shared", "containerPath": "/run/shared"}]


def test_a_device_without_node_needs_edits() -> None:
    netdev = DiscoveredDevice(subsystem="net", sys_name="eth0", sys_path="/sys/class/net/eth0")
    result = build_specs(classes({"match": {"subsystem": "net"}, "naming": ["kernel"]}), [netdev], "0.5.0")
    assert result.specs == ()
    assert result.warnings == (
        "example.com/c0: skipping /sys/class/net/eth0: it has no device node and the class gives it no edits",
    )
    spec = build_one(
        {"match": {"subsystem": "net"}, "naming": ["kernel"], "edits": {"env": ["IF={kernel}"]}}, [netdev]
    )
    assert edits_of(spec, "eth0") == {"env": ["IF=eth0"]}


def test_building_is_deterministic() -> None:
    entry = {"match": {"subsystem": "tty"}, "naming": ["kernel"]}
    first = codec.encode(build_one(entry, TTYS).spec)
    again = codec.encode(build_one(entry, list(reversed(TTYS))).spec)
    assert first == again
