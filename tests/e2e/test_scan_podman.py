"""``cdi-gen scan`` of this machine's real devices, consumed by podman in real containers."""

from __future__ import annotations

import json
import os
import stat
import textwrap
from pathlib import Path

import pytest

from tests.e2e.podman import PodmanEnv
from tests.scan.helpers import CDI_GEN, run_cdi_gen

pytestmark = [pytest.mark.podman, pytest.mark.root]

HOST_NODES = {"fuse": "/dev/fuse", "tun": "/dev/net/tun", "kvm": "/dev/kvm"}

E2E_CONFIG = textwrap.dedent(
    """\
    classes:
      - vendor: cdi-plugin.io
        class: fuse
        match: {subsystem: misc, kernel: fuse}
        edits:
          env: ["FUSE_DEVICE={devnode}", "CDI_DEVICE={name}"]
        classEdits:
          env: ["CDI_CLASS=fuse"]
      - vendor: cdi-plugin.io
        class: tun
        match: {subsystem: misc, kernel: tun}
        edits:
          env: ["TUN_DEVICE={devnode}"]
      - vendor: cdi-plugin.io
        class: kvm
        match: {subsystem: misc, kernel: kvm}
        edits:
          env: ["KVM_DEVICE={devnode}"]
      # A node only a /dev glob finds (never announced to udev), shown in the container elsewhere.
      - vendor: cdi-plugin.io
        class: e2e-null
        match: {devnode: /dev/shm/cdi-e2e-*}
        naming: [kernel]
        node: {path: "/dev/{kernel}"}
        edits:
          env: ["E2E_NODE={devnode}"]
    """
)

#: A character device with /dev/null's numbers, mode 0666 and group 1234, in a private tmpfs.
NULL_NODE = "/dev/shm/cdi-e2e-null"
MAKE_NULL_NODE = (
    f"mount -t tmpfs -o mode=755 tmpfs /dev/shm\nmknod -m 0666 {NULL_NODE} c 1 3\nchgrp 1234 {NULL_NODE}\n"
)


def host_numbers(path: str) -> str:
    st = os.stat(path)
    return f"{os.major(st.st_rdev):x}:{os.minor(st.st_rdev):x}"


def test_default_scan_of_the_host_devices_works_in_podman(podman_env: PodmanEnv, tmp_path: Path) -> None:
    out = tmp_path / "cdi"
    result = run_cdi_gen("scan", "--output-dir", out, "--json", check=0)
    report = {f["kind"]: f for f in json.loads(result.stdout)["files"]}
    for name, node in HOST_NODES.items():
        device = report[f"cdi-plugin.io/{name}"]["devices"][0]
        assert device["qualifiedName"] == f"cdi-plugin.io/{name}={name}"
        assert device["hostNodes"] == [node]
    checks = "; ".join(f"stat -c '%n %t:%T %a %F' {node}" for node in HOST_NODES.values())
    ran = podman_env.run_container([f"cdi-plugin.io/{n}={n}" for n in HOST_NODES], checks, spec_dir=out)
    assert ran.returncode == 0, ran.stderr
    seen = {line.split()[0]: line.split()[1:] for line in ran.stdout.splitlines()}
    for node in HOST_NODES.values():
        mode = stat.S_IMODE(os.stat(node).st_mode)
        assert seen[node] == [host_numbers(node), f"{mode:o}", "character", "special", "file"], ran.stdout


def test_class_env_and_a_non_root_user_opening_a_device(podman_env: PodmanEnv, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(E2E_CONFIG)
    report = tmp_path / "report.json"
    container = (
        "id -u; id -g; env | grep -E '^(FUSE_DEVICE|CDI_DEVICE|CDI_CLASS|E2E_NODE)=' | sort; "
        "stat -c '%n %t:%T %a %u %g' /dev/fuse /dev/cdi-e2e-null; "
        "echo written > /dev/cdi-e2e-null && echo write-ok; "
        "head -c 1 /dev/cdi-e2e-null | wc -c"
    )
    run = podman_env.in_namespace(
        MAKE_NULL_NODE
        + f"{CDI_GEN} scan --config {config} --output-dir /etc/cdi --json > {report}\n"
        + f"cp /etc/cdi/cdi-plugin.io-e2e-null.json {tmp_path}/\n"
        + "$PODMAN run --rm --user 1000:1000 --device cdi-plugin.io/fuse=fuse "
        + "--device cdi-plugin.io/e2e-null=cdi-e2e-null "
        + f"localhost/busybox:test sh -c {container!r}\n"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    files = {f["kind"]: f for f in json.loads(report.read_text())["files"]}
    assert files["cdi-plugin.io/fuse"]["cdiVersion"] == "0.3.0"
    null_spec = json.loads((tmp_path / "cdi-plugin.io-e2e-null.json").read_text())
    assert null_spec["cdiVersion"] == "0.5.0", "hostPath differs from path"
    assert null_spec["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/cdi-e2e-null", "hostPath": NULL_NODE, "type": "c", "fileMode": 0o666, "gid": 1234}
    ]
    lines = run.stdout.splitlines()
    assert lines[:2] == ["1000", "1000"]
    assert lines[2:6] == [
        "CDI_CLASS=fuse",
        "CDI_DEVICE=fuse",
        "E2E_NODE=/dev/shm/cdi-e2e-null",
        "FUSE_DEVICE=/dev/fuse",
    ]
    fuse_line, null_line = lines[6:8]
    assert fuse_line.startswith(f"/dev/fuse {host_numbers('/dev/fuse')} ")
    # the node has the host's numbers, mode and group (from the spec); its owner is the container user
    assert null_line == "/dev/cdi-e2e-null 1:3 666 1000 1234"
    assert lines[8:] == ["write-ok", "0"]
