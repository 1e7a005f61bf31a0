"""A failure state that lasts, logged without flooding: the long-running programs retry every few
seconds, and a line per retry on every node of a cluster hides the line that matters.

:class:`Recurring` follows one condition (a registration the kubelet refuses, a spec directory
that cannot be read...). Its first occurrence is logged as it is; the same message again is
logged at debug level only, and at its own level at most once every :data:`SUMMARY_EVERY`
seconds, as ``still <message> (<n> times since <when>, for <how long>)``; a different message
(a new reason) is logged at once; and when the condition ends, one line says so:
``recovered after <how long> (<n> times since <when>): <message>``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from cdi_plugin.wording import plural

#: A condition that lasts is said again at most this often (seconds).
SUMMARY_EVERY = 300.0


def duration(seconds: float) -> str:
    """``4.2 s``, ``12 s``, ``5.0 min``, ``3.5 h``: how long a condition lasted, for a message."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _when(wall: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(wall))


class Recurring:
    """One condition's log lines (module docstring). ``every`` overrides :data:`SUMMARY_EVERY`
    (read at each occurrence); ``extra`` is passed to every record and ``prefix`` (``resource: ``)
    starts every line; ``clock`` is monotonic.
    Safe to call from several threads."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        every: float | None = None,
        extra: Mapping[str, object] | None = None,
        prefix: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger, self._every, self._extra, self._clock = logger, every, extra, clock
        self._prefix = prefix
        self._lock = threading.Lock()
        self.message: str | None = None
        self.count = 0
        self._since = self._said = 0.0
        self._since_wall = 0.0

    def __bool__(self) -> bool:
        """Whether the condition holds (reported and not recovered since)."""
        return self.message is not None

    def due(self) -> float:
        """Seconds until a report of the same message would be said again (0: now)."""
        every = SUMMARY_EVERY if self._every is None else self._every
        return max(0.0, self._said + every - self._clock()) if self else 0.0

    def report(self, level: int, message: str, detail: str = "") -> None:
        """The condition ``message`` holds (again). ``detail`` (a retry delay, say) is appended to
        a line logged in full but does not tell one condition from another."""
        now = self._clock()
        with self._lock:
            if message != self.message:
                self.message, self.count = message, 1
                self._since = self._said = now
                self._since_wall = time.time()
                line = message + detail
            else:
                self.count += 1
                if self.due() > 0:
                    level, line = logging.DEBUG, message + detail
                else:
                    self._said = now
                    line = f"still {message} ({self._tally()}, for {duration(now - self._since)})"
        self._logger.log(level, "%s%s", self._prefix, line, extra=self._extra, stacklevel=2)

    def recovered(self, level: int = logging.INFO) -> bool:
        """The condition ended: say so, once, with how long it lasted; False if it did not hold."""
        now = self._clock()
        with self._lock:
            message, self.message = self.message, None
            if message is None:
                return False
            lasted, tally = duration(now - self._since), self._tally()
        self._logger.log(
            level,
            "%srecovered after %s (%s): %s",
            self._prefix,
            lasted,
            tally,
            message,
            extra=self._extra,
            stacklevel=2,
        )
        return True

    def _tally(self) -> str:
        return f"{plural(self.count, 'time')} since {_when(self._since_wall)}"
