"""A counter that asyncio tasks can wait on: "tell me when anything happened after N"."""

from __future__ import annotations

import asyncio


class Pulse:
    """Counts events; many waiters, no backlog, nothing lost between reading the count and waiting."""

    __slots__ = ("_event", "count")

    def __init__(self) -> None:
        self.count = 0
        self._event = asyncio.Event()

    def fire(self) -> None:
        self.count += 1
        self._event.set()
        self._event = asyncio.Event()

    async def wait_after(self, seen: int, timeout: float | None = None) -> bool:
        """Wait until the count differs from ``seen``; False if ``timeout`` seconds passed first."""
        while self.count == seen:
            try:
                async with asyncio.timeout(timeout):  # unlike wait_for in 3.11, never swallows a cancel
                    await self._event.wait()
            except TimeoutError:
                return self.count != seen
        return True

    async def settle(self, seen: int, quiet: float, longest: float) -> int:
        """After the count moved past ``seen``, wait until it stays still for ``quiet`` seconds
        (at most ``longest`` in all), so a burst of events is handled once; returns the count."""
        await self.wait_after(seen)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + longest
        while True:
            now_seen = self.count
            remaining = min(quiet, deadline - loop.time())
            if remaining <= 0 or not await self.wait_after(now_seen, remaining):
                return self.count
