"""Hot-plug end to end: real loop devices -> the watcher's spec -> the plugin -> a fake kubelet.

The watcher and the device plugin meet only through the spec directory, as ``cdi-gen watch``
and ``cdi-plugin serve`` do on one node (here both in one event loop, as ``serve --scan`` runs).
The test counts only the events of its own loop devices: other processes may add others.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cdi_plugin.deviceplugin import api
from tests.deviceplugin.fake_kubelet import DeviceEntry, FakeKubelet
from tests.deviceplugin.helpers import Layout, eventually, run, running_plugin
from tests.watch.helpers import Hearing, device_names, running, watch_options
from tests.watch.loops import AVAILABLE, Loops, free_numbers, loop_class, storm

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not AVAILABLE, reason="needs root and /dev/loop-control (CI runs as root)"),
]

KIND = "cdi-plugin.io/loop"
HEALTHY, UNHEALTHY = api.HEALTHY, "Unhealthy"


def health(devices: dict[str, DeviceEntry]) -> dict[str, str]:
    return {i: d.health for i, d in devices.items()}


def test_devices_plugged_in_and_out_reach_listandwatch(tmp_path: Path) -> None:
    a, b = free_numbers(2)
    layout = Layout.under(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(loop_class(a, b))
    settings = layout.settings(grace_period=30.0)
    options = watch_options(layout.etc, config)
    la, lb = f"loop{a}", f"loop{b}"

    async def scenario() -> None:
        async with (
            FakeKubelet(layout.plugin_dir) as kubelet,
            running_plugin(settings),
            running(Hearing(options)) as watcher,
        ):
            with Loops() as loops:
                loops.add(a)
                client = await kubelet.wait_registered(KIND)
                await client.wait_until(lambda d: health(d) == {la: HEALTHY})
                loops.add(b)
                await client.wait_until(lambda d: health(d) == {la: HEALTHY, lb: HEALTHY})
                loops.remove(a)
                # Unhealthy at once, and kept as such (not dropped) during the grace period
                await client.wait_until(lambda d: health(d) == {la: UNHEALTHY, lb: HEALTHY})
                removed = len(client.lists) - 1
                loops.add(a)  # back within the grace period: Healthy again, same ID
                await client.wait_until(lambda d: health(d) == {la: HEALTHY, lb: HEALTHY})
                assert all(la in listed for listed in client.lists[removed:]), "never dropped meanwhile"

                # a storm of 10,000 real uevents: the plugin keeps answering meanwhile
                await watcher.idle()
                before = watcher.heard[lb]
                storm(b, 10_000)  # on the loop's thread: every event is queued before one is read
                await client.stub.GetDevicePluginOptions(api.Empty(), timeout=60)
                assert watcher.heard[lb] - before < 10_000, "answered while the watcher reads the storm"
                await watcher.idle()
                assert watcher.heard[lb] - before == 10_000
                assert health(client.devices) == {la: HEALTHY, lb: HEALTHY}

                # the spec directory deleted and re-created: the watcher writes the spec again
                spec = layout.etc / "cdi-plugin.io-loop.json"
                shutil.rmtree(layout.etc)
                layout.etc.mkdir()
                await eventually(lambda: device_names(spec) == {la, lb}, "the spec is written again")
                await client.wait_until(lambda d: health(d) == {la: HEALTHY, lb: HEALTHY})
                assert client.stream_error == ""

                loops.remove(a)
                loops.remove(b)
                await watcher.idle()
                assert not spec.exists(), "the spec of a kind without devices is removed"
                removed = len(client.lists)
                await client.wait_until(lambda d: health(d) == {la: UNHEALTHY, lb: UNHEALTHY})
                assert all({la, lb} <= set(listed) for listed in client.lists[removed:]), (
                    "kept for the grace period"
                )

    run(scenario())
