"""``cdi-plugin serve`` as a real process among hostile files: each one is one more bad file, logged
and skipped, while the good kinds stay served, Allocate keeps answering, and memory stays small."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from cdi_plugin.cdi import codec
from cdi_plugin.store.ownership import RECORD_NAME
from tests.deviceplugin.fake_kubelet import FakeKubelet
from tests.deviceplugin.helpers import Layout, make_node, run, spec_of, write_spec

pytestmark = pytest.mark.timeout(300)

KIND = "cdi-plugin.io/test"
MAX_RSS_KIB = 100 * 1024
DIGITS = "9" * 5000


def spec_text(kind: str, major: str = "1") -> str:
    return (
        f'{{"cdiVersion": "0.5.0", "kind": "{kind}", "devices": [{{"name": "a", "containerEdits": '
        f'{{"deviceNodes": [{{"path": "/dev/a", "major": {major}, "minor": 3}}]}}}}]}}'
    )


def alias_bomb(kind: str, size: int = 200_000) -> str:
    """A spec of ``size`` bytes repeating one anchored device: each alias costs 8 bytes of text."""
    head = (
        f"cdiVersion: 0.5.0\nkind: {kind}\ndevices:\n"
        "  - &d\n    name: a\n    containerEdits: {env: [A=1]}\n"
    )
    return head + "  - *d\n" * ((size - len(head)) // 7)


def billion_laughs() -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


def peak_rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))


def hostile_tree(layout: Layout) -> tuple[list[str], dict[str, Path]]:
    """The spec directories, and the bad files the plugin must report by name."""
    write_spec(layout.etc, spec_of(KIND, {"a": [make_node(layout.dev / "a")]}))
    bad = {
        "int-json": layout.etc / "int.json",
        "int-yaml": layout.etc / "int.yaml",
        "bomb": layout.etc / "bomb.yaml",
        "laughs": layout.etc / "laughs.json",
    }
    bad["int-json"].write_text(spec_text("bad.io/int-json", DIGITS))
    yaml_spec = codec.encode(codec.decode(spec_text("bad.io/int-yaml").encode()), "yaml").decode()
    bad["int-yaml"].write_text(yaml_spec.replace("major: 1", f"major: {DIGITS}"))
    bad["bomb"].write_text(alias_bomb("bad.io/bomb"))
    bad["laughs"].write_text(billion_laughs())
    long_name = "d" + "1" * 5000
    write_spec(
        layout.etc, spec_of("bad.io/digits", {long_name: [], "d2": []}), owned=False, name="digits.json"
    )
    dirs = [layout.etc]
    for how in ("fifo", "zero", "huge"):
        directory = layout.root / f"spec-{how}"
        write_spec(directory, spec_of(f"other.io/{how}", {"a": []}))
        record = directory / RECORD_NAME
        record.unlink()
        if how == "fifo":
            os.mkfifo(record)
        elif how == "zero":
            record.symlink_to("/dev/zero")
        else:
            with record.open("wb") as fh:
                fh.truncate(64 * 1024 * 1024)
        dirs.append(directory)
    return [arg for d in dirs for arg in ("--spec-dir", str(d))], bad


def test_serve_keeps_serving_the_good_kinds_beside_hostile_files(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    dir_args, bad = hostile_tree(layout)
    args = [
        sys.executable, "-m", "cdi_plugin.cli.plugin", "serve", *dir_args,
        "--plugin-dir", str(layout.plugin_dir), "--sysfs-root", str(layout.sysfs),
        "--kind", "other.io/*", "--kind", "bad.io/*",
    ]  # fmt: skip

    async def scenario() -> str:
        async with FakeKubelet(layout.plugin_dir) as kubelet:
            proc = await asyncio.create_subprocess_exec(*args, stderr=asyncio.subprocess.PIPE)
            try:
                good = await kubelet.wait_registered(KIND)
                await good.wait_until(lambda d: set(d) == {"a"})
                answer = await good.allocate(["a"])
                assert [d.name for d in answer.cdi_devices] == [f"{KIND}=a"]
                for how in ("fifo", "zero", "huge"):
                    other = await kubelet.wait_registered(f"other.io/{how}")
                    await other.wait_until(lambda d: set(d) == {"a"})
                    answer = await other.allocate(["a"])
                    assert [d.name for d in answer.cdi_devices] == [f"other.io/{how}=a"]
                digits = await kubelet.wait_registered("bad.io/digits")
                await digits.wait_until(lambda d: set(d) == {"d2"})
                answer = await digits.allocate(["d2"])
                assert [d.name for d in answer.cdi_devices] == ["bad.io/digits=d2"]
                registered = {r.resource_name for r in kubelet.requests}
                assert registered.isdisjoint({"bad.io/int-json", "bad.io/int-yaml", "bad.io/bomb"})
                assert proc.returncode is None
                assert peak_rss_kib(proc.pid) < MAX_RSS_KIB
                proc.terminate()
                assert await asyncio.wait_for(proc.wait(), 60) == 0
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            assert proc.stderr is not None
            return (await proc.stderr.read()).decode()

    log = run(scenario(), timeout=240)
    skipped = [line for line in log.splitlines() if "skipping spec file" in line]
    for path, message in (
        (bad["int-json"], "/devices/0/containerEdits/deviceNodes/0/major: a number 5000 characters long"),
        # go-yaml, the runtimes' reader, takes a plain number out of float range for text
        (bad["int-yaml"], "line 9: expected an integer, got string '9999"),
        (bad["bomb"], "line 4: YAML anchors and aliases are not allowed (&d)"),
        (bad["laughs"], "line 1: YAML anchors and aliases are not allowed (&l0)"),
    ):
        assert any(f"{path}: " in line and message in line for line in skipped), (path, skipped)
    assert "skipping bad.io/digits=d1111" in log  # sorted among the others, then found too long
    for how in ("fifo", "zero", "huge"):
        record = layout.root / f"spec-{how}" / RECORD_NAME
        assert f"ignoring unusable ownership record {record}: " in log
