"""Device health from the host device nodes a CDI device names.

A device is Healthy when every host device node of its spec entry exists: the device's own
``deviceNodes`` and the spec-level ones (a runtime applies both when it injects the device). The
host side is ``hostPath``, else ``path``. Where the spec pins a ``type`` (``c``/``u`` char,
``b`` block, ``p`` FIFO) the node must be of that type, and where it pins ``major``/``minor`` the
numbers must match. Symbolic links are followed. A device without device nodes is always Healthy.
The check is a few ``stat`` calls, cheap enough to repeat on every change of a watched directory.
:class:`HealthTracker` keeps the answers between such changes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cdi_plugin.cdi.model import Device, Spec

StatFn = Callable[[str], os.stat_result]

_TYPE_NAMES = {"c": "a char device", "u": "a char device", "b": "a block device", "p": "a FIFO"}


@dataclass(frozen=True, slots=True)
class HostNode:
    path: str
    type: str | None = None
    major: int | None = None
    minor: int | None = None


@dataclass(frozen=True, slots=True)
class Rdev:
    """A device number found on the host; ``block`` tells ``/sys/dev/block`` from ``/sys/dev/char``."""

    block: bool
    major: int
    minor: int


@dataclass(frozen=True, slots=True)
class Health:
    healthy: bool
    reason: str = ""
    rdevs: tuple[Rdev, ...] = ()


HEALTHY = Health(True)


def host_nodes(spec: Spec, device: Device) -> tuple[HostNode, ...]:
    """The host device nodes injecting ``device`` touches, device-level first, without repeats."""
    nodes = list(device.container_edits.device_nodes or ())
    if spec.container_edits is not None:
        nodes += spec.container_edits.device_nodes or ()
    out: dict[HostNode, None] = {}
    for node in nodes:
        out[HostNode(node.host_path or node.path, node.type or None, node.major, node.minor)] = None
    return tuple(out)


def _kind(mode: int) -> str:
    if stat.S_ISCHR(mode):
        return "a char device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "not a device node"


def check(nodes: Iterable[HostNode], stat_fn: StatFn = os.stat) -> Health:
    """Stat every host node; the first problem found makes the device Unhealthy."""
    rdevs: list[Rdev] = []
    for node in nodes:
        if not os.path.isabs(node.path):
            return Health(False, f"host device node {node.path!r} is not an absolute path")
        try:
            info = stat_fn(node.path)
        except FileNotFoundError:
            return Health(False, f"host device node {node.path} is missing")
        except OSError as exc:
            return Health(False, f"host device node {node.path}: {exc.strerror or exc}")
        mode = info.st_mode
        is_dev = stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        if not (is_dev or stat.S_ISFIFO(mode)):
            return Health(False, f"host device node {node.path} is {_kind(mode)}, not a device node")
        wanted = _TYPE_NAMES.get(node.type or "")
        if wanted and _kind(mode) != wanted:
            return Health(False, f"host device node {node.path} is {_kind(mode)}, the spec says {wanted}")
        if is_dev:
            major, minor = os.major(info.st_rdev), os.minor(info.st_rdev)
            if (node.major is not None and node.major != major) or (
                node.minor is not None and node.minor != minor
            ):
                want = f"{node.major if node.major is not None else '*'}:"
                want += f"{node.minor if node.minor is not None else '*'}"
                return Health(False, f"host device node {node.path} is {major}:{minor}, the spec says {want}")
            rdevs.append(Rdev(stat.S_ISBLK(mode), major, minor))
    return Health(True, "", tuple(rdevs))


class HealthTracker:
    """The health of the tracked devices, each distinct group of host nodes stat'ed once."""

    def __init__(self, stat_fn: StatFn = os.stat) -> None:
        self._stat = stat_fn
        self._nodes: dict[str, tuple[HostNode, ...]] = {}
        self._known: dict[tuple[HostNode, ...], Health] = {}
        #: The host device node paths of the tracked devices, and the directories holding them.
        self.node_paths: frozenset[str] = frozenset()
        self.node_dirs: frozenset[Path] = frozenset()

    def track(self, nodes: Mapping[str, tuple[HostNode, ...]]) -> bool:
        """Follow these devices (CDI name -> host nodes) from now on; True when their nodes changed."""
        if nodes == self._nodes:
            return False
        self._nodes = dict(nodes)
        paths = {os.path.normpath(n.path) for group in set(nodes.values()) for n in group}
        self.node_paths = frozenset(paths)
        self.node_dirs = frozenset(map(Path, {os.path.dirname(p) for p in paths if os.path.isabs(p)}))
        return True

    def nodes(self, name: str) -> tuple[HostNode, ...] | None:
        """The host nodes of a tracked device; None when it is not tracked."""
        return self._nodes.get(name)

    def health(self, *, restat: bool) -> dict[str, Health]:
        """Every tracked device's health. ``restat=False`` stats only nodes not seen before: the
        others can only have changed through an event in their directory, which re-stats all."""
        if restat:
            self._known.clear()
        known = self._known
        out: dict[str, Health] = {}
        for name, group in self._nodes.items():
            found = known.get(group)
            if found is None:
                found = known[group] = check(group, self._stat)
            out[name] = found
        for stale in set(known) - set(self._nodes.values()):
            del known[stale]
        return out
