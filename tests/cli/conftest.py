"""Running ``cdi-gen`` in-process (click's runner) and as a real program."""

from __future__ import annotations

import json
import os
import subprocess
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
