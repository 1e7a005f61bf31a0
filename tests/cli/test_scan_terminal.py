"""``cdi-gen scan`` on a terminal: a table where it fits without breaking a kind, a device name or
its nodes; on a narrower one, a line per file and per device, each whole (the terminal wraps it)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import run_cdi_gen, run_on_terminal


def _scan(out: Path, columns: int) -> list[str]:
    status, lines, stderr = run_on_terminal(
        "scan", "--source", "simulated", "--dry-run", "--output-dir", out, columns=columns
    )
    assert status == 0, stderr
    return lines


def _expected(out: Path) -> dict[str, list[tuple[str, str]]]:
    """Each file the scan would write, with its devices and their host nodes, from --json."""
    done = run_cdi_gen("scan", "--json", "--source", "simulated", "--dry-run", "--output-dir", out)
    assert done.returncode == 0, done.stderr
    return {
        f["path"]: [(d["name"], " ".join(d["hostNodes"])) for d in f["devices"]]
        for f in json.loads(done.stdout)["files"]
    }


def test_on_a_40_column_terminal_paths_names_and_nodes_are_whole(tmp_path: Path) -> None:
    out = tmp_path / "a-long-output-directory-name"
    lines = _scan(out, columns=40)
    for path, devices in _expected(out).items():
        assert any(line.split("  ")[1:2] == [path] for line in lines), path
        for name, nodes in devices:
            assert f"  {name}  {nodes}" in lines
        assert f"+++ {path}" in lines, "a line of the diff was broken"


def test_on_a_wide_terminal_a_table(tmp_path: Path) -> None:
    out = tmp_path / "out"
    lines = _scan(out, columns=200)
    assert lines[0].split() == ["kind", "device", "host", "nodes", "file", "status"]
    for path, devices in _expected(out).items():
        [row] = [line for line in lines if f"  {path}  " in line]
        name, nodes = devices[0]
        assert row.split()[1:3] == [name, nodes]
