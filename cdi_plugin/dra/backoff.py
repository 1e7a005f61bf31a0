"""Delays between attempts at the API server: exponential, capped, with jitter.

:class:`Backoff` is the policy; :class:`Failures` counts the failures of a loop that runs for
ever (a list and watch, a publish) and forgets them once the loop has gone :attr:`reset_after`
seconds without one, as client-go's backoff manager does: a storm of failures slows the loop
down to one attempt per :attr:`Backoff.maximum`, a lone failure after a quiet hour costs little.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """``initial`` doubling up to ``maximum``, each delay with +-20 % jitter; ``attempts`` bounds the
    attempts of one request."""

    initial: float = 0.2
    maximum: float = 10.0
    attempts: int = 6

    def delay(self, attempt: int) -> float:
        return min(self.maximum, self.initial * 2.0 ** min(attempt, 64)) * random.uniform(0.8, 1.2)


class Failures:
    """The delay before the next attempt of a loop, growing with each failure in a row."""

    def __init__(
        self, backoff: Backoff, reset_after: float = 120.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.backoff = backoff
        self.reset_after = reset_after
        self.clock = clock
        self.count = 0
        self._last = 0.0

    def next_delay(self, at_least: float | None = None) -> float:
        """Count a failure; the delay to wait before trying again: ``at_least`` seconds (the
        server's ``Retry-After``, up to the backoff's maximum) when that is longer, with up to 20 %
        more as jitter: the nodes an API server put off together do not come back together."""
        now = self.clock()
        if self.count and now - self._last > self.reset_after:
            self.count = 0
        self._last = now
        self.count += 1
        delay = self.backoff.delay(self.count - 1)
        if at_least is None:
            return delay
        return max(delay, min(at_least, self.backoff.maximum) * random.uniform(1.0, 1.2))

    def reset(self) -> None:
        self.count = 0
