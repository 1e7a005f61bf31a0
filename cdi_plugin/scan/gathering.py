"""The watcher's next batch while it gathers: what its events touch, and its devices read ahead.

Every trigger adds what it touches to a :class:`~cdi_plugin.aio.coalesce.Coalescer`: kinds to
rescan, or a device event. Each device event is numbered; the batch is given the number of each
device's last event and the devices whose last event was ``remove`` (gone, even while sysfs still
shows them: the kernel announces a removal before it deletes the directory). While the batch
gathers (a burst), its devices are read ahead in a worker thread, a few at a time
(:meth:`~.updates.BatchWork.read_ahead`), so that little is left to do once it is released. A
batch that ``max_delay`` releases while the burst goes on leaves the devices not read ahead yet to
the next batch, where they are read ahead in turn: the batch writes what is ready. A device is left
over once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from cdi_plugin.aio.coalesce import Coalescer
from cdi_plugin.scan.updates import BatchWork, DeviceEvent

#: Devices read ahead per trip to the worker thread, while a batch gathers.
READ_AHEAD = 16

#: What the coalescer gathers: kinds to rescan, or a device to update.
Key = frozenset[str] | DeviceEvent


@dataclass(frozen=True, slots=True)
class Batch:
    keys: frozenset[Key]
    events: int
    #: The number of each device's last event (by sys path).
    numbers: Mapping[str, int]
    #: The devices whose last event was ``remove``.
    gone: AbstractSet[str]


class Gathering:
    def __init__(self, work: BatchWork, quiet: float, max_delay: float) -> None:
        self.work = work
        self.coalescer: Coalescer[Key] = Coalescer(quiet, max_delay)
        #: A batch was released and is being handed over (waiting for what is being read ahead).
        self.releasing = False
        self._number = 0  # of the last device event
        self._numbers: dict[str, int] = {}  # of each device's last event, in this batch
        self._gone: set[str] = set()
        self._unread: list[DeviceEvent] = []  # device events of this batch not read ahead yet
        self._seen: set[DeviceEvent] = set()
        self._more = asyncio.Event()  # set when _unread grows
        self._gathering = False  # its devices may be read ahead
        self._reading = False  # some are being read ahead in a worker thread
        self._deferred: set[DeviceEvent] = set()  # left to this batch by the one before

    def __len__(self) -> int:
        """The distinct keys gathered so far."""
        return len(self.coalescer)

    def add(self, key: frozenset[str]) -> None:
        self.coalescer.add(key)

    def device(self, event: DeviceEvent, removed: bool) -> None:
        """A uevent about one device (released at once after a quiet spell)."""
        self._number += 1
        self._numbers[event.sys_path] = self._number
        if removed:
            self._gone.add(event.sys_path)
        else:
            self._gone.discard(event.sys_path)
        self.coalescer.add(event)
        self._unread_add(event)

    async def next_batch(self) -> Batch:
        """Wait for the next batch, reading its devices ahead meanwhile."""
        self._gathering = True
        ahead = asyncio.ensure_future(self._read_ahead())
        try:
            keys, events = await self.coalescer.next_batch()
        except asyncio.CancelledError:
            ahead.cancel()
            raise
        self._gathering = False
        self.releasing = True
        try:
            numbers, self._numbers = self._numbers, {}  # from here on, events are the next batch's
            gone, self._gone = self._gone, set()
            self._unread, self._seen = [], set()
            if self._reading:
                await ahead  # the devices being read ahead (at most READ_AHEAD)
            else:
                ahead.cancel()  # it waits for events: nothing to wait for
            deferred, self._deferred = self._deferred, set()
            if self.coalescer.cut:
                keys = self._defer(keys, numbers, gone, deferred)
        finally:
            self.releasing = False
        return Batch(keys, events, numbers, gone)

    def _unread_add(self, event: DeviceEvent) -> None:
        if event not in self._seen:
            self._seen.add(event)
            self._unread.append(event)
            self._more.set()

    def _defer(
        self,
        keys: frozenset[Key],
        numbers: Mapping[str, int],
        gone: AbstractSet[str],
        deferred: set[DeviceEvent],
    ) -> frozenset[Key]:
        """Of a batch released while a burst goes on, leave the devices not read ahead yet to the
        next batch (those in ``deferred`` were left over by the batch before)."""
        live, ahead = self.work.live, self.work.ahead
        later = {
            key
            for key in keys
            if isinstance(key, DeviceEvent)
            and key not in deferred
            and any(
                kind in live
                and ((a := ahead.get((kind, key.sys_path))) is None or a.number != numbers.get(key.sys_path))
                for kind in key.kinds
            )
        }
        for key in later:
            self.coalescer.add(key)
            if key.sys_path not in self._numbers:  # unless an event came since
                self._numbers[key.sys_path] = numbers[key.sys_path]
                if key.sys_path in gone:
                    self._gone.add(key.sys_path)
            self._unread_add(key)
        self._deferred = later
        return keys - later

    async def _read_ahead(self) -> None:
        """While the batch gathers, read its devices ahead, a few at a time in a worker thread."""
        while self._gathering:
            if self._unread and self.work.live:
                chunk, self._unread = self._unread[:READ_AHEAD], self._unread[READ_AHEAD:]
                numbered = [
                    (event, self._numbers[event.sys_path], event.sys_path in self._gone) for event in chunk
                ]
                self._reading = True
                try:
                    await asyncio.to_thread(self.work.read_ahead, numbered)
                finally:
                    self._reading = False
            else:
                self._more.clear()
                await self._more.wait()
