"""Health from host device nodes (made with mknod in a temporary directory) and NUMA from a fake sysfs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import pytest

from cdi_plugin.cdi.model import ContainerEdits, Device, DeviceNode, Spec
from cdi_plugin.inventory.health import HealthTracker, HostNode, Rdev, check, host_nodes
from cdi_plugin.inventory.numa import NumaLocator
from tests.deviceplugin.helpers import make_node


def test_existing_char_node_is_healthy_and_reports_its_number(tmp_path: Path) -> None:
    node = make_node(tmp_path / "null")
    health = check([HostNode(str(node), "c", 1, 3)])
    assert health.healthy
    assert health.rdevs == (Rdev(False, 1, 3),)


def test_no_device_nodes_is_healthy() -> None:
    assert check([]).healthy


@pytest.mark.parametrize(
    ("setup", "node", "reason"),
    [
        ("missing", HostNode("{d}/gone"), "{d}/gone is missing"),
        ("file", HostNode("{d}/file"), "is a regular file, not a device node"),
        ("dir", HostNode("{d}/sub"), "is a directory, not a device node"),
        ("char", HostNode("{d}/null", "b"), "is a character device, the spec says a block device"),
        ("char", HostNode("{d}/null", "c", 1, 5), "is 1:3, the spec says 1:5"),
        ("char", HostNode("{d}/null", "c", 4, None), "is 1:3, the spec says 4:*"),
        ("fifo", HostNode("{d}/fifo", "c"), "is a FIFO, the spec says a character device"),
        ("none", HostNode("relative/null"), "not an absolute path"),
    ],
)
def test_unhealthy_nodes_say_why(tmp_path: Path, setup: str, node: HostNode, reason: str) -> None:
    if setup == "file":
        (tmp_path / "file").write_text("x")
    elif setup == "dir":
        (tmp_path / "sub").mkdir()
    elif setup == "char":
        make_node(tmp_path / "null")
    elif setup == "fifo":
        os.mkfifo(tmp_path / "fifo")
    good = make_node(tmp_path / "good", os.makedev(1, 5))
    node = HostNode(node.path.format(d=tmp_path), node.type, node.major, node.minor)
    health = check([HostNode(str(good)), node])
    assert not health.healthy
    assert reason.format(d=tmp_path) in health.reason


def test_fifo_and_symlinks_to_nodes_are_healthy(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    target = make_node(tmp_path / "real")
    (tmp_path / "link").symlink_to(target)
    assert check([HostNode(str(tmp_path / "fifo"), "p"), HostNode(str(tmp_path / "link"), "c", 1, 3)]).healthy


def test_host_nodes_use_host_path_and_include_spec_level_nodes() -> None:
    device = Device(
        name="a",
        container_edits=ContainerEdits(
            device_nodes=(DeviceNode(path="/dev/a", host_path="/host/a", type="c", major=1, minor=2),)
        ),
    )
    spec = Spec(
        cdi_version="0.5.0",
        kind="v.io/cl",
        devices=(device,),
        container_edits=ContainerEdits(
            device_nodes=(DeviceNode(path="/dev/shared"), DeviceNode(path="/dev/a"))
        ),
    )
    nodes = host_nodes(spec, device)
    assert nodes == (HostNode("/host/a", "c", 1, 2), HostNode("/dev/shared"), HostNode("/dev/a"))
    tracker = HealthTracker()
    assert tracker.track({"v.io/cl=d": nodes})
    assert tracker.node_dirs == {Path("/host"), Path("/dev")}
    assert tracker.node_paths == {"/host/a", "/dev/shared", "/dev/a"}


def _sysfs_device(
    root: Path, block: bool, number: str, parts: list[str], *, numa: str | None, link: bool
) -> None:
    """A sysfs device at /sys/devices/<parts>, reachable from /sys/dev/<char|block>/<number>."""
    bus = root / "devices" / "pci0000:00" / "0000:00:02.0"
    bus.mkdir(parents=True, exist_ok=True)
    if numa is not None:
        (bus / "numa_node").write_text(numa + "\n")
    dev = bus.joinpath(*parts)
    dev.mkdir(parents=True)
    if link:
        (dev / "device").symlink_to(os.path.relpath(bus, dev))
    entry = root / "dev" / ("block" if block else "char") / number
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.symlink_to(os.path.relpath(dev, entry.parent))


class Sysfs(NamedTuple):
    block: bool
    parts: list[str]
    numa: str | None
    link: bool


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (Sysfs(False, ["drm", "card0"], "1", True), 1),
        (Sysfs(False, ["drm", "card0"], "0", False), 0),
        (Sysfs(True, ["block", "nvme0n1", "nvme0n1p1"], "3", False), 3),
        (Sysfs(False, ["drm", "card0"], "-1", True), None),
        (Sysfs(False, ["drm", "card0"], None, True), None),
        (Sysfs(False, ["drm", "card0"], "garbage", True), None),
    ],
)
def test_numa_node_from_sysfs(tmp_path: Path, case: Sysfs, expected: int | None) -> None:
    _sysfs_device(tmp_path, case.block, "226:0", case.parts, numa=case.numa, link=case.link)
    locator = NumaLocator(tmp_path)
    assert locator.numa_node(Rdev(case.block, 226, 0)) == expected
    assert locator.numa_node(Rdev(not case.block, 226, 0)) is None
    found = locator.numa_nodes([Rdev(case.block, 226, 0), Rdev(case.block, 9, 9)])
    assert found == (() if expected is None else (expected,))


def test_numa_walk_stays_inside_the_sysfs_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "numa_node").write_text("7\n")
    (outside / "dev").mkdir()
    root = tmp_path / "sys"
    (root / "dev" / "char").mkdir(parents=True)
    (root / "dev" / "char" / "1:3").symlink_to(outside / "dev")
    assert NumaLocator(root).numa_node(Rdev(False, 1, 3)) is None
