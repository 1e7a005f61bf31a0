"""A kind too long for its spec file's name is a configuration error of ``cdi-gen scan``, found
before any device is read or any file written; a kind at the limit is written.

The spec file ``<vendor>-<class>.json`` is written as ``.<vendor>-<class>.json.XXXXXXXX.tmp``
first, and both names must fit in the 255 bytes of a file name: vendor and class may have 235
characters together.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scan.helpers import run_cdi_gen, snapshot

LIMIT = 235
CLASS = "c" * 63  # the longest class


def config(directory: Path, vendor: str) -> Path:
    path = directory / "config.yaml"
    path.write_text(
        f"classes:\n  - {{vendor: {vendor}, class: {CLASS}, match: {{subsystem: misc, kernel: fuse}}}}\n"
    )
    return path


def refusal(path: Path, vendor: str) -> str:
    return (
        f"{path}: classes[0].class: class '{CLASS}' and vendor '{vendor[:80]}'... ({len(vendor)} "
        f"characters) have {len(vendor) + len(CLASS)} characters together, at most {LIMIT}: the spec file, "
        "<vendor>-<class>.json, is written as .<vendor>-<class>.json.XXXXXXXX.tmp first, and a file name "
        "has at most 255 bytes (shorten the vendor or the class)"
    )


def scan(source: str, out: Path, cfg: Path, *extra: str) -> tuple[int, str, str]:
    result = run_cdi_gen(
        "scan", "--source", source, "--output-dir", out, "--cdi-spec-dirs", out, "--config", cfg, *extra
    )
    return result.returncode, result.stdout, result.stderr


@pytest.mark.parametrize("extra", [[], ["--dry-run"], ["--json"], ["--dry-run", "--json"]])
def test_a_file_name_whose_temporary_name_does_not_fit_is_refused_before_anything_is_written(
    workstation: Path, tmp_path: Path, extra: list[str]
) -> None:
    """236 characters: the spec file's name (242 bytes) fits, its temporary file's (256) does not."""
    vendor = "v" * (LIMIT + 1 - len(CLASS))
    cfg = config(tmp_path, vendor)
    out = tmp_path / "cdi"
    code, stdout, stderr = scan(f"fixture:{workstation}", out, cfg, *extra)
    assert code == 1
    assert stderr == f"cdi-gen: error: {refusal(cfg, vendor)}\n"
    if "--json" in extra:
        assert json.loads(stdout) == {"error": refusal(cfg, vendor)}
    else:
        assert stdout == ""
    assert not out.exists(), "nothing written, not even the directory"


def test_the_configuration_is_refused_before_the_devices_are_read(tmp_path: Path) -> None:
    vendor = "v" * (LIMIT + 1 - len(CLASS))
    cfg = config(tmp_path, vendor)
    code, _, stderr = scan(f"fixture:{tmp_path / 'no-such-host.json'}", tmp_path / "cdi", cfg, "--dry-run")
    assert (code, stderr) == (1, f"cdi-gen: error: {refusal(cfg, vendor)}\n")


def test_a_kind_at_the_limit_is_written_and_one_character_more_is_refused(
    workstation: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cdi"
    vendor = "v" * (LIMIT - len(CLASS))
    code, _, stderr = scan(f"fixture:{workstation}", out, config(tmp_path, vendor))
    assert (code, stderr) == (0, "")
    name = f"{vendor}-{CLASS}.json"
    assert len(name) == 241
    assert (out / name).is_file()
    assert run_cdi_gen("validate", out).returncode == 0
    before = snapshot(out)
    longer = "v" + vendor
    cfg = config(tmp_path, longer)
    code, _, stderr = scan(f"fixture:{workstation}", out, cfg)
    assert (code, stderr) == (1, f"cdi-gen: error: {refusal(cfg, longer)}\n")
    assert snapshot(out) == before
