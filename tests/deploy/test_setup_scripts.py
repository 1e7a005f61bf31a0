"""tests/unprivileged_access.sh, which tests/setup.sh runs: the unprivileged test user must reach a
checkout whatever directory it was cloned into."""

from __future__ import annotations

import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.store.unprivileged import run_as_nobody

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "unprivileged_access.sh"

pytestmark = pytest.mark.root


@pytest.fixture
def private_parent() -> Iterator[Path]:
    """A 0700 directory, as ``mktemp -d`` makes, holding a checkout ``co`` (0700 too)."""
    parent = Path(tempfile.mkdtemp(prefix="cdi-clone-", dir="/tmp"))
    try:
        checkout = parent / "co"
        checkout.mkdir(mode=0o700)
        shutil.copy(ROOT / "pyproject.toml", checkout)
        yield parent
    finally:
        shutil.rmtree(parent)


def test_a_checkout_below_a_private_directory_is_opened_for_search_only(private_parent: Path) -> None:
    checkout = private_parent / "co"
    assert run_as_nobody(["test", "-r", str(checkout / "pyproject.toml")]).returncode == 1
    done = subprocess.run([str(SCRIPT), str(checkout)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        f"tests/unprivileged_access.sh: let other users search {private_parent} (chmod o+x) for the tests "
        "run as uid 65534\n"
    )
    assert stat.S_IMODE(private_parent.stat().st_mode) == 0o701, "search, not listing"
    assert stat.S_IMODE(checkout.stat().st_mode) == 0o755
    assert run_as_nobody(["test", "-r", str(checkout / "pyproject.toml")]).returncode == 0
    again = subprocess.run([str(SCRIPT), str(checkout)], capture_output=True, text=True, check=False)
    assert (again.returncode, again.stderr) == (0, "")


def test_an_unreadable_checkout_is_an_error_naming_the_file(private_parent: Path) -> None:
    checkout = private_parent / "co"
    (checkout / "pyproject.toml").chmod(0o600)
    done = subprocess.run([str(SCRIPT), str(checkout)], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert done.stderr.endswith(
        f"tests/unprivileged_access.sh: uid 65534 cannot read {checkout}/pyproject.toml; some tests run "
        "as that user: make the checkout readable by other users\n"
    )


STUB_PYTHON = """#!/bin/sh
# ruff, mypy: pass. pytest: log the arguments, exit $FIRST (as it is) or $SECOND (in host_specs.sh)
case "$*" in
  *"-m pytest"*)
    if [ -n "${HOST_SPECS_LAYERS:-}" ]; then
      echo "second $(ls /etc/cdi | tr '\\n' ' '): ${*#-m pytest }" >> "$LOG"; exit "$SECOND"
    fi
    echo "first: ${*#-m pytest }" >> "$LOG"; exit "$FIRST";;
esac
"""


@pytest.fixture
def check_sh(tmp_path: Path) -> Path:
    """A copy of tests/check.sh and tests/host_specs.sh whose tools are stubs."""
    (tmp_path / "tests").mkdir()
    for name in ("check.sh", "host_specs.sh"):
        shutil.copy2(ROOT / "tests" / name, tmp_path / "tests" / name)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    stubs = {
        "python": STUB_PYTHON,
        "lint-imports": "#!/bin/sh\n",
        "cdi-gen": '#!/bin/sh\necho "{}" > /etc/cdi/cdi-plugin.io-fuse.json\n',
    }
    for name, text in stubs.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return tmp_path / "tests" / "check.sh"


@pytest.mark.parametrize(
    ("first", "second", "status"),
    [(0, 0, 0), (1, 0, 1), (0, 1, 1), (0, 2, 2), (0, 5, 0), (5, 0, 5)],
)
def test_check_sh_runs_pytest_twice_and_fails_if_either_run_fails(
    check_sh: Path, tmp_path: Path, first: int, second: int, status: int
) -> None:
    log = tmp_path / "pytest.log"
    env = {"PATH": "/usr/bin:/bin", "LOG": str(log), "FIRST": str(first), "SECOND": str(second)}
    done = subprocess.run(
        [str(check_sh), "-q", "-k", "x y"], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == status, done.stdout + done.stderr
    runs = log.read_text().splitlines()
    assert runs[0] == "first: -q -k x y"
    if first == 0:
        # exit 5 in the second run: every test selected was an image test
        assert runs[1:] == ["second cdi-plugin.io-fuse.json vendor.example-gpu.json : -m not image -q -k x y"]
    else:
        assert runs[1:] == []
