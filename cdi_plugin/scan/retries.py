"""Retrying the watcher's failed batches: a growing delay (1 s up to a minute), each new error
logged once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

RETRY_FIRST = 1.0
RETRY_MAX = 60.0


class Retries:
    """``add`` is called with the kinds to rescan once a retry is due."""

    def __init__(self, add: Callable[..., None]) -> None:
        self._add = add
        self._keys: set[str] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._delay = RETRY_FIRST
        self._last_error = ""
        self._failing: set[str] = set()

    @property
    def pending(self) -> bool:
        """A retry waits for its time."""
        return self._handle is not None

    def failed(self, keys: set[str], scope: set[str] | None, message: str) -> None:
        what = "every class" if scope is None else ", ".join(sorted(scope))
        delay = self._delay
        level = logging.ERROR if message != self._last_error else logging.DEBUG
        log.log(level, "rescan of %s failed: %s; retrying in %gs", what, message, delay)
        self._last_error = message
        self._keys |= keys
        self._failing |= keys
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_later(delay, self._retry)
            self._delay = min(delay * 2, RETRY_MAX)

    def succeeded(self, keys: set[str], everything: str) -> None:
        """A batch of ``keys`` went through; rescans succeed again once every key that failed has
        (``everything``, the key of a rescan of every class, covers them all): one class written
        while a rescan of every class keeps failing is no recovery."""
        self._failing = set() if everything in keys else self._failing - keys
        if self._failing:
            return
        self._delay = RETRY_FIRST
        if self._last_error:
            log.info("rescans succeed again")
            self._last_error = ""

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _retry(self) -> None:
        self._handle = None
        keys, self._keys = self._keys, set()
        self._add(*keys)
