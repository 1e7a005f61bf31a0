"""A scan killed at any step of applying its plan: the next scan recovers by itself.

The writer runs in a child process that exits on the spot (``os._exit``, as a SIGKILL would stop
it) just before its n-th rename or unlink, for every n. After each kill the device plugin's
reader still serves every changed kind, and a second scan finishes the work without --force and
removes the temporary files the killed one left.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdi_plugin.cdi import codec
from cdi_plugin.deviceplugin.state import DeviceState
from cdi_plugin.inventory import NumaLocator, SpecSource
from cdi_plugin.store.atomic import StagedFile
from cdi_plugin.store.dirlock import locked
from cdi_plugin.store.ownership import RECORD_NAME, read_record
from cdi_plugin.store.plan import plan_writes
from cdi_plugin.store.writer import apply
from tests.deviceplugin.helpers import Layout
from tests.scan.helpers import REPO, spec

BEFORE = [spec(f"cdi-plugin.io/{k}", k) for k in ("fuse", "tun", "kvm")]
#: fuse and tun change, new is created, kvm is removed.
AFTER = [spec(f"cdi-plugin.io/{k}", k, f"{k}2") for k in ("fuse", "new", "tun")]
#: The record (owning old and new), the three specs, the removal, the record without kvm.
STEPS = 6

CHILD = """
import os, sys
from pathlib import Path
from cdi_plugin.store.plan import plan_writes
from cdi_plugin.store.writer import apply
from tests.scan.test_interrupted import AFTER

out, kill_at = Path(sys.argv[1]), int(sys.argv[2])
steps = 0

def dying(real):
    def step(*args, **kwargs):
        global steps
        if steps == kill_at:
            os._exit(9)
        steps += 1
        return real(*args, **kwargs)
    return step

plan = plan_writes(AFTER, out, spec_dirs=())
os.replace, os.unlink = dying(os.replace), dying(os.unlink)
apply(plan)
"""


def _served(layout: Layout) -> set[str]:
    settings = layout.settings()
    state = DeviceState(settings, SpecSource(settings.spec_dirs), NumaLocator(layout.sysfs))
    state.sync()
    return set(state.resources())


def _temporary(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("kill_at", range(STEPS))
def test_a_scan_killed_at_any_step_is_finished_by_the_next(tmp_path: Path, kill_at: int) -> None:
    layout = Layout.under(tmp_path)
    out = layout.etc
    apply(plan_writes(BEFORE, out, spec_dirs=()))
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(out), str(kill_at)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert child.returncode == 9, child.stderr
    if kill_at < STEPS - 1:
        assert _temporary(out), "the killed scan left staged files"
    assert {"cdi-plugin.io/fuse", "cdi-plugin.io/tun"} <= _served(layout), (
        "the plugin keeps serving the kinds being rewritten"
    )
    mine = out / ".notes.txt.abcd1234.tmp"  # not a name the writer uses: never removed
    mine.write_text("keep")

    with locked(out) as lock:
        plan = plan_writes(AFTER, out, spec_dirs=())  # no ConflictError: every file is still owned
        apply(plan, tidy=lock.held)

    assert _temporary(out) == [mine.name]
    for s in AFTER:
        name = f"{s.kind.replace('/', '-')}.json"
        assert (out / name).read_bytes() == codec.encode(s, "json")
    assert not (out / "cdi-plugin.io-kvm.json").exists()
    assert {e.kind for e in read_record(out).values()} == {s.kind for s in AFTER}
    assert _served(layout) == {s.kind for s in AFTER}


def test_stale_files_of_another_user_are_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "cdi"
    apply(plan_writes(BEFORE[:1], out, spec_dirs=()))
    theirs = out / f".{RECORD_NAME}.abcd1234.tmp"
    theirs.write_text("not ours")
    os.chown(theirs, 65534, 65534)
    StagedFile(out / RECORD_NAME, b"staged by a killed scan")  # never committed
    with locked(out) as lock:
        apply(plan_writes(BEFORE[:1], out, spec_dirs=()), tidy=lock.held)
    assert _temporary(out) == [theirs.name]
