"""``--runtime``: ``validate`` and ``list`` say which runtime drops which file and device, and why;
``scan`` refuses to write what a runtime named on its command line or in its configuration would
not read."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Invoke, report, run_cdi_gen

WIDGET = {
    "name": "w",
    "containerEdits": {"deviceNodes": [{"path": "/dev/widget", "type": "c", "fileMode": 384}]},
}


def _spec(version: str = "0.3.0", kind: str = "example.com/widget", name: str = "w") -> dict[str, Any]:
    return {"cdiVersion": version, "kind": kind, "devices": [copy.deepcopy(WIDGET) | {"name": name}]}


YAML_SPEC = (
    "cdiVersion: 0.3.0\nkind: example.com/{kind}\ndevices:\n- name: w\n  containerEdits:\n    env: [A=1]\n"
)


@pytest.fixture
def flagged(tmp_path: Path) -> dict[str, Path]:
    """The four files iSulad does not read, each of its own kind."""
    files = {
        "yaml": tmp_path / "a-yaml.yaml",
        "yaml in json": tmp_path / "b-yaml-in.json",
        "v0.6.0": tmp_path / "c-prefix.json",
        "0.7.0": tmp_path / "d-newer.json",
    }
    files["yaml"].write_text(YAML_SPEC.format(kind="yaml"))
    files["yaml in json"].write_text(YAML_SPEC.format(kind="yamlinjson"))
    files["v0.6.0"].write_text(json.dumps(_spec("v0.6.0", "example.com/prefix")))
    spec = _spec("0.7.0", "example.com/newer")
    spec["devices"][0]["containerEdits"]["additionalGids"] = [44]
    files["0.7.0"].write_text(json.dumps(spec))
    return files


def test_validate_runtime_isulad_flags_yaml_yaml_in_json_a_v_prefix_and_0_7_0(
    cli: Invoke, flagged: dict[str, Path]
) -> None:
    plain = cli("validate", *flagged.values())
    assert plain.exit_code == 0, plain.output  # the CDI Go library loads all four (with warnings)
    result = cli("validate", "--json", "--runtime", "isulad", *flagged.values())
    assert result.exit_code == 1
    files = {Path(f["path"]): f for f in report(result)["files"]}
    why = {
        "yaml": "it reads only .json files",
        "yaml in json": "the .json file holds YAML, which it does not parse",
        "v0.6.0": "it rejects the 'v' in 'v0.6.0'",
        "0.7.0": "it reads cdiVersion up to 0.6.0, the file declares 0.7.0",
    }
    for case, path in flagged.items():
        found = files[path]
        assert not found["valid"], case
        isulad = found["runtimes"]["isulad"]
        assert not isulad["loads"], case
        assert f"isulad (iSulad 2.1.6) drops this file: {why[case]}" in [
            p["message"] for p in isulad["problems"]
        ]


def test_validate_runtime_passes_the_specs_cdi_gen_scan_writes_by_default(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_cdi_gen("scan", "--source", "simulated", "--output-dir", out, "--cdi-spec-dirs", tmp_path / "none")
    names = [
        a for name in ("isulad", "podman-4", "containerd-1.7", "cri-o", "docker") for a in ("--runtime", name)
    ]
    done = run_cdi_gen("validate", "--strict", *names, out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "10 files: 10 valid, 0 invalid"


def test_list_runtime_names_each_device_a_runtime_does_not_see(cli: Invoke, tmp_path: Path) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    etc.mkdir()
    run.mkdir()
    (etc / "widget.json").write_text(
        json.dumps(_spec(name="a") | {"devices": [dict(WIDGET, name="a"), WIDGET]})
    )
    # w again, at a higher priority, as YAML: the CDI Go library takes this one, iSulad the JSON one
    (run / "widget.yaml").write_text(YAML_SPEC.format(kind="widget"))
    (run / "prefix.json").write_text(json.dumps(_spec("v0.5.0", "example.com/prefix")))
    result = cli(
        "list", "--json", "--spec-dir", etc, "--spec-dir", run, "--runtime", "isulad", "--runtime", "cri-o"
    )
    assert result.exit_code == 1, result.output
    isulad, crio = report(result)["runtimes"]
    assert (isulad["runtime"], isulad["seen"]) == ("isulad", 2)
    assert isulad["unseen"] == [
        {
            "qualifiedName": "example.com/prefix=w",
            "reasons": [f"{run / 'prefix.json'}: it rejects the 'v' in 'v0.5.0'"],
        }
    ]
    assert isulad["elsewhere"] == [
        {"qualifiedName": "example.com/widget=w", "path": str(etc / "widget.json")}
    ]
    assert (crio["seen"], crio["unseen"], crio["elsewhere"]) == (3, [], [])
    text = cli("list", "--spec-dir", etc, "--spec-dir", run, "--runtime", "isulad")
    assert text.exit_code == 1
    lines = text.stdout.splitlines()
    assert "isulad (iSulad 2.1.6): 1 of 3 devices not seen" in lines
    assert (
        f"  not seen   example.com/prefix=w: {run / 'prefix.json'}: it rejects the 'v' in 'v0.5.0'" in lines
    )
    assert f"  elsewhere  example.com/widget=w: read from {etc / 'widget.json'}" in lines
    seen = cli("list", "--spec-dir", etc, "--runtime", "cri-o")
    assert seen.exit_code == 0, seen.output
    assert "cri-o (CRI-O 1.36): sees all 2 devices" in seen.stdout.splitlines()


def _scan(out: Path, *extra: str | Path) -> tuple[int, str]:
    done = run_cdi_gen(
        "scan", "--source", "simulated", "--output-dir", out, "--cdi-spec-dirs", out.parent / "x", *extra
    )
    return done.returncode, done.stderr


def test_scan_refuses_a_format_a_runtime_does_not_read(tmp_path: Path) -> None:
    code, err = _scan(tmp_path / "out", "--format", "yaml", "--runtime", "isulad")
    assert code == 1
    refusal = "--format yaml: isulad (iSulad 2.1.6) reads only .json files"
    assert err == f"cdi-gen: error: {refusal}; nothing was written\n"
    assert not (tmp_path / "out").exists()
    config = tmp_path / "config.yaml"
    config.write_text("runtimes: [isulad]\n")
    code, err = _scan(tmp_path / "out", "--format", "yaml", "--config", config)
    assert (code, err.splitlines()[-1]) == (1, err.splitlines()[0])
    assert "isulad (iSulad 2.1.6) reads only .json files" in err
    code, _ = _scan(tmp_path / "out", "--format", "yaml", "--runtime", "podman-4")
    assert code == 0


FUSE_CLASS = """\
runtimes: [{runtime}]
classes:
  - vendor: cdi-plugin.io
    class: {klass}
    match: {{subsystem: misc, kernel: fuse}}
    node: {{permissions: {permissions}}}
