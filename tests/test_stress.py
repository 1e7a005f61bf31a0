"""tests/stress.sh and its loop churner (tests/loopchurn.py): the load they make, and that they
leave nothing behind and touch no loop device of another process."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.watch.loops import AVAILABLE, Loops, free_numbers, sys_path

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not AVAILABLE, reason="needs root and /dev/loop-control (CI runs as root)"),
]

# The churner runs for real; pytest, ruff and mypy are stubs. The first pytest run waits until
# stress.sh's load runs (its children; the churner has made its file), notes it, and exits with
# $STATUS.
STUB_PYTHON = """#!/bin/sh
case "$*" in
  *"-m tests.loopchurn"*) exec "$REAL_PYTHON" "$@";;
  *"-m pytest"*)
    if [ -z "${HOST_SPECS_LAYERS:-}" ]; then
      stress=$(ps -o ppid= -p "$PPID" | tr -d ' ')
      i=0
      until ps --ppid "$stress" -o pid=,args= | grep -e 'while :; do :; done' -e loopchurn > "$LOG.load" &&
            [ "$(wc -l < "$LOG.load")" -eq 3 ] &&
            [ -e "$(grep loopchurn "$LOG.load" | awk '{print $NF}')/disk" ]; do
        i=$((i + 1)); [ "$i" -lt 600 ] || exit 99; sleep 0.1
      done
    fi
    echo "pytest: ${*#-m pytest }" >> "$LOG"; exit "$STATUS";;
  *) echo "other: $*" >> "$LOG";;
esac
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("status", [0, 3])
def test_stress_runs_pytest_under_load_and_stops_its_load(tmp_path: Path, status: int) -> None:
    (tmp_path / "tests").mkdir()
    for name in ("stress.sh", "check.sh", "host_specs.sh"):
        shutil.copy2(ROOT / "tests" / name, tmp_path / "tests" / name)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(STUB_PYTHON)
    (bin_dir / "cdi-gen").write_text('#!/bin/sh\necho "{}" > /etc/cdi/cdi-plugin.io-fuse.json\n')
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    log = tmp_path / "log"
    env = {
        "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
        "LOG": str(log),
        "STATUS": str(status),
        "REAL_PYTHON": sys.executable,
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [str(tmp_path / "tests" / "stress.sh"), "-q", "-k", "x y"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == status, done.stderr
    runs = log.read_text().splitlines()
    assert runs[0] == "pytest: -q -k x y", "no ruff, mypy or import contracts: the pytest part only"
    assert runs[1:] == ([] if status else ["pytest: -m not image -q -k x y"])
    load = [line.split(None, 1) for line in (tmp_path / "log.load").read_text().splitlines()]
    assert [args for _, args in load if "loopchurn" not in args] == ["sh -c while :; do :; done"] * 2
    [work] = [args.split()[-1] for _, args in load if "loopchurn" in args]
    assert not any(alive(int(pid)) for pid, _ in load), "the load is stopped"
    assert not Path(work).exists(), "its files are removed"
    assert f"tests/stress.sh: pytest exited with {status} after " in done.stderr
    assert " loop devices created and removed" in done.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_churner_removes_its_loop_devices_and_no_other(tmp_path: Path, sig: signal.Signals) -> None:
    first = 300_000 + (os.getpid() % 1000) * 32
    numbers = range(first, first + 16)
    assert not any(sys_path(n).exists() for n in numbers), "a free range"
    with Loops() as loops:
        loops.add(first)  # another process's device where the churner starts
        churner = subprocess.Popen(
            [sys.executable, "-m", "tests.loopchurn", str(tmp_path), str(first)],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not any(sys_path(n).exists() for n in numbers[1:]):
                assert churner.poll() is None, churner.communicate()[1]
                assert time.monotonic() < deadline, "the churner made no loop device"
                time.sleep(0.005)
            churner.send_signal(sig)
            _, stderr = churner.communicate(timeout=60)
        finally:
            if churner.poll() is None:
                churner.kill()
                churner.wait()
        assert churner.returncode == 0, stderr
        assert re.fullmatch(r"tests/loopchurn: [0-9]+ loop devices created and removed\n", stderr), stderr
        assert sys_path(first).exists(), "the other process's device is left alone"
        assert [n for n in numbers[1:] if sys_path(n).exists()] == [], "its own are removed"
    assert list(tmp_path.iterdir()) == [tmp_path / "disk"], "the file it was given a directory for"


def test_a_loop_number_another_process_took_is_never_removed() -> None:
    """What the churner and the tests rely on when two processes pick the same free number."""
    (n,) = free_numbers(1)
    with Loops() as theirs:
        theirs.add(n)
        with Loops() as ours, pytest.raises(FileExistsError):
            ours.add(n)
        assert sys_path(n).exists()
