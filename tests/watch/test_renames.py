"""Real renames: a network interface renamed makes the kernel emit ``move`` with its new name only.

The watcher cannot tell from the event which name the device had: a rename out of a class's
kernel names must still take the device out of that class's spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdi_plugin.scan.watcher import Watcher
from tests.deviceplugin.helpers import eventually, run
from tests.watch.helpers import device_names, running, watch_options
from tests.watch.taps import AVAILABLE, Tap, free_name

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not AVAILABLE, reason="needs root and /dev/net/tun (CI runs as root)"),
]

SPEC = "cdi-plugin.io-iface.json"


def iface_class(prefix: str) -> str:
    """A class of the network interfaces whose names start with ``prefix``, each giving its name."""
    return (
        "classes:\n  - vendor: cdi-plugin.io\n    class: iface\n"
        f'    match: {{subsystem: net, kernel: "{prefix}*"}}\n    naming: [kernel]\n'
        '    edits: {env: ["IFACE={kernel}"]}\n'
    )


def test_an_interface_renamed_out_of_and_back_into_a_class_follows_its_name(tmp_path: Path) -> None:
    matched = free_name("cdimv")
    other = "cdiot" + matched.removeprefix("cdimv")
    config = tmp_path / "config.yaml"
    config.write_text(iface_class(matched))
    out = tmp_path / "out"

    async def scenario() -> None:
        async with running(Watcher(watch_options(out, config))):
            with Tap(matched) as tap:
                await eventually(lambda: device_names(out / SPEC) == {matched}, "the interface added")
                tap.rename(other)
                await eventually(lambda: not (out / SPEC).exists(), "the interface renamed out of the class")
                tap.rename(matched)
                await eventually(lambda: device_names(out / SPEC) == {matched}, "renamed back")

    run(scenario())
