"""store/plan.py then store/writer.py: atomic, idempotent, and never touching a foreign file."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from cdi_plugin.cdi.model import ContainerEdits
from cdi_plugin.discovery.fixture import dumps
from cdi_plugin.errors import SpecWriteError
from cdi_plugin.store import writer
from cdi_plugin.store.dirlock import LOCK_NAME, locked
from cdi_plugin.store.files import MAX_SPEC_BYTES
from cdi_plugin.store.ownership import RECORD_NAME, owned_kinds, read_record
from cdi_plugin.store.plan import ConflictError, FileChange, Plan, plan_updates, plan_writes
from cdi_plugin.store.writer import PartialWriteError, apply
from tests.generate.hosts import WORKSTATION
from tests.scan.helpers import CDI_GEN, opened, snapshot, spec

FUSE = spec("cdi-plugin.io/fuse", "fuse")
TUN = spec("cdi-plugin.io/tun", "tun")
KVM = spec("cdi-plugin.io/kvm", "kvm")


def write(specs: list[object], out: Path, **kw: object) -> writer.Applied:
    return apply(plan_writes(specs, out, spec_dirs=(), **kw))  # type: ignore[arg-type]


def actions(plan: Plan) -> dict[str, str]:
    return {c.path.name: c.action for c in plan.changes}


def test_first_write_creates_files_0644_and_the_record(tmp_path: Path) -> None:
    out = tmp_path / "cdi"
    plan = plan_writes([FUSE, TUN], out, spec_dirs=())
    assert actions(plan) == {"cdi-plugin.io-fuse.json": "create", "cdi-plugin.io-tun.json": "create"}
    assert not out.exists(), "planning writes nothing"
    applied = apply(plan)
    assert [a for _, a in applied.done] == ["create", "create"]
    assert oct(out.stat().st_mode & 0o777) == "0o755"
    for name, kind in (
        ("cdi-plugin.io-fuse.json", "cdi-plugin.io/fuse"),
        ("cdi-plugin.io-tun.json", "cdi-plugin.io/tun"),
    ):
        assert (out / name).stat().st_mode & 0o777 == 0o644
        assert json.loads((out / name).read_bytes())["kind"] == kind
    assert set(read_record(out)) == {"cdi-plugin.io-fuse.json", "cdi-plugin.io-tun.json"}
    assert owned_kinds([out]) == {"cdi-plugin.io/fuse", "cdi-plugin.io/tun"}
    assert sorted(p.name for p in out.iterdir()) == [
        RECORD_NAME,
        "cdi-plugin.io-fuse.json",
        "cdi-plugin.io-tun.json",
    ]


def test_unchanged_content_is_not_rewritten(tmp_path: Path) -> None:
    write([FUSE, TUN], tmp_path)
    before = snapshot(tmp_path)
    plan = plan_writes([FUSE, TUN], tmp_path, spec_dirs=())
    assert set(actions(plan).values()) == {"unchanged"}
    assert plan.is_noop
    assert apply(plan).done == ()
    assert snapshot(tmp_path) == before, "same bytes and same mtimes, the record included"


def test_a_changed_spec_is_replaced_with_a_diff(tmp_path: Path) -> None:
    write([FUSE, TUN], tmp_path)
    tun_before = snapshot(tmp_path)["cdi-plugin.io-tun.json"]
    plan = plan_writes([spec("cdi-plugin.io/fuse", "fuse", "fuse2"), TUN], tmp_path, spec_dirs=())
    assert actions(plan) == {"cdi-plugin.io-fuse.json": "change", "cdi-plugin.io-tun.json": "unchanged"}
    (change,) = plan.writes
    diff = change.diff()
    assert diff.startswith(
        f"--- {tmp_path}/cdi-plugin.io-fuse.json\n+++ {tmp_path}/cdi-plugin.io-fuse.json\n"
    )
    assert '+      "name": "fuse2",' in diff
    apply(plan)
    assert b"fuse2" in (tmp_path / "cdi-plugin.io-fuse.json").read_bytes()
    assert snapshot(tmp_path)["cdi-plugin.io-tun.json"] == tun_before
    assert owned_kinds([tmp_path]) == {"cdi-plugin.io/fuse", "cdi-plugin.io/tun"}


def test_own_spec_of_a_kind_without_devices_is_removed_and_foreign_files_stay(tmp_path: Path) -> None:
    write([FUSE, TUN], tmp_path)
    (tmp_path / "vendor.json").write_text(
        json.dumps({"cdiVersion": "0.3.0", "kind": "vendor.com/x", "devices": []})
    )
    (tmp_path / "notes.txt").write_text("mine")
    foreign = {k: v for k, v in snapshot(tmp_path).items() if k in {"vendor.json", "notes.txt"}}
    plan = plan_writes([FUSE], tmp_path, spec_dirs=())
    assert actions(plan) == {"cdi-plugin.io-fuse.json": "unchanged", "cdi-plugin.io-tun.json": "remove"}
    assert plan.removals[0].diff().endswith("-  ]\n-}\n")
    apply(plan)
    assert not (tmp_path / "cdi-plugin.io-tun.json").exists()
    assert set(read_record(tmp_path)) == {"cdi-plugin.io-fuse.json"}
    assert {k: v for k, v in snapshot(tmp_path).items() if k in foreign} == foreign


def test_no_devices_at_all_removes_every_own_spec(tmp_path: Path) -> None:
    write([FUSE, TUN], tmp_path)
    write([], tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [RECORD_NAME]
    assert read_record(tmp_path) == {}


def test_a_foreign_file_at_the_same_path_is_refused_unless_forced(tmp_path: Path) -> None:
    hand_written = b'{"cdiVersion": "0.3.0", "kind": "cdi-plugin.io/fuse", "devices": []}\n'
    (tmp_path / "cdi-plugin.io-fuse.json").write_bytes(hand_written)
    before = snapshot(tmp_path)
    with pytest.raises(ConflictError) as info:
        plan_writes([FUSE, TUN], tmp_path, spec_dirs=())
    assert str(info.value).startswith(
        f"cdi-plugin.io/fuse is already defined by {tmp_path}/cdi-plugin.io-fuse.json "
        "(not written by cdi-gen); "
    )
    assert "--force" in str(info.value)
    assert snapshot(tmp_path) == before
    plan = plan_writes([FUSE, TUN], tmp_path, spec_dirs=(), force=True)
    assert [c.path.name for c in plan.overridden] == ["cdi-plugin.io-fuse.json"]
    apply(plan)
    assert (tmp_path / "cdi-plugin.io-fuse.json").read_bytes() != hand_written
    assert owned_kinds([tmp_path]) == {"cdi-plugin.io/fuse", "cdi-plugin.io/tun"}


def test_a_foreign_spec_of_the_same_kind_in_another_directory_is_refused(tmp_path: Path) -> None:
    out, run = tmp_path / "etc", tmp_path / "run"
    run.mkdir()
    other = run / "my-tun.yaml"
    other.write_text(
        "cdiVersion: 0.3.0\nkind: cdi-plugin.io/tun\ndevices: [{name: t, containerEdits: {env: [A=1]}}]\n"
    )
    (run / "broken.json").write_text("{not json")
    before = snapshot(run)
    with pytest.raises(
        ConflictError, match=rf"cdi-plugin.io/tun is already defined by {other} \(not written by"
    ):
        plan_writes([FUSE, TUN], out, spec_dirs=(out, run))
    assert not out.exists()
    plan = plan_writes([FUSE, TUN], out, spec_dirs=(out, run), force=True)
    apply(plan)
    assert snapshot(run) == before, "--force writes our file but never touches the foreign one"
    assert (out / "cdi-plugin.io-tun.json").exists()


def test_a_link_to_a_spec_directory_hides_no_foreign_spec_in_it(tmp_path: Path) -> None:
    """A spec directory named through a link, before its real name or as the output directory
    cdi-gen writes through, still has its foreign specs found."""
    etc, link = tmp_path / "etc", tmp_path / "linked"
    etc.mkdir()
    link.symlink_to("etc")
    other = etc / "my-tun.yaml"
    other.write_text(
        "cdiVersion: 0.3.0\nkind: cdi-plugin.io/tun\ndevices: [{name: t, containerEdits: {env: [A=1]}}]\n"
    )
    for out, dirs in ((tmp_path / "out", (link, etc)), (link, (etc,))):
        with pytest.raises(ConflictError, match=rf"cdi-plugin.io/tun is already defined by {other} "):
            plan_writes([TUN], out, spec_dirs=dirs)


def test_a_spec_cdi_gen_wrote_into_another_directory_is_reported_as_such(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    write([TUN], first)
    with pytest.raises(ConflictError, match="written by cdi-gen into another output directory"):
        plan_writes([TUN], second, spec_dirs=(first,))


def test_a_file_edited_by_a_user_becomes_foreign(tmp_path: Path) -> None:
    write([FUSE, TUN], tmp_path)
    path = tmp_path / "cdi-plugin.io-tun.json"
    path.write_bytes(path.read_bytes().replace(b'"tun"', b'"my-tun"'))
    edited = snapshot(tmp_path)["cdi-plugin.io-tun.json"]
    with pytest.raises(ConflictError, match=r"cdi-plugin.io-tun.json \(edited since cdi-gen wrote it\)"):
        plan_writes([FUSE, TUN], tmp_path, spec_dirs=())
    # without the kind, cdi-gen does not remove the edited file: it is no longer cdi-gen's
    plan = plan_writes([FUSE], tmp_path, spec_dirs=())
    assert actions(plan) == {"cdi-plugin.io-fuse.json": "unchanged"}
    assert [(c.kind, c.path.name) for c in plan.left] == [("cdi-plugin.io/tun", "cdi-plugin.io-tun.json")]
    apply(plan)
    assert snapshot(tmp_path)["cdi-plugin.io-tun.json"] == edited
    assert set(read_record(tmp_path)) == {"cdi-plugin.io-fuse.json"}
    assert owned_kinds([tmp_path]) == {"cdi-plugin.io/fuse"}


def test_switching_format_replaces_the_own_json_with_yaml(tmp_path: Path) -> None:
    write([FUSE], tmp_path)
    plan = plan_writes([FUSE], tmp_path, fmt="yaml", spec_dirs=())
    assert actions(plan) == {"cdi-plugin.io-fuse.yaml": "create", "cdi-plugin.io-fuse.json": "remove"}
    apply(plan)
    assert sorted(p.name for p in tmp_path.iterdir()) == [RECORD_NAME, "cdi-plugin.io-fuse.yaml"]
    assert (tmp_path / "cdi-plugin.io-fuse.yaml").read_bytes().startswith(b"---\ncdiVersion: 0.3.0\n")


def test_an_invalid_spec_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    dotted = spec("cdi-plugin.io/gpu.render", "gpu0", version="0.6.0")
    with pytest.raises(SpecWriteError) as info:
        plan_writes([FUSE, dotted], tmp_path, spec_dirs=(), max_version="0.5.0")
    assert str(info.value) == (
        f"{tmp_path}/cdi-plugin.io-gpu.render.json: /cdiVersion: cdiVersion 0.6.0 is above the allowed "
        "maximum 0.5.0; needed by a '.' in the class of kind 'cdi-plugin.io/gpu.render' (runtimes that would "
        "drop this spec: containerd 1.7.0-1.7.12, podman 4.3); nothing was written"
    )
    empty = spec("cdi-plugin.io/fuse")
    with pytest.raises(SpecWriteError, match="/devices: the spec defines no devices"):
        plan_writes([empty], tmp_path, spec_dirs=())
    assert list(tmp_path.iterdir()) == []


def test_apply_refuses_a_plan_whose_files_changed_meanwhile(tmp_path: Path) -> None:
    write([FUSE], tmp_path)
    plan = plan_writes([spec("cdi-plugin.io/fuse", "fuse", "x"), TUN], tmp_path, spec_dirs=())
    (tmp_path / "cdi-plugin.io-tun.json").write_text("{}")  # appeared after planning
    before = snapshot(tmp_path)
    with pytest.raises(SpecWriteError, match=r"cdi-plugin\.io-tun\.json changed since the plan was made"):
        apply(plan)
    assert snapshot(tmp_path) == before


def test_a_failure_half_way_reports_what_was_written_and_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rename that fails after every file was staged cannot be provoked for real (a full disk or
    a read-only mount fails while staging), so this one fault is injected at ``os.replace``."""
    write([FUSE, TUN], tmp_path)
    new = [spec("cdi-plugin.io/fuse", "fuse", "f2"), spec("cdi-plugin.io/tun", "tun", "t2")]
    plan = plan_writes(new, tmp_path, spec_dirs=())
    tun_before = snapshot(tmp_path)["cdi-plugin.io-tun.json"]
    real_replace = os.replace
    calls = []

    def replace_failing_second(src: str, dst: str) -> None:
        calls.append(dst)
        if len(calls) == 3:  # the record, fuse, then tun
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_failing_second)
    with pytest.raises(PartialWriteError) as info:
        apply(plan)
    monkeypatch.undo()
    assert str(info.value) == (
        f"{tmp_path}/cdi-plugin.io-tun.json: cannot replace: No space left on device; "
        f"already done: changed {tmp_path}/cdi-plugin.io-fuse.json"
    )
    assert b"f2" in (tmp_path / "cdi-plugin.io-fuse.json").read_bytes()
    assert snapshot(tmp_path)["cdi-plugin.io-tun.json"] == tun_before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert owned_kinds([tmp_path]) == {"cdi-plugin.io/fuse", "cdi-plugin.io/tun"}, (
        "the record matches the disk"
    )


