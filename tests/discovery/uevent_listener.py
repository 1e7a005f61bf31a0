"""Listen for uevents with pyudev's netlink monitor and print one JSON line per event.

Usage: ``python uevent_listener.py SOURCE COUNT [TIMEOUT]``; SOURCE is ``udev`` or ``kernel``.
Prints ``ready`` once the monitor socket is bound, then for each event its action, sys_path,
devnode and properties, plus the misc devices a fresh UdevSource scan finds right after it
(the rescan a hot-plug watcher would do; not after "remove").
"""

from __future__ import annotations

import json
import sys

import pyudev

from cdi_plugin.discovery.model import Query
from cdi_plugin.discovery.udev import UdevSource


def main(source: str, count: int, timeout: float) -> int:
    monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source=source)
    monitor.filter_by(subsystem="misc")
    monitor.start()
    print("ready", flush=True)
    udev = UdevSource()
    for _ in range(count):
        device = monitor.poll(timeout=timeout)
        if device is None:
            print(json.dumps({"timeout": timeout}), flush=True)
            return 1
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 10.0))
