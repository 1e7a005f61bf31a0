"""The spec registry resolves device names the way a runtime's CDI cache does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdi_plugin.store.atomic import write_atomic
from cdi_plugin.store.registry import SpecRegistry, load_registry
from tests.store.specfiles import write_spec

KIND = "example.com/widget"


@pytest.fixture
def etc(tmp_path: Path) -> Path:
    path = tmp_path / "etc"
    path.mkdir()
    return path


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return tmp_path / "run"


def test_later_directory_wins(etc: Path, run: Path) -> None:
    static = write_spec(etc, "widget.json", KIND, "w0", "w1", env="FROM=etc")
    dynamic = write_spec(run, "widget.json", KIND, "w0", env="FROM=run")
    snap = load_registry([etc, run])
    assert snap.conflicts == ()
    w0 = snap.resolve(f"{KIND}=w0")
    assert w0 is not None
    assert (w0.path, w0.priority) == (dynamic, 1)
    assert w0.device.container_edits.env == ("FROM=run",)
    w1 = snap.resolve(f"{KIND}=w1")
    assert w1 is not None
    assert (w1.path, w1.priority) == (static, 0)
    assert str(w1.kind) == KIND
    assert w1.qualified_name == f"{KIND}=w1"
    assert w1.spec.kind == KIND


def test_directory_order_not_name_decides_priority(etc: Path, run: Path) -> None:
    write_spec(etc, "widget.json", KIND, "w0", env="FROM=etc")
    write_spec(run, "widget.json", KIND, "w0", env="FROM=run")
    w0 = load_registry([run, etc]).resolve(f"{KIND}=w0")
    assert w0 is not None
    assert w0.device.container_edits.env == ("FROM=etc",)
    assert w0.priority == 1


def test_same_device_twice_at_one_priority_resolves_from_neither(etc: Path) -> None:
    a = write_spec(etc, "a.json", KIND, "w0", "w1")
    b = write_spec(etc, "b.yaml", KIND, "w0", "w2")
    snap = load_registry([etc])
    assert snap.resolve(f"{KIND}=w0") is None
    assert [(c.qualified_name, c.priority, c.paths) for c in snap.conflicts] == [(f"{KIND}=w0", 0, (a, b))]
    assert snap.resolve(f"{KIND}=w1") is not None
    assert snap.resolve(f"{KIND}=w2") is not None
    assert snap.broken == ()


def test_conflict_is_not_rescued_by_a_higher_priority_definition(etc: Path, run: Path) -> None:
    """As in the CDI cache: a conflicting name is dropped even if a later directory defines it."""
    a = write_spec(etc, "a.json", KIND, "w0")
    b = write_spec(etc, "b.json", KIND, "w0")
    write_spec(run, "c.json", KIND, "w0", "w9")
    snap = load_registry([etc, run])
    assert snap.resolve(f"{KIND}=w0") is None
    assert [(c.qualified_name, c.paths) for c in snap.conflicts] == [(f"{KIND}=w0", (a, b))]
    assert snap.resolve(f"{KIND}=w9") is not None


def test_conflicts_at_two_priorities_are_reported_separately(etc: Path, run: Path) -> None:
    a = write_spec(etc, "a.json", KIND, "w0")
    b = write_spec(etc, "b.json", KIND, "w0")
    c = write_spec(run, "c.json", KIND, "w0")
    d = write_spec(run, "d.json", KIND, "w0")
    snap = load_registry([etc, run])
    assert [(c.priority, c.paths) for c in snap.conflicts] == [(0, (a, b)), (1, (c, d))]


def test_three_files_with_one_name(etc: Path) -> None:
    paths = [write_spec(etc, f"{n}.json", KIND, "w0") for n in "abc"]
    [conflict] = load_registry([etc]).conflicts
    assert conflict.paths == tuple(paths)


def test_same_device_name_in_other_kinds_is_no_conflict(etc: Path) -> None:
    write_spec(etc, "a.json", "example.com/widget", "w0")
    write_spec(etc, "b.json", "example.com/gadget", "w0")
    snap = load_registry([etc])
    assert snap.conflicts == ()
    assert sorted(snap.devices) == ["example.com/gadget=w0", "example.com/widget=w0"]


def test_broken_files_never_hide_good_ones(etc: Path) -> None:
    write_spec(etc, "a-good.json", KIND, "w0")
    (etc / "b-syntax.json").write_text("{")
    (etc / "c-empty.yaml").write_text("")
    (etc / "d-runtime-invalid.json").write_text(
        '{"cdiVersion": "0.3.0", "kind": "example.com/widget",'
        ' "devices": [{"name": "w0", "containerEdits": {}}]}'
    )
    (etc / "e-unknown-field.json").write_text(
        '{"cdiVersion": "0.3.0", "kind": "example.com/widget", "devices": [], "extra": 1}'
    )
    write_spec(etc, "f-good.json", "example.com/gadget", "g0")
    snap = load_registry([etc])
    assert sorted(snap.devices) == ["example.com/gadget=g0", "example.com/widget=w0"]
    assert snap.conflicts == ()
    broken = {f.path.name: [p.rule for p in f.problems] for f in snap.broken}
    assert broken == {
        "b-syntax.json": ["syntax"],
        "c-empty.yaml": ["empty-file"],
        "d-runtime-invalid.json": ["empty-device-edits"],
        "e-unknown-field.json": ["unknown-field"],
    }
    assert all(f.spec is None and f.kind is None for f in snap.broken)


def test_registry_applies_runtime_rules_only(etc: Path) -> None:
    """A spec only the project's stricter rules reject (relative path, v prefix) still resolves."""
    (etc / "loose.json").write_text(
        '{"cdiVersion": "v0.3.0", "kind": "example.com/widget",'
        ' "devices": [{"name": "w0", "containerEdits": {"deviceNodes": [{"path": "dev/w0"}]}}]}'
    )
    snap = load_registry([etc])
    assert f"{KIND}=w0" in snap.devices
    assert snap.broken == ()


