"""Does this process receive uevents at all? A watcher that hears nothing should say so.

A monitor can be silent where events are expected: a container without the host's network
namespace gets no events from udevd (and, in a user namespace, none from the kernel either), and
an event source of "udev" where udevd does not run carries nothing. Such a monitor looks exactly
like a quiet host, so :func:`check_delivery` asks the kernel to announce ``/dev/null`` again (a
``change`` uevent, which changes nothing: with udevd its rules only set the mode 0666 again) and
waits for that event on a second monitor of the same source. No event within the time limit is
logged as a warning saying what to fix; a process that may not write to /sys is told that the
check could not run.
"""

from __future__ import annotations

import asyncio
import logging

from cdi_plugin.discovery.udev import MonitorSource, UdevMonitor, trigger_change
from cdi_plugin.errors import DiscoveryError

log = logging.getLogger(__name__)

#: /dev/null's device: always there, and nothing reacts to its change events.
PROBE_DEVICE = "/sys/devices/virtual/mem/null"
PROBE_SUBSYSTEM = "mem"
PROBE_TIMEOUT = 3.0


async def check_delivery(
    source: MonitorSource, timeout: float = PROBE_TIMEOUT, device: str = PROBE_DEVICE
) -> bool | None:
    """True when a triggered uevent arrived, False (and a warning) when none did within
    ``timeout`` seconds, None when the check could not run."""
    name = device.rstrip("/").rsplit("/", 1)[-1]
    try:
        monitor = UdevMonitor([PROBE_SUBSYSTEM], source, buffer_bytes=None)
        monitor.start()
    except DiscoveryError as exc:
        log.info("cannot check that uevents arrive: %s", exc)
        return None
    loop = asyncio.get_running_loop()
    arrived = asyncio.Event()

    def readable() -> None:
        try:
            events, _ = monitor.receive(64)
        except DiscoveryError:
            events = []
        if any(e.sys_name == name for e in events):
            arrived.set()

    loop.add_reader(monitor.fileno(), readable)
    try:
        try:
            trigger_change(device)
        except OSError as exc:
            log.info(
                "cannot check that uevents arrive (writing %s/uevent: %s); if hot-plugged devices are "
                "not noticed, run with the host's network namespace",
                device,
                exc.strerror or exc,
            )
            return None
        try:
            async with asyncio.timeout(timeout):
                await arrived.wait()
        except TimeoutError:
            hint = (
                "udevd does not run although /run/udev/control exists, or "
                if source == "udev"
                else "this process runs in a user namespace (no kernel uevents there), or "
            )
            log.warning(
                "no uevent arrived within %gs after asking the kernel to announce %s again (%s "
                "monitor): %sit does not share the host's network namespace (Kubernetes: hostNetwork: "
                "true; podman/docker: --network host); hot-plugged devices will not be noticed, only "
                "configuration changes and restarts rescan",
                timeout,
                device,
                source,
                hint,
            )
            return False
        log.debug("uevents arrive (%s monitor)", source)
        return True
    finally:
        loop.remove_reader(monitor.fileno())
        monitor.close()
