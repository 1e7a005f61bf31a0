"""The record of the spec files cdi-gen wrote; anything unusable in it owns nothing."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import pytest

from cdi_plugin.store import ownership
from cdi_plugin.store.ownership import RECORD_NAME, OwnedFile


def own(directory: Path, name: str, kind: str, data: bytes) -> OwnedFile:
    (directory / name).write_bytes(data)
    return OwnedFile(name, kind, ownership.digest(data))


def test_digest_is_sha256_hex() -> None:
    assert ownership.digest(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_record_round_trip(tmp_path: Path) -> None:
    config = frozenset({"example.com/b", "example.com/c"})
    owned = {
        "b.json": OwnedFile("b.json", "example.com/b", "2" * 64, config=config),
        "a.json": OwnedFile("a.json", "example.com/a", "1" * 64),
    }
    ownership.write_record(tmp_path, owned)
    assert ownership.read_record(tmp_path) == owned
    record = tmp_path / RECORD_NAME
    assert stat.S_IMODE(record.stat().st_mode) == 0o644
    config_id = ownership.digest(b"example.com/b\nexample.com/c")[:16]
    assert json.loads(record.read_text()) == {
        "version": 2,
        "configs": {config_id: ["example.com/b", "example.com/c"]},
        "files": {
            "a.json": {"kind": "example.com/a", "sha256": "1" * 64},
            "b.json": {"kind": "example.com/b", "sha256": "2" * 64, "config": config_id},
        },
    }
    assert [p.name for p in tmp_path.iterdir()] == [RECORD_NAME]


def test_no_record_owns_nothing_without_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert ownership.read_record(tmp_path) == {}
    assert ownership.owned_kinds([tmp_path, tmp_path / "missing"]) == set()
    assert caplog.text == ""


def test_owned_kinds_are_those_whose_file_is_unchanged(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    etc.mkdir()
    run.mkdir()
    a = own(etc, "a.json", "example.com/a", b"A")
    b = own(etc, "b.json", "example.com/b", b"B")
    c = own(etc, "c.json", "example.com/c", b"C")
    d = own(run, "d.json", "example.com/d", b"D")
    ownership.write_record(etc, {f.name: f for f in (a, b, c)})
    ownership.write_record(run, {d.name: d})
    (etc / "b.json").write_bytes(b"edited by someone")
    (etc / "c.json").unlink()
    assert ownership.owned_kinds([etc, run]) == {"example.com/a", "example.com/d"}


CORRUPT = [
    b"",
    b"{",
    b"\xff\xfe garbage \x00",
    b"[]",
    b'"files"',
    b"null",
    b"{}",
    b'{"files": []}',
    b'{"files": {"a.json": "example.com/a"}}',
    b'{"files": {"a.json": {"kind": "example.com/a"}}}',
    b"[" * 100_000,
]


@pytest.mark.parametrize("data", CORRUPT, ids=range(len(CORRUPT)))
def test_corrupt_record_owns_nothing(tmp_path: Path, data: bytes, caplog: pytest.LogCaptureFixture) -> None:
    own(tmp_path, "a.json", "example.com/a", b"A")
    (tmp_path / RECORD_NAME).write_bytes(data)
    assert ownership.read_record(tmp_path) == {}
    assert ownership.owned_kinds([tmp_path]) == set()
    assert "ignoring unusable ownership record" in caplog.text


def test_an_unusable_record_is_reported_once_in_words_until_it_changes_or_is_mended(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = own(tmp_path, "a.json", "example.com/a", b"A")

    def warnings() -> list[str]:
        found = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        caplog.clear()
        return found

    caplog.set_level(logging.DEBUG, "cdi_plugin")
    (tmp_path / RECORD_NAME).write_bytes(b'{"files": []}')
    for _ in range(3):  # a watcher's batch reads it several times
        assert ownership.read_record(tmp_path) == {}
    assert warnings() == [
        f"{tmp_path / RECORD_NAME}: ignoring unusable ownership record (not an object whose 'files' maps "
        "each file name to its 'kind' and 'sha256'); treating every spec as foreign"
    ]
    (tmp_path / RECORD_NAME).write_bytes(b"{")
    ownership.read_record(tmp_path)
    ownership.read_record(tmp_path)
    assert len(warnings()) == 1, "another fault"
    ownership.write_record(tmp_path, {a.name: a})
    assert ownership.read_record(tmp_path) == {"a.json": a}
    (tmp_path / RECORD_NAME).write_bytes(b"{")
    ownership.read_record(tmp_path)
    assert len(warnings()) == 1, "broken again after it was mended"


def test_unreadable_record_owns_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / RECORD_NAME).mkdir()
    assert ownership.read_record(tmp_path) == {}
    assert "ignoring unusable ownership record" in caplog.text


@pytest.mark.parametrize("name", ["../escape.json", "sub/a.json", "", ".", "..", "a\x00.json", "/etc/passwd"])
def test_names_that_leave_the_directory_are_ignored(tmp_path: Path, name: str) -> None:
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    (tmp_path / "escape.json").write_bytes(b"X")
    good = own(spec_dir, "a.json", "example.com/a", b"A")
    record = {
        "version": 1,
        "files": {
            name: {"kind": "example.com/evil", "sha256": ownership.digest(b"X")},
            "a.json": {"kind": good.kind, "sha256": good.sha256},
        },
    }
    (spec_dir / RECORD_NAME).write_text(json.dumps(record))
    assert ownership.read_record(spec_dir) == {"a.json": good}
    assert ownership.owned_kinds([spec_dir]) == {"example.com/a"}
