"""While a batch gathers (a burst), the watcher reads its devices ahead, so that the batch, once
released, reads nothing again; a batch that max_delay releases while the burst goes on leaves the
devices not read yet to the next batch, once.

Events are handed to the watcher as its uevent monitor would, and the coalescer's clock is driven
by the test. The clock moves only once the watcher is idle: a batch ends after its file is in
place, and the time of its end is when the quiet spell before the next event starts.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from cdi_plugin.aio.coalesce import Coalescer
from cdi_plugin.discovery.model import DiscoveredDevice, UdevEvent
from cdi_plugin.scan.watcher import Watcher
from tests.aio.clock import ManualClock
from tests.deviceplugin.helpers import eventually, run
from tests.generate.hosts import usb_tty
from tests.scan.helpers import Counting
from tests.watch.helpers import device_names, running, watch_options, write_host

KIND = "example.com/serial"
CONFIG = (
    "classes:\n  - vendor: example.com\n    class: serial\n"
    "    match: {subsystem: tty, kernel: 'ttyUSB*'}\n    naming: [kernel]\n"
)
SPEC = "example.com-serial.json"


def port(i: int) -> DiscoveredDevice:
    return usb_tty(f"ttyUSB{i}", i, str(i + 1), serial=None)


def names(numbers: range) -> set[str]:
    return {f"ttyUSB{i}" for i in numbers}


def setup(tmp_path: Path) -> tuple[Watcher, Counting, ManualClock, Path]:
    config, host, out = tmp_path / "config.yaml", tmp_path / "host.json", tmp_path / "out"
    config.write_text(CONFIG)
    write_host(host, [])
    source = Counting([port(0)])
    watcher = Watcher(watch_options(out, config, source=f"fixture:{host}"), source=source)
    clock = ManualClock()
    watcher.gathering.coalescer = Coalescer(0.1, 0.25, clock=clock, sleep=clock.sleep)
    return watcher, source, clock, out / SPEC


def plug(watcher: Watcher, source: Counting, numbers: range) -> None:
    for i in numbers:
        source.devices.append(port(i))
        device = port(i)
        event = UdevEvent("add", "tty", device.sys_name, device.devnode, device.sys_path)
        watcher._on_uevent(event, frozenset({KIND}))


def test_the_devices_of_a_gathering_batch_are_read_ahead_and_not_read_again(tmp_path: Path) -> None:
    watcher, source, clock, spec = setup(tmp_path)

    async def scenario() -> None:
        async with running(watcher):
            clock.advance(1.0)
            plug(watcher, source, range(1, 2))  # the leading edge, at once
            await watcher.idle()
            assert device_names(spec) == names(range(2))
            plug(watcher, source, range(2, 100))  # the rest of the burst gathers
            await eventually(lambda: len(source.lookups) == 99, "read ahead")
            assert device_names(spec) == names(range(2))
            enumerations = source.enumerations
            clock.advance(0.1)  # quiet: released
            await watcher.idle()
            assert device_names(spec) == names(range(100))
            assert len(source.lookups) == 99, "nothing read again"
            assert source.enumerations == enumerations, "no rescan"

    run(scenario())


def test_a_batch_cut_by_max_delay_leaves_what_was_not_read_ahead_to_the_next_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher, source, clock, spec = setup(tmp_path)
    monkeypatch.setattr(watcher.work, "read_ahead", lambda events: None)  # nothing is ever ready

    async def burst(numbers: range) -> None:
        """Events every 60 ms for 240 ms, then 20 ms more: max_delay, not quiet, releases the batch."""
        step = len(numbers) // 5
        for k in range(5):
            plug(watcher, source, numbers[k * step : (k + 1) * step])
            await clock.sleeping.wait()
            clock.advance(0.06 if k < 4 else 0.02)

    async def scenario() -> None:
        async with running(watcher):
            clock.advance(1.0)
            plug(watcher, source, range(1, 2))
            await watcher.idle()
            assert device_names(spec) == names(range(2))
            batches = watcher.batches.count
            await burst(range(2, 52))
            await watcher.batches.wait_after(batches)  # the cut batch, done
            assert device_names(spec) == names(range(2)), "nothing was ready: all left to the next"
            batches = watcher.batches.count
            await burst(range(52, 102))  # the next batch is cut too: what was left over is written
            await watcher.batches.wait_after(batches)
            assert device_names(spec) == names(range(52)), "the devices left over"
            await clock.sleeping.wait()
            clock.advance(0.1)  # quiet
            await watcher.idle()
            assert device_names(spec) == names(range(102)), "the rest"

    run(scenario())


def test_a_removal_announced_before_sysfs_drops_the_device_still_removes_it(tmp_path: Path) -> None:
    """The kernel (and umockdev) send ``remove`` before the device's directory is deleted: the
    watcher takes the device as gone, at once and when the removal comes within a burst."""
    watcher, source, clock, spec = setup(tmp_path)

    def unplug(i: int) -> None:  # the event only: the source still has the device
        device = port(i)
        watcher._on_uevent(
            UdevEvent("remove", "tty", device.sys_name, device.devnode, device.sys_path), frozenset({KIND})
        )

    async def scenario() -> None:
        async with running(watcher):
            clock.advance(1.0)
            plug(watcher, source, range(1, 4))  # one batch, at once
            await watcher.idle()
            assert device_names(spec) == names(range(4))
            read = len(source.lookups)
            clock.advance(1.0)
            unplug(1)  # the leading edge
            await watcher.idle()
            assert device_names(spec) == names(range(4)) - {"ttyUSB1"}, "removed at once"
            unplug(2)  # gathered, and read ahead
            plug(watcher, source, range(4, 6))
            await clock.sleeping.wait()
            clock.advance(0.1)
            await watcher.idle()
            assert device_names(spec) == {"ttyUSB0", "ttyUSB3", "ttyUSB4", "ttyUSB5"}, "burst"
            assert port(1).sys_path not in source.lookups[read:]
            assert port(2).sys_path not in source.lookups[read:]

    run(scenario())


def test_the_watcher_is_not_idle_while_a_released_batch_waits_for_its_reading_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher, source, clock, spec = setup(tmp_path)
    reading, resume = threading.Event(), threading.Event()
    read_ahead = watcher.work.read_ahead

    def slow(events: Any) -> None:
        reading.set()
        resume.wait(60)
        read_ahead(events)

    async def scenario() -> None:
        async with running(watcher):
            clock.advance(1.0)
            plug(watcher, source, range(1, 2))
            await watcher.idle()
            monkeypatch.setattr(watcher.work, "read_ahead", slow)
            plug(watcher, source, range(2, 4))  # gathered, and being read ahead
            try:
                await eventually(reading.is_set, "read ahead")
                clock.advance(0.1)  # quiet: released, and waiting for what is being read ahead
                await eventually(lambda: watcher.gathering.releasing, "released")
                assert not watcher.settled()
            finally:
                resume.set()
            await watcher.idle()
            assert device_names(spec) == names(range(4))

    run(scenario())