def test_only_json_and_yaml_files_are_read(etc: Path) -> None:
    write_spec(etc, "a.json", KIND, "json")
    write_spec(etc, "b.yaml", KIND, "yaml")
    for name in ["c.yml", "d.JSON", "e.json.bak", "f.txt", ".g.json.1234.tmp", "h"]:
        write_spec(etc, name, KIND, name.replace(".", "x"))
    snap = load_registry([etc])
    assert sorted(snap.devices) == [f"{KIND}=json", f"{KIND}=yaml"]
    assert [f.path.name for f in snap.files] == ["a.json", "b.yaml"]


def test_subdirectories_are_not_read(etc: Path) -> None:
    write_spec(etc, "top.json", KIND, "top")
    write_spec(etc / "sub", "below.json", KIND, "below")
    write_spec(etc / "dir.json", "inner.json", KIND, "inner")
    snap = load_registry([etc])
    assert sorted(snap.devices) == [f"{KIND}=top"]


def test_files_are_read_in_name_order(etc: Path) -> None:
    for name in ["b.json", "a.yaml", "c.json", "B.json"]:
        write_spec(etc, name, f"example.com/k{name[0]}", "w0")
    assert [f.path.name for f in load_registry([etc]).files] == ["B.json", "a.yaml", "b.json", "c.json"]


def test_missing_directories_are_skipped(etc: Path, tmp_path: Path) -> None:
    write_spec(etc, "a.json", KIND, "w0")
    snap = load_registry([tmp_path / "missing", etc, tmp_path / "also-missing"])
    w0 = snap.resolve(f"{KIND}=w0")
    assert w0 is not None
    assert w0.priority == 1


def test_a_spec_directory_that_is_a_file_is_skipped(etc: Path, tmp_path: Path) -> None:
    write_spec(etc, "a.json", KIND, "w0")
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    snap = load_registry([not_a_dir, etc])
    assert list(snap.devices) == [f"{KIND}=w0"]


