"""A spec with an error in each of thousands of entries: the schema pass checks a bounded part of
it, the text reports show a bounded number of rows per file, and ``--json`` still lists what the
rules found."""

from __future__ import annotations

import json
from pathlib import Path

from cdi_plugin.cdi import schema
from tests.cdi.helpers import doc
from tests.cli.conftest import Invoke, report, run_cdi_gen

SHOWN = 100


def _bad_env(directory: Path, entries: int) -> Path:
    """A spec whose every env entry breaks the CDI Go library's NAME=VALUE rule."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "env.json"
    path.write_text(json.dumps(doc(edits={"env": ["=x"] * entries})))
    return path


def test_the_schema_checks_a_bounded_part_of_an_invalid_document() -> None:
    wrong_types = doc(edits={"env": [1] * (3 * schema.MAX_CHECKED_VALUES)})
    found = schema.problems(wrong_types)
    assert schema.MAX_CHECKED_VALUES // 2 < len(found) <= schema.MAX_CHECKED_VALUES
    assert found[0].pointer == "/devices/0/containerEdits/env/0"
    assert {p.rule for p in found} == {"type"}


def test_the_cut_adds_no_problem_of_its_own() -> None:
    """Past the values checked, arrays keep an entry and objects their required fields."""
    late = {
        "cdiVersion": "0.3.0",
        "kind": "example.com/late",
        "containerEdits": {"env": [1] * schema.MAX_CHECKED_VALUES},
        "devices": [{"containerEdits": {"deviceNodes": [{"path": "/dev/late"}]}, "name": "late"}],
    }
    found = schema.problems(late)
    assert found
    assert {p.rule for p in found} == {"type"}
    assert all(p.pointer.startswith("/containerEdits/env/") for p in found)


def test_validate_shows_the_first_problems_of_a_file_and_counts_the_rest(cli: Invoke, tmp_path: Path) -> None:
    path = _bad_env(tmp_path, SHOWN + 50)
    text = cli("validate", path)
    assert text.exit_code == 1
    rows = [line for line in text.stdout.splitlines() if "env-format" in line]
    assert len(rows) == SHOWN
    assert "50 more problems (--json lists them all)" in text.stdout
    full = cli("validate", "--json", path)
    assert len(report(full)["files"][0]["problems"]) == SHOWN + 50


def test_list_shows_the_first_problems_of_a_broken_file_and_counts_the_rest(tmp_path: Path) -> None:
    path = _bad_env(tmp_path / "specs", SHOWN + 1)
    done = run_cdi_gen("list", "--spec-dir", path.parent)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == SHOWN + 2  # no resolvable devices, the problems shown, the count
    assert lines[-1] == f"broken {path}: 1 more problem (--json lists them all)"


def test_a_document_wrong_only_beyond_the_values_checked_first_is_still_wrong() -> None:
    late_error = doc(edits={"env": ["A=1"] * schema.MAX_CHECKED_VALUES + [5]})
    found = schema.problems(late_error)
    assert [(p.pointer, p.rule) for p in found] == [
        (f"/devices/0/containerEdits/env/{schema.MAX_CHECKED_VALUES}", "type")
    ]
