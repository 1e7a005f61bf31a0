"""A scan that removes files another configuration sharing a kind with its own wrote (an earlier
form of it, or another generator's still in use): it warns at each such removal."""

from __future__ import annotations

import json
from pathlib import Path

from cdi_plugin.discovery.fixture import dumps
from cdi_plugin.discovery.model import StaticSource
from cdi_plugin.scan import ScanOptions, ScanReport, run_scan
from cdi_plugin.store.ownership import RECORD_NAME
from tests.generate.hosts import WORKSTATION
from tests.scan.helpers import run_cdi_gen
from tests.scan.test_generators import FUSE, KVM, TUN, VHOST, classes, name

CONFIGS = {
    "a": (FUSE, TUN),
    "b": (FUSE, KVM),
}


def scan(out: Path, *kinds: str, host: StaticSource | None = None) -> ScanReport:
    return run_scan(
        ScanOptions(output_dir=out, spec_dirs=()), host or StaticSource(WORKSTATION), classes(*kinds)
    )


def removed(report: ScanReport) -> list[str]:
    return [f.path.name for f in report.files if f.action == "removed"]


def warned(report: ScanReport) -> list[str]:
    return [w for w in report.warnings if "each other's specs" in w]


def warning(out: Path, removed: str, kinds: tuple[str, ...], shared: str, done: str = "removed") -> str:
    return (
        f"{out}: {done} 1 spec ({removed}) written by another configuration (kinds "
        f"{', '.join(sorted(kinds))}), which shares kind {shared} with this one: nothing to do if this "
        "one replaced it; if another generator still uses it, the two remove each other's specs at "
        "every scan: give each its own kinds or its own output directory"
    )


def test_two_generators_sharing_a_kind_warn_at_each_removal_of_the_others_spec(tmp_path: Path) -> None:
    scan(tmp_path, FUSE, TUN)
    b = scan(tmp_path, FUSE, KVM)
    assert removed(b) == [name(TUN)]
    assert warned(b) == [warning(tmp_path, name(TUN), (FUSE, TUN), FUSE)]
    assert [(r.kinds, r.shared, r.paths) for r in b.plan.replaced] == [
        (frozenset({FUSE, TUN}), frozenset({FUSE}), (tmp_path / name(TUN),))
    ]
    a = scan(tmp_path, FUSE, TUN)
    assert removed(a) == [name(KVM)]
    assert warned(a) == [warning(tmp_path, name(KVM), (FUSE, KVM), FUSE)]
    b = scan(tmp_path, FUSE, KVM)
    assert removed(b) == [name(TUN)]
    assert warned(b) == [warning(tmp_path, name(TUN), (FUSE, TUN), FUSE)]


def test_a_class_removed_from_the_configuration_warns_once(tmp_path: Path) -> None:
    scan(tmp_path, FUSE, TUN)
    edited = scan(tmp_path, FUSE)
    assert removed(edited) == [name(TUN)]
    assert warned(edited) == [warning(tmp_path, name(TUN), (FUSE, TUN), FUSE)]
    again = scan(tmp_path, FUSE)
    assert removed(again) == []
    assert warned(again) == []
    assert again.plan.replaced == ()


def test_a_spec_of_a_kind_of_this_configuration_removed_is_not_warned_of(tmp_path: Path) -> None:
    """A class added, and one losing its devices: its file, written by the configuration before
    the edit, is this one's to remove."""
    scan(tmp_path, FUSE, TUN)
    no_tun = StaticSource([d for d in WORKSTATION if d.sys_name != "tun"])
    report = scan(tmp_path, FUSE, TUN, KVM, host=no_tun)
    assert removed(report) == [name(TUN)]
    assert warned(report) == []


def test_a_spec_of_a_record_of_the_previous_format_removed_is_not_warned_of(tmp_path: Path) -> None:
    scan(tmp_path, FUSE, TUN)
    record = tmp_path / RECORD_NAME
    body = json.loads(record.read_bytes())
    files = {n: {k: v for k, v in e.items() if k != "config"} for n, e in body["files"].items()}
    record.write_text(json.dumps({"version": 1, "files": files}))
    report = scan(tmp_path, FUSE)
    assert removed(report) == [name(TUN)]
    assert warned(report) == []
    assert report.plan.replaced == ()


def cli_scan(tmp_path: Path, out: Path, config: str, *args: str) -> tuple[dict[str, object], str]:
    """``cdi-gen scan`` with configuration ``config`` of :data:`CONFIGS`: the --json report (or
    nothing without --json) and stderr."""
    host, path = tmp_path / "host.json", tmp_path / f"{config}.yaml"
    host.write_text(dumps(WORKSTATION))
    lines = [f"  - {{vendor: cdi-plugin.io, class: {k.split('/')[1]}, match: {{subsystem: misc, kernel: "
             f"{k.split('/')[1]}}}}}" for k in CONFIGS[config]]  # fmt: skip
    path.write_text("classes:\n" + "\n".join(lines) + "\n")
    result = run_cdi_gen(
        "scan", "--config", path, "--source", f"fixture:{host}", "--output-dir", out, *args, check=0
    )
    return (json.loads(result.stdout) if "--json" in args else {}), result.stderr


def test_scan_json_lists_the_replaced_configurations(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first, _ = cli_scan(tmp_path, out, "a", "--json")
    assert first["replacedConfigurations"] == []
    report, _ = cli_scan(tmp_path, out, "b", "--json")
    assert report["replacedConfigurations"] == [
        {"kinds": [FUSE, TUN], "sharedKinds": [FUSE], "files": [str(out / name(TUN))]}
    ]
    assert warning(out, name(TUN), (FUSE, TUN), FUSE) in report["warnings"]  # type: ignore[operator]
    assert not (out / name(TUN)).exists()


def test_a_dry_run_says_what_it_would_remove(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cli_scan(tmp_path, out, "a")
    _, stderr = cli_scan(tmp_path, out, "b", "--dry-run")
    assert stderr.splitlines() == [
        "cdi-gen: warning: " + warning(out, name(TUN), (FUSE, TUN), FUSE, done="would remove")
    ]
    report, _ = cli_scan(tmp_path, out, "b", "--dry-run", "--json")
    assert report["replacedConfigurations"] == [
        {"kinds": [FUSE, TUN], "sharedKinds": [FUSE], "files": [str(out / name(TUN))]}
    ]
    assert (out / name(TUN)).exists()


def test_the_warning_counts_the_files_and_the_kinds_shared(tmp_path: Path) -> None:
    scan(tmp_path, FUSE, TUN, KVM, VHOST)
    report = scan(tmp_path, FUSE, TUN)
    assert warned(report) == [
        f"{tmp_path}: removed 2 specs ({name(KVM)}, {name(VHOST)}) written by another configuration "
        f"(kinds {', '.join(sorted((FUSE, TUN, KVM, VHOST)))}), which shares kinds {FUSE}, {TUN} with "
        "this one: nothing to do if this one replaced it; if another generator still uses it, the two "
        "remove each other's specs at every scan: give each its own kinds or its own output directory"
    ]
