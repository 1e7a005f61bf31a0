"""Other local users: they cannot hold the scan's lock, steer directory creation or wedge a scan.

The unprivileged user is nobody (65534) through ``setpriv``; directories are made in /tmp so that
nobody can reach them (pytest's tmp_path is private to root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cdi_plugin.errors import SpecWriteError
from cdi_plugin.store.dirlock import LOCK_NAME, locked
from cdi_plugin.store.ownership import RECORD_NAME
from cdi_plugin.store.plan import plan_writes
from cdi_plugin.store.writer import apply
from tests.generate.hosts import WORKSTATION
from tests.scan.helpers import run_cdi_gen, snapshot, spec
from tests.scan.test_failures import record_host
from tests.store.unprivileged import NOBODY

FUSE = spec("cdi-plugin.io/fuse", "fuse")


@pytest.fixture
def world() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cdi-gen-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def _scan(host: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cdi_gen("scan", "--source", f"fixture:{host}", "--output-dir", out, *extra)


def test_a_user_holding_a_flock_on_the_spec_directory_does_not_block_a_scan(world: Path) -> None:
    host = record_host(world, WORKSTATION, "host.json")
    out = world / "cdi"
    out.mkdir(mode=0o755)
    holder = subprocess.Popen([*NOBODY, "flock", str(out), "sleep", "60"])
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(["flock", "-n", str(out), "true"], check=False).returncode == 0:
            assert time.monotonic() < deadline, "nobody never took the flock"
            time.sleep(0.05)
        result = _scan(host, out, "--lock-timeout", "3600")  # a blocked scan would hang until killed
        assert result.returncode == 0, result.stderr
    finally:
        holder.kill()
        holder.wait()
    assert (out / "cdi-plugin.io-fuse.json").is_file()
    lock = out / LOCK_NAME
    assert lock.stat().st_mode & 0o777 == 0o600
    assert lock.stat().st_uid == 0
    probe = subprocess.run(
        [*NOBODY, "flock", "-n", str(lock), "true"], capture_output=True, text=True, check=False
    )
    assert "Permission denied" in probe.stderr, "only root can open the lock"


def test_a_scan_that_waits_too_long_for_the_lock_fails_in_one_line(world: Path) -> None:
    host = record_host(world, WORKSTATION, "host.json")
    out = world / "cdi"
    out.mkdir(mode=0o755)
    with locked(out):
        before = snapshot(out)
        started = time.monotonic()
        result = _scan(host, out, "--lock-timeout", "0.5")
        took = time.monotonic() - started
        assert snapshot(out) == before, "nothing written"
    assert result.returncode == 1
    assert result.stderr == (
        f"cdi-gen: error: {out / LOCK_NAME}: another scan has held the lock for more than 0.5s; "
        "nothing was written (--lock-timeout sets how long to wait)\n"
    )
    assert took >= 0.5


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: p.symlink_to(p.parent.parent / "elsewhere"), "cannot open the lock: Too many levels"),
        (os.mkfifo, "not a regular file owned by uid 0"),
        (os.mkdir, "cannot open the lock: Is a directory"),
    ],
)
def test_a_lock_that_is_not_a_regular_file_is_refused(
    world: Path, make: Callable[[Path], object], reason: str
) -> None:
    out = world / "cdi"
    out.mkdir()
    make(out / LOCK_NAME)
    with pytest.raises(SpecWriteError, match=reason), locked(out):
        pass
    assert not (world / "elsewhere").exists()


def test_directory_creation_does_not_follow_another_users_link(world: Path) -> None:
    """A user of a writable (sticky) parent points a missing component at a root-only directory."""
    public, victim = world / "public", world / "victim"
    public.mkdir()
    public.chmod(0o1777)
    victim.mkdir(mode=0o700)
    link = subprocess.run(
        [*NOBODY, "ln", "-s", str(victim), str(public / "x")], capture_output=True, text=True, check=False
    )
    assert link.returncode == 0, link.stderr
    with pytest.raises(SpecWriteError) as info:
        apply(plan_writes([FUSE], public / "x" / "cdi", spec_dirs=()))
    assert str(info.value) == (
        f"{public}/x/cdi: cannot create the spec directory: x is a symbolic link owned by uid 65534; "
        "not following it"
    )
    assert not any(victim.iterdir())
    assert victim.stat().st_mode & 0o777 == 0o700


def test_directory_creation_follows_roots_own_links(world: Path) -> None:
    real = world / "real"
    real.mkdir()
    (world / "run").symlink_to("real")  # like /var/run -> /run
    apply(plan_writes([FUSE], world / "run" / "cdi", spec_dirs=()))
    assert (real / "cdi" / "cdi-plugin.io-fuse.json").is_file()
    assert (real / "cdi").stat().st_mode & 0o777 == 0o755


def test_a_record_that_is_a_directory_fails_before_any_spec_is_written(world: Path) -> None:
    out = world / "cdi"
    out.mkdir()
    (out / RECORD_NAME).mkdir()
    with pytest.raises(SpecWriteError) as info:
        apply(plan_writes([FUSE], out, spec_dirs=()))
    assert str(info.value) == f"{out / RECORD_NAME}: is a directory; nothing was written"
    assert sorted(p.name for p in out.iterdir()) == [RECORD_NAME]
    assert not os.listdir(out / RECORD_NAME)
