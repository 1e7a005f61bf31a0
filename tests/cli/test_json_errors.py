"""``--json`` on every error path: exactly one JSON object on stdout, and the one-line error on
stderr as without it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.cli.conftest import run_cdi_gen

BOMB = "a: &a [x, x]\nclasses: [*a, *a]\n"


def error_of(args: list[str | Path], code: int) -> str:
    done = run_cdi_gen(*args)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stdout.splitlines()
    obj = json.loads(line)
    assert list(obj) == ["error"]
    message: str = obj["error"]
    assert "\n" not in message
    assert message in done.stderr
    return message


def test_scan_errors(tmp_path: Path) -> None:
    out = tmp_path / "out"
    scan: list[str | Path] = ["scan", "--json", "--source", "simulated", "--output-dir", out]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    assert error_of([*scan, "--config", bomb], 1).endswith("YAML anchors and aliases are not allowed (&a)")
    os.mkfifo(tmp_path / "fifo.yaml")
    assert error_of([*scan, "--config", tmp_path / "fifo.yaml"], 2).endswith("is a FIFO, not a regular file")
    assert error_of([*scan, "--no-such-option"], 2) == "No such option '--no-such-option'."
    assert not out.exists()


def test_list_and_inspect_errors(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    assert (
        error_of(["list", "--json", "--spec-dir", missing], 1) == f"--spec-dir {missing}: no such directory"
    )
    assert "vendor/class=name" in error_of(["inspect", "--json", "--spec-dir", tmp_path, "bad name"], 2)
    unknown = error_of(["inspect", "--json", "--spec-dir", tmp_path, "example.com/gpu=card0"], 1)
    assert unknown.startswith("unknown device example.com/gpu=card0")


def test_a_json_report_that_holds_the_error_is_the_only_object(tmp_path: Path) -> None:
    spec = {
        "cdiVersion": "0.3.0",
        "kind": "example.com/gpu",
        "devices": [
            {"name": "card0", "containerEdits": {"deviceNodes": [{"path": "/dev/cdi-gen-no-such-node"}]}}
        ],
    }
    (tmp_path / "gpu.json").write_text(json.dumps(spec))
    done = run_cdi_gen("inspect", "--json", "--spec-dir", tmp_path, "example.com/gpu=card0")
    assert done.returncode == 1
    assert json.loads(done.stdout)["errors"]
    assert done.stderr.startswith("cdi-gen: error: a runtime would not create the container")
