"""``cdi-plugin dra-objects`` on the longest kinds: the names it derives from a kind are names the
API server accepts (a DeviceClass's a DNS subdomain of at most 253 characters, a pod's a DNS
label, since it is also the pod's label value), or the kind is refused naming the limit.

A kind whose vendor or class is longer than a slice's attribute value (64 characters) cannot be
selected, so the longest kinds that get objects have a vendor of 64 characters and a class of 63.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from tests.cli.conftest import run_cdi_gen
from tests.dra.rules import is_label, is_subdomain
from tests.store.unprivileged import VENV_BIN

VENDOR, OTHER_VENDOR = "v" * 64, "w" * 64
CLASS, OTHER_CLASS = "c" * 63, "d" * 63


def dra_objects(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "cdi-plugin"), "dra-objects", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_longest_kinds_get_names_the_api_server_accepts(tmp_path: Path) -> None:
    """Two vendors of one class (their pods are named after the vendor too) and another class."""
    host = tmp_path / "host.json"
    node = {"type": "c", "major": 10, "mode": "0666", "uid": 0, "gid": 0}
    host.write_text(json.dumps([
        {"subsystem": "misc", "sys_name": name, "sys_path": f"/sys/devices/virtual/misc/{name}",
         "devnode": f"/dev/{name}", "node": {**node, "minor": minor}}
        for name, minor in (("fuse", 229), ("tun", 200), ("kvm", 232))
    ]))  # fmt: skip
    config = tmp_path / "config.yaml"
    kinds = ((VENDOR, CLASS), (OTHER_VENDOR, CLASS), (VENDOR, OTHER_CLASS))
    config.write_text(yaml.safe_dump({"classes": [
        {"vendor": vendor, "class": class_, "match": {"subsystem": "misc", "kernel": kernel}}
        for (vendor, class_), kernel in zip(kinds, ("fuse", "tun", "kvm"), strict=True)
    ]}))  # fmt: skip
    out = tmp_path / "cdi"
    scanned = run_cdi_gen("scan", "--source", f"fixture:{host}", "--config", config, "--output-dir", out,
                          "--cdi-spec-dirs", out)  # fmt: skip
    assert scanned.returncode == 0, scanned.stderr
    result = dra_objects("--spec-dir", out, "--only", "classes", "--examples")
    assert result.returncode == 0, result.stderr
    objs: list[dict[str, Any]] = [o for o in yaml.safe_load_all(result.stdout) if o is not None]
    for obj in objs:
        assert kubernetes_validate.validate(obj, "1.36", strict=True) == "1.36"
    names = {
        kind: [o["metadata"]["name"] for o in objs if o["kind"] == kind] for kind in {o["kind"] for o in objs}
    }
    expected = sorted(f"{c}.{v}" for v, c in kinds)
    assert sorted(names["DeviceClass"]) == sorted(names["ResourceClaimTemplate"]) == expected
    assert all(is_subdomain(name) for name in names["DeviceClass"])
    pods = [o for o in objs if o["kind"] == "Pod"]
    assert len({p["metadata"]["name"] for p in pods}) == 3
    for pod in pods:
        name = pod["metadata"]["name"]
        assert is_label(name), name
        assert pod["metadata"]["labels"] == {"app.kubernetes.io/name": name}
        assert name.endswith("-example")
        assert name.startswith(("c" * 20, "d" * 20)), "still named after the class"


def test_a_kind_too_long_for_a_device_class_name_is_refused_naming_the_limit(tmp_path: Path) -> None:
    """A spec cdi-gen did not write may have a vendor of 253 characters (CDI allows it)."""
    kind = f"{'v' * 200}/{'c' * 60}"
    device = {"name": "dev", "containerEdits": {"deviceNodes": [{"path": "/dev/fuse"}]}}
    spec = {"cdiVersion": "0.5.0", "kind": kind, "devices": [device]}
    (tmp_path / "long.json").write_text(json.dumps(spec))
    result = dra_objects("--spec-dir", tmp_path, "--kind", "v*/*", "--only", "classes")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"cdi-plugin: error: kind '{kind[:80]}'... (261 characters): its DeviceClass name, "
        "<class>.<vendor>, would have 261 characters, at most 253\n"
    )
