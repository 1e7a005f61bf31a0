"""Helpers for the writer and ``cdi-gen scan`` tests: small specs and snapshots of a directory."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from cdi_plugin.cdi.model import ContainerEdits, Device, DeviceNode, Spec
from cdi_plugin.discovery.model import DiscoveredDevice, StaticSource
from tests.generate.hosts import WORKSTATION

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv" / "bin" / "python"
CDI_GEN = REPO / ".venv" / "bin" / "cdi-gen"

Snapshot = dict[str, tuple[str, int, int]]


def spec(kind: str, *names: str, version: str = "0.3.0") -> Spec:
    """A spec with one device node per name (``/dev/<name>``)."""
    return Spec(
        cdi_version=version,
        kind=kind,
        devices=tuple(
            Device(name=n, container_edits=ContainerEdits(device_nodes=(DeviceNode(path=f"/dev/{n}"),)))
            for n in names
        ),
    )


def run_cdi_gen(
    *args: str | Path, user: bool = False, check: int | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``cdi-gen``; ``user`` runs it as nobody (65534) with no groups."""
    cmd = [str(CDI_GEN), *map(str, args)]
    if user:
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if check is not None:
        assert result.returncode == check, result.stdout + result.stderr
    return result


def snapshot(directory: Path) -> Snapshot:
    """Every entry of ``directory`` (hidden ones too): contents, mtime in ns, permission bits."""
    out: Snapshot = {}
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        st = entry.stat(follow_symlinks=False)
        data = Path(entry.path).read_bytes() if entry.is_file(follow_symlinks=False) else b""
        out[entry.name] = (data.decode("utf-8", "replace"), st.st_mtime_ns, st.st_mode & 0o7777)
    return out


def opened(path: Path, pid: int | str = "self") -> int:
    """How many descriptors process ``pid`` holds open on ``path`` (a process waiting for a lock
    file has it open)."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            count += os.readlink(fd) == str(path)
    return count


def without(*kernel_names: str) -> list[DiscoveredDevice]:
    return [d for d in WORKSTATION if d.sys_name not in kernel_names]


def renamed_fuse_mode(mode: int) -> list[DiscoveredDevice]:
    """The workstation with /dev/fuse at another mode (a change to an existing spec)."""
    out = []
    for d in WORKSTATION:
        if d.sys_name == "fuse" and d.node is not None:
            out.append(dataclasses.replace(d, node=dataclasses.replace(d.node, mode=mode)))
        else:
            out.append(d)
    return out


def main() -> None:
    """``python -m tests.scan.helpers DIR``: print the snapshot of DIR as JSON (inside namespaces)."""
    sys.stdout.write(json.dumps(snapshot(Path(sys.argv[1]))))


if __name__ == "__main__":
    main()


class Counting(StaticSource):
    """Counts the devices read one by one."""

    def __init__(self, devices: list[DiscoveredDevice]) -> None:
        super().__init__(devices)
        self.lookups: list[str] = []

    def lookup(self, sys_path: str, query: Any) -> DiscoveredDevice | None:
        self.lookups.append(sys_path)
        return super().lookup(sys_path, query)
