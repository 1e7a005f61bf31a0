"""Running a command as an unprivileged user, since root ignores file permissions."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
VENV_BIN = Path(sys.executable).parent


def run_as_nobody(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NOBODY, *args], capture_output=True, text=True, timeout=timeout, check=False)


def python_as_nobody(code: str) -> subprocess.CompletedProcess[str]:
    return run_as_nobody([sys.executable, "-c", code])


@contextmanager
def world_dir() -> Iterator[Path]:
    """A root-owned directory in /tmp that anyone can traverse and read but only root can write.

    pytest's own tmp_path is private to root, so the unprivileged user could not reach a file in it.
    """
    path = Path(tempfile.mkdtemp(prefix="cdi-plugin-test-", dir="/tmp"))
    try:
        path.chmod(0o755)
        yield path
    finally:
        shutil.rmtree(path)
