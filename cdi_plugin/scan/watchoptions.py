"""What a :class:`~cdi_plugin.scan.watcher.Watcher` watches and how (:class:`WatchOptions`), and
whom it tells of what it writes (:data:`OnApplied`, :data:`OnWritten`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdi_plugin.cdi.model import Spec
from cdi_plugin.discovery.query import DEV
from cdi_plugin.discovery.udev import RECEIVE_BUFFER_BYTES, MonitorSource
from cdi_plugin.scan.pipeline import Placed, ScanOptions
from cdi_plugin.scan.probe import PROBE_TIMEOUT
from cdi_plugin.store.writer import Applied

#: Called on the event loop after every write that changed files: what the store did, and each
#: file written (the spec it holds) or removed (None).
OnApplied = Callable[[Applied, Mapping[Path, Spec | None]], None]
#: Called on the event loop as soon as a spec file is renamed into place or removed, before its
#: batch ends (before the directory is synced): its path, its spec (None: removed), its stat then.
OnWritten = Placed


@dataclass(frozen=True, slots=True)
class WatchOptions:
    scan: ScanOptions = dataclasses.field(default_factory=ScanOptions)
    #: ``udev`` (the host) or ``fixture:PATH`` (a recorded host; the file is watched).
    source: str = "udev"
    #: ``udev`` or ``kernel``; None picks ``udev`` where udevd runs, else ``kernel``.
    uevent_source: MonitorSource | None = None
    dev_root: str = DEV
    quiet: float = 0.1
    max_delay: float = 0.25
    #: Check once that uevents arrive at all, and warn when they do not.
    probe: bool = True
    probe_timeout: float = PROBE_TIMEOUT
    #: The monitor's receive buffer in bytes (None: libudev's choice).
    receive_buffer: int | None = RECEIVE_BUFFER_BYTES
    #: The process also serves the device plugin, whose ``plugin`` section is read only at start.
    plugin_section_used: bool = False
    #: Checks a reloaded ``plugin`` section (and its source); raises ``ConfigError`` to refuse the edit.
    check_plugin: Callable[[Any, str], object] | None = None
    #: Seconds between full rescans that catch what events missed (None: never).
    resync: float | None = 600.0