def test_a_corrupt_record_owns_nothing_so_nothing_is_overwritten(tmp_path: Path) -> None:
    write([FUSE], tmp_path)
    (tmp_path / RECORD_NAME).write_text("garbage")
    with pytest.raises(ConflictError, match="not written by cdi-gen"):
        plan_writes([FUSE], tmp_path, spec_dirs=())


def test_scans_into_one_directory_take_turns(tmp_path: Path) -> None:
    """A scan waits for the lock another scan holds on the output directory."""
    host = tmp_path / "host.json"
    host.write_text(dumps(WORKSTATION))
    out = tmp_path / "cdi"
    out.mkdir()
    with locked(out):
        scan = subprocess.Popen(
            [CDI_GEN, "scan", "--source", f"fixture:{host}", "--output-dir", out],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not opened(out / LOCK_NAME, scan.pid):  # it has come to the lock
            assert scan.poll() is None, "the scan must wait for the lock"
            assert time.monotonic() < deadline, "the scan never opened the lock"
            time.sleep(0.01)
        assert scan.poll() is None, "the scan must wait for the lock"
        assert [p.name for p in out.iterdir()] == [LOCK_NAME]
    assert scan.wait(timeout=60) == 0
    assert (out / "cdi-plugin.io-fuse.json").exists()


def test_created_directories_are_0755_whatever_the_umask(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "cdi"
    old = os.umask(0o177)
    try:
        apply(plan_writes([FUSE], out, spec_dirs=()))
    finally:
        os.umask(old)
    for d in (tmp_path / "a", tmp_path / "a" / "b", out):
        assert stat.S_IMODE(d.stat().st_mode) == 0o755, d


def test_each_file_is_told_as_soon_as_it_is_in_place_before_the_directory_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``placed`` follows the rename (or unlink) at once: the file is what runtimes now read, and
    the syncs that only make it durable, and the record that follows a removal, come after."""
    out = tmp_path / "cdi"
    write([FUSE, TUN], out)
    syncs: list[Path] = []
    monkeypatch.setattr(writer, "fsync_dir", syncs.append)
    seen: list[tuple[str, str, object, int, set[str]]] = []

    def placed(change: object) -> None:
        assert isinstance(change, FileChange)
        on_disk = None
        if change.path.exists():
            on_disk = sorted(d["name"] for d in json.loads(change.path.read_bytes())["devices"])
        seen.append((change.path.name, change.action, on_disk, len(syncs), set(read_record(out))))

    kvm = spec("cdi-plugin.io/kvm", "kvm")
    new_tun = spec("cdi-plugin.io/tun", "tun", "tap")
    apply(plan_writes([kvm, new_tun], out, spec_dirs=()), placed=placed)
    recorded = {"cdi-plugin.io-fuse.json", "cdi-plugin.io-kvm.json", "cdi-plugin.io-tun.json"}
    assert seen == [
        ("cdi-plugin.io-kvm.json", "create", ["kvm"], 1, recorded),
        ("cdi-plugin.io-tun.json", "change", ["tap", "tun"], 1, recorded),
        ("cdi-plugin.io-fuse.json", "remove", None, 1, recorded),  # the last record comes after
    ]
    assert syncs == [out, out]
    assert set(read_record(out)) == recorded - {"cdi-plugin.io-fuse.json"}


def test_a_spec_larger_than_cdi_gen_reads_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """A spec over MAX_SPEC_BYTES would be refused by every reader of cdi-plugin (validate, the
    inventory) and by the next scan, which reads the file it replaces: it is never written."""
    env = tuple(f"V{i}={'x' * 250}" for i in range(MAX_SPEC_BYTES // 250))
    big = dataclasses.replace(
        spec("example.com/big", "big0"),
        container_edits=ContainerEdits(env=env),
    )
    out = tmp_path / "out"
    with pytest.raises(SpecWriteError) as caught:
        write([big, spec("example.com/small", "small0")], out)
    assert str(caught.value).startswith(f"{out / 'example.com-big.json'}: the spec would be ")
    assert "more than the 4 MiB cdi-gen reads back; nothing was written" in str(caught.value)
    assert not out.exists()


def test_a_foreign_spec_is_found_by_its_kind_whatever_the_case_of_its_keys(tmp_path: Path) -> None:
    """Runtimes match a spec's keys to fields case-insensitively (Go's encoding/json, after
    sigs.k8s.io/yaml sorts them: the last match wins), so "Kind" defines a kind: writing that kind
    beside it would make both definitions of the device resolve nowhere."""
    other = tmp_path / "other.json"
    other.write_text(
        '{"cdiVersion": "0.3.0", "Kind": "cdi-plugin.io/fuse",'
        ' "Devices": [{"Name": "fuse", "ContainerEdits": {"Env": ["A=1"]}}]}'
    )
    with pytest.raises(ConflictError, match=rf"cdi-plugin.io/fuse is already defined by {other} \(not"):
        plan_writes([FUSE], tmp_path, spec_dirs=())
    other.write_text('{"cdiVersion": "0.3.0", "Kind": "cdi-plugin.io/fuse", "kind": "cdi-plugin.io/tun"}')
    with pytest.raises(ConflictError, match=r"cdi-plugin\.io/tun is already defined"):
        plan_writes([TUN], tmp_path, spec_dirs=())
    plan_writes([FUSE], tmp_path, spec_dirs=())  # "kind", last in sorted order, is the one read
    other.unlink()
    mine = tmp_path / "cdi-plugin.io-fuse.json"
    mine.write_text('{"cdiVersion": "0.3.0", "KIND": "cdi-plugin.io/kvm", "devices": []}')
    with pytest.raises(SpecWriteError, match=r"which defines cdi-plugin\.io/kvm"):
        plan_writes([FUSE], tmp_path, spec_dirs=(), force=True)


def test_a_link_put_in_place_of_a_spec_is_not_cdi_gens_to_remove_or_replace(tmp_path: Path) -> None:
    """cdi-gen writes regular files: a symbolic link at its file's name (to a copy of the same
    bytes kept elsewhere) was put there by someone, and stays as it is."""
    out, keep = tmp_path / "out", tmp_path / "keep"
    keep.mkdir()
    write([FUSE], out)
    path = out / "cdi-plugin.io-fuse.json"
    data = path.read_bytes()
    path.rename(keep / path.name)
    path.symlink_to(keep / path.name)
    with pytest.raises(SpecWriteError, match="not as cdi-gen last wrote it"):
        plan_updates(out, {path.name: ("cdi-plugin.io/fuse", None, read_record(out)[path.name].sha256)})
    with pytest.raises(ConflictError):
        plan_writes([FUSE], out, spec_dirs=())
    apply(plan_writes([TUN], out, spec_dirs=()))
    assert path.is_symlink()
    assert (keep / path.name).read_bytes() == data
