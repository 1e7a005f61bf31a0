"""Which uevents and directories a set of device classes needs, and which classes an event touches."""

from __future__ import annotations

import os
from pathlib import Path

from cdi_plugin.discovery.model import UdevEvent
from cdi_plugin.generate.config import default_classes, parse_classes
from cdi_plugin.scan.nodedirs import glob_dirs, host_path
from cdi_plugin.scan.targets import targets_for
from cdi_plugin.store.configfile import parse_config


def classes(yaml: str) -> list:  # type: ignore[type-arg]
    return parse_classes(parse_config(yaml.encode(), "t.yaml"), "t.yaml")


def test_the_default_classes_listen_to_their_subsystems_only() -> None:
    targets = targets_for(default_classes())
    # enabled default classes only: hidraw, vfio and dri-card are disabled
    assert targets.subsystems == {"misc", "drm", "kfd", "tty", "video4linux", "infiniband_verbs"}
    assert not targets.every_subsystem
    binder = UdevEvent("add", "misc", "binder7", "/dev/binder7")
    assert targets.kinds_for_event(binder) == {"cdi-plugin.io/binder"}, "only the class of its kernel name"
    fuse = UdevEvent("change", "misc", "fuse", "/dev/fuse")
    assert targets.kinds_for_event(fuse) == {"cdi-plugin.io/fuse"}
    render = UdevEvent("remove", "drm", "renderD128", "/dev/dri/renderD128")
    assert targets.kinds_for_event(render) == {"cdi-plugin.io/dri-render"}
    assert targets.kinds_for_event(UdevEvent("add", "block", "loop3", "/dev/loop3")) == set()
    # a companion node named by host path is watched as a node: the infiniband class's rdma_cm
    assert dict(targets.globs) == {"/dev/infiniband/rdma_cm": {"cdi-plugin.io/infiniband"}}
    assert targets.kinds_for_node("/dev/infiniband/rdma_cm") == {"cdi-plugin.io/infiniband"}


def test_glob_only_and_every_subsystem_classes() -> None:
    targets = targets_for(
        classes(
            """
classes:
  - {vendor: example.com, class: gpu, match: {devnode: "/dev/nvidia[0-9]*"}}
  - {vendor: example.com, class: usb, match: {devnode: "/dev/bus/usb/*/*"}}
  - {vendor: example.com, class: anything, match: {kernel: "widget*"}}
  - {vendor: example.com, class: sound, enabled: false, match: {subsystem: sound}}
"""
        )
    )
    assert targets.every_subsystem
    assert targets.subsystems == set()
    assert targets.wants_uevents
    # a class that names no subsystem hears every uevent of its kernel names; the glob-only ones
    # only matching nodes
    assert targets.kinds_for_event(UdevEvent("add", "sound", "widget0")) == {"example.com/anything"}
    assert targets.kinds_for_event(UdevEvent("add", "sound", "card0")) == set()
    assert targets.kinds_for_event(UdevEvent("add", "nvidia", "nvidia0", "/dev/nvidia0")) == {
        "example.com/gpu",
    }
    assert targets.kinds_for_node("/dev/nvidia0") == {"example.com/gpu"}
    assert targets.kinds_for_node("/dev/nvidiactl") == set()
    assert targets.kinds_for_node("/dev/bus/usb/001/002") == {"example.com/usb"}
    # a new directory on a wildcard level can hold matching nodes
    assert targets.kinds_for_dir_entry("/dev/bus/usb/003") == {"example.com/usb"}
    assert targets.kinds_for_dir_entry("/dev/bus/other") == set()
    assert targets.glob_kinds == {"example.com/gpu", "example.com/usb"}


def test_only_glob_classes_need_no_uevents() -> None:
    targets = targets_for(
        classes('classes:\n  - {vendor: example.com, class: gpu, match: {devnode: "/dev/g*"}}\n')
    )
    assert not targets.wants_uevents
    assert targets.kinds_for_event(UdevEvent("add", "misc", "gx", "/dev/gx")) == {"example.com/gpu"}


def test_glob_dirs_follow_wildcard_directories(tmp_path: Path) -> None:
    for d in ("bus/usb/001", "bus/usb/002", "bus/usb/.hidden", "dri"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "bus/usb/file").write_text("")
    root = str(tmp_path)
    assert glob_dirs(["/dev/nvidia[0-9]*"], root) == {tmp_path}
    assert glob_dirs(["/dev/dri/renderD*", "/dev/missing/x*"], root) == {
        tmp_path / "dri",
        tmp_path / "missing",
    }
    assert glob_dirs(["/dev/bus/usb/*/*"], root) == {
        tmp_path / "bus/usb",
        tmp_path / "bus/usb/001",
        tmp_path / "bus/usb/002",
    }
    assert host_path(tmp_path / "bus/usb/001", "004", root) == "/dev/bus/usb/001/004"
    assert host_path(Path("/elsewhere"), "x", root) is None
    assert host_path(Path(os.sep + "dev"), "fuse") == "/dev/fuse"


def test_a_move_touches_the_classes_of_its_subsystem_whatever_the_new_name() -> None:
    targets = targets_for(
        classes('classes:\n  - {vendor: example.com, class: nic, match: {subsystem: net, kernel: "eth*"}}\n')
    )
    assert targets.kinds_for_event(UdevEvent("add", "net", "enp3s0")) == set()
    # renamed from eth0 (a name of the class) or not: the event says only the new name
    assert targets.kinds_for_event(UdevEvent("move", "net", "enp3s0")) == {"example.com/nic"}
    assert targets.kinds_for_event(UdevEvent("move", "block", "sda")) == set()
