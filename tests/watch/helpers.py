"""Running a watcher in a test's event loop, and reading what it wrote."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from cdi_plugin.discovery.fixture import dumps
from cdi_plugin.discovery.model import DiscoveredDevice, UdevEvent
from cdi_plugin.scan import ScanOptions
from cdi_plugin.scan.targets import Kinds
from cdi_plugin.scan.watcher import Watcher
from cdi_plugin.scan.watchoptions import WatchOptions


def watch_options(
    out: Path, config: Path | None = None, *, source: str = "udev", **overrides: Any
) -> WatchOptions:
    """Options for a watcher writing into ``out`` (and checking only ``out`` for foreign specs)."""
    scan = ScanOptions(config=config, output_dir=out, spec_dirs=(out,), skip_refused=True)
    return WatchOptions(scan=scan, source=source, **overrides)


class Hearing(Watcher):
    """A watcher that counts the uevents it hears of each device (by kernel name), of those that
    touch its classes: a test counts the events of its own devices, whatever else the host does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.heard: collections.Counter[str] = collections.Counter()

    def _on_uevent(self, event: UdevEvent, kinds: Kinds) -> None:
        self.heard[event.sys_name] += 1
        super()._on_uevent(event, kinds)


@contextlib.asynccontextmanager
async def running(watcher: Watcher, timeout: float = 60.0) -> AsyncIterator[Watcher]:
    """The watcher running in this loop, its first scan done; stopped (and checked) on exit."""
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    ready = asyncio.create_task(watcher.ready.wait())
    done, _ = await asyncio.wait([task, ready], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        ready.cancel()
        task.result()
        raise AssertionError("the watcher stopped before it was ready")
    if ready not in done:
        raise AssertionError("the watcher was not ready in time")
    try:
        yield watcher
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


def device_names(spec_file: Path) -> set[str] | None:
    """The device names of a spec file, None when there is no file."""
    try:
        obj = json.loads(spec_file.read_bytes())
    except FileNotFoundError:
        return None
    return {d["name"] for d in obj["devices"]}


def write_host(path: Path, devices: Sequence[DiscoveredDevice]) -> None:
    """Replace a fixture file atomically (as an editor or a recorder would)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(dumps(devices))
    tmp.rename(path)


def replace_file(path: Path, text: str) -> None:
    """Replace ``path`` the way editors do: write a new file beside it, rename it over the old one."""
    tmp = path.with_name(f".{path.name}.new")
    tmp.write_text(text)
    tmp.rename(path)
