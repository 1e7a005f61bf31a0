"""The udev facts of served devices as ResourceSlice attributes: from a device to its facts
(:mod:`cdi_plugin.cli.udev_facts`), through the inventory (looked up by device number, kept while
a node is gone), to the slices of a real ``serve --api dra`` process on simulated hardware."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from celpy.evaluation import CELEvalError

from cdi_plugin.cli.udev_facts import facts_of, udev_facts
from cdi_plugin.discovery.model import Ancestor, DiscoveredDevice
from cdi_plugin.dra.slices import PCI_BUS_ID, attributes, build_pool
from cdi_plugin.inventory import ServedDevice, UdevFacts
from cdi_plugin.inventory.health import Rdev
from tests.deviceplugin.helpers import make_node, run
from tests.discovery.simhost import WORKSTATION
from tests.dra.cel import selects
from tests.dra.conftest import DRIVER, NODE, write_spec
from tests.dra.fakeapiserver import running
from tests.dra.rules import pool_problems
from tests.dra.serving import DraNode, Serve, dra_node, register
from tests.dra.specinventory import refresh, spec_inventory

__all__ = ["dra_node"]

USB = "/sys/devices/pci0000:00/0000:00:14.0/usb1"


def _usb_tty(device_props: dict[str, str], usb_props: dict[str, str]) -> DiscoveredDevice:
    """A tty behind a USB interface of a USB device on a root hub whose serial is its PCI address."""
    return DiscoveredDevice(
        subsystem="tty",
        sys_name="ttyUSB0",
        properties=device_props,
        ancestors=(
            Ancestor("usb-serial", "ttyUSB0", f"{USB}/1-2/1-2:1.0/ttyUSB0", driver="ftdi_sio"),
            Ancestor("usb", "1-2:1.0", f"{USB}/1-2/1-2:1.0", driver="ftdi_sio", properties=usb_props),
            Ancestor("usb", "1-2", f"{USB}/1-2", driver="usb"),
            Ancestor("usb", "usb1", USB, driver="usb", properties={"ID_SERIAL_SHORT": "0000:00:14.0"}),
            Ancestor("pci", "0000:00:14.0", "/sys/devices/pci0000:00/0000:00:14.0", driver="xhci_hcd",
                     properties={"PCI_SLOT_NAME": "0000:00:14.0", "PCI_ID": "8086:A36D"}),
        ),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("props", "serial"),
    [
        ({"ID_SERIAL_SHORT": "A50285BI", "ID_SERIAL": "FTDI_FT232R_A50285BI"}, "A50285BI"),
        ({"ID_SERIAL": "WD-WX11A1234567"}, "WD-WX11A1234567"),  # a serial without a short form
        # udev made ID_SERIAL up from the vendor and model names: the device reports no serial
        ({"ID_VENDOR": "FTDI", "ID_MODEL": "FT232R", "ID_SERIAL": "FTDI_FT232R"}, None),
        ({"ID_SERIAL_SHORT": "0000000000"}, None),  # a placeholder
        ({}, None),  # not the root hub's serial
    ],
)
def test_a_serial_is_taken_only_where_it_is_stable(props: dict[str, str], serial: str | None) -> None:
    assert facts_of(_usb_tty(props, {})).serial == serial


def test_usb_ids_from_the_interface_and_no_pci_address_behind_usb() -> None:
    facts = facts_of(_usb_tty({}, {"PRODUCT": "403/6001/600"}))
    assert facts == UdevFacts(subsystem="tty", driver="ftdi_sio", vendor_id="0403", model_id="6001")


def test_hostile_ids_and_addresses_are_left_out() -> None:
    gpu = DiscoveredDevice(
        subsystem="drm",
        sys_name="card0",
        properties={"ID_VENDOR_ID": "8086'; rm", "ID_MODEL_ID": "3e92"},
        ancestors=(
            Ancestor("pci", "0000:00:02.0", "/sys/devices/pci0000:00/0000:00:02.0", driver="i915",
                     properties={"PCI_ID": "80861:3E92", "PCI_SLOT_NAME": "0000:00:02.0\\x0a"}),
        ),
    )  # fmt: skip
    assert facts_of(gpu) == UdevFacts(subsystem="drm", driver="i915", model_id="3e92")


def _device(**facts: str) -> ServedDevice:
    return ServedDevice(cdi_name="cdi-plugin.io/serial=usb0", udev=UdevFacts(**facts))


@pytest.mark.parametrize(
    ("serial", "published"),
    [
        ("s" * 64, True),  # at the limit
        ("s" * 65, False),  # over it: left out, not cut
        ("é" * 32, True),  # 64 bytes
        ("é" * 33, False),  # 33 characters, 66 bytes: the API server counts bytes
        ("", True),
    ],
)
def test_string_attributes_at_and_over_the_limit(serial: str, published: bool) -> None:
    device = _device(subsystem="tty", serial=serial)
    assert ("serial" in attributes(device)) == published
    assert attributes(device)["subsystem"] == {"string": "tty"}
    slices = build_pool(DRIVER, NODE, [device], taints=True).slices(0)
    assert pool_problems(slices) == []


def test_the_inventory_looks_facts_up_by_device_number_and_keeps_them_while_the_node_is_gone(
    spec_dir: Path, host_nodes: Path
) -> None:
    """On the host's own udev: a node 1:3 is /dev/null's device, 10:229 /dev/fuse's."""
    lookups: list[Rdev] = []
    real = udev_facts()

    def counting(rdev: Rdev) -> UdevFacts | None:
        lookups.append(rdev)
        return real(rdev)

    node = make_node(host_nodes / "null", os.makedev(1, 3))
    write_spec(spec_dir, "cdi-plugin.io/null", {"null": str(node)})
    inventory = spec_inventory([spec_dir], counting)
    [device] = inventory.devices().values()
    assert device.udev == UdevFacts(subsystem="mem")
    refresh(inventory)
    assert lookups == [Rdev(False, 1, 3)]  # once per device while its nodes stay

    node.unlink()
    refresh(inventory)
    [gone] = inventory.devices().values()
    assert (gone.healthy, gone.udev) == (False, UdevFacts(subsystem="mem"))  # the last known facts
    [obj] = build_pool(DRIVER, NODE, inventory.devices(), taints=True).slices(0)
    assert pool_problems([obj]) == []
    [entry] = obj["spec"]["devices"]
    assert entry["attributes"]["subsystem"] == {"string": "mem"}
    assert entry["taints"]

    make_node(node, os.makedev(10, 229))  # another device at the same path
    refresh(inventory)
    [back] = inventory.devices().values()
    assert (back.healthy, back.udev) == (True, UdevFacts(subsystem="misc"))
    assert lookups == [Rdev(False, 1, 3), Rdev(False, 10, 229)]


