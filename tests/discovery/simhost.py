"""Simulated hosts for the discovery tests: run UdevSource under ``umockdev-run``.

``umockdev-run`` preloads a library that redirects /sys and /dev for the whole process, so every
simulated discovery runs in a child process (``query_runner.py``) whose JSON the tests read.

- Node ownership: umockdev backs each ``N: name=00`` node with a plain file in the testbed and
  ``stat`` reports that file's permission bits, uid and gid with the device type and numbers from
  sysfs; :data:`NODE_OWNERS` is applied to those files before discovery runs.
- The udev database: umockdev writes ``E:`` lines into the sysfs ``uevent`` file and never
  redirects /run, so libudev would read the real host's /run/udev/data for simulated devices whose
  numbers collide with real ones. As root, each run therefore gets a private mount namespace with
  an empty tmpfs on /run (and the ``udev_db`` files the test asks for).
- Speed: the testbed goes to a tmpfs (/dev/shm); on a disk file system umockdev spends ~8 ms of
  fsync per device.

``python -m tests.discovery.simhost --write`` re-records the bundled fixture
``cdi_plugin/discovery/simulated/workstation.json`` from ``workstation.umockdev``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cdi_plugin.discovery.fixture import (
    SIMULATED_FIXTURE,
    SIMULATED_UMOCKDEV,
    devices_from_obj,
    dumps,
    simulated,
)
from cdi_plugin.discovery.model import Discovery, Query
from tests.discovery.query_runner import query_to_obj

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RUNNER = HERE / "query_runner.py"
WORKSTATION = Path(str(simulated(SIMULATED_UMOCKDEV)))
WORKSTATION_JSON = Path(str(simulated(SIMULATED_FIXTURE)))
IS_ROOT = os.geteuid() == 0

# group ids as on a Debian 12 desktop: video 44, render 105, dialout 20, kvm 104
NODE_OWNERS: Mapping[str, tuple[int, int, int]] = {
    "/dev/dri/card0": (0o660, 0, 44),
    "/dev/dri/card1": (0o660, 0, 44),
    "/dev/dri/renderD128": (0o660, 0, 105),
    "/dev/dri/renderD129": (0o660, 0, 105),
    "/dev/kfd": (0o660, 0, 105),
    "/dev/ttyUSB0": (0o660, 0, 20),
    "/dev/ttyUSB1": (0o660, 0, 20),
    "/dev/ttyACM0": (0o660, 0, 20),
    "/dev/ttyS0": (0o660, 0, 20),
    "/dev/hidraw0": (0o600, 0, 0),
    "/dev/video0": (0o660, 0, 44),
    "/dev/infiniband/uverbs0": (0o666, 0, 0),
    "/dev/vfio/vfio": (0o666, 0, 0),
    "/dev/vfio/42": (0o600, 0, 0),
    "/dev/fuse": (0o666, 0, 0),
    "/dev/net/tun": (0o666, 0, 0),
    "/dev/kvm": (0o660, 0, 104),
    "/dev/vhost-net": (0o660, 0, 104),
    "/dev/vhost-vsock": (0o660, 0, 104),
    "/dev/binder": (0o666, 0, 0),
    "/dev/hwbinder": (0o666, 0, 0),
    "/dev/vndbinder": (0o666, 0, 0),
    "/dev/bus/usb/001/001": (0o664, 0, 0),
    "/dev/bus/usb/001/003": (0o664, 0, 0),
    "/dev/bus/usb/001/004": (0o664, 0, 0),
    "/dev/bus/usb/001/005": (0o664, 0, 0),
    "/dev/bus/usb/001/007": (0o664, 0, 0),
    "/dev/bus/usb/001/008": (0o664, 0, 0),
}

# attributes recorded into the bundled fixture (what device classes typically look at)
RECORDED_ATTRIBUTES = frozenset(
    {
        "vendor", "device", "subsystem_vendor", "subsystem_device", "class", "numa_node",
        "idVendor", "idProduct", "serial", "manufacturer", "product", "bInterfaceNumber",
        "bInterfaceClass", "name", "index", "ibdev", "status", "dev",
    }
)  # fmt: skip


def binder_umockdev(count: int, first_minor: int = 1000) -> str:
    """``count`` misc binder devices binder0.. with numbers 10:first_minor+i."""
    return "".join(
        f"P: /devices/virtual/misc/binder{i}\nN: binder{i}=00\nE: DEVNAME=/dev/binder{i}\n"
        f"E: MAJOR=10\nE: MINOR={first_minor + i}\nE: SUBSYSTEM=misc\nA: dev=10:{first_minor + i}\\n\n\n"
        for i in range(count)
    )


def _testbed_tmpdir() -> dict[str, str]:
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return {"TMPDIR": str(shm)}
    return {}


def _prepare_script(owners: Mapping[str, tuple[int, int, int]], extra: str) -> str:
    lines = []
    for path, (mode, uid, gid) in sorted(owners.items()):
        local = '"$UMOCKDEV_DIR"' + shlex.quote(path)
        chown = f" && chown {uid}:{gid} {local}" if IS_ROOT else ""
        lines.append(f"if [ -f {local} ]; then chmod {mode:o} {local}{chown}; fi")
    if extra:
        lines.append(extra)
    lines.append('exec "$@"')
    return "set -e\n" + "\n".join(lines)


def umockdev_run(
    device_files: Sequence[Path],
    argv: Sequence[str],
    *,
    owners: Mapping[str, tuple[int, int, int]] = NODE_OWNERS,
    prepare: str = "",
    udev_db: Mapping[str, bytes] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` under ``umockdev-run`` with ``device_files`` loaded.

    ``prepare`` is shell run inside the testbed first (``$UMOCKDEV_DIR`` is its root);
    ``udev_db`` maps names such as ``c188:0`` to udev database files (needs root).
    """
    if shutil.which("umockdev-run") is None:
        raise RuntimeError("umockdev-run is missing: tests/setup.sh installs the Debian package umockdev")
    command = ["umockdev-run"]
    for f in device_files:
        command += ["--device", str(f)]
    command += ["--", "sh", "-c", _prepare_script(owners, prepare), "sh", *argv]
    return run_isolated(command, udev_db=udev_db, timeout=timeout)


