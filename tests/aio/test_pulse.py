"""Pulse: waiters learn of every fire after the count they saw, and nothing is lost in between."""

from __future__ import annotations

import asyncio

from cdi_plugin.aio.pulse import Pulse
from tests.deviceplugin.helpers import run


def test_a_fire_before_the_wait_is_not_lost() -> None:
    async def scenario() -> None:
        pulse = Pulse()
        seen = pulse.count
        pulse.fire()
        assert await pulse.wait_after(seen) is True
        assert pulse.count == seen + 1

    run(scenario())


def test_every_waiter_wakes_on_one_fire() -> None:
    async def scenario() -> list[bool]:
        pulse = Pulse()
        waiters = [asyncio.create_task(pulse.wait_after(pulse.count)) for _ in range(3)]
        await asyncio.wait(waiters, timeout=0)  # they are waiting now
        assert not any(w.done() for w in waiters)
        pulse.fire()
        return list(await asyncio.gather(*waiters))

    assert run(scenario()) == [True, True, True]


def test_without_a_fire_a_wait_that_may_not_wait_says_so() -> None:
    async def scenario() -> bool:
        pulse = Pulse()
        return await pulse.wait_after(pulse.count, timeout=0)

    assert run(scenario()) is False


def test_settle_returns_the_count_reached_by_the_burst() -> None:
    async def scenario() -> int:
        pulse = Pulse()
        for _ in range(5):
            pulse.fire()
        return await pulse.settle(0, quiet=0.05, longest=0)  # no time left to wait for more

    assert run(scenario()) == 5


def test_a_cancel_arriving_with_a_fire_is_not_swallowed() -> None:
    """A stop cancels a task waiting on a pulse even when the pulse fires in the same loop turn
    (``asyncio.wait_for`` of Python 3.11 lost that cancellation, so a stop could hang)."""

    async def scenario() -> list[bool]:
        pulse = Pulse()
        cancelled = []
        for timeout in (None, 10.0):
            waiter = asyncio.create_task(pulse.wait_after(pulse.count, timeout))
            for _ in range(3):
                await asyncio.sleep(0)  # the waiter is waiting
            pulse.fire()  # the waiter is woken, and cancelled before it runs again
            waiter.cancel()
            await asyncio.wait([waiter])
            cancelled.append(waiter.cancelled())
        return cancelled

    assert run(scenario()) == [True, True]