@pytest.mark.timeout(30)
def test_a_fifo_named_like_a_spec_does_not_block(etc: Path) -> None:
    write_spec(etc, "a.json", KIND, "w0")
    os.mkfifo(etc / "b.json")
    snap = load_registry([etc])
    assert list(snap.devices) == [f"{KIND}=w0"]
    assert [(f.path.name, f.problems[0].rule) for f in snap.broken] == [("b.json", "not-a-file")]


def test_a_symlink_to_a_spec_is_read(etc: Path, tmp_path: Path) -> None:
    target = write_spec(tmp_path / "elsewhere", "real.json", KIND, "w0")
    (etc / "link.json").symlink_to(target)
    assert list(load_registry([etc]).devices) == [f"{KIND}=w0"]


def test_a_spec_directory_that_is_a_symbolic_link_resolves_nothing(etc: Path, tmp_path: Path) -> None:
    write_spec(etc, "a.json", KIND, "w0")
    link = tmp_path / "linked"
    link.symlink_to(etc)
    assert load_registry([link]).devices == {}
    registry = SpecRegistry([link])
    registry.refresh()
    write_spec(etc, "b.json", KIND, "w1")  # told of by a watch of the directory it points to
    assert registry.update([{"a.json", "b.json"}]).devices == {}


# -- caching ---------------------------------------------------------------------------------


def test_unchanged_files_are_not_read_again(etc: Path) -> None:
    write_spec(etc, "a.json", KIND, "w0")
    registry = SpecRegistry([etc])
    first = registry.refresh()
    second = registry.refresh()
    assert second.files[0] is first.files[0]
    assert second.devices == first.devices


def test_a_file_rewritten_atomically_is_read_again(etc: Path) -> None:
    path = write_spec(etc, "a.json", KIND, "w0")
    registry = SpecRegistry([etc])
    assert sorted(registry.refresh().devices) == [f"{KIND}=w0"]
    new = path.read_text().replace('"w0"', '"w1"')
    assert len(new) == path.stat().st_size
    write_atomic(path, new.encode())
    assert sorted(registry.refresh().devices) == [f"{KIND}=w1"]


def test_a_file_rewritten_in_place_is_read_again(etc: Path) -> None:
    path = write_spec(etc, "a.json", KIND, "w0")
    registry = SpecRegistry([etc])
    registry.refresh()
    stamp = path.stat()
    path.write_text(path.read_text().replace('"w0"', '"w1"'))
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # same size, same mtime: ctime differs
    assert sorted(registry.refresh().devices) == [f"{KIND}=w1"]


def test_a_deleted_file_is_dropped(etc: Path) -> None:
    a = write_spec(etc, "a.json", KIND, "w0")
    write_spec(etc, "b.json", KIND, "w0")
    registry = SpecRegistry([etc])
    assert registry.refresh().resolve(f"{KIND}=w0") is None
    a.unlink()
    snap = registry.refresh()
    assert [f.path.name for f in snap.files] == ["b.json"]
    assert snap.resolve(f"{KIND}=w0") is not None
    assert snap.conflicts == ()


def test_a_broken_file_that_gets_fixed_is_picked_up(etc: Path) -> None:
    (etc / "a.json").write_text("{")
    registry = SpecRegistry([etc])
    assert len(registry.refresh().broken) == 1
    write_spec(etc, "a.tmp", KIND, "w0").rename(etc / "a.json")
    snap = registry.refresh()
    assert snap.broken == ()
    assert list(snap.devices) == [f"{KIND}=w0"]


def test_a_new_directory_appearing_later_is_read(etc: Path, run: Path) -> None:
    write_spec(etc, "a.json", KIND, "w0", env="FROM=etc")
    registry = SpecRegistry([etc, run])
    assert registry.refresh().devices[f"{KIND}=w0"].priority == 0
    write_spec(run, "a.json", KIND, "w0", env="FROM=run")
    assert registry.refresh().devices[f"{KIND}=w0"].priority == 1
