"""An API server without ``resource.k8s.io/v1`` (before 1.34, or DRA turned off), as the driver
finds out from the group version's discovery document: only a ``Status`` 404 NotFound, as
kube-apiserver answers, counts as "no DRA"; then the driver waits without registering with the
kubelet, and starts once the API server serves it."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from cdi_plugin.cli.serve_dra import DraDriver, dra_options
from cdi_plugin.dra.kube import RESOURCE_API, SLICES, KubeApi
from cdi_plugin.dra.rest import ApiServerError
from tests.deviceplugin.helpers import eventually, make_node, run
from tests.dra import faults
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import FakeApiServer, running
from tests.dra.fakediscovery import RESOURCES
from tests.dra.kubefixtures import connect, kube, server, sleeps
from tests.dra.serving import DraNode, dra_node
from tests.dra.specinventory import spec_inventory

__all__ = ["dra_node", "kube", "server", "sleeps"]

NO_DRA = "the API server does not serve resource.k8s.io/v1 (Kubernetes before 1.34, or DRA turned off)"


def _resource_list(group_version: str = "resource.k8s.io/v1", *left_out: str) -> faults.Action:
    listed = [{"name": name, "kind": kind, "namespaced": ns, "verbs": verbs}
              for name, kind, ns, verbs in RESOURCES if name not in left_out]  # fmt: skip
    doc = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": listed}
    return faults.body(200, json.dumps(doc).encode())


@pytest.mark.asyncio
async def test_an_api_server_that_serves_dra_costs_one_get(kube: KubeApi, server: FakeApiServer) -> None:
    assert await kube.dra_api_problem() is None
    assert server.requests == [("GET", RESOURCE_API)]


@pytest.mark.asyncio
@pytest.mark.parametrize("versions", [(), ("v1beta2", "v1beta1")], ids=["DRA off", "1.33 with DRA on"])
async def test_a_status_404_is_an_api_server_without_dra(
    kube: KubeApi, server: FakeApiServer, versions: tuple[str, ...]
) -> None:
    server.resource_versions = versions
    assert await kube.dra_api_problem() == NO_DRA
    # what the driver's slice list got before it asked: the same Status, again and again
    with pytest.raises(
        ApiServerError, match="404 NotFound: the server could not find the requested resource"
    ):
        await kube.list_slices()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (faults.html(404), "404 Not Found (text/html, not a Status)"),  # a proxy's page
        (faults.body(404, b'{"code": 404}'), "404 Not Found (application/json, not a Status)"),
        (faults.status(503, "ServiceUnavailable", "etcd"), "503 ServiceUnavailable: etcd"),
        (faults.body(200, b'{"kind": "APIGroupList"}'), "kind: 'APIGroupList', not APIResourceList"),
        (_resource_list("resource.k8s.io/v1beta1"), "groupVersion: 'resource.k8s.io/v1beta1', not resource"),
        (
            faults.body(
                200,
                b'{"kind": "APIResourceList", "groupVersion": "resource.k8s.io/v1", "resources": '
                b'[{"name": 7}]}',
            ),
            "resources[0].name: 7 is not a string",
        ),
    ],
)
async def test_an_answer_that_is_not_the_api_servers_word_tells_nothing(
    kube: KubeApi, server: FakeApiServer, answer: faults.Action, reason: str
) -> None:
    server.misbehave("GET", RESOURCE_API, answer)
    with pytest.raises(ApiServerError) as info:
        await kube.dra_api_problem()
    assert str(info.value).startswith(f"GET {RESOURCE_API}: {reason}")


@pytest.mark.asyncio
async def test_a_resource_turned_off_is_named(kube: KubeApi, server: FakeApiServer) -> None:
    server.misbehave("GET", RESOURCE_API, _resource_list("resource.k8s.io/v1", "resourceslices"))
    assert (
        await kube.dra_api_problem()
        == "the API server serves resource.k8s.io/v1 without resourceslices (turned off?)"
    )


def test_with_api_both_the_driver_waits_silently_and_starts_once_the_api_server_serves_dra(
    dra_node: DraNode, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One error line; then the discovery document is asked again every ``recheck`` seconds and
    nothing else is sent or logged, and the driver registers once the API server serves DRA."""
    make_node(dra_node.dev / "fuse")
    write_spec(dra_node.specs, "cdi-plugin.io/fuse", {"fuse": str(dra_node.dev / "fuse")})
    api = dra_node.api
    api.add_node(NODE)
    api.resource_versions = ()
    caplog.set_level(logging.DEBUG, logger="cdi_plugin")

    def discoveries() -> int:
        return api.count("GET", RESOURCE_API)

    async def scenario() -> None:
        options = dra_options(DRIVER, NODE, None, dra_node.plugins, dra_node.registry)
        driver = DraDriver(
            options, spec_inventory([dra_node.specs]), connect(tmp_path, api.url), recheck=0.05
        )
        stop = asyncio.Event()
        task = asyncio.create_task(driver.run(stop))
        try:
            await eventually(lambda: discoveries() >= 4, "three questions after the first")
            assert driver.not_started == NO_DRA
            assert not dra_node.registration_socket.exists()
            assert not dra_node.dra_socket.exists()
            api.resource_versions = ("v1",)  # the API server is upgraded
            await eventually(dra_node.registration_socket.exists, "registration socket")
            await eventually(lambda: api.count("GET", SLICES) >= 1, "slices listed")
            assert driver.not_started is None
        finally:
            stop.set()
            await task
        asked = [(c.method, c.path) for c in api.calls if c.path.startswith("/apis/")]
        first_slices = asked.index(("GET", SLICES))
        assert set(asked[:first_slices]) == {("GET", RESOURCE_API)}

    with running(api):
        run(scenario(), timeout=60)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == [
        f"{NO_DRA}: the DRA driver {DRIVER} is not started; run with --api device-plugin, or turn DRA on "
        "(asked again every 0.05 s)"
    ]
    assert f"DRA driver {DRIVER}: the API server serves DRA now; starting" in caplog.messages
