"""The real ``cdi-plugin serve`` as a flaky or hostile kubelet meets it: what it finds in the
kubelet's directories and what the kubelet sends never ends the process, and with ``--api both``
a failing DRA side never stops the device plugin."""

from __future__ import annotations

import pytest

from tests.deviceplugin.fake_kubelet import FakeKubelet as DevicePluginKubelet
from tests.deviceplugin.helpers import run
from tests.dra.conftest import DRIVER
from tests.dra.fakeapiserver import running
from tests.dra.serving import DraNode, Serve, dra_node, register
from tests.dra.test_serve import CLAIM, FUSE, _fuse_node

__all__ = ["dra_node"]

pytestmark = pytest.mark.timeout(120)


def test_a_lock_file_that_cannot_be_used_fails_prepare_and_never_stops_the_process(dra_node: DraNode) -> None:
    """No prepared claim yet (no record): the sockets are served with the node's lock unusable
    (a directory at its path); Prepare fails per claim naming it, the device plugin allocates all
    along, and once it is moved away the claim is prepared."""
    _fuse_node(dra_node)
    lock = dra_node.plugins / DRIVER / "serialize.lock"
    lock.mkdir(parents=True)

    async def scenario() -> None:
        async with DevicePluginKubelet(dra_node.device_plugins) as dp_kubelet:
            serve = await Serve.start(dra_node.args("both", *dra_node.both_ways()))
            try:
                await serve.logged("registered with the kubelet (API")
                client = await dp_kubelet.wait_registered(FUSE, timeout=30)
                await client.wait_until(lambda d: "fuse" in d)
                kubelet = await register(dra_node, serve)
                [error] = (await kubelet.prepare(CLAIM)).values()
                assert isinstance(error, str)
                assert f"{lock}: cannot open the lock: Is a directory" in error
                answer = await client.allocate(["fuse"])
                assert [d.name for d in answer.cdi_devices] == [f"{FUSE}=fuse"]
                lock.rmdir()
                [devices] = (await kubelet.prepare(CLAIM)).values()
                assert [d.cdi_device_ids for d in devices] == [(f"{FUSE}=fuse",)]
                assert serve.proc.returncode is None
            finally:
                code = await serve.stop()
            assert code == 0, serve.lines

    with running(dra_node.api):
        run(scenario(), timeout=90)