def test_a_device_without_facts_keeps_its_cdi_attributes(spec_dir: Path, host_nodes: Path) -> None:
    write_spec(
        spec_dir, "cdi-plugin.io/odd", {"odd": str(make_node(host_nodes / "odd", os.makedev(511, 4095)))}
    )
    inventory = spec_inventory([spec_dir], udev_facts())
    [obj] = build_pool(DRIVER, NODE, inventory.devices(), taints=True).slices(0)
    assert pool_problems([obj]) == []
    assert obj["spec"]["devices"][0]["attributes"] == {
        "kind": {"string": "cdi-plugin.io/odd"},
        "vendor": {"string": "cdi-plugin.io"},
        "class": {"string": "odd"},
    }


def _under_umockdev(args: list[str]) -> list[str]:
    """``args`` run on the simulated workstation, in a private mount namespace whose /run is empty
    (no udev database of the host)."""
    script = (
        "set -e; mount -t tmpfs -o mode=0755 tmpfs /run; "
        f'exec umockdev-run --device {shlex.quote(str(WORKSTATION))} -- "$@"'
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *args]


def _attributes(node: DraNode) -> dict[str, dict[str, Any]]:
    ours = [
        s for s in node.api.slices.values() if (s["spec"]["nodeName"], s["spec"]["driver"]) == (NODE, DRIVER)
    ]
    assert pool_problems(ours) == []
    return {
        d["name"]: {**d["attributes"], "tainted": bool(d.get("taints"))}
        for s in ours
        for d in s["spec"]["devices"]
    }


