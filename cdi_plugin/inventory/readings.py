"""When the inventory reads the spec directories: readings in a worker thread, coalesced, and
whether a change may be pending since the applied one began.

:meth:`Readings.settled` is what a caller that must not act on a stale inventory (Allocate)
awaits: it returns at once unless a change may be pending, judged without listing anything: an
event of the spec directories' watch (:meth:`Readings.watch_with`) that no reading has covered,
or one the kernel holds that the watch has not read yet, or files handed over by
:meth:`Readings.accept` not applied yet; without a watch, a directory whose stat moved. Then it
waits for a reading begun after the call to be applied.

With a watch, readings look only at the files its events named (:meth:`SpecSource.note`), and a
writer in this process (``serve --scan``) hands over the specs it has just written
(:meth:`Readings.accept`): they are applied at once, without waiting for the watch, and without
reading, parsing, validating or hashing them again (a rewrite of one of its files on the event
loop itself, before :meth:`Readings.accept` returns).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from cdi_plugin.aio.pulse import Pulse
from cdi_plugin.cdi.model import Spec
from cdi_plugin.inventory.source import SpecSource
from cdi_plugin.store.registry import Stat

#: Event loop turns a reading waits for the watch to read the events the kernel holds.
_DRAIN_TURNS = 8


class SpecWatch(Protocol):
    """A directory watch (of the spec directories, or of the host nodes' ones) as the inventory
    consults it."""

    @property
    def pulse(self) -> Pulse:
        """Fired for every event the watch has read."""

    def unread(self) -> bool:
        """True while the kernel holds events the watch has not read yet."""


class Readings:
    """The readings of ``source``; ``apply()``, called on the event loop without awaiting, applies
    the source's latest reading (after each reading, and for a hand-over taken without one)."""

    def __init__(self, source: SpecSource, apply: Callable[[], None]) -> None:
        self.source = source
        self._apply = apply
        self._watch: SpecWatch | None = None
        self._covered = -1  # the watch's pulse count when the applied reading began
        self._asked = self._done = 0  # refreshes asked for, and covered by a finished reading
        self._reader: asyncio.Future[None] | None = None
        self._reading_from = -1  # the watch's pulse count when the reading under way began
        self._reading_handed = 0
        self._noted_at = (0, 0)  # (the watch's pulse count, the source's notes) at the last reading
        self._handed = self._handed_done = 0  # :meth:`accept` calls, and those a reading applied
        self._handing: set[asyncio.Future[None]] = set()

    def watch_with(self, watch: SpecWatch) -> None:
        """Judge pending changes by this watch of the spec directories from now on; every entry it
        reports is noted in the source (:meth:`SpecSource.note`; an event it fires for without
        doing so, such as a queue overflow, makes the next reading list the directories again)."""
        self._watch = watch
        self._noted_at = (watch.pulse.count, self.source.noted)
        self.source.watched = True

    def accept(
        self, written: Mapping[Path, Spec | None], stats: Mapping[Path, Stat | None] | None = None
    ) -> None:
        """Files this process has just written into a spec directory (atomically, recorded as
        cdi-gen's): path -> the spec written, or None for a file removed. Call on the event loop.

        With ``stats`` (each file's stat just after its rename), a rewrite of a file of cdi-gen's
        is applied before this returns, nothing read (:meth:`SpecSource.take`); otherwise, or
        while a reading is under way, the files are applied in a reading begun now, which takes
        the specs as given. Either way the watch's events for the same files then find them
        unchanged."""
        idle = self._reader is None and self._handed == self._handed_done
        if stats is not None and idle and self.source.take(written, stats):
            self._apply()
            return
        self.source.give(written)
        self._handed += 1
        task = asyncio.ensure_future(self.refresh())  # readings asked for meanwhile are coalesced
        self._handing.add(task)
        task.add_done_callback(self._handing.discard)

    def pending(self) -> bool:
        """True when the spec directories may have changed since the applied reading began (O(1))."""
        if self._handed != self._handed_done:
            return True
        watch = self._watch
        if watch is not None:
            return watch.pulse.count != self._covered or watch.unread()
        return self.source.moved()

    async def settled(self) -> None:
        """Return once every change made to the spec directories before the call is applied.

        Nothing pending, it returns without yielding to the event loop. An event the loop has
        read from the watch's descriptor is handled by the watch in the next loop turn; a caller
        that is itself answering a request (Allocate) runs turns after the one in which the
        request arrived, so an event of a change made before the request was sent has been
        handled by then, and one the kernel still holds is seen as unread."""
        if not self.pending():
            return
        watch = self._watch
        reader = self._reader
        # No event since the reading under way began: it covers every change made so far.
        covering = (
            watch is not None
            and self._reading_from == watch.pulse.count
            and not watch.unread()
            and self._reading_handed == self._handed
        )
        if reader is not None and covering:
            await asyncio.shield(reader)
        else:
            await self.refresh()

    async def refresh(self) -> None:
        """Read the spec directories in a worker thread and apply the reading on the loop. A call
        made while a reading is under way waits for it, then for one begun after the call."""
        self._asked += 1
        ticket = self._asked
        while self._done < ticket:
            if self._reader is None:
                self._reader = asyncio.ensure_future(self._read())
            await asyncio.shield(self._reader)

    async def _read(self) -> None:
        covers = self._asked
        watch = self._watch
        if watch is not None:
            # Let the watch handle what the kernel holds (its events name the files): the loop
            # reads the descriptor in one turn, the watch handles what was read in the next.
            for _ in range(_DRAIN_TURNS):
                if not watch.unread():
                    break
                await asyncio.sleep(0)
            await asyncio.sleep(0)
        count = self._reading_from = watch.pulse.count if watch is not None else -1
        handed = self._reading_handed = self._handed
        if watch is not None:
            noted = self.source.noted
            if count - self._noted_at[0] != noted - self._noted_at[1] or watch.unread():
                self.source.note_all()  # an event that named no file, or not read yet: look at everything
            self._noted_at = (count, noted)
        unsettled = self.source.unsettled
        try:
            await asyncio.to_thread(self.source.current)
            if self.source.unsettled == unsettled:  # else the directories kept changing: still pending
                self._covered = count
                self._handed_done = max(self._handed_done, handed)
            self._apply()
        finally:
            self._done = max(self._done, covers)
            self._reader = None
