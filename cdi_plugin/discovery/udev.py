"""Discovery through udev: the only module that imports pyudev.

What a :class:`UdevSource` reports for each device of the asked subsystems:

- ``properties``: every udev property. libudev merges the sysfs ``uevent`` file with the udev
  database (``/run/udev/data``) where udevd has written one; on hosts without udevd (minimal VMs,
  containers with /sys mounted) only the ``uevent`` keys exist, and ``devlinks`` is empty.
- ``devnode``, ``devtype``, ``driver``, ``devlinks`` as udev reports them (``devlinks`` falls back to
  the ``DEVLINKS`` property when the database has none, as in umockdev simulations).
- ``attributes``: only the sysfs attributes the query names, for the device and each ancestor
  (nearest first); missing ones are left out.
- ``node``: ``stat`` of the devnode. A node udev announces but /dev lacks (or that is not a device
  file) gives ``node=None`` and a warning; a device without a devnode has both ``None``.

Where udevd runs, a device it has not set up yet (its rules still running: no database entry,
so none of the ``ID_*`` properties classes match and name devices by, nor its links, and the node
may lack its final owner and mode) is left out, counted in one warning per subsystem: udevd
announces it once it is set up, and a later scan or the watcher's update reads it then. Where no
udevd runs, no device is ever set up, and every device is reported as the kernel describes it.

Text from libudev is decoded as UTF-8; bytes that are not UTF-8 become ``\\xNN`` escapes, so hostile
values arrive intact as text and never raise. Nodes matched by the query's devnode globs that no
reported device owns (same path or same type/major/minor) follow as subsystem-less entries.

:class:`UdevMonitor` delivers uevents (hot-plug) as :class:`UdevEvent` values, read without
blocking from the udev netlink monitor.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Literal

import pyudev

from cdi_plugin.discovery import nodes
from cdi_plugin.discovery.model import Ancestor, DiscoveredDevice, Discovery, NodeInfo, Query, UdevEvent
from cdi_plugin.discovery.query import DEV, add_glob_entries, check_query
from cdi_plugin.errors import DiscoveryError
from cdi_plugin.wording import first_few, plural

log = logging.getLogger(__name__)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def _opt(raw: bytes | None) -> str | None:
    return None if raw is None else _text(raw)


class _Reader:
    """Reads devices (pyudev ``Device`` objects or raw libudev pointers) with libudev calls, once per scan."""

    def __init__(self, lib: Any, attributes: frozenset[str]) -> None:
        self.lib = lib
        self.attribute_names = sorted((name, name.encode()) for name in attributes)
        self.ancestors: dict[str, Ancestor] = {}  # sys_path -> ancestor, shared by siblings

    def entries(self, entry: Any) -> Iterator[tuple[bytes, bytes | None]]:
        lib = self.lib
        while entry:
            yield lib.udev_list_entry_get_name(entry), lib.udev_list_entry_get_value(entry)
            entry = lib.udev_list_entry_get_next(entry)

    def properties(self, dev: Any) -> Mapping[str, str]:
        pairs = self.entries(self.lib.udev_device_get_properties_list_entry(dev))
        return MappingProxyType({_text(k): _text(v or b"") for k, v in pairs})

    def attributes(self, dev: Any) -> Mapping[str, str]:
        found = {}
        for name, raw_name in self.attribute_names:
            value = self.lib.udev_device_get_sysattr_value(dev, raw_name)
            if value is not None:
                found[name] = _text(value)
        return MappingProxyType(found)

    def devlinks(self, dev: Any, properties: Mapping[str, str]) -> tuple[str, ...]:
        links = tuple(_text(k) for k, _ in self.entries(self.lib.udev_device_get_devlinks_list_entry(dev)))
        return links or tuple(properties.get("DEVLINKS", "").split())

    def ancestor_chain(self, dev: Any) -> tuple[Ancestor, ...]:
        lib = self.lib
        chain = []
        parent = lib.udev_device_get_parent(dev)  # borrowed: lives as long as ``dev``
        while parent:
            sys_path = _text(lib.udev_device_get_syspath(parent))
            ancestor = self.ancestors.get(sys_path)
            if ancestor is None:
                ancestor = Ancestor(
                    subsystem=_opt(lib.udev_device_get_subsystem(parent)) or "",
                    sys_name=_text(lib.udev_device_get_sysname(parent)),
                    sys_path=sys_path,
                    driver=_opt(lib.udev_device_get_driver(parent)),
                    properties=self.properties(parent),
                    attributes=self.attributes(parent),
                )
                self.ancestors[sys_path] = ancestor
            chain.append(ancestor)
            parent = lib.udev_device_get_parent(parent)
        return tuple(chain)


@functools.cache
def _udev() -> Any:
    """The process's libudev context (loading it runs ``ldconfig`` through ctypes, ~5 ms)."""
    try:
        return pyudev.Context()
    except (ImportError, OSError) as exc:
        raise DiscoveryError(f"udev: cannot load libudev: {exc}") from exc


