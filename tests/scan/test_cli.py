"""``cdi-gen scan`` end to end on a recorded host: output, exit codes, and what lands on disk."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from cdi_plugin.discovery.model import DiscoveredDevice
from cdi_plugin.generate.config import default_config_text
from cdi_plugin.store.ownership import RECORD_NAME, owned_kinds
from tests.generate.hosts import WORKSTATION, char, props, usb_tty
from tests.scan.helpers import renamed_fuse_mode, run_cdi_gen, snapshot, without

DEFAULT_KINDS = {
    "cdi-plugin.io/fuse",
    "cdi-plugin.io/tun",
    "cdi-plugin.io/vhost-net",
    "cdi-plugin.io/kvm",
    "cdi-plugin.io/dri-render",
    "cdi-plugin.io/kfd",
    "cdi-plugin.io/usb-serial",
    "cdi-plugin.io/video4linux",
    "cdi-plugin.io/infiniband",
    "cdi-plugin.io/binder",
}


def scan(
    host: Path, out: Path, *extra: str | Path, check: int | None = 0
) -> subprocess.CompletedProcess[str]:
    """``cdi-gen scan`` of a recorded host into ``out``."""
    return run_cdi_gen("scan", "--source", f"fixture:{host}", "--output-dir", out, *extra, check=check)


def test_print_default_config() -> None:
    result = run_cdi_gen("scan", "--print-default-config")
    assert result.stdout == default_config_text()
    assert len(yaml.safe_load(result.stdout)["classes"]) == 13


def test_scan_writes_then_leaves_unchanged_files_alone(workstation: Path, tmp_path: Path) -> None:
    out = tmp_path / "cdi"
    out.mkdir()  # so that the first scan already takes the lock (its file stays)
    first = scan(workstation, out)
    assert re.search(r"cdi-plugin\.io/usb-serial +FT4ZK0A1 +/dev/ttyUSB0 ", first.stdout)
    assert f"{out}/cdi-plugin.io-kvm.json" in first.stdout
    assert "17 devices in 10 file(s): 10 created" in first.stdout
    assert "warning: cdi-plugin.io/usb-serial: /dev/ttyUSB1 named" in first.stderr, (
        "shared serials are reported"
    )
    assert owned_kinds([out]) == DEFAULT_KINDS
    before = snapshot(out)
    again = scan(workstation, out)
    assert "10 unchanged" in again.stdout
    assert snapshot(out) == before


def test_json_report(workstation: Path, tmp_path: Path) -> None:
    result = scan(workstation, tmp_path, "--json", check=0)
    report = json.loads(result.stdout)
    assert report["dryRun"] is False
    assert report["config"] == "<embedded default config>"
    files = {f["kind"]: f for f in report["files"]}
    assert set(files) == DEFAULT_KINDS
    render = files["cdi-plugin.io/dri-render"]
    assert render["action"] == "created"
    assert render["cdiVersion"] == "0.3.0"
    assert render["devices"][1] == {
        "name": "pci-0000_03_00.0",
        "qualifiedName": "cdi-plugin.io/dri-render=pci-0000_03_00.0",
        "hostNodes": ["/dev/dri/renderD128"],
        "source": "/dev/dri/renderD128",
        "naming": "path",
    }
    assert len(report["warnings"]) == 2


def test_dry_run_writes_nothing_and_shows_the_diff(
    workstation: Path, host_file: Callable[..., Path], tmp_path: Path
) -> None:
    out = tmp_path / "cdi"
    result = scan(workstation, out, "--dry-run", check=0)
    assert not out.exists()
    assert "10 would create" in result.stdout
    assert f"+++ {out}/cdi-plugin.io-fuse.json" in result.stdout
    assert "dry run: nothing was written" in result.stdout
    scan(workstation, out)
    before = snapshot(out)
    changed = host_file(renamed_fuse_mode(0o660))
    result = scan(changed, out, "--dry-run", "--json", check=0)
    report = {f["kind"]: f for f in json.loads(result.stdout)["files"]}
    assert report["cdi-plugin.io/fuse"]["action"] == "changed"
    assert (
        '-            "fileMode": 438,\n+            "fileMode": 432,\n'
        in report["cdi-plugin.io/fuse"]["diff"]
    )
    assert report["cdi-plugin.io/tun"]["diff"] == ""
    assert snapshot(out) == before


def test_a_kind_whose_last_device_is_gone_is_removed(
    workstation: Path, host_file: Callable[..., Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    scan(workstation, out)
    no_kvm = host_file(without("kvm"))
    result = scan(no_kvm, out)
    assert re.search(rf"cdi-plugin\.io/kvm +- +- +{out}/cdi-plugin\.io-kvm\.json +removed", result.stdout)
    assert not (out / "cdi-plugin.io-kvm.json").exists()
    assert owned_kinds([out]) == DEFAULT_KINDS - {"cdi-plugin.io/kvm"}


def test_yaml_format(workstation: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    scan(workstation, out, "--format", "yaml", check=0)
    names = sorted(p.name for p in out.iterdir())
    assert names[0] == RECORD_NAME
    assert all(n.endswith(".yaml") for n in names[1:])
    assert len(names) == 11
    run_cdi_gen("validate", out)


def test_foreign_spec_conflict_and_force(workstation: Path, tmp_path: Path) -> None:
    out, other = tmp_path / "out", tmp_path / "other"
    other.mkdir()
    foreign = other / "fuse.json"
    foreign.write_text(
        json.dumps(
            {
                "cdiVersion": "0.3.0",
                "kind": "cdi-plugin.io/fuse",
                "devices": [{"name": "f", "containerEdits": {"deviceNodes": [{"path": "/dev/fuse"}]}}],
            }
        )
    )
    before = snapshot(other)
    refused = scan(workstation, out, "--spec-dir", other, check=1)
    assert refused.stderr == (
        f"cdi-gen: error: cdi-plugin.io/fuse is already defined by {foreign} (not written by cdi-gen); "
        "cdi-gen does not change a spec it does not own: remove that file, or pass --force to write "
        "cdi-plugin.io/fuse anyway\n"
    )
    assert not out.exists()
    forced = scan(workstation, out, "--spec-dir", other, "--force")
    assert "wrote over" not in forced.stdout, "the foreign file was not touched"
    assert (
        f"--force: also defined, left as it is: cdi-plugin.io/fuse: {foreign} (not written by cdi-gen)"
        in forced.stdout
    )
    assert snapshot(other) == before
    assert (out / "cdi-plugin.io-fuse.json").exists()


def test_force_reports_the_foreign_files_it_replaced(workstation: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    foreign = out / "cdi-plugin.io-tun.json"
    foreign.write_text(
        '{"cdiVersion": "0.3.0", "kind": "cdi-plugin.io/tun", '
        '"devices": [{"name": "t", "containerEdits": {"deviceNodes": [{"path": "/dev/net/tun"}]}}]}'
    )
    dry = scan(workstation, out, "--force", "--dry-run")
    assert f"--force: would write over cdi-plugin.io/tun: {foreign} (not written by cdi-gen)" in dry.stdout
    forced = scan(workstation, out, "--force", "--json")
    assert json.loads(forced.stdout)["forced"] == [f"cdi-plugin.io/tun: {foreign} (not written by cdi-gen)"]
    assert json.loads(forced.stdout)["leftAlone"] == []
    assert json.loads(foreign.read_text())["devices"][0]["name"] == "tun"


def test_force_never_replaces_a_file_of_another_kind_at_the_same_name(
    workstation: Path, tmp_path: Path
) -> None:
    """cdi/plugin.io-fuse is written to cdi-plugin.io-fuse.json as well: --force is for a kind
    defined twice, not for another kind's file."""
    out = tmp_path / "out"
    out.mkdir()
    foreign = out / "cdi-plugin.io-fuse.json"
    foreign.write_text(
        '{"cdiVersion": "0.6.0", "kind": "cdi/plugin.io-fuse", '
        '"devices": [{"name": "f", "containerEdits": {"env": ["A=1"]}}]}'
    )
    before = foreign.read_bytes()
    for extra in ((), ("--force",)):
        refused = scan(workstation, out, *extra, check=1)
        assert refused.stderr == (
            f"cdi-gen: error: {foreign}: cdi-gen would write cdi-plugin.io/fuse into this file, which "
            "defines cdi/plugin.io-fuse (not written by cdi-gen); it is not replaced, even with --force: "
            "move it away, or give the class another vendor or class; nothing was written\n"
        )
        assert foreign.read_bytes() == before
        assert [p.name for p in out.glob("*.json")] == [foreign.name]


