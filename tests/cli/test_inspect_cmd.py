"""``cdi-gen inspect``: what a runtime gives a container, for specs cdi-gen writes from this host's
devices, for the upstream test specs, and for device nodes the tests make; host facts are checked
against ``stat``. ``--oci``: test_inspect_oci.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.cdi.upstream import UPSTREAM
from tests.cli.conftest import Invoke, report, run_cdi_gen
from tests.store.specfiles import write_spec

#: Every kind of edit the generator writes: the matched node under another container path and
#: with permissions, a companion node, env, a typed mount, a hook with args, env and timeout, and
#: the same kinds at the spec level; the `all` device merges them. /dev/null, zero, full, random
#: and urandom are on every Linux host.
CONFIG = textwrap.dedent(
    """\
    classes:
      - vendor: cdi-plugin.io
        class: mem
        match: {subsystem: mem, kernel: ["null", "zero", "full"]}
        naming: [kernel]
        allDevice: true
        node: {path: "/dev/cdi/{kernel}", permissions: rw}
        edits:
          env: ["MEM_NODE={devnode}", "MEM_NAME={name}"]
          deviceNodes:
            - {path: /dev/cdi-random, hostPath: /dev/random}
          mounts:
            - {hostPath: "/run/mem-{name}", containerPath: /run/mem, options: [ro, bind], type: bind}
          hooks:
            - hookName: createContainer
              path: /usr/bin/true
              args: ["true", "--node", "{devnode}"]
              env: ["MEM_INDEX={index}"]
              timeout: 10
        classEdits:
          env: ["MEM_CLASS=mem"]
          deviceNodes:
            - {path: /dev/urandom}
          mounts:
            - {hostPath: /usr/share/zoneinfo, containerPath: /usr/share/zoneinfo, options: [ro, rbind]}
          hooks:
            - {hookName: poststop, path: /usr/bin/true}
    """
)
KIND = "cdi-plugin.io/mem"
_STAT_TYPES = {"character special file": "c", "block special file": "b", "fifo": "p"}


def stat_of(path: str | Path) -> dict[str, Any]:
    """The host node as coreutils' ``stat`` shows it (not following a symbolic link)."""
    done = subprocess.run(
        ["stat", "-c", "%F|%t|%T|%A|%u|%g", str(path)], capture_output=True, text=True, timeout=60, check=True
    )
    kind, major, minor, mode, uid, gid = done.stdout.strip().split("|")
    return {
        "type": _STAT_TYPES[kind],
        "major": int(major, 16) if kind != "fifo" else 0,
        "minor": int(minor, 16) if kind != "fifo" else 0,
        "mode": mode,
        "uid": int(uid),
        "gid": int(gid),
    }


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The spec cdi-gen scan writes for this host's /dev/null, /dev/zero and /dev/full."""
    base = tmp_path_factory.mktemp("generated")
    (base / "config.yaml").write_text(CONFIG)
    out = base / "specs"
    done = run_cdi_gen(
        "scan", "--config", base / "config.yaml", "--output-dir", out, "--cdi-spec-dirs", base / "runtime"
    )
    assert done.returncode == 0, done.stderr
    return out


def spec_path(generated: Path) -> str:
    return str(generated / "cdi-plugin.io-mem.json")


def expected_node(generated: Path, device: str | None, path: str, host: str, cgroup: str) -> dict[str, Any]:
    """A node as inspect shows it: the spec's fileMode and gid, the host's type and numbers now."""
    spec = json.loads(Path(spec_path(generated)).read_text())
    edits = (
        spec["containerEdits"]
        if device is None
        else next(d["containerEdits"] for d in spec["devices"] if d["name"] == device)
    )
    [written] = [n for n in edits["deviceNodes"] if n["path"] == path]
    now = stat_of(host)
    bits = subprocess.run(["stat", "-c", "%a", host], capture_output=True, text=True, timeout=60, check=True)
    assert written["fileMode"] == int(bits.stdout, 8), "the spec holds the host's mode bits"
    return {
        "path": path, "type": now["type"], "major": now["major"], "minor": now["minor"],
        "fileMode": written["fileMode"], "gid": written["gid"], "hostPath": host, "mode": now["mode"],
        "cgroupAccess": cgroup,
        "nonRoot": {"access": "".join(c for c in now["mode"][1:3] if c in cgroup), "via": "owner",
                    "group": None},
        "host": now,
        "from": {"path": spec_path(generated), "device": None if device is None else f"{KIND}={device}"},
    }  # fmt: skip


