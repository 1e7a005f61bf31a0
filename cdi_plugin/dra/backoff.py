"""Delays between attempts at the API server: exponential, capped, with jitter; and how a loop
that keeps failing is logged.

:class:`Backoff` is the policy; :class:`Failures` counts the failures of a loop that runs for
ever (a list and watch, a publish) and forgets them once the loop has gone :attr:`reset_after`
seconds without one, as client-go's backoff manager does: a storm of failures slows the loop
down to one attempt per :attr:`Backoff.maximum`, a lone failure after a quiet hour costs little.
:class:`Outage` keeps an API server that is down for an hour from filling the log with a line
per attempt.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from cdi_plugin.wording import duration, plural

#: While a loop keeps failing, one line at most this often (seconds), besides the first.
STILL_FAILING_EVERY = 300.0


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
        server's ``Retry-After``) when that is longer, but never more than the backoff's maximum."""
        now = self.clock()
        if self.count and now - self._last > self.reset_after:
            self.count = 0
        self._last = now
        self.count += 1
        delay = self.backoff.delay(self.count - 1)
        return delay if at_least is None else max(delay, min(at_least, self.backoff.maximum))

    def reset(self) -> None:
        self.count = 0


class Outage:
    """The log lines of a loop's failures in a row: the first at ``level``, the next ones at debug
    level but for one ``still failing (N attempts, since T)`` line every ``every`` seconds, and
    one info line when the loop works again, naming how long it failed. Each line starts with
    ``what`` (the loop)."""

    def __init__(
        self,
        log: logging.Logger,
        what: str,
        *,
        level: int = logging.WARNING,
        every: float = STILL_FAILING_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log, self.what, self.level, self.every, self.clock = log, what, level, every, clock
        self.attempts = 0  # failed in a row
        self._started = self._logged = 0.0
        self._since = ""

    def failed(self, problem: str, then: str) -> None:
        """An attempt failed with ``problem``; ``then`` says what the loop does next."""
        now = self.clock()
        self.attempts += 1
        if self.attempts == 1:
            self._started = self._logged = now
            self._since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
            self.log.log(self.level, "%s: %s; %s", self.what, problem, then)
        elif now - self._logged >= self.every:
            self._logged = now
            self.log.log(
                self.level, "%s: still failing (%d attempts, since %s): %s; %s",
                self.what, self.attempts, self._since, problem, then,
            )  # fmt: skip
        else:
            self.log.debug("%s: %s; %s", self.what, problem, then)

    def recovered(self) -> None:
        """An attempt worked: the line that ends an outage, if there was one."""
        if self.attempts:
            self.log.info(
                "%s: working again after %s in %s",
                self.what, plural(self.attempts, "failed attempt"), duration(self.clock() - self._started),
            )  # fmt: skip
            self.attempts = 0
