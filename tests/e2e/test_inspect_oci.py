"""``cdi-gen inspect --oci``: the edits written into a runc bundle's config.json, then run by runc."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.cli.conftest import run_cdi_gen

pytestmark = pytest.mark.root

BUSYBOX = Path("/bin/busybox")


def bundle(base: Path, script: str) -> Path:
    """A runc bundle: busybox as the root file system, ``sh -c script`` as user 1000:1000."""
    rootfs = base / "bundle" / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    for applet in ("sh", "stat", "cat", "echo"):
        (rootfs / "bin" / applet).symlink_to("busybox")
    for d in ("dev", "proc", "sys", "tmp", "mnt"):
        (rootfs / d).mkdir()
    done = subprocess.run(
        ["runc", "spec"], cwd=base / "bundle", capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    config = json.loads((base / "bundle" / "config.json").read_text())
    config["process"].update(terminal=False, args=["sh", "-c", script], user={"uid": 1000, "gid": 1000})
    config["root"]["readonly"] = False
    (base / "bundle" / "config.json").write_text(json.dumps(config))
    return base / "bundle"


def test_runc_runs_the_container_the_written_config_describes(tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    (share / "file").write_text("shared\n")
    hook_ran = tmp_path / "hook-ran"
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "acme.example/null",
        "devices": [{"name": "x", "containerEdits": {
            "env": ["CDI_DEVICE=x"],
            "deviceNodes": [
                {"path": "/dev/cdi/null", "hostPath": "/dev/null", "fileMode": 0o660},
                {"path": "/dev/cdi/locked", "hostPath": "/dev/null", "fileMode": 0o660,
                 "uid": 0, "gid": 1234},
            ],
            "mounts": [{"hostPath": str(share), "containerPath": "/mnt/share", "options": ["rbind", "ro"]}],
            "hooks": [{"hookName": "createRuntime", "path": "/bin/sh",
                       "args": ["sh", "-c", f"echo ran > {hook_ran}"]}],
        }}],
        "containerEdits": {"env": ["CDI_KIND=null"]},
    }  # fmt: skip
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "null.json").write_text(json.dumps(spec))
    script = (
        'echo "$CDI_KIND $CDI_DEVICE"; stat -c "%t:%T %a %u %g" /dev/cdi/null; cat /mnt/share/file; '
        "echo data > /dev/cdi/null && echo write-ok; "
        "(echo data > /dev/cdi/locked) 2>/dev/null && echo locked-write-ok || echo locked-denied"
    )
    where = bundle(tmp_path, script)
    config = where / "config.json"
    before = json.loads(config.read_text())
    done = run_cdi_gen("inspect", "--json", "--spec-dir", specs, "--oci", config, "acme.example/null=x")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["ociSpec"] == str(config)
    # what inspect predicts for a container user other than root, checked below as user 1000
    assert [n["nonRoot"] for n in shown["deviceNodes"]] == [
        {"access": "rw", "via": "owner", "group": None},
        {"access": "", "via": "other", "group": 1234},
    ]
    after = json.loads(config.read_text())
    assert after["process"]["env"] == [*before["process"]["env"], "CDI_KIND=null", "CDI_DEVICE=x"]
    null = os.stat("/dev/null")
    major, minor = os.major(null.st_rdev), os.minor(null.st_rdev)
    assert after["linux"]["devices"] == [
        {"path": "/dev/cdi/null", "type": "c", "major": major, "minor": minor, "fileMode": 0o660,
         "uid": 1000, "gid": 1000},
        {"path": "/dev/cdi/locked", "type": "c", "major": major, "minor": minor, "fileMode": 0o660,
         "uid": 0, "gid": 1234},
    ]  # fmt: skip
    assert after["linux"]["resources"]["devices"] == [
        *before["linux"]["resources"]["devices"],
        *[{"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"}] * 2,
    ]
    assert {k: v for k, v in after.items() if k not in ("process", "linux", "mounts", "hooks")} == {
        k: v for k, v in before.items() if k not in ("process", "linux", "mounts", "hooks")
    }
    runc_root = tmp_path / "runc-root"
    ran = subprocess.run(
        ["runc", "--root", str(runc_root), "run", "--bundle", str(where), f"cdi-{uuid.uuid4().hex[:12]}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.splitlines() == [
        "null x",
        f"{major:x}:{minor:x} 660 1000 1000",
        "shared",
        "write-ok",
        "locked-denied",
    ]
    assert hook_ran.read_text() == "ran\n"


def test_nothing_is_written_when_a_node_cannot_be_created(tmp_path: Path) -> None:
    spec = {
        "cdiVersion": "0.3.0",
        "kind": "acme.example/gone",
        "devices": [{"name": "x", "containerEdits": {"deviceNodes": [{"path": "/dev/cdi-test-gone"}]}}],
    }
    (tmp_path / "gone.json").write_text(json.dumps(spec))
    config = bundle(tmp_path, "true") / "config.json"
    before = config.read_bytes()
    done = run_cdi_gen("inspect", "--spec-dir", tmp_path, "--oci", config, "acme.example/gone=x")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        'cdi-gen: error: failed to inject devices: failed to stat CDI host device "/dev/cdi-test-gone": '
        f"no such file or directory; {config} is not changed\n"
    )
    assert config.read_bytes() == before
