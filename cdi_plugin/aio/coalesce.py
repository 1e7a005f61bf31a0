"""Coalescing bursts of events into batches: the leading edge at once, then the rest together.

The first event after a quiet spell (the common case: one device plugged in) is released at once.
Events that arrive while its batch is being handled (until the consumer asks for the next
one), or within ``quiet`` seconds after that, are coalesced: such a batch is released once no new event
arrived for ``quiet`` seconds, or ``max_delay`` seconds after its first event even while events
keep coming, so a sustained storm cannot postpone the update forever (:attr:`Coalescer.cut` then
tells the consumer that the burst goes on). A burst (a USB hub with many
devices, a thousand binder nodes created at once) thus costs a handful of batches, not one per
event. Only the distinct keys of a batch are kept, so memory does not grow with the number of
events. The clock, and the sleep that waits on it, can be replaced (tests drive a batch's timing
by hand).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Coalescer(Generic[K]):
    """``leading=False`` coalesces every batch, the first event of a quiet spell included."""

    def __init__(
        self,
        quiet: float = 0.1,
        max_delay: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        *,
        leading: bool = True,
    ) -> None:
        if quiet <= 0 or max_delay < quiet:
            raise ValueError("need 0 < quiet <= max_delay")
        self.quiet = quiet
        self.max_delay = max_delay
        self.leading = leading
        self._clock = clock
        self._sleep = sleep
        self._keys: set[K] = set()
        self._first = 0.0
        self._last = 0.0
        self._events = 0
        self._free_since = -math.inf  # when the consumer, done with a batch, asked for the next
        self._released = False
        self._pending = asyncio.Event()
        #: The last batch was released by ``max_delay`` while events kept coming (a burst goes on).
        self.cut = False

    def add(self, key: K) -> None:
        """Record an event; cheap enough to call for every uevent."""
        now = self._clock()
        if not self._keys:
            self._first = now
        self._keys.add(key)
        self._last = now
        self._events += 1
        self._pending.set()

    def __len__(self) -> int:
        return len(self._keys)

    async def next_batch(self) -> tuple[frozenset[K], int]:
        """Wait for the next batch; returns its distinct keys and how many events it held."""
        if self._released:
            self._free_since = self._clock()
        while True:
            await self._pending.wait()
            self.cut = False
            if self.leading and self._first >= self._free_since + self.quiet:
                break  # the first event after a quiet spell
            deadline = min(self._last + self.quiet, self._first + self.max_delay)
            now = self._clock()
            if deadline <= now:
                self.cut = now < self._last + self.quiet
                break
            await self._sleep(deadline - now)
        keys, events = frozenset(self._keys), self._events
        self._keys.clear()
        self._events = 0
        self._pending.clear()
        self._released = True
        return keys, events
