"""Bad input to ``cdi-gen validate``: one line naming the file and the cause, exit 1, no traceback."""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from cdi_plugin.errors import SpecLoadError
from tests.cli.conftest import CDI_GEN, Invoke, report, run_cdi_gen
from tests.store.unprivileged import run_as_nobody, world_dir


def malformed_json(d: Path) -> Path:
    path = d / "malformed.json"
    path.write_text('{"cdiVersion": ')
    return path


def malformed_yaml(d: Path) -> Path:
    path = d / "malformed.yaml"
    path.write_text("cdiVersion: 0.3.0\ndevices: [a, b\n")
    return path


def empty(d: Path) -> Path:
    path = d / "empty.json"
    path.write_text("")
    return path


def missing_directory(d: Path) -> Path:
    return d / "no" / "such" / "dir"


def ten_megabytes(d: Path) -> Path:
    path = d / "huge.json"
    device = b'{"name": "d", "containerEdits": {"deviceNodes": [{"path": "/dev/d"}]}}'
    head = b'{"cdiVersion": "0.3.0", "kind": "example.com/huge", "devices": ['
    path.write_bytes(head + b", ".join([device] * 150_000) + b"]}")
    assert path.stat().st_size > 10_000_000
    return path


def binary_garbage(d: Path) -> Path:
    path = d / "garbage.json"
    path.write_bytes(random.Random(7).randbytes(4096))
    return path


def fifo(d: Path) -> Path:
    path = d / "fifo.json"
    os.mkfifo(path)
    return path


def too_deep(d: Path) -> Path:
    path = d / "deep.yaml"
    path.write_text("devices: " + "[" * 100_000)
    return path


CASES: list[tuple[Callable[[Path], Path], str]] = [
    (malformed_json, r"invalid JSON: line 1 column 16: Expecting value"),
    (malformed_yaml, r"invalid YAML: line 3 column 1: did not find expected ',' or '\]'"),
    (empty, r"the file is empty \(no spec data\)"),
    (missing_directory, r"no such file or directory"),
    (ten_megabytes, r"the file is larger than 4 MiB, too large for a device spec"),
    (binary_garbage, r"not UTF-8 text \(binary data at byte \d+\)|binary data \(NUL byte at offset \d+\)"),
    (fifo, r"is a FIFO, not a device spec"),
    (too_deep, r"line 1: nested more than 64 levels deep, which no spec is"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("make", "cause"), CASES, ids=[c[0].__name__ for c in CASES])
def test_one_line_naming_the_file_and_the_cause(
    tmp_path: Path, make: Callable[[Path], Path], cause: str
) -> None:
    path = make(tmp_path)
    done = run_cdi_gen("validate", path)
    assert done.returncode == 1
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout
    assert re.fullmatch(f"✗ {re.escape(str(path))}: ({cause})", lines[0]), lines[0]
    assert lines[1] == "1 file: 0 valid, 1 invalid"
    assert "Traceback" not in done.stdout + done.stderr


#: In-process, without the deeply nested file: if its check regressed, libyaml would crash pytest itself.
IN_PROCESS = [c for c in CASES if c[0] is not too_deep]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("make", "cause"), IN_PROCESS, ids=[c[0].__name__ for c in IN_PROCESS])
def test_json_report_of_bad_input(
    cli: Invoke, tmp_path: Path, make: Callable[[Path], Path], cause: str
) -> None:
    path = make(tmp_path)
    result = cli("validate", "--json", path)
    assert result.exit_code == 1
    [file] = report(result)["files"]
    assert (file["path"], file["valid"]) == (str(path), False)
    [problem] = file["problems"]
    assert re.fullmatch(cause, problem["message"])
    assert problem["severity"] == "error"


@pytest.mark.root
def test_unreadable_file_as_an_unprivileged_user() -> None:
    with world_dir() as d:
        path = d / "secret.json"
        path.write_text("{}")
        path.chmod(0o600)
        done = run_as_nobody([str(CDI_GEN), "validate", str(path)])
    assert done.returncode == 1, done.stderr
    assert done.stderr == ""
    assert done.stdout.splitlines() == [f"✗ {path}: permission denied", "1 file: 0 valid, 1 invalid"]


@pytest.mark.root
def test_unreadable_directory_as_an_unprivileged_user() -> None:
    with world_dir() as d:
        private = d / "private"
        private.mkdir(mode=0o700)
        (private / "a.json").write_text("{}")
        done = run_as_nobody([str(CDI_GEN), "validate", "--json", str(private)])
    assert done.returncode == 1, done.stderr
    [file] = json.loads(done.stdout)["files"]
    assert file["path"] == str(private)
    assert [(p["rule"], p["message"]) for p in file["problems"]] == [("unreadable", "permission denied")]


def test_unexpected_failure_is_one_line_without_debug(cli: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*_: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("cdi_plugin.store.validation.validate_paths", explode)
    result = cli("validate", "x.json")
    assert result.exit_code == 1
    assert result.stderr == "cdi-gen: error: RuntimeError: boom (run with --debug for the traceback)\n"
    assert result.stdout == ""
    debug = cli("--debug", "validate", "x.json")
    assert isinstance(debug.exception, RuntimeError)
    assert debug.exit_code == 1


def test_package_errors_are_shown_as_their_message(cli: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_: object) -> None:
        raise SpecLoadError("/etc/cdi/x.json", "/kind", "kind-format", "invalid kind 'x'")

    monkeypatch.setattr("cdi_plugin.store.validation.validate_paths", fail)
    result = cli("validate", "x.json")
    assert result.exit_code == 1
    assert result.stderr == "cdi-gen: error: /etc/cdi/x.json: /kind: invalid kind 'x'\n"


def test_an_unexpected_failure_with_a_huge_text_is_one_short_line(
    cli: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(*_: object) -> None:
        raise RuntimeError("boom\n" + "x" * (1 << 20))

    monkeypatch.setattr("cdi_plugin.store.validation.validate_paths", explode)
    result = cli("validate", "x.json")
    assert result.exit_code == 1
    assert result.stderr.startswith("cdi-gen: error: RuntimeError: boom\\n")
    assert result.stderr.endswith(" (run with --debug for the traceback)\n")
    assert result.stderr.count("\n") == 1
    assert len(result.stderr) < 500