def test_two_devices_of_a_generated_spec(cli: Invoke, generated: Path) -> None:
    result = cli("inspect", "--json", "--spec-dir", generated, f"{KIND}=null", f"{KIND}=zero")
    assert result.exit_code == 0, result.output
    out = report(result)
    path = spec_path(generated)
    spec_level = {"path": path, "device": None}
    null, zero = ({"path": path, "device": f"{KIND}={n}"} for n in ("null", "zero"))
    assert out["devices"] == [
        {"qualifiedName": f"{KIND}={n}", "path": path, "priority": 0, "kind": KIND, "cdiVersion": "0.5.0"}
        for n in ("null", "zero")
    ]
    # the spec's edits first, once; a variable set again keeps its place and takes the last value
    assert out["env"] == [
        {"value": "MEM_CLASS=mem", "from": spec_level},
        {"value": "MEM_NODE=/dev/zero", "from": zero},
        {"value": "MEM_NAME=zero", "from": zero},
    ]
    # one node per container path: zero's /dev/cdi-random replaces null's, and moves last
    assert out["deviceNodes"] == [
        expected_node(generated, None, "/dev/urandom", "/dev/urandom", "rwm"),
        expected_node(generated, "null", "/dev/cdi/null", "/dev/null", "rw"),
        expected_node(generated, "zero", "/dev/cdi/zero", "/dev/zero", "rw"),
        expected_node(generated, "zero", "/dev/cdi-random", "/dev/random", "rwm"),
    ]
    # one mount per container path, sorted by depth
    assert out["mounts"] == [
        {"destination": "/run/mem", "type": "bind", "source": "/run/mem-zero", "options": ["ro", "bind"],
         "from": zero},
        {"destination": "/usr/share/zoneinfo", "source": "/usr/share/zoneinfo", "options": ["ro", "rbind"],
         "from": spec_level},
    ]  # fmt: skip
    assert out["hooks"] == [
        {"hookName": "createContainer", "path": "/usr/bin/true", "args": ["true", "--node", f"/dev/{n}"],
         "env": [f"MEM_INDEX={i}"], "timeout": 10, "from": origin}
        for n, i, origin in (("null", 1, null), ("zero", 2, zero))
    ] + [{"hookName": "poststop", "path": "/usr/bin/true", "from": spec_level}]  # fmt: skip
    assert (out["intelRdt"], out["additionalGids"], out["netDevices"], out["errors"]) == (None, [], [], [])


def test_the_all_device_of_a_generated_spec(cli: Invoke, generated: Path) -> None:
    """The devices mount different host paths on /run/mem: the `all` device leaves that path out."""
    out = report(cli("inspect", "--json", "--spec-dir", generated, f"{KIND}=all"))
    assert [n["path"] for n in out["deviceNodes"]] == [
        "/dev/urandom", "/dev/cdi/full", "/dev/cdi-random", "/dev/cdi/null", "/dev/cdi/zero",
    ]  # fmt: skip
    assert [n["host"] == stat_of(n["hostPath"]) for n in out["deviceNodes"]] == [True] * 5
    assert [e["value"] for e in out["env"]] == ["MEM_CLASS=mem"], "the devices' values differ"
    assert [(m["destination"], m["source"]) for m in out["mounts"]] == [
        ("/usr/share/zoneinfo", "/usr/share/zoneinfo"),
    ]
    assert [(h["hookName"], h.get("args", [""])[-1]) for h in out["hooks"]] == [
        ("createContainer", "/dev/full"), ("createContainer", "/dev/null"), ("createContainer", "/dev/zero"),
        ("poststop", ""),
    ]  # fmt: skip


