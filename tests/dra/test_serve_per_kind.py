"""One API per kind, in the real ``cdi-plugin serve`` process: the device plugin side (a fake
kubelet's ListAndWatch) and the DRA side (a fake API server's slices, prepare over the DRA socket)
each serve only the kinds the configuration gives them, and each side's log speaks of itself."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from cdi_plugin.dra import api
from tests.deviceplugin.fake_kubelet import FakeKubelet as DevicePluginKubelet
from tests.deviceplugin.helpers import make_node, run
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import running
from tests.dra.serving import CDI_PLUGIN, DraNode, Serve, dra_node, published, register
from tests.dra.test_kubelet import claim_obj

__all__ = ["dra_node"]

pytestmark = pytest.mark.timeout(120)

FUSE, TTY = "cdi-plugin.io/fuse", "cdi-plugin.io/tty"
TTY_CLAIM = api.Claim("default", "tty-claim", "uid-tty")
FUSE_CLAIM = api.Claim("default", "fuse-claim", "uid-fuse")


def _two_kinds(node: DraNode) -> None:
    make_node(node.dev / "fuse")
    make_node(node.dev / "ttyUSB0")
    write_spec(node.specs, FUSE, {"fuse": str(node.dev / "fuse")})
    write_spec(node.specs, TTY, {"ttyUSB0": str(node.dev / "ttyUSB0")})
    node.api.add_node(NODE)
    node.api.add_claim(claim_obj(TTY_CLAIM, ("tty", NODE, "tty-ttyusb0")))
    node.api.add_claim(claim_obj(FUSE_CLAIM, ("fuse", NODE, "fuse-fuse")))


def _config(node: DraNode, plugin: str) -> list[str]:
    path = node.config.with_name("config.yaml")
    path.write_text(f"plugin: {plugin}\n")
    return ["--config", str(path)]


def test_each_side_serves_only_the_kinds_the_configuration_gives_it(dra_node: DraNode) -> None:
    """fuse has no entry (the device plugin's with --api both), tty is given to DRA."""
    _two_kinds(dra_node)
    config = _config(dra_node, f'{{resources: {{"{TTY}": {{api: dra}}}}}}')

    async def scenario() -> Serve:
        async with DevicePluginKubelet(dra_node.device_plugins) as dp_kubelet:
            serve = await Serve.start(dra_node.args("both", *config))
            try:
                kubelet = await register(dra_node, serve)
                assert await serve.wait_for(lambda: published(dra_node), "slices") == {"tty-ttyusb0": TTY}
                client = await dp_kubelet.wait_registered(FUSE, timeout=20)
                devices = await client.wait_until(lambda d: "fuse" in d)
                assert list(devices) == ["fuse"]
                await serve.logged(f"not advertising kind {TTY}: plugin.resources.{TTY}.api is dra")
                await serve.logged(f"DRA driver: not serving kind {FUSE}: no plugin.resources entry")
                prepared = await kubelet.prepare(TTY_CLAIM)
                expected = (api.PreparedDevice(("tty",), NODE, "tty-ttyusb0", (f"{TTY}=ttyUSB0",)),)
                assert prepared == {TTY_CLAIM.uid: expected}
                [error] = (await kubelet.prepare(FUSE_CLAIM)).values()
                assert error == (
                    f"claim default/fuse-claim: device {NODE}/fuse-fuse: not served by driver "
                    f"{DRIVER} on this node (removed?)"
                )
            finally:
                assert await serve.stop() == 0, serve.lines
            assert [r.resource_name for r in dp_kubelet.requests] == [FUSE]
        return serve

    with running(dra_node.api):
        serve = run(scenario(), timeout=90)
    assert published(dra_node) == {"tty-ttyusb0": TTY}
    assert dra_node.kubelet_sockets() == []
    assert sum(f"not advertising kind {TTY}" in m for m in serve.messages()) == 1


def test_with_dra_alone_the_log_speaks_only_of_dra(dra_node: DraNode) -> None:
    _two_kinds(dra_node)
    config = _config(dra_node, f'{{resources: {{"{FUSE}": {{api: device-plugin}}}}}}')

    async def scenario() -> Serve:
        serve = await Serve.start(dra_node.args("dra", *config))
        try:
            await register(dra_node, serve)
            assert await serve.wait_for(lambda: published(dra_node), "slices") == {"tty-ttyusb0": TTY}
            await serve.logged(
                f"DRA driver: not serving kind {FUSE}: plugin.resources.{FUSE}.api is device-plugin, "
                "and the device plugin does not run (--api dra)"
            )
        finally:
            assert await serve.stop() == 0, serve.lines
        return serve

    with running(dra_node.api):
        serve = run(scenario(), timeout=60)
    records = [json.loads(line) for line in serve.lines if line.startswith("{")]
    device_plugin = [
        r["msg"]
        for r in records
        if r["logger"].startswith("cdi_plugin.deviceplugin")
        or any(word in r["msg"] for word in ("advertis", "device ID", "plugin dir", "kubelet socket"))
    ]
    assert device_plugin == [], "\n".join(serve.lines)
    assert "stopped" in serve.messages()  # the whole log was read
    assert not list(dra_node.device_plugins.iterdir())


def test_an_exclusive_kind_named_for_both_apis_is_refused_at_start_in_one_line(dra_node: DraNode) -> None:
    config = _config(dra_node, f'{{resources: {{"{TTY}": {{api: both}}}}}}')
    result = subprocess.run(
        dra_node.args("both", *config), capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 1
    assert result.stderr == (
        f"cdi-plugin: error: {config[1]}: plugin.resources.{TTY}.api: both, but kind {TTY} is exclusive "
        "(replicas 1): one device could then go to two pods at once, one through each API; give it one "
        "API, replicas above 1 if it is shared, or set allowExclusiveKindsOnBothApis "
        "(--allow-exclusive-kinds-on-both-apis)\n"
    )
    assert dra_node.kubelet_sockets() == []
    assert not list(dra_node.device_plugins.iterdir())


def test_the_scanner_refuses_a_reloaded_configuration_naming_an_exclusive_kind_for_both_apis(
    dra_node: DraNode, tmp_path: Path
) -> None:
    """serve --scan follows its configuration: the bad edit is refused in one line, the last good
    configuration stays, and the device plugin keeps serving."""
    fuse = dra_node.dev / "fuse"
    os.mknod(fuse, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    fixture = tmp_path / "host.json"
    node = {"type": "c", "major": 1, "minor": 3, "mode": "0666", "uid": 0, "gid": 0}
    fixture.write_text(json.dumps([{
        "subsystem": "misc", "sys_name": "fuse", "sys_path": "/sys/devices/virtual/misc/fuse",
        "devnode": str(fuse), "node": node, "properties": {"MAJOR": "1", "MINOR": "3"},
    }]))  # fmt: skip
    config = _config(dra_node, f'{{resources: {{"{FUSE}": {{api: device-plugin}}}}}}')
    path = Path(config[1])
    args = [
        str(CDI_PLUGIN), "serve", "--scan", "--source", f"fixture:{fixture}",
        "--spec-dir", str(dra_node.specs), "--plugin-dir", str(dra_node.device_plugins),
        "--log-format", "json", *config,
    ]  # fmt: skip

    async def scenario() -> Serve:
        async with DevicePluginKubelet(dra_node.device_plugins) as dp_kubelet:
            serve = await Serve.start(args)
            try:
                client = await dp_kubelet.wait_registered(FUSE, timeout=30)
                await client.wait_until(lambda d: "fuse" in d)
                await serve.logged(f"; configuration {path}")
                bad = path.with_name("bad.yaml")
                bad.write_text(f'plugin: {{resources: {{"{FUSE}": {{api: both}}}}}}\n')
                bad.rename(path)
                await serve.logged("keeping the last good configuration")
                answer = await client.allocate(["fuse"])
                assert [d.name for d in answer.cdi_devices] == [f"{FUSE}=fuse"]
            finally:
                assert await serve.stop() == 0, serve.lines
        return serve

    serve = run(scenario(), timeout=60)
    [refused] = [m for m in serve.messages() if "keeping the last good configuration" in m]
    assert refused.startswith(f"{path}: plugin.resources.{FUSE}.api: both, but kind {FUSE} is exclusive")