@pytest.mark.umockdev
@pytest.mark.timeout(120)
def test_serve_publishes_the_udev_facts_of_simulated_hardware(dra_node: DraNode) -> None:
    card1 = make_node(dra_node.dev / "card1", os.makedev(226, 1))  # a node outside /dev, goes away
    write_spec(dra_node.specs, "cdi-plugin.io/gpu", {"card0": "/dev/dri/card0", "card1": str(card1)})
    write_spec(dra_node.specs, "cdi-plugin.io/serial", {"usb0": "/dev/ttyUSB0"})
    write_spec(dra_node.specs, "cdi-plugin.io/rdma", {"uverbs0": "/dev/infiniband/uverbs0"})
    dra_node.api.add_node(NODE)

    def cdi(kind: str) -> dict[str, Any]:
        vendor, _, class_ = kind.partition("/")
        return {"kind": {"string": kind}, "vendor": {"string": vendor}, "class": {"string": class_}}

    def s(value: str) -> dict[str, str]:
        return {"string": value}

    card1_attributes = {
        **cdi("cdi-plugin.io/gpu"), "subsystem": s("drm"), "driver": s("amdgpu"), "vendorID": s("1002"),
        "modelID": s("73bf"), PCI_BUS_ID: s("0000:01:00.0"), "numaNode": {"int": 0},
    }  # fmt: skip
    expected = {
        "gpu-card0": {
            **cdi("cdi-plugin.io/gpu"), "subsystem": s("drm"), "driver": s("i915"), "vendorID": s("8086"),
            "modelID": s("3e92"), PCI_BUS_ID: s("0000:00:02.0"), "numaNode": {"int": 0}, "tainted": False,
        },
        "gpu-card1": {**card1_attributes, "tainted": False},
        "serial-usb0": {
            **cdi("cdi-plugin.io/serial"), "subsystem": s("tty"), "driver": s("ftdi_sio"),
            "vendorID": s("0403"), "modelID": s("6001"), "serial": s("A50285BI"), "numaNode": {"int": 0},
            "tainted": False,
        },
        "rdma-uverbs0": {
            **cdi("cdi-plugin.io/rdma"), "subsystem": s("infiniband_verbs"), "driver": s("mlx5_core"),
            "vendorID": s("15b3"), "modelID": s("1017"), PCI_BUS_ID: s("0000:3b:00.0"),
            "numaNode": {"int": 1}, "tainted": False,
        },
    }  # fmt: skip

    async def scenario() -> None:
        serve = await Serve.start(_under_umockdev(dra_node.args("dra")))
        try:
            await register(dra_node, serve)
            await serve.wait_for(lambda: _attributes(dra_node) == expected, "slices with udev facts")
            card1.unlink()  # its device keeps its attributes, tainted
            gone = {**expected, "gpu-card1": {**card1_attributes, "tainted": True}}
            await serve.wait_for(lambda: _attributes(dra_node) == gone, "card1 tainted")
        finally:
            code = await serve.stop()
        assert code == 0, "\n".join(serve.lines)

    with running(dra_node.api):
        run(scenario(), timeout=90)


def test_the_documented_selectors_select_by_these_attributes() -> None:
    """The CEL examples of docs/dra.md, evaluated on a GPU, a USB serial adapter and an RDMA device."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "dra.md").read_text()
    (block,) = re.findall(r"```cel\n(.*?)```", docs, re.DOTALL)
    devices = [
        ServedDevice(cdi_name="cdi-plugin.io/gpu=card1", numa_nodes=(0,), udev=UdevFacts(
            subsystem="drm", driver="amdgpu", vendor_id="1002", model_id="73bf", pci_address="0000:01:00.0")),
        ServedDevice(cdi_name="cdi-plugin.io/fuse=fuse", udev=UdevFacts(subsystem="misc")),
        ServedDevice(cdi_name="cdi-plugin.io/serial=usb0", numa_nodes=(0,), udev=UdevFacts(
            subsystem="tty", driver="ftdi_sio", vendor_id="0403", model_id="6001", serial="A50285BI")),
        ServedDevice(cdi_name="cdi-plugin.io/rdma=uverbs0", numa_nodes=(1,), udev=UdevFacts(
            subsystem="infiniband_verbs", driver="mlx5_core", pci_address="0000:3b:00.0")),
    ]  # fmt: skip
    [obj] = build_pool(DRIVER, NODE, devices, taints=True).slices(0)
    entries = obj["spec"]["devices"]

    def selected(expression: str) -> list[str]:
        return [e["name"] for e in entries if selects(expression, e, DRIVER)]

    assert [selected(line) for line in block.splitlines()] == [
        ["gpu-card1", "serial-usb0"],
        ["gpu-card1"],
        ["serial-usb0"],
        ["rdma-uverbs0"],
    ]
    with pytest.raises(CELEvalError):  # without has(): an error on a device without a serial
        selected('device.attributes["cdi-plugin.io"].serial == "A50285BI"')
