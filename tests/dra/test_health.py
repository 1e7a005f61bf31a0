"""What a message of the device health stream holds, from the real inventory, without gRPC: every
device of the pool by the name its slice publishes, the inventory's health and reason (cut as the
kubelet cuts it), the grace period of a device whose spec entry went."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdi_plugin.dra.health import HEALTHY, MESSAGE_CUT, MESSAGE_MAX, TIMEOUT, UNHEALTHY, cut, pool_health
from cdi_plugin.dra.slices import build_pool
from cdi_plugin.inventory import GONE_REASON, NumaLocator, ServedDevice, SpecInventory, SpecSource
from tests.deviceplugin.helpers import make_node
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.specinventory import spec_inventory

GPU = "cdi-plugin.io/gpu"


def _gpus(spec_dir: Path, host_nodes: Path, names: tuple[str, ...] = ("card0", "card1", "gone")) -> None:
    write_spec(spec_dir, GPU, {n: str(host_nodes / n) for n in names})


@pytest.fixture
def inventory(spec_dir: Path, host_nodes: Path) -> SpecInventory:
    for name in ("card0", "card1"):
        make_node(host_nodes / name)
    _gpus(spec_dir, host_nodes)  # /dev/gone does not exist: gpu-gone is Unhealthy
    return spec_inventory([spec_dir])


# -- what a message holds (no gRPC) ---------------------------------------------------------------


def test_every_device_of_the_pool_by_its_slice_name_with_the_inventorys_health(
    inventory: SpecInventory, host_nodes: Path
) -> None:
    devices = inventory.devices()
    health = pool_health(NODE, devices, now=1_700_000_000.7)
    published = [e["name"] for chunk in build_pool(DRIVER, NODE, devices, taints=True).chunks for e in chunk]
    assert [h.device_name for h in health] == sorted(published) == ["gpu-card0", "gpu-card1", "gpu-gone"]
    assert [(h.pool_name, h.health, h.message) for h in health] == [
        (NODE, HEALTHY, ""),
        (NODE, HEALTHY, ""),
        (NODE, UNHEALTHY, f"host device node {host_nodes}/gone is missing"),
    ]
    assert {(h.last_updated, h.timeout) for h in health} == {(1_700_000_000, TIMEOUT)}


def test_a_long_reason_is_cut_as_the_kubelet_cuts_it() -> None:
    exact = "x" * MESSAGE_MAX
    assert cut(exact) == exact
    long = "y" * (MESSAGE_MAX + 1)
    assert cut(long) == "y" * MESSAGE_CUT + "..."
    sick = ServedDevice(cdi_name=f"{GPU}=card0", healthy=False, reason="z" * 5000)
    [health] = pool_health(NODE, {sick.cdi_name: sick}, now=0)
    assert health.message == "z" * MESSAGE_CUT + "..."


def test_a_device_whose_spec_entry_went_is_unhealthy_until_its_grace_period_ends(
    spec_dir: Path, host_nodes: Path
) -> None:
    for name in ("card0", "card1"):
        make_node(host_nodes / name)
    _gpus(spec_dir, host_nodes, ("card0", "card1"))
    clock = [1000.0]
    inventory = SpecInventory(
        SpecSource([spec_dir]),
        NumaLocator(spec_dir.parent / "sys"),
        grace_period=60.0,
        matching_glob=lambda kind: "*",
        clock=lambda: clock[0],
    )
    inventory.sync()
    _gpus(spec_dir, host_nodes, ("card0",))
    inventory.sync()
    health = {h.device_name: h for h in pool_health(NODE, inventory.devices(), now=0)}
    assert (health["gpu-card1"].health, health["gpu-card1"].message) == (UNHEALTHY, GONE_REASON)
    assert health["gpu-card0"].health == HEALTHY
    clock[0] += 60.0
    inventory.expire()
    assert [h.device_name for h in pool_health(NODE, inventory.devices(), now=0)] == ["gpu-card0"]
