"""UdevSource against this machine's real /sys and /dev (fuse, tun, kvm and loop nodes).

Other processes may create and remove loop devices meanwhile (tests/stress.sh does): the loop
tests hold to account only the nodes that existed throughout a discovery (the same inode before
and after it).
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from pathlib import Path

import pytest

from cdi_plugin.discovery.model import NodeInfo, Query
from cdi_plugin.discovery.udev import UdevSource, _udev
from cdi_plugin.errors import DiscoveryError
from tests.discovery.simhost import IS_ROOT, WORKSTATION, discover, parse_results, run_isolated, runner_argv

needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root (CI runs as root)")
MISC = Query(subsystems=frozenset({"misc"}))


def host_node(path: str) -> NodeInfo:
    st = os.stat(path)
    kind = "b" if stat.S_ISBLK(st.st_mode) else "c"
    return NodeInfo(
        kind, os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
    )


def uevent(sys_path: str) -> dict[str, str]:
    lines = Path(sys_path, "uevent").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_fuse_is_a_misc_device_with_its_node() -> None:
    found = UdevSource().discover(MISC)
    fuse = next(d for d in found.devices if d.sys_name == "fuse")
    assert (fuse.subsystem, fuse.sys_path, fuse.devnode) == (
        "misc",
        "/sys/devices/virtual/misc/fuse",
        "/dev/fuse",
    )
    assert fuse.node == host_node("/dev/fuse")
    assert (fuse.node.type, fuse.node.major, fuse.node.minor) == ("c", 10, 229)
    assert (fuse.properties["MAJOR"], fuse.properties["MINOR"]) == ("10", "229")
    assert uevent(fuse.sys_path).items() <= {**fuse.properties, "DEVNAME": "fuse"}.items()


def test_query_for_misc_returns_only_misc_devices_with_their_nodes() -> None:
    found = UdevSource().discover(MISC)
    assert {d.subsystem for d in found.devices} == {"misc"}
    nodes = {d.devnode: d.node for d in found.devices}
    assert {"/dev/fuse", "/dev/loop-control"} <= nodes.keys()
    for path, node in nodes.items():  # tun and kvm among them where their modules are loaded
        assert path is not None
        assert node == host_node(path), path
    sys_names = sorted(p.name for p in Path("/sys/class/misc").iterdir())
    assert sorted(d.sys_name for d in found.devices) == sys_names
    assert found.warnings == ()


def loop_nodes() -> dict[str, tuple[int, NodeInfo]]:
    """The loop device nodes now: inode and node (a node removed and made again has a new inode)."""
    out = {}
    for path in Path("/dev").glob("loop[0-9]*"):
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile
            out[str(path)] = (os.stat(path).st_ino, host_node(str(path)))
    return out


def throughout(
    before: dict[str, tuple[int, NodeInfo]], after: dict[str, tuple[int, NodeInfo]]
) -> dict[str, NodeInfo]:
    return {path: seen[1] for path, seen in before.items() if after.get(path) == seen}


def test_loop_glob_yields_block_nodes_with_stat_data() -> None:
    before = loop_nodes()
    found = UdevSource().discover(Query(subsystems=frozenset({"misc"}), devnode_globs=("/dev/loop[0-9]*",)))
    stable = throughout(before, loop_nodes())
    assert stable, "this host has /dev/loop0..7"
    loops = {d.devnode: d for d in found.devices if d.subsystem == ""}
    assert stable.keys() <= loops.keys()
    assert [d.devnode for d in found.devices if d.subsystem == ""] == sorted(loops), "in order"
    for path, node in stable.items():
        loop = loops[path]
        assert loop.sys_name == Path(path).name
        assert loop.node == node
        assert (node.type, node.major) == ("b", 7)
        assert (loop.sys_path, loop.properties, loop.ancestors) == ("", {}, ())
    assert "/dev/loop-control" in {d.devnode for d in found.devices if d.subsystem == "misc"}


def test_glob_does_not_repeat_devices_udev_reported() -> None:
    before = loop_nodes()
    found = UdevSource().discover(
        Query(subsystems=frozenset({"block", "misc"}), devnode_globs=("/dev/loop[0-9]*", "/dev/fuse"))
    )
    stable = throughout(before, loop_nodes()).keys()
    devnodes = [d.devnode for d in found.devices]
    assert len(devnodes) == len(set(devnodes)), "no node twice"
    by_udev = {d.devnode for d in found.devices if d.subsystem == "block" and d.sys_name.startswith("loop")}
    assert stable <= by_udev
    # only a loop device made during the discovery can be found by the glob alone
    assert stable.isdisjoint(d.devnode for d in found.devices if d.subsystem == "")
    assert all(d.devtype == "disk" for d in found.devices if d.devnode in by_udev)


def test_nodes_missing_from_dev_root_are_kept_with_a_warning(tmp_path: Path) -> None:
    found = UdevSource(dev_root=str(tmp_path)).discover(MISC)
    fuse = next(d for d in found.devices if d.sys_name == "fuse")
    assert (fuse.devnode, fuse.node) == ("/dev/fuse", None)
    assert "misc fuse: /dev/fuse is announced by udev but missing" in found.warnings
    assert len(found.warnings) == len(found.devices)


def test_libudev_that_cannot_load_is_a_discovery_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyudev

    def no_libudev() -> None:
        raise ImportError("No library named udev")

    monkeypatch.setattr(pyudev, "Context", no_libudev)
    _udev.cache_clear()
    try:
        with pytest.raises(DiscoveryError, match="udev: cannot load libudev: No library named udev"):
            UdevSource().discover(MISC)
    finally:
        _udev.cache_clear()


@pytest.mark.root
@needs_root
def test_dev_root_with_nodes_udev_never_announced(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    (dev / "dri").mkdir(parents=True)
    for name, kind, mode, number in (
        ("nvidia0", stat.S_IFCHR, 0o666, (195, 0)),
        ("nvidiactl", stat.S_IFCHR, 0o660, (195, 255)),
        ("nvidia-disk", stat.S_IFBLK, 0o600, (259, 3)),
    ):
        os.mknod(dev / name, mode | kind, os.makedev(*number))
        os.chmod(dev / name, mode)
    os.chown(dev / "nvidiactl", 0, 44)
    os.symlink("nvidia0", dev / "nvidia-link")
    os.symlink("gone", dev / "nvidia-dangling")
    (dev / "nvidia-notes").write_text("not a node")
    (dev / "nvidia-dir").mkdir()
    found = UdevSource(dev_root=str(dev)).discover(
        Query(devnode_globs=("/dev/nvidia*",), subsystems=frozenset({"kfd"}))
    )
    assert [(d.subsystem, d.sys_name, d.devnode, d.node) for d in found.devices] == [
        ("", "nvidia-disk", "/dev/nvidia-disk", NodeInfo("b", 259, 3, 0o600, 0, 0)),
        ("", "nvidia0", "/dev/nvidia0", NodeInfo("c", 195, 0, 0o666, 0, 0)),
        ("", "nvidiactl", "/dev/nvidiactl", NodeInfo("c", 195, 255, 0o660, 0, 44)),
    ]  # the symlink to nvidia0 is the same node; files, dirs and dangling links are not nodes
    assert found.warnings == ()
    only_link = UdevSource(dev_root=str(dev)).discover(
        Query(devnode_globs=("/dev/nvidia-l*",), subsystems=frozenset({"kfd"}))
    )
    assert [(d.devnode, d.node.major) for d in only_link.devices] == [("/dev/nvidia-link", 195)]


@pytest.mark.root
@needs_root
def test_unreadable_dev_root_gives_warnings_not_a_crash(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir(mode=0o700)
    os.mknod(dev / "fuse", 0o666 | stat.S_IFCHR, os.makedev(10, 229))
    tmp_path.chmod(0o755)
    argv = runner_argv({"misc": MISC}, dev_root=str(dev))
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = parse_results(done)["misc"]
    assert not isinstance(found, str)
    fuse = next(d for d in found.devices if d.sys_name == "fuse")
    assert fuse.node is None
    assert "misc fuse: /dev/fuse: cannot stat: Permission denied" in found.warnings


@pytest.mark.root
@needs_root
def test_properties_without_udev_database_are_the_uevent_keys() -> None:
    found = parse_results(run_isolated(runner_argv({"misc": MISC})))["misc"]
    assert not isinstance(found, str)
    fuse = next(d for d in found.devices if d.sys_name == "fuse")
    assert dict(fuse.properties) == {
        **uevent(fuse.sys_path),
        "DEVNAME": "/dev/fuse",
        "DEVPATH": "/devices/virtual/misc/fuse",
        "SUBSYSTEM": "misc",
    }
    assert fuse.devlinks == ()


FUSE_DB = (
    b"S:fuse-test-link\nS:cdi/by-test/fuse\nI:1700000000\nE:ID_FROM_DB=yes, from the database\n"
    b"E:ID_RAW=a\xffb\nG:uaccess\nQ:uaccess\nV:1\n"
)


@pytest.mark.root
@needs_root
def test_udev_database_adds_properties_devlinks_and_tags() -> None:
    found = parse_results(run_isolated(runner_argv({"misc": MISC}), udev_db={"c10:229": FUSE_DB}))["misc"]
    assert not isinstance(found, str)
    fuse = next(d for d in found.devices if d.sys_name == "fuse")
    assert fuse.properties["ID_FROM_DB"] == "yes, from the database"
    assert fuse.properties["ID_RAW"] == "a\\xffb"
    assert fuse.properties["TAGS"] == ":uaccess:"
    assert fuse.properties["MAJOR"] == "10"  # the uevent keys are still there
    assert sorted(fuse.devlinks) == ["/dev/cdi/by-test/fuse", "/dev/fuse-test-link"]
    kvm = next(d for d in found.devices if d.sys_name == "kvm")
    assert "ID_FROM_DB" not in kvm.properties


@pytest.mark.umockdev
@pytest.mark.root
@needs_root
def test_udev_database_for_simulated_devices() -> None:
    db = b"S:serial/by-id/from-db\nE:ID_SERIAL_SHORT=FROM-DB\nE:ID_DB_ONLY=1\nG:systemd\n"
    found = discover([WORKSTATION], {"tty": Query(subsystems=frozenset({"tty"}))}, udev_db={"c188:0": db})[
        "tty"
    ]
    assert not isinstance(found, str)
    usb0 = next(d for d in found.devices if d.sys_name == "ttyUSB0")
    assert usb0.properties["ID_SERIAL_SHORT"] == "FROM-DB"  # the database overrides the uevent file
    assert usb0.properties["ID_DB_ONLY"] == "1"
    assert usb0.devlinks == ("/dev/serial/by-id/from-db",)  # from the database, not the DEVLINKS fallback
    usb1 = next(d for d in found.devices if d.sys_name == "ttyUSB1")
    assert usb1.properties["ID_SERIAL_SHORT"] == "A50285BI"
