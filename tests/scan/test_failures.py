"""Bad input and hostile environments: a one-line error, exit 1, and the specs on disk untouched.

Permission cases run ``cdi-gen`` as nobody (root ignores file modes); a full disk and a read-only
file system are real mounts inside a private mount namespace (``unshare -m``), so the host never
sees them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from cdi_plugin.discovery.fixture import dumps
from cdi_plugin.discovery.model import DiscoveredDevice
from tests.generate.hosts import WORKSTATION, char
from tests.scan.helpers import CDI_GEN, PYTHON, REPO, renamed_fuse_mode, run_cdi_gen, snapshot


@pytest.fixture
def world() -> Iterator[Path]:
    """A temporary directory nobody (65534) can enter (pytest's tmp_path is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="cdi-gen-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def record_host(directory: Path, devices: Sequence[DiscoveredDevice], name: str) -> Path:
    path = directory / name
    path.write_text(dumps(devices))
    path.chmod(0o644)
    return path


@pytest.fixture
def populated(world: Path) -> tuple[Path, Path, Path]:
    """An output directory with specs from an earlier scan, and a host that changed since."""
    out = world / "cdi"
    before = record_host(world, WORKSTATION, "before.json")
    after = record_host(world, renamed_fuse_mode(0o660), "after.json")
    run_cdi_gen("scan", "--source", f"fixture:{before}", "--output-dir", out, check=0)
    return out, before, after


def scan_after(populated: tuple[Path, Path, Path], *extra: str | Path, user: bool = False) -> str:
    out, _, after = populated
    result = run_cdi_gen(
        "scan", "--source", f"fixture:{after}", "--output-dir", out, *extra, user=user, check=1
    )
    assert result.stdout == ""
    assert result.stderr.startswith("cdi-gen: error: ")
    assert result.stderr.count("\n") == 1, "one line"
    return result.stderr.removeprefix("cdi-gen: error: ").rstrip("\n")


CONFIGS = {
    "unknown-key": (
        "classes:\n  - {vendor: example.com, class: widget, match: {subsystem: misc}, nmae: [kernel]}\n",
        "classes[0].nmae: unknown field 'nmae'",
    ),
    "bad-glob": (
        "classes:\n  - {vendor: example.com, class: widget, match: {subsystem: misc, kernel: 'fuse[0-9'}}\n",
        "classes[0].match.kernel: invalid 'kernel': \"fuse[0-9\" (a glob or a list of globs on kernel names",
    ),
    "bad-vendor": (
        "classes:\n  - {vendor: -example.com, class: widget, match: {subsystem: misc}}\n",
        "classes[0].vendor: invalid 'vendor': \"-example.com\" (a domain you own",
    ),
    "one-letter-class": (
        "classes:\n  - {vendor: example.com, class: w, match: {subsystem: misc}}\n",
        "classes[0].class: invalid 'class': \"w\" (2-63 characters",
    ),
    "not-yaml": ("classes: [\n", "invalid YAML"),
}


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_a_bad_config_changes_nothing(case: str, populated: tuple[Path, Path, Path], world: Path) -> None:
    text, message = CONFIGS[case]
    config = world / "config.yaml"
    config.write_text(text)
    before = snapshot(populated[0])
    error = scan_after(populated, "--config", config)
    assert error.startswith(f"{config}: {message}"), error
    assert snapshot(populated[0]) == before


def test_a_missing_config(populated: tuple[Path, Path, Path], world: Path) -> None:
    before = snapshot(populated[0])
    assert (
        scan_after(populated, "--config", world / "nope.yaml")
        == f"{world}/nope.yaml: no such file or directory"
    )
    assert snapshot(populated[0]) == before


@pytest.mark.root
def test_an_unreadable_config(populated: tuple[Path, Path, Path], world: Path) -> None:
    config = world / "secret.yaml"
    config.write_text("classes: []\n")
    config.chmod(0o600)
    before = snapshot(populated[0])
    assert scan_after(populated, "--config", config, user=True) == f"{config}: permission denied"
    assert snapshot(populated[0]) == before


@pytest.mark.root
def test_an_unwritable_output_directory(populated: tuple[Path, Path, Path]) -> None:
    out = populated[0]
    before = snapshot(out)
    error = scan_after(populated, user=True)
    assert error == (
        f"{out}/cdi-plugin.io-fuse.json: cannot create a file in {out}: Permission denied; "
        "nothing was changed"
    )
    assert snapshot(out) == before


@pytest.mark.root
def test_an_output_directory_that_cannot_be_created(world: Path) -> None:
    world.chmod(0o755)
    host = record_host(world, WORKSTATION, "host.json")
    result = run_cdi_gen(
        "scan", "--source", f"fixture:{host}", "--output-dir", world / "new" / "cdi", user=True, check=1
    )
    assert result.stderr == (
        f"cdi-gen: error: {world}/new/cdi: cannot create the spec directory: Permission denied\n"
    )
    assert not (world / "new").exists()


def in_namespace(script: str) -> subprocess.CompletedProcess[str]:
    """Run a shell script in a private mount namespace (its mounts vanish with it)."""
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-euc", script],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip


@pytest.mark.root
def test_a_read_only_file_system(populated: tuple[Path, Path, Path]) -> None:
    out, _, after = populated
    before = snapshot(out)
    result = in_namespace(
        f"mount --bind {out} {out}\n"
        f"mount -o remount,ro,bind {out}\n"
        f"{CDI_GEN} scan --source fixture:{after} --output-dir {out} || echo exit=$?\n"
    )
    assert result.stdout.endswith("exit=1\n"), result.stdout + result.stderr
    assert result.stderr == (
        f"cdi-gen: error: {out}/cdi-plugin.io-fuse.json: cannot create a file in {out}: "
        "Read-only file system; nothing was changed\n"
    )
    assert snapshot(out) == before


@pytest.mark.root
def test_a_full_disk(world: Path) -> None:
    out = world / "cdi"
    out.mkdir()
    first = record_host(world, WORKSTATION, "before.json")
    bigger = [*WORKSTATION, *(DiscoveredDevice(
        subsystem="misc", sys_name=f"binder{i}", sys_path=f"/sys/devices/virtual/misc/binder{i}",
        devnode=f"/dev/binderfs/binder{i}", node=char(10, 100 + i, 0o666),
    ) for i in range(200))]  # fmt: skip
    second = record_host(world, bigger, "after.json")
    result = in_namespace(
        f"mount -t tmpfs -o size=128k,mode=755 tmpfs {out}\n"
        f"{CDI_GEN} scan --source fixture:{first} --output-dir {out} >/dev/null\n"
        f"dd if=/dev/zero of={out}/filler bs=1k 2>/dev/null || true\n"
        f"{PYTHON} -m tests.scan.helpers {out} > {world}/before.snap\n"
        f"{CDI_GEN} scan --source fixture:{second} --output-dir {out} || echo exit=$?\n"
        f"{PYTHON} -m tests.scan.helpers {out} > {world}/after.snap\n"
    )
    assert result.stdout.endswith("exit=1\n"), result.stdout + result.stderr
    error = result.stderr.splitlines()[-1]
    assert error.startswith(f"cdi-gen: error: {out}/cdi-plugin.io-")
    assert error.endswith(": cannot write: No space left on device; nothing was changed")
    before = json.loads((world / "before.snap").read_text())
    assert len([n for n in before if n.endswith(".json")]) == 10
    assert json.loads((world / "after.snap").read_text()) == before
    assert list(out.iterdir()) == [], "the tmpfs lived only in the namespace"


@pytest.mark.root
def test_a_bad_source_file(world: Path) -> None:
    host = world / "host.json"
    host.write_text('[{"subsystem": "misc"}]')
    result = run_cdi_gen("scan", "--source", f"fixture:{host}", "--output-dir", world / "out", check=1)
    assert result.stderr.startswith(f"cdi-gen: error: {host}")
    assert not (world / "out").exists()
