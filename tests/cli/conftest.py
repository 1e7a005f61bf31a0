"""Running ``cdi-gen`` in-process (click's runner), as a real program, and on a terminal."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cdi_plugin.cli.gen import main
from tests.store.unprivileged import VENV_BIN

CDI_GEN = VENV_BIN / "cdi-gen"
REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "specs"

Invoke = Callable[..., Result]


@pytest.fixture
def cli() -> Invoke:
    def invoke(*args: str | Path) -> Result:
        return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=True)

    return invoke


def run_cdi_gen(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [str(CDI_GEN), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        env=env,
    )


def report(result: Result | subprocess.CompletedProcess[str]) -> Any:
    return json.loads(result.stdout)


_ESCAPES = re.compile(r"\x1b\[[0-9;]*m")


def run_on_terminal(*args: str | Path, columns: int, timeout: float = 60) -> tuple[int, list[str], str]:
    """Run ``cdi-gen`` with stdin and stdout on a pseudo-terminal ``columns`` wide (stderr piped).

    Returns the exit status, the lines the terminal received (colours stripped, trailing spaces
    kept) and stderr.
    """
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TTY_COMPATIBLE")}
    try:
        proc = subprocess.Popen(
            [str(CDI_GEN), *map(str, args)], stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env
        )
    finally:
        os.close(slave)
    received = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([master], [], [], deadline - time.monotonic())[0]:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the program closed the terminal
                break
            if not chunk:
                break
            received += chunk
        stderr = proc.stderr.read().decode() if proc.stderr else ""
        status = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
    text = _ESCAPES.sub("", received.decode()).replace("\r\n", "\n")
    return status, text.splitlines(), stderr
