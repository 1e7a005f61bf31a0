"""Listen for uevents with pyudev's netlink monitor and print one JSON line per event.

Usage: ``python uevent_listener.py SOURCE COUNT [TIMEOUT [SYS_NAME]]``; SOURCE is ``udev`` or
``kernel``; TIMEOUT (60 s) bounds the wait for each event. Prints ``ready`` once the monitor
socket is bound, then for each event of a misc device (of ``SYS_NAME`` only, if given: the host's
other devices may send events meanwhile) its action, sys_path, devnode and properties, plus the
misc devices a fresh UdevSource scan finds right after it (the rescan a hot-plug watcher would do;
not after "remove"). With SOURCE ``kernel`` and
SYS_NAME, a monitor of the "udev" group listens too, and the events it holds at the moment the
kernel's event has arrived are printed last, as ``{"udev": [...]}``.
"""

from __future__ import annotations

import json
import sys
import time

import pyudev

from cdi_plugin.discovery.model import Query
from cdi_plugin.discovery.udev import UdevSource


def monitor(source: str) -> pyudev.Monitor:
    found = pyudev.Monitor.from_netlink(pyudev.Context(), source=source)
    found.filter_by(subsystem="misc")
    found.start()
    return found


def main(source: str, count: int, timeout: float, sys_name: str | None) -> int:
    listener = monitor(source)
    udev_group = monitor("udev") if source == "kernel" and sys_name else None
    print("ready", flush=True)
    udev = UdevSource()
    deadline = time.monotonic() + timeout
    while count:
        # None also when only events of other subsystems were queued (filtered out)
        device = listener.poll(timeout=max(deadline - time.monotonic(), 0.001))
        if device is None:
            if time.monotonic() < deadline:
                continue
            print(json.dumps({"timeout": timeout}), flush=True)
            return 1
        if sys_name is not None and device.sys_name != sys_name:
            continue
        count -= 1
        deadline = time.monotonic() + timeout
        scan = None  # after "remove" the sysfs directory may still be there (umockdev removes it later)
        if device.action != "remove":
            scan = sorted(d.sys_name for d in udev.discover(Query(subsystems=frozenset({"misc"}))).devices)
        event = {
            "action": device.action,
            "sys_path": device.sys_path,
            "devnode": device.device_node,
            "properties": dict(device.properties),
            "scan": scan,
        }
        print(json.dumps(event), flush=True)
    if udev_group is not None:
        held = iter(lambda: udev_group.poll(timeout=0), None)
        print(json.dumps({"udev": [d.action for d in held]}), flush=True)
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(
        main(
            args[0],
            int(args[1]),
            float(args[2]) if len(args) > 2 else 60.0,
            args[3] if len(args) > 3 else None,
        )
    )