def test_the_text_report(cli: Invoke, generated: Path) -> None:
    result = cli("inspect", "--spec-dir", generated, f"{KIND}=null")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    null = stat_of("/dev/null")
    path = spec_path(generated)
    assert lines[0] == f"{KIND}=null: {path} (priority 0, cdiVersion 0.5.0)"
    at = lines.index("device nodes")
    assert lines[at + 4].startswith(
        f"  /dev/cdi/null: c {null['major']}:{null['minor']}, mode {null['mode']}, owner the container "
        "user, group 0, cgroup access rw  (from cdi-plugin.io/mem=null)"
    )
    assert (
        lines[at + 5]
        == f"    host /dev/null now: c {null['major']}:{null['minor']} {null['mode']} uid 0 gid 0"
    )
    assert lines[at + 6].startswith("    a user other than root: ")
    assert lines[lines.index("env") + 1 :][:3] == [
        f"  MEM_CLASS=mem  (from the spec-level edits of {path})",
        "  MEM_NODE=/dev/null  (from cdi-plugin.io/mem=null)",
        "  MEM_NAME=null  (from cdi-plugin.io/mem=null)",
    ]
    assert lines[lines.index("hooks") + 1 :] == [
        "  createContainer: /usr/bin/true (args true --node /dev/null; env MEM_INDEX=1; timeout 10 s)  "
        "(from cdi-plugin.io/mem=null)",
        f"  poststop: /usr/bin/true  (from the spec-level edits of {path})",
    ]


@pytest.mark.root
def test_nodes_follow_the_host_node_as_it_is_now(cli: Invoke, tmp_path: Path) -> None:
    """Numbers the spec leaves out come from the host node at each call; the mode, owner and group
    shown for the host node are what ``stat`` says; a FIFO and a block node too."""
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    os.mknod(nodes / "char", 0o20640, os.makedev(1, 3))
    os.chown(nodes / "char", 0, 1234)
    os.mknod(nodes / "block", 0o60600, os.makedev(7, 200))
    os.mkfifo(nodes / "fifo", 0o644)
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "acme.example/node",
        "devices": [{"name": "x", "containerEdits": {"deviceNodes": [
            {"path": "/dev/char", "hostPath": str(nodes / "char"), "type": "c"},
            {"path": "/dev/block", "hostPath": str(nodes / "block")},
            {"path": "/dev/fifo", "hostPath": str(nodes / "fifo"), "type": "p"},
            {"path": "/dev/pinned", "hostPath": str(nodes / "char"), "type": "c", "major": 10, "minor": 200,
             "fileMode": 0o660, "uid": 0, "gid": 1234, "permissions": "r"},
        ]}}],
    }  # fmt: skip
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "node.json").write_text(json.dumps(spec))

    def inspected() -> list[dict[str, Any]]:
        result = cli("inspect", "--json", "--spec-dir", specs, "acme.example/node=x")
        assert result.exit_code == 0, result.output
        nodes_shown: list[dict[str, Any]] = report(result)["deviceNodes"]
        return nodes_shown

    char, block, fifo, pinned = inspected()
    for shown, host in ((char, "char"), (block, "block"), (fifo, "fifo"), (pinned, "char")):
        assert shown["host"] == stat_of(nodes / host)
    assert stat_of(nodes / "char")["mode"] == "crw-r-----"
    assert (char["type"], char["major"], char["minor"], char["mode"]) == ("c", 1, 3, "crw-rw-rw-")
    assert char["nonRoot"] == {"access": "rw", "via": "owner", "group": None}
    assert (block["type"], block["major"], block["minor"], block["cgroupAccess"]) == ("b", 7, 200, "rwm")
    assert (fifo["type"], fifo["cgroupAccess"], fifo["host"]["type"]) == ("p", None, "p")
    # numbers pinned in the spec are the container's, whatever the host node has
    assert (pinned["major"], pinned["minor"], pinned["mode"], pinned["cgroupAccess"]) == (
        10,
        200,
        "crw-rw----",
        "r",
    )
    assert pinned["nonRoot"] == {"access": "", "via": "other", "group": None}, "the cgroup rule allows r only"
    # the host node renumbered: the container gets the new numbers
    (nodes / "char").unlink()
    os.mknod(nodes / "char", 0o20600, os.makedev(1, 5))
    char, _, _, pinned = inspected()
    assert (char["major"], char["minor"], char["host"]) == (1, 5, stat_of(nodes / "char"))
    assert (pinned["major"], pinned["minor"]) == (10, 200)


