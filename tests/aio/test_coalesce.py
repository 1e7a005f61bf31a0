"""The coalescer releases one batch per burst, and never later than max_delay into a storm.

The coalescer's clock and sleep are driven by the tests: nothing here depends on how fast the
machine is.
"""

from __future__ import annotations

import asyncio

import pytest

from cdi_plugin.aio.coalesce import Coalescer
from tests.aio.clock import ManualClock
from tests.deviceplugin.helpers import run


def test_rejects_inconsistent_windows() -> None:
    with pytest.raises(ValueError, match="quiet"):
        Coalescer(quiet=0.3, max_delay=0.1)


def test_a_burst_is_one_batch_of_distinct_keys_released_after_the_quiet_period() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        coalescer: Coalescer[str] = Coalescer(quiet=0.05, max_delay=0.5, clock=clock, sleep=clock.sleep)
        for i in range(1000):
            coalescer.add(f"binder{i % 3}")
        batch = asyncio.create_task(coalescer.next_batch())
        await clock.sleeping.wait()
        assert not batch.done(), "not released at the first event"
        assert clock.sleeps == [0.05]
        clock.advance(0.05)
        keys, events = await batch
        assert keys == {"binder0", "binder1", "binder2"}
        assert events == 1000
        assert len(coalescer) == 0

    run(scenario())


def test_a_storm_cannot_postpone_the_batch_past_max_delay() -> None:
    tick = 0  # the time, in 1/64 s (exact in binary: no rounding in the coalescer's arithmetic)
    coalescer: Coalescer[int]

    async def storm_sleep(delay: float) -> None:
        """While the coalescer waits, an event arrives every tick: the quiet period never comes."""
        nonlocal tick
        assert tick < 640, "the storm postponed the batch for 10 s"
        end = tick + max(1, round(delay * 64))
        while tick < end:
            tick += 1
            coalescer.add(tick)

    coalescer = Coalescer(quiet=4 / 64, max_delay=16 / 64, clock=lambda: tick / 64, sleep=storm_sleep)

    async def scenario() -> list[tuple[float, int]]:
        nonlocal tick
        released = []
        for _ in range(3):
            tick += 1  # the storm goes on between batches too
            coalescer.add(tick)
            first = tick
            _, events = await coalescer.next_batch()
            released.append(((tick - first) / 64, events))
        return released

    # each batch comes max_delay after its first event, with the 17 events of that quarter second
    assert run(scenario()) == [(0.25, 17)] * 3


def test_events_after_a_batch_start_a_new_one() -> None:
    async def scenario() -> list[frozenset[str]]:
        clock = ManualClock()
        coalescer: Coalescer[str] = Coalescer(quiet=0.02, max_delay=0.1, clock=clock, sleep=clock.sleep)
        batches = []
        for key in ("a", "b"):
            coalescer.add(key)
            batch = asyncio.create_task(coalescer.next_batch())
            await clock.sleeping.wait()
            clock.advance(0.02)
            batches.append((await batch)[0])
        return batches

    assert run(scenario()) == [frozenset({"a"}), frozenset({"b"})]
