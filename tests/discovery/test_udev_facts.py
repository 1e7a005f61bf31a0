"""The udev facts of a device, looked up by device number: on the real host and on simulated hardware."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from cdi_plugin.cli.udev_facts import lookup
from cdi_plugin.discovery.udev import UdevSource
from cdi_plugin.inventory import UdevFacts
from cdi_plugin.inventory.health import Rdev
from tests.discovery.simhost import WORKSTATION, umockdev_run

RUNNER = Path(__file__).resolve().parent / "facts_runner.py"


def _rdev(path: str) -> Rdev:
    info = os.stat(path)
    return Rdev(stat.S_ISBLK(info.st_mode), os.major(info.st_rdev), os.minor(info.st_rdev))


def test_lookup_by_number_on_the_host() -> None:
    source = UdevSource()
    null = source.lookup_number(False, 1, 3)
    assert null is not None
    assert (null.subsystem, null.sys_name, null.devnode) == ("mem", "null", "/dev/null")
    rdev = os.stat("/dev/loop0").st_rdev
    loop = source.lookup_number(True, os.major(rdev), os.minor(rdev))
    assert loop is not None
    assert (loop.subsystem, loop.sys_name, loop.devtype) == ("block", "loop0", "disk")
    assert source.lookup_number(True, 1, 3) is None  # 1:3 is a char device; no block device has it


def test_facts_of_host_devices() -> None:
    source = UdevSource()
    assert lookup(source, _rdev("/dev/null")) == UdevFacts(subsystem="mem")
    assert lookup(source, _rdev("/dev/fuse")) == UdevFacts(subsystem="misc")
    assert lookup(source, _rdev("/dev/loop0")) == UdevFacts(subsystem="block")


def test_a_number_no_device_owns_has_no_facts() -> None:
    """What a lookup finds once a device node vanished with its device."""
    assert not Path("/sys/dev/char/511:4095").exists()
    assert lookup(UdevSource(), Rdev(False, 511, 4095)) is None


@pytest.mark.umockdev
def test_facts_of_simulated_hardware() -> None:
    paths = ["/dev/dri/card0", "/dev/dri/renderD129", "/dev/ttyUSB0", "/dev/infiniband/uverbs0",
             "/dev/hidraw0", "/dev/video0", "/dev/bus/usb/001/003", "/dev/fuse"]  # fmt: skip
    done = umockdev_run([WORKSTATION], [sys.executable, str(RUNNER), *paths])
    assert done.returncode == 0, done.stderr
    found = {path: UdevFacts(**facts) for path, facts in json.loads(done.stdout).items()}
    assert found == {
        # a DRM node: the driver and IDs of its PCI function
        "/dev/dri/card0": UdevFacts(
            subsystem="drm", driver="i915", vendor_id="8086", model_id="3e92", pci_address="0000:00:02.0"
        ),
        "/dev/dri/renderD129": UdevFacts(
            subsystem="drm", driver="amdgpu", vendor_id="1002", model_id="73bf", pci_address="0000:01:00.0"
        ),
        # behind USB: the udev IDs and serial, no PCI address (the USB controller's is not the device's)
        "/dev/ttyUSB0": UdevFacts(
            subsystem="tty", driver="ftdi_sio", vendor_id="0403", model_id="6001", serial="A50285BI"
        ),
        "/dev/infiniband/uverbs0": UdevFacts(
            subsystem="infiniband_verbs",
            driver="mlx5_core",
            vendor_id="15b3",
            model_id="1017",
            pci_address="0000:3b:00.0",
        ),
        "/dev/hidraw0": UdevFacts(
            subsystem="hidraw", driver="hid-generic", vendor_id="046d", model_id="c52b"
        ),
        "/dev/video0": UdevFacts(
            subsystem="video4linux", driver="uvcvideo", vendor_id="04f2", model_id="b6d9", serial="0001"
        ),
        "/dev/bus/usb/001/003": UdevFacts(
            subsystem="usb", driver="usb", vendor_id="0403", model_id="6001", serial="A50285BI"
        ),
        "/dev/fuse": UdevFacts(subsystem="misc"),
    }