def test_a_node_whose_host_path_is_a_symbolic_link_is_refused_as_runtimes_refuse_it(
    cli: Invoke, tmp_path: Path
) -> None:
    link = tmp_path / "null-link"
    link.symlink_to("/dev/null")
    write_spec(tmp_path / "specs", "x.json", "acme.example/node", "x")
    spec = json.loads((tmp_path / "specs" / "x.json").read_text())
    spec["cdiVersion"] = "0.5.0"
    spec["devices"][0]["containerEdits"]["deviceNodes"] = [{"path": "/dev/x", "hostPath": str(link)}]
    (tmp_path / "specs" / "x.json").write_text(json.dumps(spec))
    result = cli("inspect", "--json", "--spec-dir", tmp_path / "specs", "acme.example/node=x")
    message = f'failed to stat CDI host device "{link}": not a device node (a symbolic link)'
    assert result.exit_code == 1
    assert report(result)["errors"] == [message]
    assert report(result)["deviceNodes"] == []
    assert result.stderr == (
        f"cdi-gen: error: a runtime would not create the container: failed to inject devices: {message}\n"
    )


def test_var_run_cdi_overrides_etc_cdi(cli: Invoke, private_spec_dirs: tuple[Path, Path]) -> None:
    etc, run = private_spec_dirs
    write_spec(etc, "gpu.json", "acme.example/gpu", "null", env="FROM=etc")
    write_spec(run, "gpu.json", "acme.example/gpu", "null", env="FROM=run")
    out = report(cli("inspect", "--json", "acme.example/gpu=null"))
    assert [(d["path"], d["priority"]) for d in out["devices"]] == [(str(run / "gpu.json"), 1)]
    assert [e["value"] for e in out["env"]] == ["FROM=run"]


def test_names_that_do_not_resolve_are_one_line_errors_naming_the_files(
    cli: Invoke, private_spec_dirs: tuple[Path, Path]
) -> None:
    etc, run = private_spec_dirs
    write_spec(etc, "gpu.json", "acme.example/gpu", "card0", "card1", "card2")
    write_spec(etc, "fuse-a.json", "cdi-plugin.io/fuse", "fuse")
    write_spec(etc, "fuse-b.yaml", "cdi-plugin.io/fuse", "fuse")
    result = cli("inspect", "cdi-plugin.io/fuse=fuse", "acme.example/gpu=card9", "acme.example/tpu=x")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        f"cdi-gen: error: cdi-plugin.io/fuse=fuse is ambiguous: defined in both {etc / 'fuse-a.json'} and "
        f"{etc / 'fuse-b.yaml'} at the same priority; runtimes resolve neither",
        f"cdi-gen: error: unknown device acme.example/gpu=card9: acme.example/gpu is defined in "
        f"{etc / 'gpu.json'}, whose devices are card0, card1 and card2",
        f"cdi-gen: error: unknown device acme.example/tpu=x: no spec file in {etc} and {run} defines "
        "acme.example/tpu",
    ]
    (run.mkdir())
    (run / "tpu.json").write_text('{"cdiVersion": "0.3.0", "kind": "acme.example/tpu"}')
    result = cli("inspect", "--json", "acme.example/tpu=x")
    assert result.exit_code == 1
    assert result.stderr == (
        f"cdi-gen: error: unknown device acme.example/tpu=x: no spec file in {etc} and {run} defines "
        f"acme.example/tpu; broken files, which runtimes skip: {run / 'tpu.json'}\n"
    )


@pytest.mark.parametrize("name", ["fuse", "cdi-plugin.io/fuse", "a/fuse=x", "cdi-plugin.io/fuse=-x"])
def test_a_name_that_is_not_fully_qualified_is_a_usage_error(cli: Invoke, name: str) -> None:
    result = cli("inspect", name)
    assert (result.exit_code, result.stdout) == (2, "")
    [line] = result.stderr.splitlines()
    assert line.startswith(("cdi-gen: error: invalid device name ", f"cdi-gen: error: {name}: invalid "))
    assert name in line


