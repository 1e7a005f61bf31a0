"""Readings that cost with the change: a watched inventory looks only at the files its watch named,
and specs handed over by their writer (``serve --scan``) are served without reading them back."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from cdi_plugin.aio.dirwatch import FILES, DirWatch
from cdi_plugin.aio.pulse import Pulse
from cdi_plugin.cli.serve_scan import make_watcher
from cdi_plugin.inventory import NumaLocator, SpecInventory, SpecSource
from cdi_plugin.inventory import source as source_module
from cdi_plugin.store import registry as registry_module
from cdi_plugin.store.registry import file_stat
from tests.deviceplugin.helpers import Layout, eventually, make_node, run, spec_of, write_spec
from tests.watch.helpers import running

KIND = "cdi-plugin.io/test"


class QuietWatch:
    """A spec watch that reports only what a test tells it (no inotify)."""

    def __init__(self) -> None:
        self.pulse = Pulse()

    def unread(self) -> bool:
        return False


class Disk:
    """Counts directory listings, spec files parsed and files hashed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.listed: list[str] = []
        self.parsed: list[str] = []
        self.hashed = 0
        scandir, load, digest = os.scandir, registry_module.load_spec_file, source_module.digest

        def counted_scandir(path: Any = ".") -> Any:  # a directory is listed through its descriptor
            self.listed.append(os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else str(path))
            return scandir(path)

        def counted_load(path: Path, priority: int) -> registry_module.SpecFile:
            self.parsed.append(path.name)
            return load(path, priority)

        def counted_digest(data: bytes) -> str:
            self.hashed += 1
            return digest(data)

        monkeypatch.setattr(os, "scandir", counted_scandir)
        monkeypatch.setattr(registry_module, "load_spec_file", counted_load)
        monkeypatch.setattr(source_module, "digest", counted_digest)

    def clear(self) -> None:
        self.listed.clear()
        self.parsed.clear()
        self.hashed = 0


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout.under(tmp_path)


def _watched(layout: Layout) -> tuple[SpecInventory, QuietWatch]:
    inventory = SpecInventory(SpecSource([layout.etc, layout.run]), NumaLocator(layout.sysfs), grace_period=5)
    inventory.sync()
    watch = QuietWatch()
    inventory.watch_with(watch)
    return inventory, watch


def _event(inventory: SpecInventory, watch: QuietWatch, directory: Path, name: str) -> None:
    """What the daemon's spec watch does for one inotify event."""
    if inventory.note(directory, name):
        watch.pulse.fire()


@pytest.fixture
def foreign(layout: Layout) -> None:
    """200 spec files of other vendors beside the served one."""
    for i in range(200):
        spec = spec_of(f"vendor{i}.example/thing", {"d0": [f"/dev/thing{i}"]})
        write_spec(layout.etc, spec, owned=False)