@functools.cache
def _lookup_udev() -> Any:
    """The libudev context of :meth:`UdevSource.lookup_number`: libudev objects are not
    thread-safe, and lookups run on the event loop's thread while scans may run in a worker."""
    try:
        return pyudev.Context()
    except (ImportError, OSError) as exc:
        raise DiscoveryError(f"udev: cannot load libudev: {exc}") from exc


class UdevSource:
    """The live host as udev sees it (pyudev over libudev).

    ``dev_root`` is where the host's /dev is visible (``stat`` and globs look there; reported
    paths stay ``/dev/...``). The sysfs root is not configurable: libudev always reads /sys, so
    simulated hardware comes from umockdev, which redirects /sys and /dev for the process.
    """

    def __init__(self, *, dev_root: str = DEV, initialized_only: bool | None = None) -> None:
        """``initialized_only`` leaves out devices udevd has not set up yet (None: where udevd runs;
        False where nothing would announce them later, e.g. while listening to the kernel's events)."""
        self._dev_root = dev_root.rstrip("/") or "/"
        self._initialized_only = monitor_source() == "udev" if initialized_only is None else initialized_only
        #: Enumerations of the host's devices so far (each scan makes one).
        self.enumerations = 0

    def _enumerate(self, query: Query) -> list[Any]:
        self.enumerations += 1
        context = _udev()
        try:
            enumerator = context.list_devices()
            for subsystem in sorted(query.subsystems):
                enumerator.match_subsystem(subsystem)
            return list(enumerator)
        except (OSError, pyudev.DeviceNotFoundError) as exc:
            wanted = ", ".join(sorted(query.subsystems)) or "all subsystems"
            raise DiscoveryError(f"udev: cannot enumerate devices ({wanted}): {exc}") from exc

    def discover(self, query: Query) -> Discovery:
        check_query(query)
        started = time.perf_counter()
        found = self._enumerate(query)
        reader = _Reader(_udev()._libudev, query.attributes)
        warnings: list[str] = []
        waiting: dict[str, list[str]] = {}
        devices = [
            device
            for dev in found
            if (device := self._device(reader, dev, query, warnings, waiting)) is not None
        ]
        devices.sort(key=lambda d: d.sys_path)
        warnings[:0] = [_not_set_up(subsystem, names) for subsystem, names in sorted(waiting.items())]
        hits = nodes.expand_globs(query.devnode_globs, self._dev_root, warnings)
        add_glob_entries(devices, hits)
        log.debug(
            "udev: %d devices (%d by devnode glob) in %.1f ms",
            len(devices),
            sum(1 for d in devices if not d.subsystem),
            (time.perf_counter() - started) * 1000,
        )
        return Discovery(tuple(devices), tuple(warnings))

    def lookup(self, sys_path: str, query: Query) -> DiscoveredDevice | None:
        """The device at ``sys_path`` as :meth:`discover` reports it (its warnings are left out:
        a node udev announces but /dev lacks has ``node=None``); None when there is none, not
        of the query's subsystems, or not set up by udevd yet (it announces the device once it is)."""
        check_query(query)
        try:
            dev = pyudev.Devices.from_sys_path(_udev(), sys_path)
        except pyudev.DeviceNotFoundError:
            return None
        except OSError as exc:
            raise DiscoveryError(f"udev: cannot read {sys_path}: {exc}") from exc
        device = self._device(_Reader(_udev()._libudev, query.attributes), dev, query, [])
        if device is None or (query.subsystems and device.subsystem not in query.subsystems):
            return None
        return device

    def lookup_number(self, block: bool, major: int, minor: int) -> DiscoveredDevice | None:
        """The device that owns device number ``major:minor`` (a block device when ``block``), with
        its ancestors, as :meth:`discover` reports it; None when no device has that number (its
        node vanished)."""
        kind = "block" if block else "char"
        context = _lookup_udev()
        try:
            dev = pyudev.Devices.from_device_number(context, kind, os.makedev(major, minor))
        except pyudev.DeviceNotFoundError:
            return None
        except OSError as exc:
            raise DiscoveryError(f"udev: cannot read {kind} device {major}:{minor}: {exc}") from exc
        return self._device(_Reader(context._libudev, frozenset()), dev, Query(), [], set_up_only=False)

    def _device(
        self,
        reader: _Reader,
        dev: Any,
        query: Query,
        warnings: list[str],
        waiting: dict[str, list[str]] | None = None,
        *,
        set_up_only: bool = True,
    ) -> DiscoveredDevice | None:
        """The device as reported, None when it has no subsystem or awaits udevd (its name then
        goes into ``waiting`` under its subsystem)."""
        lib = reader.lib
        subsystem = _opt(lib.udev_device_get_subsystem(dev))
        if not subsystem:
            return None
        sys_name = _text(lib.udev_device_get_sysname(dev))
        if set_up_only and self._initialized_only and _awaits_udevd(lib, dev):
            if waiting is not None:
                waiting.setdefault(subsystem, []).append(sys_name)
            return None
        devnode = _opt(lib.udev_device_get_devnode(dev))
        properties = reader.properties(dev)
        node = None
        if devnode is not None:
            node = self._node(subsystem, sys_name, devnode, properties, warnings)
        return DiscoveredDevice(
            subsystem=subsystem,
            sys_name=sys_name,
            sys_path=_text(lib.udev_device_get_syspath(dev)),
            devnode=devnode,
            devtype=_opt(lib.udev_device_get_devtype(dev)),
            driver=_opt(lib.udev_device_get_driver(dev)),
            node=node,
            devlinks=reader.devlinks(dev, properties),
            properties=properties,
            attributes=reader.attributes(dev),
            ancestors=reader.ancestor_chain(dev) if query.with_ancestors else (),
        )

    def _node(
        self, subsystem: str, sys_name: str, devnode: str, properties: Mapping[str, str], warnings: list[str]
    ) -> NodeInfo | None:
        def warn(problem: str) -> None:
            who = nodes.printable(f"{subsystem} {sys_name}")
            warnings.append(f"{who}: {nodes.printable(devnode)}{problem}")

        try:
            node = nodes.stat_node(devnode, self._dev_root)
        except FileNotFoundError:
            warn(" is announced by udev but missing")
            return None
        except OSError as exc:
            warn(f": cannot stat: {exc.strerror}")
            return None
        if node is None:
            warn(" is not a character or block device")
            return None
        expected = "b" if subsystem == "block" else "c"
        major, minor = properties.get("MAJOR"), properties.get("MINOR")
        if node.type != expected or (
            major is not None and minor is not None and (major, minor) != (str(node.major), str(node.minor))
        ):
            announced = f"{expected} {nodes.printable(major or '?')}:{nodes.printable(minor or '?')}"
            warn(f" is {node.type} {node.major}:{node.minor} but udev announces {announced}")
        return node


