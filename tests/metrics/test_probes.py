"""Liveness and readiness: the heartbeat, the spec directories, what readiness waits for."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from cdi_plugin.metrics import STARTING, PluginMetrics, Probes

ROOT = Path(__file__).resolve().parents[2]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_liveness_follows_the_heartbeat() -> None:
    clock = Clock()
    probes = Probes(stale_after=30, clock=clock)
    assert probes.liveness().ok
    clock.now += 29
    assert probes.liveness().ok
    clock.now += 2
    check = probes.liveness()
    assert not check.ok
    assert check.detail == "the event loop has not run for 31s"
    probes.beat()
    assert probes.liveness().ok
    assert probes.interval == 5


def test_readiness_waits_for_every_required_name() -> None:
    probes = Probes()
    assert probes.readiness().detail == "ok (nothing to serve)"
    probes.require(["vendor.example/b", "vendor.example/a"])
    check = probes.readiness()
    assert not check.ok
    assert check.detail == "waiting for: vendor.example/a, vendor.example/b"
    probes.satisfy("vendor.example/a")
    assert probes.readiness().detail == "waiting for: vendor.example/b"
    probes.satisfy("vendor.example/b")
    assert probes.readiness() == probes.readiness()
    assert probes.readiness().ok
    assert probes.readiness().detail == "ok (2 ready)"
    probes.satisfy("vendor.example/a", False)
    assert not probes.readiness().ok
    probes.require([])
    assert probes.readiness().ok


def test_each_group_replaces_only_its_own_names_and_a_reason_is_shown_while_unsatisfied() -> None:
    probes = Probes()
    probes.require(["vendor.example/a"])
    probes.require(["driver registered", "pool published"], group="dra")
    probes.satisfy("driver registered", False, "refused: no version it knows")
    assert probes.readiness().detail == (
        "waiting for: vendor.example/a, driver registered (refused: no version it knows), pool published"
    )
    probes.require(["vendor.example/b"])  # the device plugin's resources change: the DRA names stay
    probes.satisfy("vendor.example/b")
    probes.satisfy("pool published")
    assert probes.readiness().detail == "waiting for: driver registered (refused: no version it knows)"
    probes.satisfy("driver registered")
    assert probes.readiness().detail == "ok (3 ready)"
    probes.satisfy("driver registered", False)  # no reason: none shown, not the old one
    assert probes.readiness().detail == "waiting for: driver registered"


def test_the_plugin_is_not_ready_before_it_first_read_the_spec_directories() -> None:
    metrics = PluginMetrics()
    assert metrics.probes.readiness().detail == f"waiting for: {STARTING}"
    metrics.serving([])
    assert metrics.probes.readiness().ok


def test_missing_spec_directories_are_fine_but_a_file_in_their_place_is_not(tmp_path: Path) -> None:
    present, missing, file = tmp_path / "etc-cdi", tmp_path / "run-cdi", tmp_path / "file"
    present.mkdir()
    file.write_text("")
    assert Probes([present, missing]).liveness().ok
    check = Probes([present, file]).liveness()
    assert not check.ok
    assert check.detail == f"{file}: is a regular file, not a directory"


def _liveness_script(directory: Path) -> str:
    return textwrap.dedent(
        f"""
        from pathlib import Path
        from cdi_plugin.metrics import Probes
        print(Probes([Path({str(directory)!r})]).liveness())
        """
    )


@pytest.mark.root
def test_a_spec_directory_the_process_cannot_list_fails_liveness() -> None:
    base = Path(tempfile.mkdtemp(prefix="cdi-probes-"))
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir(mode=0o700)
        command = [*NOBODY, sys.executable, "-c", _liveness_script(locked)]
        out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    finally:
        shutil.rmtree(base)
    assert out.strip() == f"Check(ok=False, detail='{locked}: cannot be listed: Permission denied')"


@pytest.mark.root
def test_a_mounted_directory_deleted_on_the_host_fails_liveness(tmp_path: Path) -> None:
    """What a DaemonSet sees when /etc/cdi is removed and created again on the host: its mount
    still holds the deleted directory, which a restart replaces."""
    host, mounted = tmp_path / "host-etc-cdi", tmp_path / "container-etc-cdi"
    host.mkdir()
    mounted.mkdir()
    script = f"""
mount --bind {host} {mounted}
{sys.executable} -c "$BEFORE"
rmdir {host}
{sys.executable} -c "$BEFORE"
"""
    out = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-euc", script],
        capture_output=True,
        text=True,
        check=True,
        env={"BEFORE": _liveness_script(mounted), "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
    ).stdout.splitlines()
    assert out[0] == "Check(ok=True, detail='ok')"
    assert out[1] == (
        f"Check(ok=False, detail='{mounted}: deleted on the host while mounted here; "
        "a restart mounts the new one')"
    )
