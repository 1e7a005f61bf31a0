"""The watcher's uevents: a monitor of the subsystems its classes need, read on the event loop.

At most :data:`PER_WAKEUP` events are read per wake-up, so a storm cannot starve the other tasks
of the loop. Each event adds the kinds it touches, with the event (a device can be updated alone);
a receive-buffer overflow (events were lost) is logged once until the next batch and adds every
class. A monitor that fails for good is reported through ``fail``.
"""

from __future__ import annotations

import asyncio
import logging
import select
from collections.abc import Callable

from cdi_plugin.discovery.model import UdevEvent
from cdi_plugin.discovery.udev import MonitorSource, UdevMonitor
from cdi_plugin.errors import DiscoveryError
from cdi_plugin.scan.targets import Kinds, Targets

log = logging.getLogger(__name__)

#: uevents read per wake-up of the event loop.
PER_WAKEUP = 64


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
        #: The loss of events was logged (the watcher clears it after each batch).
        self.lost_logged = False

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
            if not self.lost_logged:
                self.lost_logged = True
                log.warning(
                    "uevents were lost (the monitor's receive buffer overflowed); rescanning every class"
                )
            self._lost()


def _release(monitor: UdevMonitor) -> None:
    asyncio.get_running_loop().remove_reader(monitor.fileno())
    monitor.close()
