"""Plans limited to some kinds (the rescans of ``cdi-gen watch``): other kinds are left alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdi_plugin.discovery.model import StaticSource
from cdi_plugin.generate.config import default_classes
from cdi_plugin.scan import ScanOptions, run_scan
from cdi_plugin.store.ownership import owned_kinds, read_record
from cdi_plugin.store.plan import plan_writes
from cdi_plugin.store.writer import PartialWriteError, apply
from tests.generate.hosts import WORKSTATION
from tests.scan.helpers import snapshot, spec

FUSE = spec("cdi-plugin.io/fuse", "fuse")
TUN = spec("cdi-plugin.io/tun", "tun")
KVM = spec("cdi-plugin.io/kvm", "kvm")


def actions(changes: object) -> dict[str, str]:
    return {c.path.name: c.action for c in changes}  # type: ignore[attr-defined]


def test_a_limited_plan_neither_removes_nor_forgets_other_kinds(tmp_path: Path) -> None:
    apply(plan_writes([FUSE, TUN, KVM], tmp_path, spec_dirs=()))
    before = snapshot(tmp_path)
    tun2 = spec("cdi-plugin.io/tun", "tun", "tap")
    plan = plan_writes([tun2], tmp_path, spec_dirs=(), kinds={"cdi-plugin.io/tun"})
    assert actions(plan.changes) == {"cdi-plugin.io-tun.json": "change"}
    apply(plan)
    after = snapshot(tmp_path)
    for name in ("cdi-plugin.io-fuse.json", "cdi-plugin.io-kvm.json"):
        assert after[name] == before[name], "untouched: same bytes, same mtime"
    assert owned_kinds([tmp_path]) == {"cdi-plugin.io/fuse", "cdi-plugin.io/tun", "cdi-plugin.io/kvm"}
    # an unlimited plan with the same specs would have removed the other two
    full = plan_writes([tun2], tmp_path, spec_dirs=())
    assert actions(full.removals) == {"cdi-plugin.io-fuse.json": "remove", "cdi-plugin.io-kvm.json": "remove"}


def test_a_kind_in_scope_without_a_spec_loses_its_file(tmp_path: Path) -> None:
    apply(plan_writes([FUSE, TUN], tmp_path, spec_dirs=()))
    plan = plan_writes([], tmp_path, spec_dirs=(), kinds={"cdi-plugin.io/tun"})
    assert actions(plan.changes) == {"cdi-plugin.io-tun.json": "remove"}
    apply(plan)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "cdi-plugin.io-fuse.json"
    ]
    assert set(read_record(tmp_path)) == {"cdi-plugin.io-fuse.json"}


def test_an_edited_file_outside_the_scope_keeps_its_record_entry(tmp_path: Path) -> None:
    apply(plan_writes([FUSE, TUN], tmp_path, spec_dirs=()))
    tun = tmp_path / "cdi-plugin.io-tun.json"
    tun.write_bytes(tun.read_bytes().replace(b'"tun"', b'"mine"'))
    apply(
        plan_writes(
            [spec("cdi-plugin.io/fuse", "fuse", "cuse")], tmp_path, spec_dirs=(), kinds={"cdi-plugin.io/fuse"}
        )
    )
    assert "cdi-plugin.io-tun.json" in read_record(tmp_path), "a later full scan still knows it was cdi-gen's"
    assert b'"mine"' in tun.read_bytes()


def test_a_spec_outside_the_scope_is_a_programming_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="limited to other kinds"):
        plan_writes([FUSE], tmp_path, spec_dirs=(), kinds={"cdi-plugin.io/tun"})


def test_a_failed_limited_apply_keeps_the_record_of_other_kinds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    apply(plan_writes([FUSE, TUN, KVM], tmp_path, spec_dirs=()))
    plan = plan_writes(
        [spec("cdi-plugin.io/tun", "tun", "t2"), spec("cdi-plugin.io/kvm", "kvm", "k2")],
        tmp_path,
        spec_dirs=(),
        kinds={"cdi-plugin.io/tun", "cdi-plugin.io/kvm"},
    )
    real_replace = os.replace
    calls: list[str] = []

    def replace_failing_second(src: str, dst: str) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_failing_second)
    with pytest.raises(PartialWriteError):
        apply(plan)
    monkeypatch.undo()
    assert owned_kinds([tmp_path]) == {"cdi-plugin.io/fuse", "cdi-plugin.io/tun", "cdi-plugin.io/kvm"}


def test_run_scan_limited_to_kinds_scans_and_writes_only_those(tmp_path: Path) -> None:
    options = ScanOptions(output_dir=tmp_path, spec_dirs=())
    source = StaticSource(WORKSTATION)
    run_scan(options, source, default_classes())
    before = snapshot(tmp_path)
    without_tun = StaticSource([d for d in WORKSTATION if d.sys_name not in {"tun", "fuse"}])
    report = run_scan(options, without_tun, default_classes(), kinds={"cdi-plugin.io/tun"})
    assert [(f.path.name, f.action) for f in report.files] == [("cdi-plugin.io-tun.json", "removed")]
    after = snapshot(tmp_path)
    assert "cdi-plugin.io-tun.json" not in after
    assert after["cdi-plugin.io-fuse.json"] == before["cdi-plugin.io-fuse.json"], "fuse is out of scope"
    assert set(before) - set(after) == {"cdi-plugin.io-tun.json"}
