"""``cdi-plugin serve --api dra|both`` as a real process, against a fake kubelet (registration and
DRA calls over the unix sockets it serves) and a fake API server over HTTP."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from typing import Any

import pytest

from cdi_plugin.dra import api
from tests.deviceplugin.fake_kubelet import FakeKubelet as DevicePluginKubelet
from tests.deviceplugin.helpers import make_node, run
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import CLAIMS, SLICES, running
from tests.dra.serving import DraNode, Serve, dra_node, free_port, published, register
from tests.dra.test_kubelet import claim_obj

__all__ = ["dra_node"]

pytestmark = pytest.mark.timeout(120)

FUSE = "cdi-plugin.io/fuse"
CLAIM = api.Claim("default", "fuse-claim", "uid-1")


def claim_path(ref: api.Claim) -> str:
    return f"{CLAIMS}{ref.namespace}/resourceclaims/{ref.name}"


def _fuse_node(node: DraNode) -> None:
    make_node(node.dev / "fuse")
    write_spec(node.specs, FUSE, {"fuse": str(node.dev / "fuse")})
    node.api.add_node(NODE)
    node.api.add_claim(claim_obj(CLAIM, ("fuse", NODE, "fuse-fuse")))


def test_dra_registers_prepares_and_removes_its_sockets_on_exit(dra_node: DraNode) -> None:
    _fuse_node(dra_node)

    async def scenario() -> None:
        serve = await Serve.start(dra_node.args("dra"))
        try:
            kubelet = await register(dra_node, serve)
            [info] = kubelet.infos
            assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER, str(dra_node.dra_socket))
            assert kubelet.version == api.V1
            await serve.logged(f"registered with the kubelet as DRA driver {DRIVER}")
            assert await serve.wait_for(lambda: published(dra_node), "slices") == {"fuse-fuse": FUSE}

            prepared = await kubelet.prepare(CLAIM)
            expected = (api.PreparedDevice(("fuse",), NODE, "fuse-fuse", (f"{FUSE}=fuse",)),)
            assert prepared == {CLAIM.uid: expected}
            assert await kubelet.prepare(CLAIM) == {CLAIM.uid: expected}  # the same answer again
            claims = [c for c in dra_node.api.calls if "resourceclaims" in c.path]
            assert [(c.method, c.path, c.query) for c in claims] == [("GET", claim_path(CLAIM), {})]
            other = api.Claim("default", "gone", "uid-2")
            [error] = (await kubelet.prepare(other)).values()
            assert error == "claim default/gone: not found in the API server (deleted after allocation?)"
            assert await kubelet.unprepare(CLAIM) == {CLAIM.uid: ""}
            assert not list(dra_node.device_plugins.iterdir())  # no device plugin socket
        finally:
            code = await serve.stop()
        assert code == 0, serve.lines
        assert dra_node.kubelet_sockets() == []
        assert published(dra_node) == {"fuse-fuse": FUSE}  # slices stay: the kubelet deletes them

    with running(dra_node.api):
        run(scenario(), timeout=60)


def test_a_kubelet_restart_gets_the_driver_registered_and_its_slices_published_again(
    dra_node: DraNode,
) -> None:
    _fuse_node(dra_node)

    async def scenario() -> None:
        serve = await Serve.start(dra_node.args("dra"))
        try:
            await register(dra_node, serve)
            await serve.wait_for(lambda: published(dra_node), "slices")
            # A starting kubelet whose directories were wiped, and which deleted the node's slices.
            shutil.rmtree(dra_node.kubelet / "plugins")
            shutil.rmtree(dra_node.registry)
            dra_node.api.delete_slices(nodeName=NODE)
            dra_node.registry.mkdir()
            await serve.wait_for(dra_node.dra_socket.exists, "DRA socket again")
            kubelet = await register(dra_node, serve)
            assert await serve.wait_for(lambda: published(dra_node), "slices again") == {"fuse-fuse": FUSE}
            assert (await kubelet.prepare(CLAIM))[CLAIM.uid] != ""
            assert sorted(dra_node.kubelet_sockets()) == [
                f"plugins/{DRIVER}/dra.sock",
                f"plugins_registry/{DRIVER}-reg.sock",
            ]
        finally:
            code = await serve.stop()
        assert code == 0, serve.lines
        assert dra_node.kubelet_sockets() == []

    with running(dra_node.api):
        run(scenario(), timeout=60)


def test_an_api_server_down_at_start_is_waited_for_while_the_device_plugin_serves(dra_node: DraNode) -> None:
    _fuse_node(dra_node)
    port = free_port()

    async def scenario() -> None:
        async with DevicePluginKubelet(dra_node.device_plugins) as dp_kubelet:
            serve = await Serve.start(
                dra_node.args("both", *dra_node.both_ways(), url=f"http://127.0.0.1:{port}")
            )
            try:
                client = await dp_kubelet.wait_registered(FUSE, timeout=20)
                await client.wait_until(lambda d: "fuse" in d)
                await serve.logged(f"cannot confirm node {NODE}", timeout=30)
                answer = await client.allocate(["fuse"])  # the device plugin answers meanwhile
                assert [d.name for d in answer.cdi_devices] == [f"{FUSE}=fuse"]
                assert not dra_node.registration_socket.exists()

                with running(dra_node.api, port):
                    kubelet = await register(dra_node, serve)
                    await serve.wait_for(lambda: published(dra_node), "slices")
                    assert (await kubelet.prepare(CLAIM))[CLAIM.uid] == (
                        api.PreparedDevice(("fuse",), NODE, "fuse-fuse", (f"{FUSE}=fuse",)),
                    )
                    # 500s and 429s on the slices: retried, the device plugin keeps answering
                    dra_node.api.fail("PUT", SLICES, 500, 429, 503)
                    make_node(dra_node.dev / "fuse2")
                    write_spec(dra_node.specs, FUSE, {"fuse": str(dra_node.dev / "fuse"),
                                                      "fuse2": str(dra_node.dev / "fuse2")})  # fmt: skip
                    await client.wait_until(lambda d: "fuse2" in d)
                    assert [d.name for d in (await client.allocate(["fuse2"])).cdi_devices] == [
                        f"{FUSE}=fuse2"
                    ]
                    await serve.wait_for(lambda: "fuse-fuse2" in published(dra_node), "hot-plugged device")
                    assert not dra_node.api.failures
                    await serve.logged("500")
            finally:
                code = await serve.stop()
        assert code == 0, serve.lines
        assert dra_node.kubelet_sockets() == []

    run(scenario(), timeout=90)


def test_both_apis_serve_the_same_inventory(dra_node: DraNode) -> None:
    _fuse_node(dra_node)

    async def scenario() -> None:
        async with DevicePluginKubelet(dra_node.device_plugins) as dp_kubelet:
            serve = await Serve.start(dra_node.args("both", *dra_node.both_ways()))
            try:
                kubelet = await register(dra_node, serve)
                client = await dp_kubelet.wait_registered(FUSE, timeout=20)
                await client.wait_until(lambda d: "fuse" in d and d["fuse"].health == "Healthy")
                allocated = await client.allocate(["fuse"])
                prepared: Any = (await kubelet.prepare(CLAIM))[CLAIM.uid]
                assert [d.name for d in allocated.cdi_devices] == list(prepared[0].cdi_device_ids)

                # the device's node goes: Unhealthy to the device plugin, tainted in the slice,
                # refused by NodePrepareResources
                (dra_node.dev / "fuse").unlink()
                await client.wait_until(lambda d: d["fuse"].health == "Unhealthy")

                def tainted() -> bool:
                    return any(
                        d.get("taints") for s in dra_node.api.slices.values() for d in s["spec"]["devices"]
                    )

                await serve.wait_for(tainted, "taint")
                late = api.Claim("default", "late", "uid-3")
                dra_node.api.add_claim(claim_obj(late, ("fuse", NODE, "fuse-fuse")))
                [error] = (await kubelet.prepare(late)).values()
                gone = dra_node.dev / "fuse"
                assert error == (
                    f"claim default/late: device {NODE}/fuse-fuse ({FUSE}=fuse): "
                    f"unhealthy: host device node {gone} is missing"
                )
            finally:
                code = await serve.stop()
        assert code == 0, serve.lines
        assert dra_node.kubelet_sockets() == []

    with running(dra_node.api):
        run(scenario(), timeout=60)


def test_a_node_the_api_server_does_not_know_stops_the_process(dra_node: DraNode) -> None:
    _fuse_node(dra_node)

    async def scenario() -> tuple[int, Serve]:
        serve = await Serve.start([*dra_node.args("both"), "--node-name", "node-x"])
        return await serve.exit(30), serve

    with running(dra_node.api):
        code, serve = run(scenario(), timeout=60)
    assert code == 1
    errors = [line for line in serve.lines if not line.startswith("{")]
    assert errors == ["cdi-plugin: error: node 'node-x': not found in the API server"]
    assert serve.lines[-1] == errors[0]
    assert dra_node.kubelet_sockets() == []
    assert not list(dra_node.device_plugins.iterdir())


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--driver-name", "Not_A.Name"],
            "cdi-plugin: error: --driver-name: driver name 'Not_A.Name': not a DNS subdomain",
        ),
        (["--driver-name", "a" * 64], "cdi-plugin: error: --driver-name: driver name 'aaaa"),
        (["--node-name", ""], "cdi-plugin: error: --node-name: not given and $NODE_NAME is not set"),
        (
            ["--node-name", "Node_A"],
            "cdi-plugin: error: --node-name: node name 'Node_A': not a DNS subdomain",
        ),
        (
            ["--kubeconfig", "/nonexistent/kubeconfig"],
            "cdi-plugin: error: --kubeconfig /nonexistent/kubeconfig: ",
        ),
    ],
)
def test_bad_dra_options_give_a_one_line_error(dra_node: DraNode, extra: list[str], message: str) -> None:
    result = subprocess.run(
        [*dra_node.args("dra", url="http://127.0.0.1:1"), *extra],
        capture_output=True, text=True, timeout=30, check=False, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.startswith(message), result.stderr
    assert result.stderr.count("\n") == 1
    assert dra_node.kubelet_sockets() == []


def test_dra_options_need_the_dra_api(dra_node: DraNode) -> None:
    args = [a for a in dra_node.args("device-plugin") if a not in ("--node-name", NODE)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert (
        "--kubeconfig, --kubelet-plugins-dir, --kubelet-registry-dir need --api dra or both" in result.stderr
    )


def test_a_stop_while_the_api_server_is_down_stops_at_once(dra_node: DraNode) -> None:
    _fuse_node(dra_node)

    async def scenario() -> tuple[int, float, Serve]:
        serve = await Serve.start(dra_node.args("dra", url=f"http://127.0.0.1:{free_port()}"))
        try:
            await serve.logged(f"cannot confirm node {NODE}: GET /api/v1/nodes/{NODE}: ConnectError")
        finally:
            started = asyncio.get_running_loop().time()
            code = await serve.stop()
        return code, asyncio.get_running_loop().time() - started, serve

    code, took, serve = run(scenario(), timeout=60)
    assert code == 0, serve.lines
    assert took < 10, took  # not after the backoff
    assert "SIGTERM received, stopping" in serve.messages()
    assert dra_node.kubelet_sockets() == []


def test_a_removed_device_is_tainted_for_the_grace_period_then_leaves_the_pool(dra_node: DraNode) -> None:
    _fuse_node(dra_node)
    make_node(dra_node.dev / "fuse2")
    both = {"fuse": str(dra_node.dev / "fuse"), "fuse2": str(dra_node.dev / "fuse2")}
    write_spec(dra_node.specs, FUSE, both)

    def taints() -> dict[str, bool]:
        return {
            d["name"]: bool(d.get("taints"))
            for s in dra_node.api.slices.values()
            for d in s["spec"]["devices"]
        }

    async def scenario() -> None:
        serve = await Serve.start(dra_node.args("dra", "--grace-period", "2s"))
        try:
            await register(dra_node, serve)
            await serve.wait_for(
                lambda: taints() == {"fuse-fuse": False, "fuse-fuse2": False}, "both devices"
            )
            write_spec(dra_node.specs, FUSE, {"fuse": both["fuse"]})  # fuse2's spec entry goes
            await serve.wait_for(
                lambda: taints() == {"fuse-fuse": False, "fuse-fuse2": True}, "fuse2 tainted"
            )
            await serve.wait_for(
                lambda: taints() == {"fuse-fuse": False}, "fuse2 gone after the grace period"
            )
        finally:
            code = await serve.stop()
        assert code == 0, serve.lines

    with running(dra_node.api):
        run(scenario(), timeout=60)