# -- uevents ------------------------------------------------------------------------------------

MonitorSource = Literal["udev", "kernel"]
#: udevd's control socket: where it exists udevd runs, and re-announces every uevent once its rules ran.
UDEV_CONTROL = "/run/udev/control"
#: The kernel's queue for events not read yet, as udevd asks for it; a storm of 10,000 uevents takes
#: about 10 MiB of it, and only what is queued uses memory. Beyond ``net.core.rmem_max`` it needs
#: CAP_NET_ADMIN (recent libudev asks for the same by itself).
RECEIVE_BUFFER_BYTES = 128 * 1024 * 1024


def _not_set_up(subsystem: str, names: list[str]) -> str:
    """One warning for the devices of ``subsystem`` udevd has not set up yet (at boot, many)."""
    shown = first_few(sorted(nodes.printable(n) for n in names))
    until = "it is" if len(names) == 1 else "they are"
    return (
        f"{nodes.printable(subsystem)}: {plural(len(names), 'device')} not set up by udev yet "
        f"({shown}): left out until {until}"
    )


def _awaits_udevd(lib: Any, dev: Any) -> bool:
    """Whether udevd has yet to set ``dev`` up: it has no database entry though udevd writes one
    for every device with a number or a network interface once its rules have run (a device with
    neither and nothing to store never gets one, so it is never waited for)."""
    if lib.udev_device_get_is_initialized(dev):
        return False
    numbered = os.major(lib.udev_device_get_devnum(dev)) != 0
    return numbered or bool(_opt(lib.udev_device_get_property_value(dev, b"IFINDEX")))


