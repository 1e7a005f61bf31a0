"""Generators with different configurations on one output directory, older records, and files
found without a record: each full scan removes only the stale files of its own configuration."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest

from cdi_plugin.discovery.fixture import dumps
from cdi_plugin.discovery.model import StaticSource
from cdi_plugin.generate.config import DeviceClass, default_classes
from cdi_plugin.scan import ScanOptions, run_scan
from cdi_plugin.store.ownership import RECORD_NAME, read_record
from cdi_plugin.store.plan import ConflictError
from tests.generate.hosts import WORKSTATION
from tests.scan.helpers import run_cdi_gen, snapshot

FUSE, TUN, KVM, VHOST = (f"cdi-plugin.io/{c}" for c in ("fuse", "tun", "kvm", "vhost-net"))


def classes(*kinds: str) -> list[DeviceClass]:
    return [c for c in default_classes() if c.kind in kinds]


def scan(out: Path, *kinds: str, host: StaticSource | None = None) -> dict[str, str]:
    report = run_scan(
        ScanOptions(output_dir=out, spec_dirs=()), host or StaticSource(WORKSTATION), classes(*kinds)
    )
    return {f.path.name: f.action for f in report.files}


def name(kind: str) -> str:
    return kind.replace("/", "-") + ".json"


def test_full_rescans_of_two_configurations_leave_each_others_specs(tmp_path: Path) -> None:
    scan(tmp_path, FUSE, TUN)
    scan(tmp_path, KVM)
    before = snapshot(tmp_path)
    assert {name(FUSE), name(TUN), name(KVM)} <= set(before)
    assert scan(tmp_path, FUSE, TUN) == {name(FUSE): "unchanged", name(TUN): "unchanged"}
    assert scan(tmp_path, KVM) == {name(KVM): "unchanged"}
    assert snapshot(tmp_path) == before, "nothing removed, nothing rewritten"
    record = read_record(tmp_path)
    assert record[name(FUSE)].config == frozenset({FUSE, TUN})
    assert record[name(KVM)].config == frozenset({KVM})


def test_a_configuration_still_removes_its_own_stale_specs(tmp_path: Path) -> None:
    scan(tmp_path, FUSE, TUN)
    scan(tmp_path, KVM)
    no_tun = StaticSource([d for d in WORKSTATION if d.sys_name != "tun"])
    assert scan(tmp_path, FUSE, TUN, host=no_tun) == {name(FUSE): "unchanged", name(TUN): "removed"}
    scan(tmp_path, FUSE, TUN)
    # the class removed from the configuration: the file was written by an earlier form of it
    assert scan(tmp_path, FUSE) == {name(FUSE): "unchanged", name(TUN): "removed"}
    assert set(read_record(tmp_path)) == {name(FUSE), name(KVM)}
    assert (tmp_path / name(KVM)).exists()


def test_a_record_of_the_previous_format_is_read_and_marked_on_the_next_write(tmp_path: Path) -> None:
    scan(tmp_path, FUSE, TUN)
    record = tmp_path / RECORD_NAME
    body = json.loads(record.read_bytes())
    old = {
        "version": 1,
        "files": {n: {k: v for k, v in e.items() if k != "config"} for n, e in body["files"].items()},
    }
    record.write_text(json.dumps(old))
    assert {e.config for e in read_record(tmp_path).values()} == {None}
    before = snapshot(tmp_path)
    assert scan(tmp_path, FUSE, TUN) == {name(FUSE): "unchanged", name(TUN): "unchanged"}
    after = snapshot(tmp_path)
    assert {n: after[n] for n in (name(FUSE), name(TUN))} == {n: before[n] for n in (name(FUSE), name(TUN))}
    assert {e.config for e in read_record(tmp_path).values()} == {frozenset({FUSE, TUN})}
    assert json.loads(record.read_bytes())["version"] == 2


def test_without_a_record_a_file_identical_to_the_new_spec_is_taken_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    scan(tmp_path, FUSE, TUN)
    before = snapshot(tmp_path)
    (tmp_path / RECORD_NAME).unlink()
    caplog.set_level(logging.INFO, "cdi_plugin")
    assert scan(tmp_path, FUSE, TUN) == {name(FUSE): "unchanged", name(TUN): "unchanged"}
    assert set(read_record(tmp_path)) == {name(FUSE), name(TUN)}
    after = snapshot(tmp_path)
    assert {n: after[n] for n in (name(FUSE), name(TUN))} == {n: before[n] for n in (name(FUSE), name(TUN))}
    assert f"{tmp_path / name(FUSE)}: cdi-gen's again" in caplog.text
    # taken again, it is cdi-gen's to remove once its devices are gone
    no_tun = StaticSource([d for d in WORKSTATION if d.sys_name != "tun"])
    assert scan(tmp_path, FUSE, TUN, host=no_tun)[name(TUN)] == "removed"


def test_without_a_record_a_file_with_other_bytes_stays_foreign(tmp_path: Path) -> None:
    scan(tmp_path, FUSE, TUN)
    tun = tmp_path / name(TUN)
    tun.write_bytes(tun.read_bytes() + b"\n")
    (tmp_path / RECORD_NAME).unlink()
    with pytest.raises(ConflictError, match="not written by cdi-gen"):
        scan(tmp_path, FUSE, TUN)


def test_a_file_the_record_does_not_list_is_not_taken_even_with_identical_bytes(tmp_path: Path) -> None:
    scan(tmp_path, FUSE, TUN)
    record = tmp_path / RECORD_NAME
    body = json.loads(record.read_bytes())
    del body["files"][name(TUN)]
    record.write_text(json.dumps(body))
    with pytest.raises(ConflictError, match="not written by cdi-gen"):
        scan(tmp_path, FUSE, TUN)


def test_a_link_with_identical_bytes_is_not_taken(tmp_path: Path) -> None:
    out = tmp_path / "cdi"
    scan(out, TUN)
    tun = out / name(TUN)
    mine = tmp_path / "mine.json"
    mine.write_bytes(tun.read_bytes())
    tun.unlink()
    tun.symlink_to(mine)
    (out / RECORD_NAME).unlink()
    with pytest.raises(ConflictError, match="not written by cdi-gen"):
        scan(out, TUN)


def test_a_full_scan_warns_of_each_other_configuration_once_and_leaves_its_files(tmp_path: Path) -> None:
    """A generator whose vendor changed leaves every spec of its old name: the scan says so, in one
    warning per configuration, and leaves them (they could be another generator's)."""
    renamed = [dataclasses.replace(c, vendor="mycorp.com") for c in classes(FUSE, TUN)]
    scan(tmp_path, FUSE, TUN)
    scan(tmp_path, KVM)
    before = snapshot(tmp_path)
    report = run_scan(ScanOptions(output_dir=tmp_path, spec_dirs=()), StaticSource(WORKSTATION), renamed)
    assert {f.path.name: f.action for f in report.files} == {
        "mycorp.com-fuse.json": "created",
        "mycorp.com-tun.json": "created",
    }
    assert [(o.kinds, [p.name for p in o.paths]) for o in report.plan.others] == [
        (frozenset({FUSE, TUN}), [name(FUSE), name(TUN)]),
        (frozenset({KVM}), [name(KVM)]),
    ]
    warned = [w for w in report.warnings if "another configuration" in w]
    assert warned == [
        f"{tmp_path}: 2 specs ({name(FUSE)}, {name(TUN)}) were written by another configuration (kinds "
        f"{FUSE}, {TUN}), which shares no kind with this one; left in place as another generator's: "
        "delete them if no generator uses that configuration any more",
        f"{tmp_path}: 1 spec ({name(KVM)}) was written by another configuration (kinds {KVM}), which "
        "shares no kind with this one; left in place as another generator's: delete it if no "
        "generator uses that configuration any more",
    ]
    after = snapshot(tmp_path)
    assert {n: after[n] for n in before if n != RECORD_NAME} == {
        n: v for n, v in before.items() if n != RECORD_NAME
    }
    # a scan of some kinds only does not look at the other configurations
    some = run_scan(
        ScanOptions(output_dir=tmp_path, spec_dirs=()),
        StaticSource(WORKSTATION),
        renamed,
        kinds={"mycorp.com/fuse"},
    )
    assert some.plan.others == ()
    assert not [w for w in some.warnings if "another configuration" in w]


def test_the_warning_names_a_few_files_and_counts_them(tmp_path: Path) -> None:
    kinds = (FUSE, TUN, KVM, VHOST)
    scan(tmp_path, *kinds)
    renamed = [dataclasses.replace(c, vendor="mycorp.com") for c in classes(*kinds)]
    report = run_scan(ScanOptions(output_dir=tmp_path, spec_dirs=()), StaticSource(WORKSTATION), renamed)
    shown = sorted(name(k) for k in kinds)[:3]
    assert [w for w in report.warnings if "another configuration" in w] == [
        f"{tmp_path}: 4 specs ({', '.join(shown)}, ...) were written by another configuration (kinds "
        f"{', '.join(sorted(kinds))}), which shares no kind with this one; left in place as another "
        "generator's: delete them if no generator uses that configuration any more"
    ]


def test_scan_json_lists_the_other_configurations(tmp_path: Path) -> None:
    host, out = tmp_path / "host.json", tmp_path / "out"
    host.write_text(dumps(WORKSTATION))
    for vendor in ("example.com", "mycorp.com"):
        (tmp_path / "config.yaml").write_text(
            f"classes:\n  - {{vendor: {vendor}, class: fuse, match: {{subsystem: misc, kernel: fuse}}}}\n"
        )
        result = run_cdi_gen(
            "scan", "--config", tmp_path / "config.yaml", "--source", f"fixture:{host}",
            "--output-dir", out, "--json", check=0,
        )  # fmt: skip
    report = json.loads(result.stdout)
    assert report["otherConfigurations"] == [
        {"kinds": ["example.com/fuse"], "files": [str(out / "example.com-fuse.json")]}
    ]
    assert [w for w in report["warnings"] if "another configuration" in w] == [
        f"{out}: 1 spec (example.com-fuse.json) was written by another configuration "
        "(kinds example.com/fuse), which shares no kind with this one; left in place as another "
        "generator's: delete it if no generator uses that configuration any more"
    ]
    assert (out / "example.com-fuse.json").exists()


def test_a_configuration_without_classes_warns_of_the_specs_it_left(tmp_path: Path) -> None:
    scan(tmp_path, FUSE)
    report = run_scan(ScanOptions(output_dir=tmp_path, spec_dirs=()), StaticSource(WORKSTATION), [])
    assert report.files == ()
    assert [o.paths for o in report.plan.others] == [(tmp_path / name(FUSE),)]
    assert [w for w in report.warnings if "another configuration" in w] == [
        f"{tmp_path}: 1 spec ({name(FUSE)}) was written by another configuration (kinds {FUSE}), which "
        "shares no kind with this one; left in place as another generator's: delete it if no "
        "generator uses that configuration any more"
    ]


def test_the_warning_of_a_hostile_record_is_one_escaped_line(tmp_path: Path) -> None:
    """The record is read as input: a file name or kind in it never starts a line of its own nor
    drives the terminal."""
    host, out = tmp_path / "host.json", tmp_path / "out"
    host.write_text(dumps(WORKSTATION))
    out.mkdir()
    (tmp_path / "config.yaml").write_text(
        "classes:\n  - {vendor: mycorp.com, class: fuse, match: {subsystem: misc, kernel: fuse}}\n"
    )
    hostile = "a\x1b[31m\nb.json"
    (out / hostile).write_text("{}")
    record = {"version": 2, "configs": {"c": ["x.com/\x1b]0;title\x07k\nz"]},
              "files": {hostile: {"kind": "x.com/k", "sha256": "0", "config": "c"}}}  # fmt: skip
    (out / RECORD_NAME).write_text(json.dumps(record))
    result = run_cdi_gen(
        "scan", "--config", tmp_path / "config.yaml", "--source", f"fixture:{host}", "--output-dir", out,
        check=0,
    )  # fmt: skip
    assert [line for line in result.stderr.splitlines() if "another configuration" in line] == [
        f"cdi-gen: warning: {out}: 1 spec (a\\x1b[31m\\nb.json) was written by another configuration "
        "(kinds x.com/\\x1b]0;title\\x07k\\nz), which shares no kind with this one; left in place as "
        "another generator's: delete it if no generator uses that configuration any more"
    ]
    assert "\x1b" not in result.stderr
