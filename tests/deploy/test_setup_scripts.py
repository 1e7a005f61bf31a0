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
