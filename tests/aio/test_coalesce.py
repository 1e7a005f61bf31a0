"""The coalescer releases the first event of a quiet spell at once, coalesces what follows into one
batch per burst, and never releases later than max_delay into a storm.

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


def coalescer(clock: ManualClock, quiet: float = 0.05, max_delay: float = 0.5) -> Coalescer[str]:
    return Coalescer(quiet=quiet, max_delay=max_delay, clock=clock, sleep=clock.sleep)


def test_the_first_event_after_a_quiet_spell_is_released_at_once() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        c = coalescer(clock)
        batch = asyncio.create_task(c.next_batch())
        await asyncio.sleep(0)  # the consumer waits
        clock.advance(3.0)
        c.add("loop7")
        assert await batch == (frozenset({"loop7"}), 1)
        assert clock.sleeps == [], "released without waiting for the quiet period"

    run(scenario())


def test_a_burst_after_the_leading_event_is_one_batch_of_distinct_keys() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        c = coalescer(clock)
        clock.advance(1.0)
        c.add("binder0")
        assert await c.next_batch() == (frozenset({"binder0"}), 1)  # the leading edge
        # the rest of the burst arrives while the first batch is handled
        for i in range(1, 1000):
            c.add(f"binder{i % 3}")
        batch = asyncio.create_task(c.next_batch())
        await clock.sleeping.wait()
        assert not batch.done(), "events during the work wait for the quiet period"
        assert clock.sleeps == [pytest.approx(0.05)]
        clock.advance(0.05)
        keys, events = await batch
        assert keys == {"binder0", "binder1", "binder2"}
        assert events == 999
        assert len(c) == 0

    run(scenario())


def test_events_shortly_after_a_batch_are_coalesced_and_later_ones_lead_again() -> None:
    async def scenario() -> list[tuple[frozenset[str], list[float]]]:
        clock = ManualClock()
        c = coalescer(clock, quiet=0.02, max_delay=0.1)
        clock.advance(1.0)
        c.add("a")
        out = [(await c.next_batch())[0], list(clock.sleeps)]
        batch = asyncio.create_task(c.next_batch())
        await asyncio.sleep(0)
        clock.advance(0.01)  # within the window after the consumer became free
        c.add("b")
        await clock.sleeping.wait()
        clock.advance(0.02)
        out += [(await batch)[0], list(clock.sleeps)]
        batch = asyncio.create_task(c.next_batch())
        await asyncio.sleep(0)
        clock.advance(0.5)  # a quiet spell
        c.add("c")
        out += [(await batch)[0], list(clock.sleeps)]
        return [(out[i], out[i + 1]) for i in range(0, len(out), 2)]  # type: ignore[misc]

    assert run(scenario()) == [
        (frozenset({"a"}), []),
        (frozenset({"b"}), [pytest.approx(0.02)]),
        (frozenset({"c"}), [pytest.approx(0.02)]),
    ]


def test_without_the_leading_edge_the_first_event_waits_too() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        c = Coalescer[str](quiet=0.05, max_delay=0.5, clock=clock, sleep=clock.sleep, leading=False)
        clock.advance(1.0)
        c.add("a")
        batch = asyncio.create_task(c.next_batch())
        await clock.sleeping.wait()
        assert not batch.done()
        clock.advance(0.05)
        assert await batch == (frozenset({"a"}), 1)

    run(scenario())


@pytest.mark.parametrize("leading", [True, False])
def test_a_storm_cannot_postpone_the_batch_past_max_delay(leading: bool) -> None:
    tick = 0  # the time, in 1/64 s (exact in binary: no rounding in the coalescer's arithmetic)
    c: Coalescer[int]

    async def storm_sleep(delay: float) -> None:
        """While the coalescer waits, an event arrives every tick: the quiet period never comes."""
        nonlocal tick
        assert tick < 640, "the storm postponed the batch for 10 s"
        end = tick + max(1, round(delay * 64))
        while tick < end:
            tick += 1
            c.add(tick)

    c = Coalescer(
        quiet=4 / 64, max_delay=16 / 64, clock=lambda: tick / 64, sleep=storm_sleep, leading=leading
    )

    async def scenario() -> list[tuple[float, int]]:
        nonlocal tick
        released = []
        for _ in range(3):
            tick += 1  # the storm goes on between batches too
            c.add(tick)
            first = tick
            _, events = await c.next_batch()
            released.append(((tick - first) / 64, events))
        return released

    # the first event leads (nothing came before it); then the storm never leaves a quiet spell:
    # each batch comes max_delay after its first event, with the 17 events of that quarter second
    first = [(0.0, 1)] if leading else [(0.25, 17)]
    assert run(scenario()) == first + [(0.25, 17)] * 2


def test_cut_says_whether_max_delay_released_a_batch_while_events_kept_coming() -> None:
    async def scenario() -> list[bool]:
        clock = ManualClock()
        c = coalescer(clock, quiet=0.05, max_delay=0.2)
        clock.advance(1.0)
        c.add("a")
        await c.next_batch()  # the leading edge
        cuts = [c.cut]
        for _ in range(2):
            c.add("b")
            batch = asyncio.create_task(c.next_batch())
            for _ in range(5):  # an event every 40 ms: the quiet period never comes
                await clock.sleeping.wait()
                clock.advance(0.04)
                c.add("b")
            await batch
            cuts.append(c.cut)
        c.add("c")
        batch = asyncio.create_task(c.next_batch())
        await clock.sleeping.wait()
        clock.advance(0.05)  # quiet: the burst is over
        await batch
        return [*cuts, c.cut]

    assert run(scenario()) == [False, True, True, False]