"""


NODE = "/devices/0/containerEdits/deviceNodes/0"
REFUSED = [
    ("isulad", "fuse", "none", "0.5.0",
     f"cdi-plugin.io/fuse: {NODE}/permissions: isulad (iSulad 2.1.6) drops this file: it rejects "
     "permissions 'none'"),
    ("podman-4", "fuse.v2", "rw", "0.6.0",
     "cdi-plugin.io/fuse.v2: /cdiVersion: podman-4 (podman 4.3) drops this file: it reads cdiVersion up to "
     "0.5.0, the file declares 0.6.0"),
]  # fmt: skip


@pytest.mark.parametrize("case", REFUSED, ids=["permissions none", "cdiVersion 0.6.0"])
def test_scan_refuses_a_spec_a_configured_runtime_would_drop(tmp_path: Path, case: tuple[str, ...]) -> None:
    runtime, klass, permissions, max_version, message = case
    config = tmp_path / "config.yaml"
    config.write_text(FUSE_CLASS.format(runtime=runtime, klass=klass, permissions=permissions))
    code, err = _scan(tmp_path / "out", "--config", config, "--cdi-version-max", max_version)
    assert code == 1
    [line] = err.splitlines()
    assert line.startswith(f"cdi-gen: error: {message}")
    assert line.endswith("; nothing was written")
    assert not (tmp_path / "out").exists()
    config.write_text(FUSE_CLASS.format(runtime="cri-o", klass=klass, permissions="rw"))
    assert _scan(tmp_path / "out", "--config", config, "--cdi-version-max", max_version)[0] == 0
