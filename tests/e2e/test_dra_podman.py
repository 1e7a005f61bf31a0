"""The DRA chain on this machine: cdi-gen scan -> spec files -> cdi-plugin serve --api dra ->
ResourceSlices in a (fake) API server -> a claim allocated the fuse device -> the kubelet's
NodePrepareResources -> the returned CDI device IDs -> podman run --device -> /dev/fuse in the
container. With --api both, the device plugin's Allocate answers from the same specs meanwhile."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdi_plugin.dra import api
from tests.deviceplugin.fake_kubelet import FakeKubelet as DevicePluginKubelet
from tests.deviceplugin.helpers import run
from tests.dra.conftest import NODE
from tests.dra.fakeapiserver import running
from tests.dra.serving import DraNode, Serve, dra_node, published, register
from tests.dra.test_kubelet import claim_obj
from tests.e2e.podman import PodmanEnv
from tests.scan.helpers import run_cdi_gen

__all__ = ["dra_node"]

pytestmark = [pytest.mark.podman, pytest.mark.root, pytest.mark.timeout(180)]

FUSE = "cdi-plugin.io/fuse"
CLAIM = api.Claim("default", "pod-fuse", "8d0c3f2e-claim")


async def _prepare(node: DraNode, api_choice: str) -> tuple[list[str], list[str]]:
    """Serve the scanned specs; the CDI IDs NodePrepareResources gives for a claim of the fuse
    device, and (with the device plugin API on) the names Allocate gives for it."""
    async with DevicePluginKubelet(node.device_plugins) as dp_kubelet:
        both = node.both_ways() if api_choice == "both" else []
        serve = await Serve.start(node.args(api_choice, *both, any_kind=False))
        try:
            kubelet = await register(node, serve)
            slices = await serve.wait_for(lambda: published(node), "slices")
            [device] = [name for name, kind in slices.items() if kind == FUSE]
            node.api.add_claim(claim_obj(CLAIM, ("fuse", NODE, device)))
            [prepared] = (await kubelet.prepare(CLAIM)).values()
            assert not isinstance(prepared, str), prepared
            [fuse] = prepared
            assert (fuse.request_names, fuse.pool_name, fuse.device_name) == (("fuse",), NODE, device)
            allocated: list[str] = []
            if api_choice == "both":
                client = await dp_kubelet.wait_registered(FUSE)
                await client.wait_until(lambda d: "fuse" in d)
                allocated = [d.name for d in (await client.allocate(["fuse"])).cdi_devices]
            assert await kubelet.unprepare(CLAIM) == {CLAIM.uid: ""}
        finally:
            code = await serve.stop()
        assert code == 0, serve.lines
    return list(fuse.cdi_device_ids), allocated


@pytest.mark.parametrize("api_choice", ["dra", "both"])
def test_a_claim_prepared_by_the_driver_gets_dev_fuse_into_a_podman_container(
    podman_env: PodmanEnv, dra_node: DraNode, api_choice: str
) -> None:
    run_cdi_gen("scan", "--output-dir", dra_node.specs, check=0)
    dra_node.api.add_node(NODE)

    with running(dra_node.api):
        ids, allocated = run(_prepare(dra_node, api_choice), timeout=90)

    assert ids == [f"{FUSE}=fuse"]
    assert allocated == ([f"{FUSE}=fuse"] if api_choice == "both" else [])
    ran = podman_env.run_container(ids, "stat -c '%n %t:%T' /dev/fuse", spec_dir=dra_node.specs)
    assert ran.returncode == 0, ran.stderr
    rdev = os.stat("/dev/fuse").st_rdev
    assert ran.stdout.split() == ["/dev/fuse", f"{os.major(rdev):x}:{os.minor(rdev):x}"]
    assert dra_node.kubelet_sockets() == []
    assert not list(Path(dra_node.device_plugins).iterdir())
