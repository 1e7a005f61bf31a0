"""The coalescer releases one batch per burst, and never later than max_delay into a storm."""

from __future__ import annotations

import asyncio
import time

import pytest

from cdi_plugin.aio.coalesce import Coalescer


def test_rejects_inconsistent_windows() -> None:
    with pytest.raises(ValueError, match="quiet"):
        Coalescer(quiet=0.3, max_delay=0.1)


async def _burst_then_wait(coalescer: Coalescer[str]) -> tuple[frozenset[str], int, float]:
    start = time.monotonic()
    for i in range(1000):
        coalescer.add(f"binder{i % 3}")
    keys, events = await coalescer.next_batch()
    return keys, events, time.monotonic() - start


def test_a_burst_is_one_batch_of_distinct_keys() -> None:
    coalescer: Coalescer[str] = Coalescer(quiet=0.05, max_delay=0.5)
    keys, events, waited = asyncio.run(_burst_then_wait(coalescer))
    assert keys == {"binder0", "binder1", "binder2"}
    assert events == 1000
    assert len(coalescer) == 0
    assert waited >= 0.05  # waited for the quiet period, not released at the first event


def test_a_storm_cannot_postpone_the_batch_past_max_delay() -> None:
    async def scenario() -> list[float]:
        coalescer: Coalescer[int] = Coalescer(quiet=0.05, max_delay=0.2)
        start = time.monotonic()
        released: list[float] = []

        async def storm() -> None:
            while time.monotonic() - start < 1.0:  # an event every 10 ms: the quiet period never comes
                coalescer.add(1)
                await asyncio.sleep(0.01)

        producer = asyncio.create_task(storm())
        while len(released) < 3:
            await coalescer.next_batch()
            released.append(time.monotonic() - start)
        producer.cancel()
        return released

    released = asyncio.run(scenario())
    # Each batch comes about max_delay after the previous one, long before the storm ends at 1 s.
    assert released[0] < 0.6
    assert released[2] < 0.95


def test_events_after_a_batch_start_a_new_one() -> None:
    async def scenario() -> list[frozenset[str]]:
        coalescer: Coalescer[str] = Coalescer(quiet=0.02, max_delay=0.1)
        coalescer.add("a")
        first, _ = await coalescer.next_batch()
        coalescer.add("b")
        second, _ = await coalescer.next_batch()
        return [first, second]

    assert asyncio.run(scenario()) == [frozenset({"a"}), frozenset({"b"})]
