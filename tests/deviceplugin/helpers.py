"""Building blocks for device plugin tests: spec files as cdi-gen writes them, device nodes, a
plugin running in-process, a bounded ``run`` for async scenarios, the IDs a list shows Healthy."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from cdi_plugin.cdi import codec
from cdi_plugin.cdi.model import ContainerEdits, Device, DeviceNode, Spec
from cdi_plugin.deviceplugin import api, daemon
from cdi_plugin.deviceplugin.lifecycle import socket_name
from cdi_plugin.deviceplugin.settings import Settings
from cdi_plugin.store.atomic import write_atomic
from cdi_plugin.store.ownership import OwnedFile, digest, read_record, write_record
from tests.deviceplugin.fake_kubelet import DeviceEntry

T = TypeVar("T")

NULL_RDEV = os.makedev(1, 3)


def run(coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
    """Run one async scenario with a hard time limit (which only bounds a failure)."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def eventually(predicate: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    """Wait until ``predicate()`` holds (checked every 10 ms); AssertionError naming ``what`` if it
    does not within ``timeout`` seconds, which only bounds a failure."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        await asyncio.sleep(0.01)


def make_node(path: Path, rdev: int = NULL_RDEV) -> Path:
    """A char device node like /dev/null (1:3) at ``path``, for tests that must not touch /dev."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR | 0o666, rdev)
    return path


def spec_of(kind: str, devices: Mapping[str, Sequence[Path | str]], version: str = "0.5.0") -> Spec:
    """A spec whose devices each inject the given host nodes (hostPath) as /dev/<basename>."""
    return Spec(
        cdi_version=version,
        kind=kind,
        devices=tuple(
            Device(
                name=name,
                container_edits=ContainerEdits(
                    device_nodes=tuple(
                        DeviceNode(path=f"/dev/{Path(n).name}", host_path=str(n), type="c") for n in nodes
                    )
                    or None,
                    env=None if nodes else (f"DEVICE={name}",),
                ),
            )
            for name, nodes in devices.items()
        ),
    )


def write_spec(
    directory: Path, spec: Spec, *, owned: bool = True, name: str | None = None, fmt: codec.Format = "json"
) -> Path:
    """Write a spec atomically; ``owned`` records it as cdi-gen's, the way cdi-gen does: the record
    first (owning the old and the new contents), then the file."""
    directory.mkdir(parents=True, exist_ok=True)
    file_name = name or spec.kind.replace("/", "-") + (".yaml" if fmt == "yaml" else ".json")
    path = directory / file_name
    data = codec.encode(spec, fmt)
    record = read_record(directory)
    if owned:
        old = path.read_bytes() if path.exists() else None
        previous = digest(old) if old is not None and file_name in record else None
        record[file_name] = OwnedFile(file_name, spec.kind, digest(data), previous)
        write_record(directory, record)
        write_atomic(path, data)
        return path
    write_atomic(path, data)
    if file_name in record:
        del record[file_name]
        write_record(directory, record)
    return path


@dataclass
class Layout:
    root: Path
    etc: Path
    run: Path
    plugin_dir: Path
    dev: Path
    sysfs: Path

    @classmethod
    def under(cls, root: Path) -> Layout:
        layout = cls(root, root / "etc-cdi", root / "run-cdi", root / "plugins", root / "dev", root / "sys")
        for d in (layout.etc, layout.plugin_dir, layout.dev, layout.sysfs):
            d.mkdir(parents=True, exist_ok=True)
        return layout

    def settings(self, **overrides: Any) -> Settings:
        base = Settings(
            spec_dirs=(self.etc, self.run),
            plugin_dir=self.plugin_dir,
            sysfs_root=self.sysfs,
            grace_period=5.0,
        )
        return replace(base, **overrides)

    def sockets(self) -> set[str]:
        return {p.name for p in self.plugin_dir.iterdir() if stat.S_ISSOCK(p.lstat().st_mode)}


@contextlib.asynccontextmanager
async def running_plugin(settings: Settings) -> AsyncIterator[asyncio.Task[None]]:
    """The plugin's daemon in this event loop; stopped (and checked to stop cleanly) on exit."""
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.run(settings, stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


def sock(layout: Layout, resource: str) -> str:
    """The socket file name the plugin uses for ``resource`` in the layout's plugin directory."""
    return socket_name(resource, layout.plugin_dir)


def healthy(devices: Mapping[str, DeviceEntry]) -> set[str]:
    """The device IDs of a ListAndWatch list that are Healthy."""
    return {i for i, d in devices.items() if d.health == api.HEALTHY}
