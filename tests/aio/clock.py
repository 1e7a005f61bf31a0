"""A clock that moves only when a test says so, for code that takes a clock and a sleep."""

from __future__ import annotations

import asyncio


class ManualClock:
    """``clock()`` is :attr:`now`; ``await clock.sleep(d)`` returns once :meth:`advance` moved the
    time ``d`` seconds on. Every sleep requested is kept in :attr:`sleeps`; :attr:`sleeping` is set
    while a sleep waits for the time to move."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.sleeps: list[float] = []
        self._moved = asyncio.Event()
        self.sleeping = asyncio.Event()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        deadline = self.now + delay
        while self.now < deadline:
            self.sleeping.set()
            await self._moved.wait()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.sleeping.clear()
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()
