"""A YAML alias bomb and a billion-laughs config, through the real programs: a one-line error,
quickly, in little memory (the expansion never happens)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import CDI_GEN
from tests.deviceplugin.test_hostile_specs import alias_bomb
from tests.store.unprivileged import VENV_BIN

pytestmark = pytest.mark.timeout(120)

#: The test only guards against a hang; bench figures, not tests, say how fast it is.
DEADLINE = 30.0
MAX_RSS_KIB = 100 * 1024


def billion_laughs_config(width: int = 10, levels: int = 10) -> bytes:
    """About 1 KB of YAML that stands for ``width ** levels`` strings."""
    lines = ["laugh0: &laugh0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [
        f"laugh{i}: &laugh{i} [" + ", ".join([f"*laugh{i - 1}"] * width) + "]" for i in range(1, levels)
    ]
    return (
        "classes:\n  - vendor: ab\n    class: cd\n    match: {kernel: x}\n" + "\n".join(lines) + "\n"
    ).encode()


#: Runs a program and writes its peak RSS (KiB) to a file. The program is spawned from this small
#: process rather than from pytest, whose memory a forked child would count as its own until exec.
#: The ceiling on the address space makes a regression fail the test instead of the machine.
_MEASURE = """
import os, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as fh:
    fh.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_measured(args: list[str], tmp_path: Path) -> tuple[int, str, int]:
    """Exit status, stderr and stdout, and peak RSS (KiB) of one process; a process still running
    after :data:`DEADLINE` seconds is killed and fails the test."""
    out, rss = tmp_path / "output", tmp_path / "rss"
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-c", _MEASURE, str(rss), *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "200"},
            start_new_session=True,
        )
        try:
            code = proc.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return code, out.read_text(), int(rss.read_text())


def test_validate_refuses_a_200_kb_alias_bomb_in_one_line(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb("ex.io/bomb", 200_000))
    assert 190_000 < bomb.stat().st_size <= 200_000
    code, output, rss = run_measured([str(CDI_GEN), "validate", str(bomb)], tmp_path)
    assert code == 1
    errors = [line for line in output.splitlines() if str(bomb) in line]
    assert errors == [f"✗ {bomb}: line 4: YAML anchors and aliases are not allowed (&d)"]
    assert rss < MAX_RSS_KIB


@pytest.mark.parametrize(
    "command",
    [
        [str(CDI_GEN), "scan", "--dry-run", "--output-dir", "{out}", "--config", "{config}"],
        [str(VENV_BIN / "cdi-plugin"), "serve", "--plugin-dir", "{out}", "--config", "{config}"],
    ],
    ids=["cdi-gen scan", "cdi-plugin serve"],
)
def test_a_billion_laughs_config_is_a_one_line_error(tmp_path: Path, command: list[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_bytes(billion_laughs_config())
    assert 900 <= config.stat().st_size <= 1100
    args = [a.format(out=tmp_path / "out", config=config) for a in command]
    code, output, rss = run_measured(args, tmp_path)
    assert code == 1
    program = Path(args[0]).name
    assert (
        output == f"{program}: error: {config}: line 5: YAML anchors and aliases are not allowed (&laugh0)\n"
    )
    assert rss < MAX_RSS_KIB
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