def test_a_name_given_twice_counts_once(cli: Invoke, tmp_path: Path) -> None:
    spec = {
        "cdiVersion": "0.3.0", "kind": "acme.example/hook",
        "devices": [{"name": "x", "containerEdits": {"hooks": [{"hookName": "poststop", "path": "/bin/x"}]}}],
    }  # fmt: skip
    (tmp_path / "hook.json").write_text(json.dumps(spec))
    out = report(
        cli("inspect", "--json", "--spec-dir", tmp_path, "acme.example/hook=x", "acme.example/hook=x")
    )
    assert [d["qualifiedName"] for d in out["devices"]] == ["acme.example/hook=x"]
    assert len(out["hooks"]) == 1


def test_the_upstream_good_specs_define_one_device_twice(cli: Invoke) -> None:
    good = UPSTREAM / "testdata" / "good"
    result = cli("inspect", "--spec-dir", good, "vendor.com/device=myDevice")
    assert result.exit_code == 1
    assert result.stderr == (
        f"cdi-gen: error: vendor.com/device=myDevice is ambiguous: defined in both {good / 'minimal.json'} "
        f"and {good / 'spec-example.json'} at the same priority; runtimes resolve neither\n"
    )


def host_expectation(path: str) -> dict[str, Any] | str:
    """The node a runtime would make from a host path of the upstream specs, or its error."""
    if not os.path.lexists(path):
        return f'failed to stat CDI host device "{path}": no such file or directory'
    return stat_of(path)


@pytest.mark.parametrize("name", ["minimal.json", "spec-example.json"])
def test_each_upstream_good_spec(cli: Invoke, tmp_path: Path, name: str) -> None:
    shutil.copy(UPSTREAM / "testdata" / "good" / name, tmp_path / name)
    result = cli("inspect", "--json", "--spec-dir", tmp_path, "vendor.com/device=myDevice")
    out = report(result)
    upstream = json.loads((UPSTREAM / "testdata" / "good" / name).read_text())
    assert out["devices"] == [{
        "qualifiedName": "vendor.com/device=myDevice", "path": str(tmp_path / name), "priority": 0,
        "kind": "vendor.com/device", "cdiVersion": upstream["cdiVersion"],
    }]  # fmt: skip
    top = upstream.get("containerEdits", {})
    nodes = top.get("deviceNodes", []) + upstream["devices"][0]["containerEdits"]["deviceNodes"]
    expected = [(n["path"], host_expectation(n.get("hostPath", n["path"]))) for n in nodes]
    assert [(n["path"], n["host"]) for n in out["deviceNodes"]] == [
        (p, h) for p, h in expected if isinstance(h, dict)
    ]
    assert out["errors"] == [h for _, h in expected if isinstance(h, str)]
    assert result.exit_code == (1 if out["errors"] else 0)
    spec_level = {"path": str(tmp_path / name), "device": None}
    assert out["env"] == [{"value": e, "from": spec_level} for e in top.get("env", [])]
    assert [(m["source"], m["destination"]) for m in out["mounts"]] == [
        (m["hostPath"], m["containerPath"]) for m in top.get("mounts", [])
    ]
    assert [(h["hookName"], h["path"]) for h in out["hooks"]] == [
        (h["hookName"], h["path"]) for h in top.get("hooks", [])
    ]


def test_the_upstream_bad_specs_are_named_as_broken(cli: Invoke, tmp_path: Path) -> None:
    for name in ("empty.json", "explicit-empty.json"):
        shutil.copy(UPSTREAM / "testdata" / "bad" / name, tmp_path / name)
    result = cli("inspect", "--spec-dir", tmp_path, "vendor.com/device=myDevice")
    assert result.exit_code == 1
    assert result.stderr == (
        f"cdi-gen: error: unknown device vendor.com/device=myDevice: no spec file in {tmp_path} defines "
        f"vendor.com/device; broken files, which runtimes skip: {tmp_path / 'empty.json'} and "
        f"{tmp_path / 'explicit-empty.json'}\n"
    )


def test_inspect_as_a_real_program(generated: Path) -> None:
    done = run_cdi_gen("inspect", "--spec-dir", generated, f"{KIND}=full")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert (
        done.stdout.splitlines()[0] == f"{KIND}=full: {spec_path(generated)} (priority 0, cdiVersion 0.5.0)"
    )
