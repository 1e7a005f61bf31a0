"""Emit uevents from a umockdev testbed to a listener process (run by Debian's /usr/bin/python3).

Usage: ``umockdev-wrapper /usr/bin/python3 uevent_emitter.py LISTENER_ARGV...``

umockdev's GObject API (gi.repository.UMockdev) is only available to the system Python, while the
code under test runs in the project's virtualenv; both processes share the testbed through the
``UMOCKDEV_DIR`` environment variable and the preload library that ``umockdev-wrapper`` sets up.
``Testbed.new()`` sets ``UMOCKDEV_DIR`` with g_setenv(), which Python's ``os.environ`` does not see,
so it is passed to the listener explicitly.

Steps: start the listener and wait for its "ready" line (its netlink socket is bound), add a
device (umockdev emits "add" by itself), emit "change", emit "remove" and remove the device,
add a second device; after each step wait for the listener's line. The listener's lines are copied to stdout.
"""

from __future__ import annotations

import os
import subprocess
import sys

import gi

gi.require_version("UMockdev", "1.0")
from gi.repository import UMockdev  # noqa: E402


def binder(n: int) -> str:
    return (
        f"P: /devices/virtual/misc/binder{n}\nN: binder{n}=00\nE: DEVNAME=/dev/binder{n}\n"
        f"E: MAJOR=10\nE: MINOR={1000 + n}\nE: SUBSYSTEM=misc\nA: dev=10:{1000 + n}\\n\n"
    )


SYS_PATH = "/sys/devices/virtual/misc/binder7"


def main(listener: list[str]) -> int:
    testbed = UMockdev.Testbed.new()
    env = dict(os.environ, UMOCKDEV_DIR=testbed.get_root_dir())
    with subprocess.Popen(listener, stdout=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        if ready.strip() != "ready":
            print(f"listener did not start: {ready!r}", file=sys.stderr)
            proc.kill()
            return 1
        lines = [ready]

        def emitted() -> None:
            lines.append(proc.stdout.readline())  # the listener has handled the event

        if not testbed.add_from_string(binder(7)):
            proc.kill()
            return 1
        emitted()
        testbed.uevent(SYS_PATH, "change")
        emitted()
        testbed.uevent(SYS_PATH, "remove")
        testbed.remove_device(SYS_PATH)
        emitted()
        testbed.add_from_string(binder(8))
        emitted()
        out, _ = proc.communicate(timeout=30)
        sys.stdout.write("".join(lines[1:]) + out)
        return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
