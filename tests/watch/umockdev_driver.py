"""Drive ``cdi-gen watch`` with simulated hot-plug (run by Debian's /usr/bin/python3 under umockdev-wrapper).

Usage: ``umockdev-wrapper /usr/bin/python3 umockdev_driver.py SPEC_FILE WATCH_ARGV...``

Starts the watcher (JSON logs) in the testbed, waits for its first scan, then adds binder7 and
binder8 (umockdev emits ``add`` by itself), removes binder7 and binder8 (``remove`` is sent first:
umockdev sends nothing when a device is removed), and after each step waits until SPEC_FILE
lists the expected devices. Prints one JSON object: the device sets seen after each step, the
watcher's exit status after SIGTERM and its log messages.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import gi

gi.require_version("UMockdev", "1.0")
from gi.repository import UMockdev  # noqa: E402

TIMEOUT = 60.0


def binder(n: int) -> str:
    return (
        f"P: /devices/virtual/misc/binder{n}\nN: binder{n}=00\nE: DEVNAME=/dev/binder{n}\n"
        f"E: MAJOR=10\nE: MINOR={1000 + n}\nE: SUBSYSTEM=misc\nA: dev=10:{1000 + n}\\n\n"
    )


def names(spec_file: str) -> list[str] | None:
    try:
        with open(spec_file, "rb") as fh:
            return sorted(d["name"] for d in json.load(fh)["devices"])
    except FileNotFoundError:
        return None
    except ValueError:
        return ["<unreadable>"]


def wait_for(spec_file: str, expected: list[str] | None) -> list[str] | None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        seen = names(spec_file)
        if seen == expected:
            return seen
        time.sleep(0.01)
    return names(spec_file)


def remove(testbed: UMockdev.Testbed, n: int) -> None:
    sys_path = f"/sys/devices/virtual/misc/binder{n}"
    testbed.uevent(sys_path, "remove")
    testbed.remove_device(sys_path)


def main(spec_file: str, watcher: list[str]) -> int:
    testbed = UMockdev.Testbed.new()
    env = dict(os.environ, UMOCKDEV_DIR=testbed.get_root_dir())
    proc = subprocess.Popen(watcher, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    messages: list[str] = []
    seen: list[list[str] | None] = []
    try:
        for line in proc.stderr:
            messages.append(json.loads(line)["msg"])
            if messages[-1].startswith("initial scan in "):
                break
        testbed.add_from_string(binder(7))
        seen.append(wait_for(spec_file, ["binder7"]))
        testbed.add_from_string(binder(8))
        seen.append(wait_for(spec_file, ["binder7", "binder8"]))
        remove(testbed, 7)
        seen.append(wait_for(spec_file, ["binder8"]))
        remove(testbed, 8)
        seen.append(wait_for(spec_file, None))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, rest = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, rest = proc.communicate()
    messages += [json.loads(line)["msg"] for line in rest.splitlines() if line.startswith("{")]
    print(json.dumps({"seen": seen, "status": proc.returncode, "messages": messages}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