@pytest.mark.usefixtures("foreign")
def test_a_noted_change_reads_that_file_only(layout: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    write_spec(layout.etc, spec_of(KIND, {"a": [a]}))
    inventory, watch = _watched(layout)
    assert list(inventory.devices()) == [f"{KIND}=a"]
    disk = Disk(monkeypatch)

    path = write_spec(layout.etc, spec_of(KIND, {"a": [a], "b": [b]}))
    _event(inventory, watch, layout.etc, ".cdi-gen-owned")
    _event(inventory, watch, layout.etc, path.name)
    assert not inventory.note(layout.etc, "notes.txt")
    run(inventory.settled())

    assert list(inventory.devices()) == [f"{KIND}=a", f"{KIND}=b"]
    assert (disk.listed, disk.parsed, disk.hashed) == ([], [path.name], 1)
    reading = inventory.reading
    assert reading is not None
    assert len(reading.snapshot.files) == 201

    disk.clear()
    path.unlink()
    _event(inventory, watch, layout.etc, path.name)
    run(inventory.settled())
    assert inventory.devices()[f"{KIND}=a"].gone_since is not None
    assert (disk.listed, disk.parsed) == ([], [])


@pytest.mark.usefixtures("foreign")
def test_an_event_that_names_no_file_lists_the_directories(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = make_node(layout.dev / "a")
    write_spec(layout.etc, spec_of(KIND, {"a": [a]}))
    inventory, watch = _watched(layout)
    disk = Disk(monkeypatch)
    write_spec(layout.etc, spec_of(KIND, {"a": [a], "b": [a]}))
    watch.pulse.fire()  # e.g. a queue overflow: the watch cannot say what changed
    run(inventory.settled())
    assert sorted(inventory.devices()) == [f"{KIND}=a", f"{KIND}=b"]
    assert str(layout.etc) in disk.listed
    assert disk.parsed == [f"{KIND.replace('/', '-')}.json"]  # the others are unchanged


def test_a_spec_handed_over_is_served_unread_and_its_event_costs_nothing(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    write_spec(layout.etc, spec_of(KIND, {"a": [a]}))
    inventory, watch = _watched(layout)
    disk = Disk(monkeypatch)
    changes: list[list[str]] = []
    inventory.follow(lambda: changes.append(sorted(inventory.devices())))

    async def scenario() -> None:
        spec = spec_of(KIND, {"a": [a], "b": [b]})
        path = write_spec(layout.etc, spec)  # the record, then the file, as the writer does
        inventory.accept({path: spec})
        assert inventory.pending()
        await inventory.settled()  # what Allocate awaits: the handed-over spec is applied
        assert changes == [[f"{KIND}=a", f"{KIND}=b"]]
        assert (disk.listed, disk.parsed, disk.hashed) == ([], [], 0)
        reading = inventory.reading
        assert reading is not None
        assert KIND in reading.owned

        # the watch's events for the same files arrive later: recognised by their stamps
        _event(inventory, watch, layout.etc, ".cdi-gen-owned")
        _event(inventory, watch, layout.etc, path.name)
        await inventory.settled()
        assert (disk.listed, disk.parsed, disk.hashed) == ([], [], 0)
        assert len(changes) == 1

        path.unlink()
        inventory.accept({path: None})
        await inventory.settled()
        assert inventory.devices()[f"{KIND}=b"].gone_since is not None

    run(scenario())


def test_a_rewrite_handed_over_with_its_stat_is_applied_before_accept_returns(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    write_spec(layout.etc, spec_of(KIND, {"a": [a]}))
    inventory, watch = _watched(layout)
    disk = Disk(monkeypatch)
    changes: list[list[str]] = []
    inventory.follow(lambda: changes.append(sorted(inventory.devices())))

    async def scenario() -> None:
        spec = spec_of(KIND, {"a": [a], "b": [b]})
        path = write_spec(layout.etc, spec)
        inventory.accept({path: spec}, {path: file_stat(path)})
        # no await: applied on the event loop, no reading in a worker thread
        assert changes == [[f"{KIND}=a", f"{KIND}=b"]]
        assert (disk.listed, disk.parsed, disk.hashed) == ([], [], 0)
        snapshot = inventory.source.current()
        resolved = snapshot.resolve(f"{KIND}=b")
        assert resolved is not None
        assert resolved.spec is spec

        # the watch's events for the same files: the file is recognised by the stat handed over
        _event(inventory, watch, layout.etc, ".cdi-gen-owned")
        _event(inventory, watch, layout.etc, path.name)
        await inventory.settled()
        assert (disk.listed, disk.parsed, disk.hashed) == ([], [], 0)
        assert len(changes) == 1
        reading = inventory.reading
        assert reading is not None
        assert KIND in reading.owned

    run(scenario())


def test_a_hand_over_that_cannot_be_applied_at_once_waits_for_a_reading(layout: Layout) -> None:
    """A reading under way (it holds the registry), or a file not read before (a new kind: its
    ownership is not known yet): the specs are taken as given by the next reading."""
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    write_spec(layout.etc, spec_of(KIND, {"a": [a]}))
    inventory, _ = _watched(layout)

    async def scenario() -> None:
        reading = asyncio.ensure_future(inventory.refresh())
        await asyncio.sleep(0)  # the reading is under way
        spec = spec_of(KIND, {"a": [a], "b": [b]})
        path = write_spec(layout.etc, spec)
        inventory.accept({path: spec}, {path: file_stat(path)})
        assert f"{KIND}=b" not in inventory.devices()
        assert inventory.pending()
        await inventory.settled()
        assert f"{KIND}=b" in inventory.devices()
        await reading

        other = spec_of("cdi-plugin.io/other", {"o": [b]})
        path = write_spec(layout.etc, other)
        inventory.accept({path: other}, {path: file_stat(path)})
        assert "cdi-plugin.io/other=o" not in inventory.devices()
        await inventory.settled()
        assert "cdi-plugin.io/other=o" in inventory.devices()

    run(scenario())


def _binders(directory: Path, n: int) -> list[dict[str, object]]:
    devices: list[dict[str, object]] = []
    for i in range(n):
        node = make_node(directory / f"binder{i}")
        devices.append(
            {
                "subsystem": "misc",
                "sys_name": f"binder{i}",
                "sys_path": f"/sys/devices/virtual/misc/binder{i}",
                "devnode": str(node),
                "node": {"type": "c", "major": 1, "minor": 3, "mode": "0666", "uid": 0, "gid": 0},
                "properties": {"MAJOR": "1", "MINOR": "3"},
            }
        )
    return devices


def test_serve_scan_feeds_the_inventory_without_its_directory_watch(layout: Layout) -> None:
    """The plugin's inventory has no running watch of its spec directories: only the watcher's
    hand-over can tell it about the specs written."""
    fixture = layout.root / "host.json"
    fixture.write_text(json.dumps(_binders(layout.dev, 2)))
    settings = layout.settings()
    inventory = SpecInventory(SpecSource(settings.spec_dirs), NumaLocator(layout.sysfs), grace_period=5)
    inventory.sync()
    inventory.watch_with(QuietWatch())
    watcher = make_watcher(settings, None, source=f"fixture:{fixture}", inventory=inventory)
    names = {f"cdi-plugin.io/binder=binder{i}" for i in range(3)}

    async def scenario() -> None:
        async with running(watcher):
            await eventually(lambda: set(inventory.devices()) == names - {"cdi-plugin.io/binder=binder2"},
                             "the first scan's devices served")  # fmt: skip
            fixture.write_text(json.dumps(_binders(layout.dev / "more", 3)))
            await eventually(lambda: set(inventory.devices()) >= names, "the device added served")
            assert (layout.etc / "cdi-plugin.io-binder.json").is_file()

    run(scenario())


def test_specs_handed_over_while_a_reading_runs_are_applied_too(layout: Layout) -> None:
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    write_spec(layout.etc, spec_of(KIND, {"a": [a]}))
    inventory, _ = _watched(layout)

    async def scenario() -> None:
        first = spec_of(KIND, {"a": [a], "b": [b]})
        inventory.accept({write_spec(layout.etc, first): first})
        await asyncio.sleep(0)  # the first reading is under way
        other = spec_of("cdi-plugin.io/other", {"o": [b]})
        inventory.accept({write_spec(layout.etc, other): other})
        await eventually(lambda: "cdi-plugin.io/other=o" in inventory.devices(), "the second hand-over")
        assert not inventory.pending()

    run(scenario())


@pytest.mark.usefixtures("foreign")
def test_the_real_inotify_watch_names_the_files_that_changed(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = make_node(layout.dev / "a"), make_node(layout.dev / "b")
    write_spec(layout.etc, spec_of(KIND, {"a": [a]}))
    inventory = SpecInventory(SpecSource([layout.etc, layout.run]), NumaLocator(layout.sysfs), grace_period=5)

    async def scenario() -> None:
        dirs = inventory.source.dirs
        async with DirWatch(dirs, name="spec dirs", events=FILES, relevant=inventory.note) as watch:
            inventory.watch_with(watch)
            await inventory.refresh()
            disk = Disk(monkeypatch)
            path = write_spec(layout.etc, spec_of(KIND, {"a": [a], "b": [b]}))
            await inventory.settled()  # the events may still be in the kernel: read, then applied
            assert sorted(inventory.devices()) == [f"{KIND}=a", f"{KIND}=b"]
            assert (disk.listed, disk.parsed) == ([], [path.name])

    run(scenario())
