"""``cdi-gen inspect --oci FILE``: the edits written into an OCI runtime spec the way a runtime's CDI
library makes them, and the files it refuses to edit, left as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import Invoke, report


@pytest.fixture
def mount_spec(tmp_path: Path) -> Path:
    spec = {
        "cdiVersion": "0.3.0", "kind": "acme.example/lib",
        "devices": [{"name": "x", "containerEdits": {
            "env": ["LIB=1"], "mounts": [{"hostPath": "/usr/lib", "containerPath": "/opt/lib"}],
        }}],
    }  # fmt: skip
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "lib.json").write_text(json.dumps(spec))
    return tmp_path / "specs"


def test_oci_writes_into_the_file_and_says_so(cli: Invoke, tmp_path: Path, mount_spec: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"ociVersion": "1.0.2", "process": {"env": ["PATH=/bin"]}}))
    config.chmod(0o600)
    result = cli("inspect", "--json", "--spec-dir", mount_spec, "--oci", config, "acme.example/lib=x")
    assert result.exit_code == 0, result.output
    assert report(result)["ociSpec"] == str(config)
    assert json.loads(config.read_text()) == {
        "ociVersion": "1.0.2",
        "process": {"env": ["PATH=/bin", "LIB=1"]},
        "mounts": [{"destination": "/opt/lib", "source": "/usr/lib"}],
    }
    assert config.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "specs"], "no temporary file left"


def test_oci_reads_what_go_json_writes_raw_or_escaped(cli: Invoke, tmp_path: Path, mount_spec: Path) -> None:
    """runc reads config.json with Go's JSON, which takes a raw DEL and a surrogate pair escape."""
    config = tmp_path / "config.json"
    config.write_text('{"ociVersion": "1.0.2", "process": {"env": ["A=\x7f\\ud83d\\ude00"]}}')
    result = cli("inspect", "--json", "--spec-dir", mount_spec, "--oci", config, "acme.example/lib=x")
    assert result.exit_code == 0, result.output
    assert json.loads(config.read_text())["process"]["env"] == ["A=\x7f\U0001f600", "LIB=1"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"process": {"env": "PATH=/bin"}}', "{config}: /process/env: expected a list"),
        ("process: {}\n", "{config}: not JSON"),
        ("", "{config}: the file is empty (no OCI runtime spec data)"),
        ('{"linux": {"namespaces": [{"type": "user"}]}}',
         "{config}: it has a user namespace, where the CDI library gives the mounts it adds ID mappings, "
         "which cdi-gen does not write"),
    ],
)  # fmt: skip
def test_oci_refuses_a_file_it_cannot_edit_and_leaves_it(
    cli: Invoke, tmp_path: Path, mount_spec: Path, content: str, message: str
) -> None:
    config = tmp_path / "config.json"
    config.write_text(content)
    result = cli("inspect", "--spec-dir", mount_spec, "--oci", config, "acme.example/lib=x")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"cdi-gen: error: {message.format(config=config)}\n"
    assert config.read_text() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "specs"]


def test_oci_refuses_a_symbolic_link(cli: Invoke, tmp_path: Path, mount_spec: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "config.json"
    link.symlink_to(target)
    result = cli("inspect", "--spec-dir", mount_spec, "--oci", link, "acme.example/lib=x")
    assert result.exit_code == 1
    assert result.stderr == f"cdi-gen: error: {link}: is a symbolic link, which is not followed\n"
    assert (link.is_symlink(), target.read_text()) == (True, "{}")
