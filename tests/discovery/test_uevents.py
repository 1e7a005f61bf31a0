"""Proof for hot-plug: uevents reach pyudev's netlink monitor, from umockdev and from the kernel.

See docs/discovery.md ("Uevents and monitors"); the watcher built on this is tested in tests/watch/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.discovery.simhost import IS_ROOT

HERE = Path(__file__).resolve().parent
LISTENER = [sys.executable, str(HERE / "uevent_listener.py")]
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with python3-gi and gir1.2-umockdev-1.0


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


@pytest.mark.umockdev
@pytest.mark.parametrize("source", ["udev", "kernel"])
def test_umockdev_uevents_reach_a_pyudev_monitor_in_another_process(source: str) -> None:
    env = {**os.environ, "TMPDIR": "/dev/shm"} if os.access("/dev/shm", os.W_OK) else None
    done = subprocess.run(
        ["umockdev-wrapper", SYSTEM_PYTHON, str(HERE / "uevent_emitter.py"), *LISTENER, source, "4"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    got = events(done.stdout)
    assert [(e["action"], e["sys_path"], e["devnode"]) for e in got] == [
        ("add", "/sys/devices/virtual/misc/binder7", "/dev/binder7"),
        ("change", "/sys/devices/virtual/misc/binder7", "/dev/binder7"),
        ("remove", "/sys/devices/virtual/misc/binder7", "/dev/binder7"),
        ("add", "/sys/devices/virtual/misc/binder8", "/dev/binder8"),
    ]
    assert got[0]["properties"] == {
        "ACTION": "add",
        "DEVNAME": "/dev/binder7",
        "DEVPATH": "/devices/virtual/misc/binder7",
        "MAJOR": "10",
        "MINOR": "1007",
        "SEQNUM": "1",
        "SUBSYSTEM": "misc",
    }
    assert [e["scan"] for e in got] == [
        ["binder7"],
        ["binder7"],
        None,
        ["binder8"],
    ]  # a rescan sees the change


def _listen(argv: list[str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _trigger_fuse_change() -> None:
    Path("/sys/devices/virtual/misc/fuse/uevent").write_text("change")


@pytest.mark.root
@pytest.mark.skipif(not IS_ROOT, reason="writing a uevent file needs root (CI runs as root)")
def test_kernel_monitor_sees_host_uevents_and_udev_monitor_needs_udevd() -> None:
    """The kernel group carries every uevent; the "udev" group only what udevd re-sends after
    processing. The second listener runs in a fresh network namespace, where no udevd runs even if
    the host has one: kernel uevents still reach it, and when the kernel's event has arrived, its
    "udev" monitor holds nothing (the kernel sends to the kernel group alone). Both listen for
    fuse's event only: the host's other devices may send events meanwhile."""
    kernel = _listen([*LISTENER, "kernel", "1", "60", "fuse"])
    fresh = _listen(["unshare", "--net", *LISTENER, "kernel", "1", "60", "fuse"])
    try:
        _trigger_fuse_change()
        out, err = kernel.communicate(timeout=120)
        fresh_out, fresh_err = fresh.communicate(timeout=120)
    finally:
        kernel.kill()
        fresh.kill()
    assert kernel.returncode == 0, err
    assert fresh.returncode == 0, fresh_err
    for event, *_ in (events(out), events(fresh_out)):
        assert (event["action"], event["sys_path"], event["devnode"]) == (
            "change",
            "/sys/devices/virtual/misc/fuse",
            "/dev/fuse",
        )
        assert (event["properties"]["MAJOR"], event["properties"]["MINOR"]) == ("10", "229")
        assert "fuse" in event["scan"]
    assert events(fresh_out)[1:] == [{"udev": []}]
