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
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cdi_plugin.cdi.model import Device, Spec
from cdi_plugin.wording import file_type

StatFn = Callable[[str], os.stat_result]

_TYPE_NAMES = {"c": "a character device", "u": "a character device", "b": "a block device", "p": "a FIFO"}


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
            return Health(False, f"host device node {node.path} is {file_type(mode)}, not a device node")
        wanted = _TYPE_NAMES.get(node.type or "")
        if wanted and file_type(mode) != wanted:
            return Health(False, f"host device node {node.path} is {file_type(mode)}, the spec says {wanted}")
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
    """The health of the tracked devices, each distinct group of host nodes stat'ed once.

    Devices are tracked and re-checked one by one (:meth:`retrack`, :meth:`health_of`,
    :meth:`names_at`), so a change costs with the devices it touches, not with those tracked."""

    def __init__(self, stat_fn: StatFn = os.stat) -> None:
        self._stat = stat_fn
        self._nodes: dict[str, tuple[HostNode, ...]] = {}
        self._known: dict[tuple[HostNode, ...], Health] = {}
        self._groups: Counter[tuple[HostNode, ...]] = Counter()
        self._by_path: dict[str, list[str]] = {}  # normalised host node path -> tracked names
        self._dirs: Counter[Path] = Counter()
        #: The host device node paths of the tracked devices, and the directories holding them.
        self.node_paths: frozenset[str] = frozenset()
        self.node_dirs: frozenset[Path] = frozenset()

    def track(self, nodes: Mapping[str, tuple[HostNode, ...]]) -> bool:
        """Follow exactly these devices (CDI name -> host nodes); True when their nodes changed."""
        if nodes == self._nodes:
            return False
        changes: dict[str, tuple[HostNode, ...] | None] = dict.fromkeys(self._nodes.keys() - nodes.keys())
        changes.update((n, g) for n, g in nodes.items() if self._nodes.get(n) != g)
        return self.retrack(changes)

    def retrack(self, changes: Mapping[str, tuple[HostNode, ...] | None]) -> bool:
        """Follow these devices with these host nodes from now on (None: no longer); True when
        the nodes of the tracked devices changed."""
        paths_moved = changed = False
        for name, group in changes.items():
            old = self._nodes.get(name)
            if old == group:
                continue
            changed = True
            if old is not None:
                del self._nodes[name]
                self._groups[old] -= 1
                if not self._groups[old]:
                    del self._groups[old]
                    self._known.pop(old, None)
                for path in _paths(old):
                    holders = self._by_path[path]
                    holders.remove(name)
                    if not holders:
                        del self._by_path[path]
                        paths_moved = True
                        self._count_dir(path, -1)
            if group is not None:
                self._nodes[name] = group
                self._groups[group] += 1
                for path in _paths(group):
                    holders = self._by_path.setdefault(path, [])
                    if not holders:
                        paths_moved = True
                        self._count_dir(path, 1)
                    holders.append(name)
        if paths_moved:
            self.node_paths = frozenset(self._by_path)
            self.node_dirs = frozenset(self._dirs)
        return changed

    def _count_dir(self, path: str, step: int) -> None:
        if not os.path.isabs(path):
            return
        directory = Path(os.path.dirname(path))
        self._dirs[directory] += step
        if not self._dirs[directory]:
            del self._dirs[directory]

    def nodes(self, name: str) -> tuple[HostNode, ...] | None:
        """The host nodes of a tracked device; None when it is not tracked."""
        return self._nodes.get(name)

    def names_at(self, paths: Iterable[str]) -> set[str]:
        """The tracked devices using any of these host node paths."""
        out: set[str] = set()
        for path in paths:
            out.update(self._by_path.get(os.path.normpath(path), ()))
        return out

    def health_of(self, names: Iterable[str], *, restat: bool = False) -> dict[str, Health]:
        """The health of these devices (those tracked); ``restat`` checks their nodes again."""
        known = self._known
        checked: set[tuple[HostNode, ...]] = set()
        out: dict[str, Health] = {}
        for name in names:
            group = self._nodes.get(name)
            if group is None:
                continue
            found = known.get(group) if not restat or group in checked else None
            if found is None:
                found = known[group] = check(group, self._stat)
                checked.add(group)
            out[name] = found
        return out

    def health(self, *, restat: bool) -> dict[str, Health]:
        """Every tracked device's health. ``restat=False`` stats only nodes not seen before: the
        others can only have changed through an event in their directory, which re-stats them."""
        if restat:
            self._known.clear()
        return self.health_of(self._nodes)


def _paths(group: tuple[HostNode, ...]) -> set[str]:
    return {os.path.normpath(n.path) for n in group}
