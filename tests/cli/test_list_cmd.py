"""``cdi-gen list``: what resolves, from which file and priority, and what conflicts or is broken."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Invoke, report, run_cdi_gen
from tests.store.specfiles import write_spec


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    etc, run = tmp_path / "etc", tmp_path / "run"
    write_spec(etc, "gpu.json", "acme.example/gpu", "card0", "card1")
    write_spec(etc, "fuse-a.json", "cdi-plugin.io/fuse", "fuse")
    write_spec(etc, "fuse-b.yaml", "cdi-plugin.io/fuse", "fuse")
    write_spec(run, "gpu.json", "acme.example/gpu", "card1")
    (run / "broken.json").write_text('{"cdiVersion": "0.3.0"}')
    return etc, run


def test_list_json(cli: Invoke, dirs: tuple[Path, Path]) -> None:
    etc, run = dirs
    result = cli("list", "--json", "--spec-dir", etc, "--spec-dir", run)
    assert result.exit_code == 0, result.output
    assert report(result) == {
        "dirs": [str(etc), str(run)],
        "devices": [
            {"kind": "acme.example/gpu", "name": "card0", "qualifiedName": "acme.example/gpu=card0",
             "path": str(etc / "gpu.json"), "priority": 0},
            {"kind": "acme.example/gpu", "name": "card1", "qualifiedName": "acme.example/gpu=card1",
             "path": str(run / "gpu.json"), "priority": 1},
        ],
        "conflicts": [
            {"qualifiedName": "cdi-plugin.io/fuse=fuse", "priority": 0,
             "paths": [str(etc / "fuse-a.json"), str(etc / "fuse-b.yaml")]},
        ],
        "broken": [
            {"path": str(run / "broken.json"), "priority": 1,
             "problems": [{"pointer": "/", "rule": "required", "severity": "error",
                           "message": "missing required field 'kind'", "hint": ""}]},
        ],
        "warnings": [],
    }  # fmt: skip


def test_list_text(cli: Invoke, dirs: tuple[Path, Path]) -> None:
    etc, run = dirs
    result = cli("list", "--spec-dir", etc, "--spec-dir", run)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["kind", "name", "qualified", "name", "file", "priority"]
    assert lines[1].split() == [
        "acme.example/gpu",
        "card0",
        "acme.example/gpu=card0",
        str(etc / "gpu.json"),
        "0",
    ]
    assert lines[2].split() == [
        "acme.example/gpu",
        "card1",
        "acme.example/gpu=card1",
        str(run / "gpu.json"),
        "1",
    ]
    assert (
        f"conflict cdi-plugin.io/fuse=fuse: defined in {etc / 'fuse-a.json'}, {etc / 'fuse-b.yaml'} "
        "(priority 0); it does not resolve"
    ) in lines
    assert f"broken {run / 'broken.json'}" in lines
    assert "missing required field 'kind'" in result.stdout


def test_list_with_nothing_to_show(cli: Invoke, tmp_path: Path) -> None:
    result = cli("list", "--spec-dir", tmp_path)
    assert result.exit_code == 0
    assert result.stdout == f"no resolvable devices in {tmp_path}\n"
    assert report(cli("list", "--json", "--spec-dir", tmp_path)) == {
        "dirs": [str(tmp_path)],
        "devices": [],
        "conflicts": [],
        "broken": [],
        "warnings": [],
    }


def test_a_file_with_only_warnings_resolves_and_is_not_broken(cli: Invoke, tmp_path: Path) -> None:
    """A 'v' prefix on cdiVersion: the CDI Go library accepts it, so the devices resolve."""
    path = write_spec(tmp_path, "gpu.json", "acme.example/gpu", "card0")
    path.write_text(path.read_text().replace('"cdiVersion": "0.3.0"', '"cdiVersion": "v0.3.0"'))
    out = report(cli("list", "--json", "--spec-dir", tmp_path))
    assert [d["qualifiedName"] for d in out["devices"]] == ["acme.example/gpu=card0"]
    assert out["broken"] == []
    [warned] = out["warnings"]
    assert (warned["path"], warned["priority"]) == (str(path), 0)
    assert [(p["rule"], p["severity"]) for p in warned["problems"]] == [("version-prefix", "warning")]
    result = cli("list", "--spec-dir", tmp_path)
    assert result.exit_code == 0
    assert f"warning {path}: loads, with 1 warning" in result.stdout.splitlines()
    assert "broken" not in result.stdout


def test_a_missing_spec_dir_named_on_the_command_line_is_an_error(cli: Invoke, tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    for args in (["--spec-dir", missing], ["--json", "--spec-dir", tmp_path, "--spec-dir", missing]):
        result = cli("list", *args)
        assert (result.exit_code, result.stdout) == (1, "")
        assert result.stderr == f"cdi-gen: error: --spec-dir {missing}: no such directory\n"


def test_missing_default_spec_dirs_hold_no_devices(cli: Invoke, private_spec_dirs: tuple[Path, Path]) -> None:
    result = cli("list")
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == f"no resolvable devices in {private_spec_dirs[0]}, {private_spec_dirs[1]}\n"


def test_list_as_a_real_program(dirs: tuple[Path, Path]) -> None:
    etc, run = dirs
    done = run_cdi_gen("list", "--json", "--spec-dir", etc, "--spec-dir", run)
    assert done.returncode == 0, done.stderr
    assert [d["qualifiedName"] for d in report(done)["devices"]] == [
        "acme.example/gpu=card0",
        "acme.example/gpu=card1",
    ]
