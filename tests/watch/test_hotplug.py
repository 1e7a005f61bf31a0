"""Real hot-plug: loop devices created and destroyed through /dev/loop-control make the kernel emit
real add/remove uevents, and writing ``change`` to their uevent file makes real storms.

Other processes on the host create and remove devices too (tests/stress.sh does so on purpose):
the tests look only at the events of the loop devices they create, and tolerate any other."""

from __future__ import annotations

import asyncio
import logging
import select
import time
from pathlib import Path

import pytest

from cdi_plugin.aio.coalesce import Coalescer
from cdi_plugin.discovery.model import UdevEvent
from cdi_plugin.discovery.udev import UdevMonitor, UdevSource, trigger_change
from cdi_plugin.scan.probe import check_delivery
from cdi_plugin.scan.uevents import PER_WAKEUP
from cdi_plugin.scan.watcher import Watcher
from tests.aio.clock import ManualClock
from tests.deviceplugin.helpers import eventually, run
from tests.watch.helpers import Hearing, device_names, running, watch_options
from tests.watch.loops import AVAILABLE, Loops, free_numbers, loop_class, storm, sys_path

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not AVAILABLE, reason="needs root and /dev/loop-control (CI runs as root)"),
]

SPEC = "cdi-plugin.io-loop.json"


def collect(monitor: UdevMonitor, n: int, wanted: int, timeout: float = 60.0) -> list[UdevEvent]:
    """Read events until ``wanted`` of them are loop device ``n``'s (AssertionError after ``timeout``);
    returns every event read, those of other devices too."""
    events: list[UdevEvent] = []
    deadline = time.monotonic() + timeout
    while len(of(n, events)) < wanted:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{len(of(n, events))} of {wanted} events of loop{n} within {timeout}s"
        select.select([monitor.fileno()], [], [], remaining)
        got, lost = monitor.receive(1000)
        assert not lost
        events += got
    return events


def of(n: int, events: list[UdevEvent]) -> list[UdevEvent]:
    return [e for e in events if e.sys_name == f"loop{n}"]


def test_the_monitor_delivers_real_add_and_remove_events_of_its_subsystems_only() -> None:
    (n,) = free_numbers(1)
    monitor = UdevMonitor(["block"], "kernel")
    monitor.start()
    try:
        with Loops() as loops:
            loops.add(n)
            trigger_change("/sys/devices/virtual/misc/fuse")  # misc: filtered out
            loops.remove(n)
            events = collect(monitor, n, 2)  # the fuse event came between the two, if at all
    finally:
        monitor.close()
    assert of(n, events) == [
        UdevEvent("add", "block", f"loop{n}", f"/dev/loop{n}", str(sys_path(n))),
        UdevEvent("remove", "block", f"loop{n}", f"/dev/loop{n}", str(sys_path(n))),
    ]
    assert {e.subsystem for e in events} == {"block"}


def test_the_monitor_reads_in_slices_and_reports_an_overflow() -> None:
    (n,) = free_numbers(1)
    sliced = UdevMonitor(["block"], "kernel")
    small = UdevMonitor(["block"], "kernel", buffer_bytes=64 * 1024)
    sliced.start()
    small.start()
    try:
        with Loops() as loops:
            loops.add(n)
            storm(n, 10_000)  # nothing reads meanwhile
            first, lost = sliced.receive(100)
            assert len(first) == 100, "at most the limit per call"
            assert not lost
            rest = collect(sliced, n, 10_001 - len(of(n, first)))  # the large buffer kept every event
            assert [e.action for e in of(n, first + rest)] == ["add"] + ["change"] * 10_000
            _, lost = small.receive(100_000)
            assert lost, "the small buffer overflowed: the caller learns that events were lost"
    finally:
        sliced.close()
        small.close()


def test_delivery_check_sees_its_own_uevent() -> None:
    assert run(check_delivery("kernel", timeout=60)) is True


