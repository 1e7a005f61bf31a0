"""Discovery timings: this host's default-class subsystems, and 1000 simulated binder devices.

    .venv/bin/python bench/bench_discovery.py [--runs 20]

Each figure is the median of ``--runs`` full ``UdevSource.discover`` calls in one process (a fresh
source each time; libudev is loaded once per process, as in ``cdi-gen``). Baselines, measured in the same run:

- "all subsystems": the same source with no subsystem filter (what the fast path saves);
- "pyudev public API": the plain way, ``Context().list_devices(subsystem=...)`` then
  ``dict(device.properties)``, every ancestor's properties and ``os.stat`` of the node
  (no attribute reads, no glob, no conversion into frozen values).

The simulated part runs this script again under ``umockdev-run`` (testbed in /dev/shm), where
every file access goes through umockdev's preload library; the testbed setup time is printed apart.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdi_plugin.discovery.model import Query
from cdi_plugin.discovery.udev import UdevSource

DEFAULT_SUBSYSTEMS = frozenset(
    {"misc", "drm", "kfd", "tty", "video4linux", "infiniband_verbs", "hidraw", "vfio"}
)
DEFAULT_QUERY = Query(
    subsystems=DEFAULT_SUBSYSTEMS,
    devnode_globs=("/dev/nvidia*", "/dev/dri/*"),
    attributes=frozenset({"vendor", "device", "numa_node", "serial", "idVendor", "idProduct"}),
)


def median_ms(fn: Callable[[], int], runs: int) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(runs):
        started = time.perf_counter()
        count = fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), count


def with_source(query: Query) -> Callable[[], int]:
    return lambda: len(UdevSource().discover(query).devices)


def pyudev_public(subsystems: frozenset[str]) -> Callable[[], int]:
    import pyudev

    context = pyudev.Context()

    def run() -> int:
        count = 0
        for subsystem in sorted(subsystems) or [None]:
            devices = context.list_devices(subsystem=subsystem) if subsystem else context.list_devices()
            for device in devices:
                dict(device.properties)
                for parent in device.ancestors:
                    dict(parent.properties)
                if device.device_node:
                    with contextlib.suppress(OSError):
                        os.stat(device.device_node)
                count += 1
        return count

    return run


def measure(runs: int, query: Query) -> dict[str, Any]:
    source_ms, devices = median_ms(with_source(query), runs)
    all_ms, all_devices = median_ms(with_source(Query(attributes=query.attributes)), runs)
    public_ms, public_devices = median_ms(pyudev_public(query.subsystems), runs)
    return {
        "UdevSource": (source_ms, devices),
        "UdevSource, all subsystems": (all_ms, all_devices),
        "pyudev public API": (public_ms, public_devices),
    }


def show(title: str, results: dict[str, Any]) -> None:
    print(title)
    base = results["UdevSource"][0]
    for name, (ms, devices) in results.items():
        print(f"  {name:28} {ms:8.2f} ms  {devices:5d} devices  ({ms / base:4.2f}x)")


def simulated(runs: int, count: int) -> None:
    binder = "".join(
        f"P: /devices/virtual/misc/binder{i}\nN: binder{i}=00\nE: DEVNAME=/dev/binder{i}\n"
        f"E: MAJOR=10\nE: MINOR={1000 + i}\nE: SUBSYSTEM=misc\nA: dev=10:{1000 + i}\\n\n\n"
        for i in range(count)
    )
    env = dict(os.environ)
    if os.access("/dev/shm", os.W_OK):
        env["TMPDIR"] = "/dev/shm"
    with tempfile.TemporaryDirectory() as tmp:
        device_file = Path(tmp, "binder.umockdev")
        device_file.write_text(binder)
        started = time.perf_counter()
        subprocess.run(["umockdev-run", "--device", str(device_file), "--", "true"], check=True, env=env)
        setup_s = time.perf_counter() - started
        inner = [sys.executable, __file__, "--inner", "--runs", str(runs)]
        done = subprocess.run(
            ["umockdev-run", "--device", str(device_file), "--", *inner],
            check=True,
            env=env,
            capture_output=True,
            text=True,
        )
    show(
        f"{count} simulated binder devices under umockdev-run (testbed setup {setup_s:.2f} s):",
        json.loads(done.stdout),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        json.dump(
            measure(args.runs, Query(subsystems=frozenset({"misc"}), devnode_globs=("/dev/binder*",))),
            sys.stdout,
        )
        return
    subsystems = ", ".join(sorted(DEFAULT_SUBSYSTEMS))
    print(f"median of {args.runs} runs each; query: {subsystems} + 2 globs + 6 attributes")
    show("this host:", measure(args.runs, DEFAULT_QUERY))
    simulated(args.runs, args.devices)


if __name__ == "__main__":
    main()