def run_isolated(
    command: Sequence[str], *, udev_db: Mapping[str, bytes] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``command``; as root in a private mount namespace whose /run is an empty tmpfs holding
    only the ``udev_db`` files (so the host's udev database, if any, is out of sight)."""
    env = {**os.environ, **_testbed_tmpdir()}
    if not IS_ROOT:
        if udev_db:
            raise RuntimeError("a simulated udev database needs root (a private mount namespace)")
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    with tempfile.TemporaryDirectory() as db_dir:
        for name, content in (udev_db or {}).items():
            Path(db_dir, name).write_bytes(content)
        isolate = (
            "set -e; mount -t tmpfs -o mode=0755 tmpfs /run; mkdir -p /run/udev/data; "
            f'cp -a {shlex.quote(db_dir)}/. /run/udev/data/; exec "$@"'
        )
        wrapped = ["unshare", "--mount", "--propagation", "private", "sh", "-c", isolate, "sh", *command]
        return subprocess.run(wrapped, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def runner_argv(queries: Mapping[str, Query], dev_root: str | None = None) -> list[str]:
    argv = [sys.executable, str(RUNNER), json.dumps({k: query_to_obj(q) for k, q in queries.items()})]
    return argv if dev_root is None else [*argv, dev_root]


def parse_results(done: subprocess.CompletedProcess[str]) -> dict[str, Discovery | str]:
    """The query runner's output; a failed query maps to its error message."""
    if done.returncode != 0:
        raise AssertionError(f"discovery process failed ({done.returncode}):\n{done.stderr}")
    results: dict[str, Discovery | str] = {}
    for name, obj in json.loads(done.stdout).items():
        if "error" in obj:
            results[name] = obj["error"]
        else:
            results[name] = Discovery(devices_from_obj(obj["devices"], name), tuple(obj["warnings"]))
    return results


def discover(
    device_files: Sequence[Path], queries: Mapping[str, Query], **kwargs: Any
) -> dict[str, Discovery | str]:
    """Run every query in one simulated process."""
    return parse_results(umockdev_run(device_files, runner_argv(queries), **kwargs))


def record_workstation() -> str:
    """The bundled fixture text, recorded from the simulated workstation."""
    found = discover([WORKSTATION], {"all": Query(attributes=RECORDED_ATTRIBUTES)})["all"]
    assert isinstance(found, Discovery), found
    assert not found.warnings, found.warnings
    return dumps(found.devices)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.discovery.simhost --write")
    WORKSTATION_JSON.write_text(record_workstation())
    print(f"wrote {WORKSTATION_JSON}")
