"""The health of the devices the DRA driver publishes, by kind, scraped from a real ``cdi-plugin
serve --api both --metrics-address`` process: a kind the configuration gives to DRA alone has no
device plugin metric, so ``cdi_plugin_dra_devices`` is what an alert on unusable devices reads."""

from __future__ import annotations

import asyncio

import pytest

from tests.deviceplugin.helpers import make_node, run
from tests.dra.conftest import NODE, write_spec
from tests.dra.fakeapiserver import running
from tests.dra.serving import DraNode, Serve, dra_node, published
from tests.dra.test_serve_metrics import _endpoint
from tests.metrics.scrape import Samples, metrics_until, scrape, value

__all__ = ["dra_node"]

pytestmark = pytest.mark.timeout(120)

FUSE, TTY = "cdi-plugin.io/fuse", "cdi-plugin.io/tty"


def _health(found: Samples, kind: str) -> tuple[float | None, float | None]:
    return (
        value(found, "cdi_plugin_dra_devices", kind=kind, health="Healthy"),
        value(found, "cdi_plugin_dra_devices", kind=kind, health="Unhealthy"),
    )


def test_the_devices_published_are_counted_by_kind_and_health(dra_node: DraNode) -> None:
    make_node(dra_node.dev / "fuse")
    tty = make_node(dra_node.dev / "ttyUSB0")
    make_node(dra_node.dev / "ttyUSB1")
    write_spec(dra_node.specs, FUSE, {"fuse": str(dra_node.dev / "fuse")})
    write_spec(dra_node.specs, TTY, {n: str(dra_node.dev / n) for n in ("ttyUSB0", "ttyUSB1")})
    dra_node.api.add_node(NODE)
    config = dra_node.config.with_name("config.yaml")
    config.write_text(f'plugin: {{resources: {{"{TTY}": {{api: dra}}}}}}\n')

    async def scenario() -> None:
        serve = await Serve.start(
            dra_node.args("both", "--config", str(config), "--metrics-address", "127.0.0.1:0")
        )
        try:
            base = await _endpoint(serve)
            found = await metrics_until(base, lambda s: _health(s, TTY) == (2, 0), "two healthy ttys")
            assert _health(found, FUSE) == (None, None)  # the device plugin's: not published
            assert value(found, "cdi_plugin_devices", resource=TTY, health="Healthy") is None
            # the metric follows the inventory, the slices follow it through the API server
            assert sorted(await serve.wait_for(lambda: published(dra_node), "slices")) == [
                "tty-ttyusb0",
                "tty-ttyusb1",
            ]

            tty.unlink()  # the host's device node is gone: unhealthy
            await metrics_until(base, lambda s: _health(s, TTY) == (1, 1), "one tty unhealthy")
            make_node(tty)
            await metrics_until(base, lambda s: _health(s, TTY) == (2, 0), "healthy again")

            (dra_node.specs / "cdi-plugin.io-tty.json").unlink()  # kept, unhealthy, for the grace period
            await metrics_until(base, lambda s: _health(s, TTY) == (0, 2), "both kept unhealthy")
            assert _health(await asyncio.to_thread(scrape, base), FUSE) == (None, None)
        finally:
            code = await serve.stop()
        assert code == 0, serve.lines

    with running(dra_node.api):
        run(scenario(), timeout=90)
