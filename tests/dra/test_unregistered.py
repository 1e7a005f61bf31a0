"""A driver the kubelet does not register (no kubelet on the node, DRA off in it, or the driver's
sockets in another directory than the kubelet's plugin watcher watches): one warning naming the
registration socket and what to check, each time the sockets are served and no registration
follows; a refusal is the kubelet's own error line, not this warning."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from cdi_plugin.cli.serve_dra import DraDriver, dra_options
from tests.deviceplugin.helpers import eventually, make_node, run
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import running
from tests.dra.fakekubelet import FakeKubelet
from tests.dra.kubefixtures import connect
from tests.dra.serving import DraNode, dra_node, published
from tests.dra.specinventory import spec_inventory

__all__ = ["dra_node"]

pytestmark = pytest.mark.timeout(120)


def test_a_driver_not_registered_says_so_once_each_time_it_serves_its_sockets(
    dra_node: DraNode, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make_node(dra_node.dev / "fuse")
    write_spec(dra_node.specs, "cdi-plugin.io/fuse", {"fuse": str(dra_node.dev / "fuse")})
    dra_node.api.add_node(NODE)
    caplog.set_level(logging.INFO, logger="cdi_plugin")
    socket = dra_node.registration_socket
    warning = (
        f"DRA driver {DRIVER}: not registered by the kubelet 0.2 s after serving {socket}; check that the "
        "kubelet runs with DRA on and that this is its plugins_registry directory (its --root-dir; "
        "--kubelet-registry-dir)"
    )

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

    async def scenario() -> None:
        options = dra_options(DRIVER, NODE, None, dra_node.plugins, dra_node.registry)
        inventory = spec_inventory([dra_node.specs])
        driver = DraDriver(options, inventory, connect(tmp_path, dra_node.api.url), register_within=0.2)
        stop = asyncio.Event()
        task = asyncio.create_task(driver.run(stop))
        try:
            await eventually(lambda: warning in warnings(), "the warning")
            assert published(dra_node)  # the slices do not wait for the kubelet
            await FakeKubelet(dra_node.registry).register(socket, DRIVER)
            await eventually(lambda: "registered with the kubelet as DRA driver" in caplog.text, "registered")
            socket.unlink()  # a kubelet restart wiped it; nothing registers the new one
            await eventually(lambda: warnings().count(warning) == 2, "the warning again")
        finally:
            stop.set()
            await task
        assert warnings() == [
            warning,
            f"a DRA plugin socket of {DRIVER} disappeared; serving and registering again",
            warning,
        ]

    with running(dra_node.api):
        run(scenario(), timeout=60)
