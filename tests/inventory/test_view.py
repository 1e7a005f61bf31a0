"""The inventory as one consumer sees it: only the kinds it serves, over the real inventory."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cdi_plugin.inventory import KindView, SpecInventory
from tests.deviceplugin.helpers import make_node, run
from tests.dra.conftest import write_spec
from tests.dra.specinventory import refresh, spec_inventory

FUSE, TTY = "cdi-plugin.io/fuse", "cdi-plugin.io/tty"
WHY = "plugin.resources.cdi-plugin.io/fuse.api is device-plugin"


def _inventory(tmp_path: Path) -> SpecInventory:
    specs, dev = tmp_path / "cdi", tmp_path / "dev"
    dev.mkdir()
    for name in ("fuse", "ttyUSB0", "ttyUSB1"):
        make_node(dev / name)
    write_spec(specs, FUSE, {"fuse": str(dev / "fuse")})
    write_spec(specs, TTY, {"ttyUSB0": str(dev / "ttyUSB0")})
    return spec_inventory([specs])


def _view(inventory: SpecInventory) -> KindView:
    return KindView(inventory, lambda kind: WHY if kind == FUSE else None, "DRA driver")


def test_the_view_holds_the_kept_kinds_only_and_logs_each_kind_left_out_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "cdi_plugin.inventory.view")
    inventory = _inventory(tmp_path)
    view = _view(inventory)
    assert list(view.devices()) == [f"{TTY}=ttyUSB0"]
    assert set(inventory.devices()) == {f"{FUSE}=fuse", f"{TTY}=ttyUSB0"}
    assert view.problem(f"{FUSE}=fuse") == f"kind {FUSE} is not served through this API"
    assert view.problem(f"{TTY}=ttyUSB0") is None
    assert caplog.messages == [f"DRA driver: not serving kind {FUSE}: {WHY}"]


def test_the_devices_are_the_same_object_until_a_kept_kinds_devices_change(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path)
    view = _view(inventory)
    before = view.devices()
    dev, specs = tmp_path / "dev", tmp_path / "cdi"
    make_node(dev / "fuse2")
    write_spec(specs, FUSE, {"fuse": str(dev / "fuse"), "fuse2": str(dev / "fuse2")})
    refresh(inventory)
    assert f"{FUSE}=fuse2" in inventory.devices()
    assert view.devices() is before  # a change of a kind left out is no change here
    write_spec(specs, TTY, {"ttyUSB0": str(dev / "ttyUSB0"), "ttyUSB1": str(dev / "ttyUSB1")})
    refresh(inventory)
    assert list(view.devices()) == [f"{TTY}=ttyUSB0", f"{TTY}=ttyUSB1"]


def test_changes_yield_the_kept_devices(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path)
    view = _view(inventory)
    dev, specs = tmp_path / "dev", tmp_path / "cdi"

    async def scenario() -> None:
        changes = view.changes()
        assert list(await anext(changes)) == [f"{TTY}=ttyUSB0"]
        write_spec(specs, TTY, {"ttyUSB1": str(dev / "ttyUSB1")})
        refresh(inventory)
        assert list(await anext(changes)) == [f"{TTY}=ttyUSB1"]
        await changes.aclose()

    run(scenario())
