"""The real ``cdi-plugin serve`` on a cluster whose API server does not serve resource.k8s.io/v1
(before 1.34, or DRA turned off): one error line naming the cause and the fix, no DRA socket, no
request but the one that found out; with ``--api both`` the device plugin serves on, with
``--api dra`` the process stops. Before, the driver registered with the kubelet and logged a
404 for its slices every 1 to 30 s, for ever."""

from __future__ import annotations

import json
import re

import pytest

from tests.deviceplugin.fake_kubelet import FakeKubelet as DevicePluginKubelet
from tests.deviceplugin.helpers import make_node, run
from tests.dra import faults
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import running
from tests.dra.serving import DraNode, Serve, dra_node, register, sockets

__all__ = ["dra_node"]

pytestmark = pytest.mark.timeout(120)

FUSE = "cdi-plugin.io/fuse"
NO_DRA = "the API server does not serve resource.k8s.io/v1 (Kubernetes before 1.34, or DRA turned off)"


def _node_without_dra(node: DraNode) -> None:
    make_node(node.dev / "fuse")
    write_spec(node.specs, FUSE, {"fuse": str(node.dev / "fuse")})
    node.api.add_node(NODE)
    node.api.resource_versions = ()


def _dra_side(serve: Serve) -> list[dict[str, str]]:
    """The records of the DRA side's loggers."""
    records = [json.loads(line) for line in serve.lines if line.startswith("{")]
    return [
        r
        for r in records
        if r["logger"] == "cdi_plugin.cli.serve_dra" or r["logger"].startswith("cdi_plugin.dra")
    ]


def test_with_api_both_one_error_line_and_the_device_plugin_serves_on(dra_node: DraNode) -> None:
    _node_without_dra(dra_node)
    line = (
        f"{NO_DRA}: the DRA driver {DRIVER} is not started; run with --api device-plugin, or turn DRA on "
        "(asked again every 600 s)"
    )

    async def scenario() -> Serve:
        async with DevicePluginKubelet(dra_node.device_plugins) as dp_kubelet:
            serve = await Serve.start(dra_node.args("both", *dra_node.both_ways()))
            try:
                client = await dp_kubelet.wait_registered(FUSE, timeout=30)
                await client.wait_until(lambda d: "fuse" in d)
                await serve.logged(line, timeout=30)
                # the driver's job is past its one question: it waits, and the device plugin serves
                answer = await client.allocate(["fuse"])
                assert [d.name for d in answer.cdi_devices] == [f"{FUSE}=fuse"]
                make_node(dra_node.dev / "fuse2")  # an inventory change, which woke the publisher before
                write_spec(dra_node.specs, FUSE, {"fuse": str(dra_node.dev / "fuse"),
                                                  "fuse2": str(dra_node.dev / "fuse2")})  # fmt: skip
                await client.wait_until(lambda d: "fuse2" in d)
                answer = await client.allocate(["fuse2"])
                assert [d.name for d in answer.cdi_devices] == [f"{FUSE}=fuse2"]
                assert sockets(dra_node.plugins) + sockets(dra_node.registry) == []  # no DRA socket
            finally:
                code = await serve.stop()
        assert code == 0, serve.lines
        return serve

    with running(dra_node.api):
        serve = run(scenario(), timeout=90)
    problems = [r["msg"] for r in _dra_side(serve) if r["level"] in ("warning", "error")]
    assert problems == [line], "\n".join(serve.lines)
    asked = [(c.method, c.path) for c in dra_node.api.calls if c.path.startswith("/apis/")]
    assert asked == [("GET", "/apis/resource.k8s.io/v1")]
    assert "stopped" in serve.messages()  # the whole log was read


def test_with_api_dra_the_process_stops_with_the_line(dra_node: DraNode) -> None:
    _node_without_dra(dra_node)

    async def scenario() -> tuple[int, Serve]:
        serve = await Serve.start(dra_node.args("dra"))
        return await serve.exit(30), serve

    with running(dra_node.api):
        code, serve = run(scenario(), timeout=60)
    assert code == 1
    errors = [line for line in serve.lines if not line.startswith("{")]
    assert errors == [
        f"cdi-plugin: error: {NO_DRA}: the DRA driver {DRIVER} is not started; run with --api device-plugin, "
        "or on a cluster that serves it"
    ]
    assert [r for r in _dra_side(serve) if r["level"] in ("warning", "error")] == []
    assert dra_node.kubelet_sockets() == []
    assert [c.path for c in dra_node.api.calls] == [f"/api/v1/nodes/{NODE}", "/apis/resource.k8s.io/v1"]


def test_a_proxys_404_page_is_not_taken_for_an_api_server_without_dra(dra_node: DraNode) -> None:
    """With --api dra alone, an HTML 404 of what stands in front of the API server is retried,
    and the driver registers once the API server answers."""
    _node_without_dra(dra_node)
    dra_node.api.resource_versions = ("v1",)
    dra_node.api.misbehave("GET", "/apis/resource.k8s.io/v1", faults.html(404), times=2)

    async def scenario() -> Serve:
        serve = await Serve.start(dra_node.args("dra"))
        try:
            await register(dra_node, serve)
        finally:
            assert await serve.stop() == 0, serve.lines
        return serve

    with running(dra_node.api):
        serve = run(scenario(), timeout=60)
    problems = [r["msg"] for r in _dra_side(serve) if r["level"] in ("warning", "error")]
    assert len(problems) == 1, problems  # the second failure in a row at debug level
    assert problems[0].startswith(
        f"DRA driver {DRIVER}: cannot tell whether the API server serves DRA: GET "
        "/apis/resource.k8s.io/v1: 404 Not Found (text/html, not a Status); not registered with the "
        "kubelet yet, trying again in"
    ), problems
    ended = [r["msg"] for r in _dra_side(serve) if "recovered after" in r["msg"]]
    assert len(ended) == 1, ended
    assert re.fullmatch(
        rf"DRA driver {DRIVER}: recovered after [\d.]+ s \(2 times since .* UTC\): "
        "cannot tell whether the API server serves DRA",
        ended[0],
    )
