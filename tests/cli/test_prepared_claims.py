"""``cdi-plugin prepared-claims``: the newest whole record of the driver's state file, as the JSON
document a release before slots reads; a damaged slot noted, an unusable file one line."""

from __future__ import annotations

import asyncio
from pathlib import Path

from click.testing import CliRunner, Result

from cdi_plugin.cli import plugin
from cdi_plugin.dra.prepare import PreparedDevice
from cdi_plugin.dra.prepared import PreparedClaims
from cdi_plugin.dra.preparedstate import PreparedState, decode, encode
from cdi_plugin.store.slotfile import HEADER, MIN_SLOT

DRIVER = "gpu.example.com"


def card(i: int) -> tuple[PreparedDevice, ...]:
    return (PreparedDevice(("gpu",), "node-a", f"gpu-card{i}", (f"example.com/gpu=card{i}",)),)


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(plugin.main, ["prepared-claims", *map(str, args)], catch_exceptions=False)


def prepared(plugins: Path, *changes: dict[str, tuple[PreparedDevice, ...]]) -> Path:
    path = plugins / DRIVER / "prepared.json"
    claims = PreparedClaims(path)
    for change in changes:
        asyncio.run(claims.put(change))
    return path


def test_prints_the_newest_record_as_the_plain_document(tmp_path: Path) -> None:
    path = prepared(tmp_path, {"uid-1": card(0)}, {"uid-2": card(1)})
    result = run("--kubelet-plugins-dir", tmp_path, "--driver-name", DRIVER)
    assert result.exit_code == 0, result.output
    state = PreparedState({"uid-1": card(0), "uid-2": card(1)})
    assert result.stdout == encode(state, indent=1).decode()
    assert result.stdout.startswith('{\n "version": 1,\n "claims": {\n  "uid-1": [\n')  # for people
    assert result.stderr == ""
    copy = tmp_path / "plain.json"  # what a release before slots reads
    copy.write_text(result.stdout)
    assert decode(copy.read_bytes(), str(copy)) == state
    assert run("--file", copy).stdout == result.stdout
    assert run("--file", path).stdout == result.stdout


def test_a_damaged_slot_is_noted_and_the_record_before_it_printed(tmp_path: Path) -> None:
    path = prepared(tmp_path, {"uid-1": card(0)}, {"uid-2": card(1)})
    with path.open("r+b") as fh:  # record 2, in slot 1, torn
        fh.seek(MIN_SLOT + HEADER.size + 50)
        fh.write(b"\0" * 50)
    result = run("--file", path)
    assert result.exit_code == 0, result.output
    assert result.stdout == encode(PreparedState({"uid-1": card(0)}), indent=1).decode()
    assert result.stderr == (
        f"cdi-plugin: note: {path}: slot 1 (checksum mismatch) passed over: record 1 of slot 0 is used\n"
    )


def test_a_file_that_cannot_be_used_is_one_line_and_status_1(tmp_path: Path) -> None:
    path = prepared(tmp_path, {"uid-1": card(0)})
    with path.open("r+b") as fh:
        fh.seek(HEADER.size)
        fh.write(b"[")
    cases = {
        (
            "--file",
            str(path),
        ): f"{path}: no slot holds a whole record (slot 0: checksum mismatch; slot 1: empty)",
        ("--kubelet-plugins-dir", str(tmp_path / "none")): (
            f"{tmp_path / 'none' / 'cdi-plugin.io' / 'prepared.json'}: no such file or directory"
        ),
        ("--driver-name", "../etc"): "driver name '../etc': not a DNS subdomain",
    }
    for args, message in cases.items():
        result = run(*args)
        assert result.exit_code == 1
        assert result.stdout == ""
        assert result.stderr.startswith(f"cdi-plugin: error: {message}"), result.stderr
        assert result.stderr.count("\n") == 1