def test_loop_devices_added_and_removed_update_the_spec(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = free_numbers(2)
    config = tmp_path / "config.yaml"
    config.write_text(loop_class(a, b))
    out = tmp_path / "out"
    caplog.set_level(logging.INFO, "cdi_plugin")

    async def scenario() -> None:
        async with running(Watcher(watch_options(out, config))):
            assert not (out / SPEC).exists()
            with Loops() as loops:
                loops.add(a)
                await eventually(lambda: device_names(out / SPEC) == {f"loop{a}"}, "a added")
                loops.add(b)
                await eventually(lambda: device_names(out / SPEC) == {f"loop{a}", f"loop{b}"}, "b added")
                loops.remove(a)
                await eventually(lambda: device_names(out / SPEC) == {f"loop{b}"}, "a removed")
                loops.remove(b)
                await eventually(lambda: not (out / SPEC).exists(), "the spec of a kind without devices")

    run(scenario())
    lines = [
        m for m in caplog.messages if m.startswith(("rescanned cdi-plugin.io/", "updated cdi-plugin.io/"))
    ]
    # the first device of a kind creates its file through a rescan; the others are updated alone
    assert [line.split(" after ")[0] for line in lines] == ["rescanned cdi-plugin.io/loop"] + [
        "updated cdi-plugin.io/loop"
    ] * 3
    assert lines[0].endswith(f": wrote {SPEC}; devices added: cdi-plugin.io/loop=loop{a}")
    assert lines[1].endswith(f": wrote {SPEC}; devices added: cdi-plugin.io/loop=loop{b}")
    assert lines[2].endswith(f": wrote {SPEC}; devices removed: cdi-plugin.io/loop=loop{a}")
    assert lines[3].endswith(f": removed {SPEC}; devices removed: cdi-plugin.io/loop=loop{b}")


def flap(loops: Loops, n: int, times: int, last: str) -> None:
    """Add and remove loop device ``n`` over and over, ending with ``last`` (removing a loop device
    takes the kernel ~40 ms, so batches run between the steps)."""
    steps = [loops.add, loops.remove] if last == "add" else [loops.remove, loops.add]
    for _ in range(times):
        for step in steps:
            step(n)
    steps[0](n)


def test_a_flapping_device_ends_in_the_state_it_was_last_in(tmp_path: Path) -> None:
    anchor, n = free_numbers(2)
    config = tmp_path / "config.yaml"
    config.write_text(loop_class(anchor, n))
    out = tmp_path / "out"

    async def scenario() -> None:
        watcher = Watcher(watch_options(out, config))
        async with running(watcher):
            with Loops() as loops:
                loops.add(anchor)  # the spec stays: the flapping device is updated, not rescanned
                for last, names in (("add", {f"loop{anchor}", f"loop{n}"}), ("remove", {f"loop{anchor}"})):
                    await asyncio.to_thread(flap, loops, n, 20, last)
                    await watcher.idle()  # every event of the flapping handled: nothing later undoes it
                    assert device_names(out / SPEC) == names, last

    run(scenario())


def test_one_device_added_or_removed_is_updated_without_enumerating_the_host(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    anchor, n = free_numbers(2)
    config = tmp_path / "config.yaml"
    config.write_text(loop_class(anchor, n))
    out = tmp_path / "out"
    caplog.set_level(logging.INFO, "cdi_plugin")
    seen = []

    async def scenario() -> None:
        watcher = Watcher(watch_options(out, config), on_applied=lambda applied, specs: seen.append(specs))
        source = watcher.source
        assert isinstance(source, UdevSource)
        async with running(watcher):
            with Loops() as loops:
                loops.add(anchor)
                await watcher.idle()
                assert device_names(out / SPEC) == {f"loop{anchor}"}
                enumerations = source.enumerations
                loops.add(n)
                await watcher.idle()
                assert device_names(out / SPEC) == {f"loop{anchor}", f"loop{n}"}
                loops.remove(n)
                await watcher.idle()
                assert device_names(out / SPEC) == {f"loop{anchor}"}
                assert source.enumerations == enumerations, "no enumeration for one device"

    run(scenario())
    assert [
        sorted(d.name for d in spec.devices) for specs in seen[-2:] for spec in specs.values() if spec
    ] == [
        sorted([f"loop{anchor}", f"loop{n}"]),
        [f"loop{anchor}"],
    ]
    assert [m.split(" after ")[0] for m in caplog.messages if m.startswith("updated ")] == [
        "updated cdi-plugin.io/loop"
    ] * 2


def test_an_event_storm_is_coalesced_into_one_batch_after_the_leading_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The coalescer's clock stands still while 10 000 real uevents are read, however long the
    machine takes to read them: the first events (one wake-up's worth) go at once, and once the
    clock moves on, all the others make one batch."""
    (n,) = free_numbers(1)
    config = tmp_path / "config.yaml"
    config.write_text(loop_class(n))
    out = tmp_path / "out"
    caplog.set_level(logging.DEBUG, "cdi_plugin.scan")

    async def scenario() -> None:
        watcher = Hearing(watch_options(out, config))
        clock = ManualClock()
        options = watcher.options
        watcher.gathering.coalescer = Coalescer(
            options.quiet, options.max_delay, clock=clock, sleep=clock.sleep
        )
        async with running(watcher):
            with Loops() as loops:
                loops.add(n)
                deadline = time.monotonic() + 60
                while not watcher.settled():  # the add, and a change the kernel may send after it
                    assert time.monotonic() < deadline, "the add handled"
                    clock.advance(1.0)
                    await watcher.batches.wait_after(watcher.batches.count, 0.05)
                mtime = (out / SPEC).stat().st_mtime_ns
                clock.advance(1.0)  # a quiet spell
                seen, heard = len(caplog.records), watcher.heard[f"loop{n}"]
                await asyncio.to_thread(storm, n, 10_000)
                await eventually(lambda: watcher.heard[f"loop{n}"] - heard >= 10_000, "every event read")
                clock.advance(1.0)
                await watcher.idle()
                batches = [
                    r for r in caplog.records[seen:] if r.getMessage().startswith(("rescanned", "updated"))
                ]
                assert [r.events for r in batches][1:] == [10_000 - batches[0].events]  # type: ignore[attr-defined]
                assert 1 <= batches[0].events <= PER_WAKEUP  # type: ignore[attr-defined]
                assert (out / SPEC).stat().st_mtime_ns == mtime, "same content: not rewritten"

    run(scenario())


def test_lost_events_cause_a_full_rescan(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a, b = free_numbers(2)
    config = tmp_path / "config.yaml"
    config.write_text(loop_class(a, b))
    out = tmp_path / "out"
    caplog.set_level(logging.INFO, "cdi_plugin")

    async def scenario() -> None:
        options = watch_options(out, config, uevent_source="kernel", receive_buffer=64 * 1024)
        watcher = Watcher(options)
        async with running(watcher):
            with Loops() as loops:
                loops.add(a)
                await eventually((out / SPEC).exists, "loop added")
                await watcher.idle()
                storm(a, 10_000)  # on the event loop's thread: nothing is read meanwhile
                loops.add(b)  # its add event is among the lost ones
                await eventually(lambda: device_names(out / SPEC) == {f"loop{a}", f"loop{b}"}, "b found")

    run(scenario())
    assert (
        "uevents were lost (the monitor's receive buffer overflowed); rescanning every class"
        in caplog.messages
    )
    assert any(m.startswith("rescanned every class after ") for m in caplog.messages)


def test_a_configuration_edit_changes_which_uevents_are_heard(tmp_path: Path) -> None:
    (n,) = free_numbers(1)
    config = tmp_path / "config.yaml"
    gpu = '{vendor: example.com, class: gpu, match: {devnode: "/dev/nvidia[0-9]*"}}'
    config.write_text(f"classes:\n  - {gpu}\n")
    out = tmp_path / "out"

    async def scenario() -> None:
        watcher = Watcher(watch_options(out, config))
        async with running(watcher):
            assert watcher.targets.subsystems == set(), "no class needs uevents yet"
            tmp = config.with_name("config.new")
            tmp.write_text(loop_class(n))
            tmp.rename(config)
            await eventually(lambda: watcher.targets.subsystems == {"block"}, "the new classes are in force")
            await watcher.idle()  # the rescan after the edit is over: only a uevent can find the loop
            with Loops() as loops:
                loops.add(n)
                await eventually(lambda: device_names(out / SPEC) == {f"loop{n}"}, "heard the add")

    run(scenario())
