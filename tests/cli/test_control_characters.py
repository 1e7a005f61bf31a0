"""Text from spec files and their names reaches a terminal escaped: a file name, a key, a value or
an error holding an escape sequence can neither recolour, clear nor retitle the terminal, and
never starts a line of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cdi.helpers import doc
from tests.cli.conftest import Invoke, run_cdi_gen

#: Colours the text red, clears the screen, sets the window title, and overrides the text direction.
HOSTILE = "\x1b[31m\x1b[2J\x1b]0;owned\x07\u202e"
ESCAPED = "\\x1b[31m\\x1b[2J\\x1b]0;owned\\x07\\u202e"


def _write(directory: Path, name: str, obj: object) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(json.dumps(obj))
    return path


def _assert_escaped(output: str) -> None:
    assert not {"\x1b", "\x07", "\u202e"} & set(output)
    assert ESCAPED in output


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    """A valid spec whose file name, env, mount paths and annotation key hold escape sequences,
    and a broken one whose unknown key does."""
    edits = {
        "env": [f"A{HOSTILE}=1"],
        "mounts": [{"hostPath": f"/h{HOSTILE}", "containerPath": f"/c{HOSTILE}"}],
    }
    directory = tmp_path / "specs"
    _write(directory, f"a{HOSTILE}.json", doc("0.6.0", "example.com/ok", edits, annotations={HOSTILE: "v"}))
    _write(directory, "b.json", doc(kind="example.com/broken", **{HOSTILE: 1}))
    return directory


def test_validate_escapes_file_names_keys_and_values(spec_dir: Path) -> None:
    done = run_cdi_gen("validate", spec_dir)
    assert done.returncode == 1
    _assert_escaped(done.stdout)
    assert len([line for line in done.stdout.splitlines() if "a\\x1b[31m" in line]) == 1


def test_list_escapes_file_names_and_problems_on_both_streams(spec_dir: Path) -> None:
    done = run_cdi_gen("list", "--spec-dir", spec_dir)
    assert done.returncode == 1
    _assert_escaped(done.stdout)
    _assert_escaped(done.stderr)
    [row] = done.stdout.splitlines()
    assert row.split("\t")[1] == f"{spec_dir}/a{ESCAPED}.json"


def test_inspect_escapes_the_file_name_and_the_edits(spec_dir: Path) -> None:
    done = run_cdi_gen("inspect", "--spec-dir", spec_dir, "example.com/ok=widget0")
    assert done.returncode == 0, done.stderr
    _assert_escaped(done.stdout)
    assert f"  A{ESCAPED}=1  (from example.com/ok=widget0)" in done.stdout.splitlines()
    assert f"  /h{ESCAPED} on /c{ESCAPED}  (from example.com/ok=widget0)" in done.stdout.splitlines()


def test_an_error_line_escapes_a_file_name(cli: Invoke, tmp_path: Path) -> None:
    first = _write(tmp_path / "specs", f"1{HOSTILE}.json", doc(kind="example.com/dup"))
    _write(tmp_path / "specs", "2.json", doc(kind="example.com/dup"))
    result = cli("inspect", "--spec-dir", first.parent, "example.com/dup=widget0")
    assert result.exit_code == 1
    _assert_escaped(result.stderr)
    assert len(result.stderr.splitlines()) == 1
