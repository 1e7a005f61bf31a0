"""``cdi-plugin dra-objects``: the names it derives from a kind are names the API server accepts
(a DeviceClass's a DNS subdomain of at most 253 characters, a pod's a DNS label, since it is also
the pod's label value), for the longest kinds and for kinds whose <class>.<vendor> is no DNS
subdomain; the names of other kinds are those the command always gave them.

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

from cdi_plugin.cdi.names import short_hash
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


def write_specs(directory: Path, kinds: list[str]) -> None:
    """One spec per kind, in files named by number (a kind may be longer than a file name)."""
    directory.mkdir(exist_ok=True)
    for i, kind in enumerate(kinds):
        device = {"name": "dev", "containerEdits": {"deviceNodes": [{"path": f"/dev/dev{i}"}]}}
        spec = {"cdiVersion": "0.6.0", "kind": kind, "devices": [device]}
        (directory / f"kind{i}.json").write_text(json.dumps(spec))


def names_of(objs: list[dict[str, Any]]) -> dict[str, list[str]]:
    names: dict[str, list[str]] = {}
    for obj in objs:
        names.setdefault(obj["kind"], []).append(obj["metadata"]["name"])
    return names


#: Kinds CDI allows, each printed by the command before kinds that are no DNS subdomain got names:
#: their names must stay what they were (the objects are applied in clusters).
ORDINARY = {
    "Acme.com/Net_Dev": ("net-dev.acme.com", "net-dev-dra-example"),
    "a-b.c_d.example/X_Y.z-9": ("x-y.z-9.a-b.c-d.example", "x-y-z-9-dra-example"),
    "cdi-plugin.io/fuse": ("fuse.cdi-plugin.io", "fuse-cdi-plugin-io-example"),
    "vendor.example/fuse": ("fuse.vendor.example", "fuse-vendor-example-example"),
    "example.com/GPU": ("gpu.example.com", "gpu-example-com-example"),
    "nvidia.com/gpu": ("gpu.nvidia.com", "gpu-nvidia-com-example"),
    "xy.io/fuse_x": ("fuse-x.xy.io", "fuse-x-dra-example"),
}


def test_ordinary_kinds_keep_their_names(tmp_path: Path) -> None:
    write_specs(tmp_path, list(ORDINARY))
    result = dra_objects("--spec-dir", tmp_path, "--kind", "*/*", "--only", "classes", "--examples")
    assert (result.returncode, result.stderr) == (0, "")
    names = names_of([o for o in yaml.safe_load_all(result.stdout) if o is not None])
    served = sorted(ORDINARY)
    assert names == {
        "DeviceClass": [ORDINARY[k][0] for k in served],
        "ResourceClaimTemplate": [ORDINARY[k][0] for k in served],
        "Pod": [ORDINARY[k][1] for k in served],
    }


#: Kinds CDI allows whose <class>.<vendor> is no DNS subdomain, with the name each gets before
#: its hash; with an ordinary kind that meets one of them once '_' is '-' (its name stays).
UNPLAIN = {
    "acme.com/net..dev": "net.dev.acme.com",
    "acme.com/NET..DEV": "net.dev.acme.com",
    "acme.com/net-.dev": "net.dev.acme.com",
    "acme.com/net.-dev": "net.dev.acme.com",
    "acme.com/net_.dev": "net.dev.acme.com",
    "acme.com/net._dev": "net.dev.acme.com",
    "Acme..Com/Net.Dev": "net.dev.acme.com",
    "acme.com/" + "c.-" * 20 + "c": "c" + ".c" * 20 + ".acme.com",
}


def test_kinds_that_are_no_dns_subdomain_get_names_of_their_own(tmp_path: Path) -> None:
    """Every object valid for the 1.36 API server; no two kinds share a name; the ordinary
    acme.com/net.dev keeps net.dev.acme.com."""
    write_specs(tmp_path, [*UNPLAIN, "acme.com/net.dev"])
    result = dra_objects("--spec-dir", tmp_path, "--kind", "*/*", "--only", "classes", "--examples")
    assert (result.returncode, result.stderr) == (0, "")
    objs: list[dict[str, Any]] = [o for o in yaml.safe_load_all(result.stdout) if o is not None]
    for obj in objs:
        assert kubernetes_validate.validate(obj, "1.36", strict=True) == "1.36"
    expected = {kind: f"{name}-{short_hash(kind)}" for kind, name in UNPLAIN.items()}
    expected["acme.com/net.dev"] = "net.dev.acme.com"
    names = names_of(objs)
    assert sorted(names["DeviceClass"]) == sorted(expected.values())
    selectors = {o["metadata"]["name"]: o["spec"]["selectors"][0]["cel"]["expression"] for o in objs
                 if o["kind"] == "DeviceClass"}  # fmt: skip
    for kind, name in expected.items():  # by kind, else (a kind of over 64 characters) by class
        assert json.dumps(kind if len(kind) <= 64 else kind.partition("/")[2]) in selectors[name]
    assert sorted(names["ResourceClaimTemplate"]) == sorted(expected.values())
    assert len(set(names["Pod"])) == len(expected)
    for pod in (o for o in objs if o["kind"] == "Pod"):
        assert pod["metadata"]["labels"] == {"app.kubernetes.io/name": pod["metadata"]["name"]}
        assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] in expected.values()
