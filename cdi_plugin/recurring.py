"""A failure state that lasts, logged without flooding: the long-running programs retry every few
seconds, and a line per retry on every node of a cluster hides the line that matters.

:class:`Recurring` follows one condition (a registration the kubelet refuses, a spec directory
that cannot be read...). Its first occurrence is logged as it is; the same message again is
logged at debug level only, and at its own level at most once every :data:`SUMMARY_EVERY`
seconds, as ``still <message> (<n> times since <when>, for <how long>)``; a different message
(a new reason) is logged at once, while one that comes back before the condition ends (two
reasons in turn) is summarised as if it had never stopped; and when the condition ends, one
line says so: ``recovered after <how long> (<n> times since <when>): <message>``.

A reason that changes at every attempt (a counter, an address in it) is not a new line each
time: after :data:`REASONS_SAID` reasons of one condition said in full, a further new reason is
logged at debug level only, and counted in a summary said at most every :data:`SUMMARY_EVERY`
seconds, ``still <message> (<n> new reasons since <when>, logged at debug level)``; those
not counted in a line yet are counted in the next summary of a reason, or in the ``recovered``
line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cdi_plugin.wording import plural

#: A condition that lasts is said again at most this often (seconds).
SUMMARY_EVERY = 300.0
#: The reasons of a condition remembered while it lasts (those reported last).
REASONS_KEPT = 8
#: The new reasons of a condition said in full; the next ones are summarised.
REASONS_SAID = 5


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


@dataclass(slots=True)
class _Reason:
    """One message of a condition: since when and how often it was reported, when last said."""

    since: float
    since_wall: float
    said: float
    count: int = 0

    def tally(self) -> str:
        return f"{plural(self.count, 'time')} since {_when(self.since_wall)}"


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
        #: The message reported last, while the condition holds.
        self.message: str | None = None
        #: The condition's reasons, the one reported last at the end.
        self._reasons: dict[str, _Reason] = {}
        #: The new reasons said in full; when a line was last said at the condition's level; the
        #: new reasons logged at debug level since, and since when (wall clock).
        self._new_said = 0
        self._said = 0.0
        self._quiet = 0
        self._quiet_since = 0.0

    def __bool__(self) -> bool:
        """Whether the condition holds (reported and not recovered since)."""
        return self.message is not None

    def due(self) -> float:
        """Seconds until a report of the same message would be said again (0: now)."""
        with self._lock:
            return self._due(self._clock())

    def _interval(self) -> float:
        return SUMMARY_EVERY if self._every is None else self._every

    def _due(self, now: float) -> float:
        reason = self._reasons.get(self.message) if self.message is not None else None
        if reason is None:
            return 0.0
        return max(0.0, reason.said + self._interval() - now)

    def report(self, level: int, message: str, detail: str = "") -> None:
        """The condition ``message`` holds (again). ``detail`` (a retry delay, say) is appended to
        a line logged in full but does not tell one reason from another."""
        now = self._clock()
        with self._lock:
            self.message = message
            reason = self._reasons.pop(message, None)
            fresh = reason is None
            if reason is None:
                reason = _Reason(now, time.time(), now)
            self._reasons[message] = reason  # the one reported last at the end
            if len(self._reasons) > REASONS_KEPT:
                del self._reasons[next(iter(self._reasons))]
            reason.count += 1
            line: str | None = None  # None: logged at debug level only
            if fresh and self._new_said < REASONS_SAID:
                self._new_said += 1
                line = message + detail
            elif fresh:
                self._quiet += 1
                self._quiet_since = self._quiet_since or reason.since_wall
                if now >= self._said + self._interval():
                    line = f"still {message} ({plural(self._quiet, 'new reason')} since "
                    line += f"{_when(self._quiet_since)}, logged at debug level)"
                    self._quiet, self._quiet_since = 0, 0.0
            elif self._due(now) == 0:
                reason.said = now
                line = f"still {message} ({reason.tally()}, for {duration(now - reason.since)}"
                line += f"{self._take_quiet()})"
            if line is not None:
                self._said = now
            else:
                level, line = logging.DEBUG, message + detail
        self._logger.log(level, "%s%s", self._prefix, line, extra=self._extra, stacklevel=2)

    def _take_quiet(self) -> str:
        """``; <n> new reasons since <when> logged at debug level`` for the new reasons not
        counted in a line yet (then none are), or nothing."""
        if not self._quiet:
            return ""
        note = f"; {plural(self._quiet, 'new reason')} since {_when(self._quiet_since)} logged at debug level"
        self._quiet, self._quiet_since = 0, 0.0
        return note

    def recovered(self, level: int = logging.INFO) -> bool:
        """The condition ended: say so, once, with how long its last reason lasted; False if it
        did not hold."""
        now = self._clock()
        with self._lock:
            message, self.message = self.message, None
            if message is None:
                return False
            reason = self._reasons[message]
            self._reasons.clear()
            lasted, tally = duration(now - reason.since), reason.tally() + self._take_quiet()
            self._new_said = 0
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