def monitor_source() -> MonitorSource:
    """``udev`` where udevd runs (its events come after nodes, links and database are in place),
    else ``kernel`` (the kernel's own events, the only ones there are)."""
    return "udev" if os.path.exists(UDEV_CONTROL) else "kernel"


def _receive_buffer(fd: int) -> int:
    """The receive buffer the kernel gave the socket ``fd`` (it reports twice what was set)."""
    with socket.socket(fileno=os.dup(fd)) as sock:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2


class UdevMonitor:
    """uevents from the udev netlink monitor, filtered by subsystem (none given: every subsystem).

    Use :meth:`fileno` with a poller (asyncio's ``add_reader``) and call :meth:`receive` when it is
    readable: it never blocks and returns at most ``limit`` events, so a storm is read in slices.
    The monitor has its own libudev context: scans may run in another thread meanwhile.
    """

    def __init__(
        self,
        subsystems: Iterable[str] = (),
        source: MonitorSource | None = None,
        buffer_bytes: int | None = RECEIVE_BUFFER_BYTES,
    ) -> None:
        """``buffer_bytes`` None keeps the receive buffer libudev chose."""
        self.source: MonitorSource = source or monitor_source()
        self.subsystems = frozenset(subsystems)
        try:
            context = pyudev.Context()
            monitor = pyudev.Monitor.from_netlink(context, source=self.source)
            for subsystem in sorted(self.subsystems):
                monitor.filter_by(subsystem)
        except (ImportError, OSError) as exc:
            raise DiscoveryError(f"udev: cannot create a {self.source} event monitor: {exc}") from exc
        try:
            if buffer_bytes is not None:
                monitor.set_receive_buffer_size(buffer_bytes)
        except OSError as exc:
            log.info(
                "udev monitor: receive buffer of %d KiB (raising it to %d MiB failed: %s; it needs "
                "CAP_NET_ADMIN); a burst of events that overflows it costs a full rescan",
                _receive_buffer(monitor.fileno()) // 1024,
                (buffer_bytes or 0) // (1024 * 1024),
                exc.strerror or exc,
            )
        self._monitor: Any = monitor
        self._lib = context._libudev

    def start(self) -> None:
        """Bind the netlink socket: events sent from now on are queued for :meth:`receive`."""
        try:
            self._monitor.start()
        except OSError as exc:
            raise DiscoveryError(f"udev: cannot start the {self.source} event monitor: {exc}") from exc

    def fileno(self) -> int:
        return int(self._monitor.fileno())

    def receive(self, limit: int) -> tuple[list[UdevEvent], bool]:
        """The events queued now, at most ``limit``, and whether the kernel dropped some since the
        last call (its receive buffer overflowed: the caller cannot know what changed)."""
        events: list[UdevEvent] = []
        lost = False
        lib = self._lib
        while len(events) < limit:
            try:
                # pyudev's public poll() reports an overflow as an OSError without its errno
                device = self._monitor._receive_device()
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    lost = True
                    continue
                raise DiscoveryError(f"udev: cannot receive events: {exc}") from exc
            if device is None:  # nothing queued (never truth-test a pyudev Device)
                break
            events.append(
                UdevEvent(
                    action=_opt(lib.udev_device_get_action(device)) or "",
                    subsystem=_opt(lib.udev_device_get_subsystem(device)) or "",
                    sys_name=_opt(lib.udev_device_get_sysname(device)) or "",
                    devnode=_opt(lib.udev_device_get_devnode(device)),
                    sys_path=_opt(lib.udev_device_get_syspath(device)) or "",
                )
            )
        return events, lost

    def close(self) -> None:
        """Close the socket (libudev closes it with the last reference)."""
        self._monitor = None


def trigger_change(sys_path: str) -> None:
    """Make the kernel announce the device again with a ``change`` uevent (needs root).

    Raises ``OSError``."""
    with open(os.path.join(sys_path, "uevent"), "w", encoding="ascii") as fh:
        fh.write("change")
