"""The watcher's uevents: a monitor of the subsystems its classes need, read on the event loop.

At most :data:`PER_WAKEUP` events are read per wake-up, so a storm cannot starve the other tasks
of the loop. Each event adds the kinds it touches, with the event (a device can be updated alone);
a receive-buffer overflow (events were lost) adds every class. The loss is logged once, then,
while overflows go on, summarised every few minutes; the first batch that begins
:data:`LOSS_QUIET` seconds after the last overflow says it ended
(:class:`~cdi_plugin.recurring.Recurring`). A monitor that fails for good is reported through
``fail``.
"""

from __future__ import annotations

import asyncio
import logging
import select
import time
from collections.abc import Callable

from cdi_plugin.discovery.model import UdevEvent
from cdi_plugin.discovery.udev import MonitorSource, UdevMonitor
from cdi_plugin.errors import DiscoveryError
from cdi_plugin.recurring import Recurring
from cdi_plugin.scan.targets import Kinds, Targets

log = logging.getLogger(__name__)

#: uevents read per wake-up of the event loop.
PER_WAKEUP = 64
LOST = "uevents were lost (the monitor's receive buffer overflowed); rescanning every class"
#: The loss of uevents has ended once a batch begins this long after the last overflow (seconds):
#: a flood that overflows the buffer now and then is one condition, not one per overflow.
LOSS_QUIET = 60.0


class Uevents:
    def __init__(
        self,
        source: MonitorSource | None,
        receive_buffer: int | None,
        *,
        targets: Callable[[], Targets],
        add: Callable[[UdevEvent, Kinds], None],
        lost: Callable[[], None],
        fail: Callable[[DiscoveryError], None],
    ) -> None:
        self.source = source
        self.receive_buffer = receive_buffer
        self._targets, self._add, self._lost, self._fail = targets, add, lost, fail
        self.monitor: UdevMonitor | None = None
        #: uevents read so far.
        self.count = 0
        #: Receive-buffer overflows seen so far.
        self.losses = 0
        #: Events were lost since the last batch began (:meth:`batch_started`).
        self.lost_since_batch = False
        self._loss = Recurring(log)
        self._last_loss = 0.0

    def start(self) -> None:
        """Listen for the uevents the classes need (again, after a configuration change)."""
        targets = self._targets()
        old = self.monitor
        if not targets.wants_uevents:
            self.monitor = None
        else:
            monitor = UdevMonitor(
                () if targets.every_subsystem else targets.subsystems, self.source, self.receive_buffer
            )
            monitor.start()
            asyncio.get_running_loop().add_reader(monitor.fileno(), self._readable, monitor)
            self.monitor = monitor
        if old is not None:
            _release(old)

    def queued(self) -> bool:
        """Whether uevents wait to be read."""
        if self.monitor is None:
            return False
        return bool(select.select([self.monitor.fileno()], [], [], 0)[0])

    def stop(self) -> None:
        if self.monitor is not None:
            _release(self.monitor)
            self.monitor = None

    def _readable(self, monitor: UdevMonitor) -> None:
        try:
            events, lost = monitor.receive(PER_WAKEUP)
        except DiscoveryError as exc:
            self.stop()
            self._fail(exc)
            return
        self.count += len(events)
        targets = self._targets()
        for event in events:
            kinds = targets.kinds_for_event(event)
            if kinds:
                self._add(event, kinds)
        if lost:
            self.losses += 1
            self._last_loss = time.monotonic()
            if not self.lost_since_batch:
                self.lost_since_batch = True
                self._loss.report(logging.WARNING, LOST)
            self._lost()

    def batch_started(self) -> None:
        """A batch begins: a loss before it counts for it; none for :data:`LOSS_QUIET` seconds ends
        the loss."""
        if self._loss and time.monotonic() - self._last_loss >= LOSS_QUIET:
            self._loss.recovered()
        self.lost_since_batch = False


def _release(monitor: UdevMonitor) -> None:
    asyncio.get_running_loop().remove_reader(monitor.fileno())
    monitor.close()