def test_a_refusal_names_every_conflicting_kind(workstation: Path, tmp_path: Path) -> None:
    out, other = tmp_path / "out", tmp_path / "other"
    other.mkdir()
    kinds = ["fuse", "kvm", "tun"]
    for name in kinds:
        (other / f"{name}.json").write_text(
            json.dumps({"cdiVersion": "0.3.0", "kind": f"cdi-plugin.io/{name}",
                        "devices": [{"name": "x", "containerEdits": {"env": ["A=1"]}}]})
        )  # fmt: skip
    refused = scan(workstation, out, "--spec-dir", other, check=1)
    assert refused.stderr == (
        "cdi-gen: error: specs cdi-gen does not own already define what it would write: "
        + "; ".join(f"cdi-plugin.io/{n} by {other}/{n}.json (not written by cdi-gen)" for n in kinds)
        + "; cdi-gen does not change a spec it does not own: remove those files, or pass --force to "
        "write cdi-plugin.io/fuse, cdi-plugin.io/kvm, cdi-plugin.io/tun anyway\n"
    )


def test_a_try_out_is_not_refused_for_the_specs_runtimes_read(
    private_spec_dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    """A host that ran ``cdi-gen scan`` (and has another definition of a kind) can still try the
    simulated workstation in a directory that no runtime reads; a scan into a directory runtimes
    read is still checked against all of them."""
    etc, run = private_spec_dirs
    run_cdi_gen("scan", "--source", "simulated", check=0)
    assert (etc / "cdi-plugin.io-dri-render.json").exists(), "the default output is the first spec dir"
    run.mkdir()
    foreign = run / "binder.json"
    foreign.write_text(
        '{"cdiVersion": "0.3.0", "kind": "cdi-plugin.io/binder", '
        '"devices": [{"name": "b", "containerEdits": {"env": ["A=1"]}}]}'
    )
    before = snapshot(etc)
    try_out = tmp_path / "cdi-try"
    run_cdi_gen("scan", "--source", "simulated", "--output-dir", try_out, check=0)
    assert (try_out / "cdi-plugin.io-binder.json").exists()
    run_cdi_gen("validate", try_out, check=0)
    refused = run_cdi_gen("scan", "--source", "simulated", check=1)
    assert f"cdi-plugin.io/binder is already defined by {foreign}" in refused.stderr
    again = run_cdi_gen("scan", "--source", "simulated", "--cdi-spec-dirs", etc, check=0)
    assert "10 unchanged" in again.stdout
    after = snapshot(etc)
    assert after.pop(".cdi-gen.lock")[2] == 0o600, "the scans into etc took its root-only lock"
    assert after == before


def test_version_ceiling_names_the_feature(host_file: Callable[..., Path], tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "classes:\n"
        "  - {vendor: example.com, class: fuse, node: {path: /dev/f},\n"
        "     match: {subsystem: misc, kernel: fuse}}\n"
    )
    host = host_file(WORKSTATION)
    out = tmp_path / "out"
    result = run_cdi_gen(
        "scan",
        "--config",
        config,
        "--source",
        f"fixture:{host}",
        "--output-dir",
        out,
        "--cdi-version-max",
        "0.4.0",
        check=1,
    )
    assert "needs cdiVersion 0.5.0 for deviceNode 'hostPath', above the maximum 0.4.0" in result.stderr
    assert not out.exists()
    ok = run_cdi_gen(
        "scan", "--config", config, "--source", f"fixture:{host}", "--output-dir", out, "--json", check=0
    )
    assert json.loads(ok.stdout)["files"][0]["cdiVersion"] == "0.5.0"


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert run_cdi_gen("scan", "--format", "xml").returncode == 2
    assert run_cdi_gen("scan", "--cdi-version-max", "9.9.9").returncode == 2
    assert run_cdi_gen("scan", "--output-dir").returncode == 2
    for args in (
        ["scan", "--source", "simulatd"],
        ["scan", "--source", "fixture:"],
        ["watch", "--source", "x"],
    ):
        done = run_cdi_gen(*args, "--output-dir", tmp_path / "out")
        assert done.returncode == 2, done.stderr
        assert f"Invalid value for '--source': '{args[-1]}': must be 'udev'" in done.stderr
    assert run_cdi_gen("scan", "--cdi-spec-dirs", ":", "--output-dir", tmp_path / "out").returncode == 2
    for command in ("scan", "watch"):
        for value in ("nan", "inf"):  # nan: a wait for another scan's lock that never ends
            done = run_cdi_gen(command, "--lock-timeout", value, "--output-dir", tmp_path / "out")
            assert done.returncode == 2, done.stderr
            assert f"Invalid value for '--lock-timeout': {value} is not a finite number" in done.stderr
    assert not (tmp_path / "out").exists()


HOSTILE = "../../etc/cron.d/x\n--privileged $(id)"


def hostile_host() -> Sequence[DiscoveredDevice]:
    evil = DiscoveredDevice(
        subsystem="tty",
        sys_name="ttyUSB9",
        sys_path="/sys/devices/x/ttyUSB9",
        devnode="/dev/ttyUSB9",
        node=char(188, 9, 0o660, 20),
        properties=props(ID_SERIAL_SHORT=HOSTILE, ID_MODEL=HOSTILE, ID_PATH=HOSTILE),
    )
    traversal = DiscoveredDevice(
        subsystem="tty",
        sys_name="ttyUSB8",
        sys_path="/sys/devices/x/ttyUSB8",
        devnode="/dev/../etc/ttyUSB8",
        node=char(188, 8, 0o660, 20),
    )
    return [evil, traversal]


def test_hostile_udev_data_fails_the_scan_unless_skipped(
    host_file: Callable[..., Path], tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "classes:\n"
        "  - vendor: example.com\n"
        "    class: serial\n"
        "    match: {subsystem: tty}\n"
        "    naming: [kernel]\n"
        "    edits:\n"
        "      env: ['MODEL={property:ID_MODEL}']\n"
        "      hooks: [{hookName: createContainer, path: /bin/hook, args: [hook, '{serial}']}]\n"
    )
    honest = DiscoveredDevice(
        subsystem="tty",
        sys_name="ttyUSB1",
        sys_path="/sys/devices/x/ttyUSB1",
        devnode="/dev/ttyUSB1",
        node=char(188, 1, 0o660, 20),
        properties=props(ID_SERIAL_SHORT="FT4ZK0A1", ID_MODEL="FT232R_USB_UART"),
    )
    host = host_file([honest, *hostile_host()])
    out = tmp_path / "out"
    out.mkdir()
    (out / "user-notes.json").write_text("{}")
    before = snapshot(out)
    args = ("scan", "--config", config, "--source", f"fixture:{host}", "--output-dir", out)

    refused = run_cdi_gen(*args, check=1)
    assert refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1
    assert refused.stderr.startswith(
        "cdi-gen: error: refusing 2 devices (hostile udev data, or no name of its own), nothing was written"
    )
    assert (
        "skipping /dev/ttyUSB9: {property:ID_MODEL} is '../../etc/cron.d/x\\n--privileged $(id)'"
        in refused.stderr
    )
    assert "which holds a control character" in refused.stderr
    assert "skipping /dev/../etc/ttyUSB8: node path '/dev/../etc/ttyUSB8' is not a clean" in refused.stderr
    assert snapshot(out) == before

    skipped = run_cdi_gen(*args, "--skip-refused", check=0)
    assert "cdi-gen: warning: example.com/serial: skipping /dev/ttyUSB9" in skipped.stderr
    spec = json.loads((out / "example.com-serial.json").read_bytes())
    assert [d["name"] for d in spec["devices"]] == ["ttyUSB1"]
    assert spec["devices"][0]["containerEdits"]["env"] == ["MODEL=FT232R_USB_UART"]
    assert (out / "user-notes.json").read_text() == "{}"
    assert run_cdi_gen("validate", out / "example.com-serial.json").returncode == 0


def test_a_device_copying_another_devices_name_stops_no_other_spec(
    host_file: Callable[..., Path], tmp_path: Path
) -> None:
    """A USB device whose serial number is another device's port name: both are left out with
    --skip-refused (neither takes the name), every other device and kind is written."""
    victim = usb_tty("ttyUSB1", 1, "2", serial=None)  # named by its port
    evil = usb_tty("ttyUSB0", 0, "1", serial="pci-0000_00_14.0-usb-0_2_1.0")
    honest = usb_tty("ttyUSB2", 2, "3", serial="FT4ZK0A1")
    fuse = next(d for d in WORKSTATION if d.sys_name == "fuse")
    host = host_file([victim, evil, honest, fuse])
    out = tmp_path / "out"
    args = ("scan", "--source", f"fixture:{host}", "--output-dir", out, "--cdi-spec-dirs", out)

    refused = run_cdi_gen(*args, check=1)
    assert "both named 'pci-0000_00_14.0-usb-0_2_1.0'" in refused.stderr
    assert not out.exists()

    skipped = run_cdi_gen(*args, "--skip-refused", check=0)
    assert "skipping /dev/ttyUSB0: /dev/ttyUSB0 (serial) and /dev/ttyUSB1 (path)" in skipped.stderr
    spec = json.loads((out / "cdi-plugin.io-usb-serial.json").read_bytes())
    assert [d["name"] for d in spec["devices"]] == ["FT4ZK0A1"]
    assert (out / "cdi-plugin.io-fuse.json").exists()


def test_a_long_warning_is_one_line(host_file: Callable[..., Path], tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "classes:\n"
        "  - {vendor: example.com, class: serial, match: {subsystem: tty}, naming: [kernel],\n"
        "     edits: {env: ['MODEL={property:ID_MODEL}', 'SERIAL={serial}']}}\n"
    )
    long_hostile = "x/" * 200
    evil = DiscoveredDevice(
        subsystem="tty",
        sys_name="ttyUSB9",
        sys_path="/sys/devices/x/ttyUSB9",
        devnode="/dev/ttyUSB9",
        node=char(188, 9, 0o660, 20),
        properties=props(ID_SERIAL_SHORT=long_hostile, ID_MODEL=long_hostile),
    )
    host = host_file([evil])
    args = ("scan", "--config", config, "--source", f"fixture:{host}", "--output-dir", tmp_path / "out")
    skipped = run_cdi_gen(*args, "--skip-refused", check=0)
    [line] = skipped.stderr.splitlines()
    assert line.startswith("cdi-gen: warning: example.com/serial: skipping /dev/ttyUSB9: ")
    assert line.count(long_hostile) == 2
