"""The table's row of podman 4 (``--runtime podman-4``), measured: real podman resolves a device
from a spec file exactly when the table says it reads the file."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cdi_plugin.cdi import codec
from cdi_plugin.cdi.runtime_checks import refusals
from cdi_plugin.cdi.runtimes import BY_NAME
from tests.e2e.podman import PodmanEnv

pytestmark = [pytest.mark.podman, pytest.mark.root]

EDITS = {"env": ["CDI_SEEN=yes"]}


def _json(version: str, **edits: object) -> str:
    device = {"name": "d", "containerEdits": EDITS | edits}
    return json.dumps({"cdiVersion": version, "kind": "example.com/test", "devices": [device]})


YAML = (
    "cdiVersion: 0.3.0\nkind: example.com/test\ndevices:\n- name: d\n  containerEdits:\n"
    "    env: [CDI_SEEN=yes]\n"
)
NULL = {"path": "/dev/null", "type": "c"}
CASES = {
    "0.3.0": (".json", _json("0.3.0")),
    "0.5.0": (".json", _json("0.5.0")),
    "0.6.0": (".json", _json("0.6.0")),
    "0.7.0": (".json", _json("0.7.0")),
    "1.1.0": (".json", _json("1.1.0")),
    "v0.3.0": (".json", _json("v0.3.0")),
    "a .yaml file": (".yaml", YAML),
    "YAML in a .json file": (".json", YAML),
    "permissions none": (".json", _json("0.3.0", deviceNodes=[NULL | {"permissions": "none"}])),
    "permissions rw": (".json", _json("0.3.0", deviceNodes=[NULL | {"permissions": "rw"}])),
    "a createContainer hook": (
        ".json",
        _json("0.3.0", hooks=[{"hookName": "createContainer", "path": "/bin/true"}]),
    ),
}


def test_podman_is_the_version_the_row_was_measured_on() -> None:
    version = subprocess.run(["podman", "--version"], capture_output=True, text=True, check=True).stdout
    assert version.split()[-1].startswith("4."), version


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", list(CASES))
def test_podman_reads_a_spec_exactly_when_the_table_says(
    podman_env: PodmanEnv, tmp_path: Path, case: str
) -> None:
    suffix, text = CASES[case]
    (tmp_path / f"example.com-test{suffix}").write_text(text)
    obj, syntax = codec.parse(text.encode(), case, "yaml" if suffix == ".yaml" else "json")
    spec = codec.spec_from_obj(obj, case)
    reads = not any(p.is_error for p in refusals(BY_NAME["podman-4"], spec, suffix, syntax))
    done = podman_env.run_container(["example.com/test=d"], "echo seen=$CDI_SEEN", spec_dir=tmp_path)
    if reads:
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "seen=yes"
    else:
        assert done.returncode != 0
        assert "unresolvable CDI devices example.com/test=d" in done.stderr, done.stderr
