"""The spec directories as a runtime sees them: which device names resolve, and from which file.

Resolution follows the CDI library's cache exactly:

* directories are read in order; a directory's index is its priority, the later one wins;
* only ``.json`` and ``.yaml`` files, name-sorted, no recursion;
* a file that fails to load (an error) is reported and skipped, never hiding the others; a file
  with only warnings loads, as it does in a runtime, and keeps its warnings;
* the same fully-qualified name twice at one priority is a conflict: it is reported for both
  files and the name does not resolve at all, not even from a higher-priority file.

:class:`SpecRegistry` keeps the parsed files between refreshes and re-reads only files whose
size, mtime or inode changed, so resolving is cheap for the device plugin.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from cdi_plugin.cdi import codec
from cdi_plugin.cdi.model import Device, Spec
from cdi_plugin.cdi.names import Kind, parse_kind
from cdi_plugin.cdi.problems import Problem, from_error
from cdi_plugin.cdi.validate import runtime_problems
from cdi_plugin.errors import SpecLoadError
from cdi_plugin.store.files import list_spec_files, read_spec_bytes, spec_format


@dataclass(frozen=True, slots=True)
class SpecFile:
    """One file in a spec directory; ``spec`` is None when a runtime would not load it.

    ``problems`` are the reasons it does not load, or the warnings of a file that loads.
    """

    path: Path
    priority: int
    spec: Spec | None
    problems: tuple[Problem, ...] = ()

    @property
    def kind(self) -> Kind | None:
        return parse_kind(self.spec.kind) if self.spec is not None else None


@dataclass(frozen=True, slots=True)
class ResolvedDevice:
    qualified_name: str
    kind: Kind
    device: Device
    spec: Spec
    path: Path
    priority: int


@dataclass(frozen=True, slots=True)
class NameConflict:
    """A device name defined in several files at one priority: a runtime resolves it from none."""

    qualified_name: str
    priority: int
    paths: tuple[Path, ...]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An immutable view of the spec directories at one moment."""

    dirs: tuple[Path, ...]
    files: tuple[SpecFile, ...]
    devices: Mapping[str, ResolvedDevice] = field(default_factory=dict)
    conflicts: tuple[NameConflict, ...] = ()

    def resolve(self, qualified_name: str) -> ResolvedDevice | None:
        return self.devices.get(qualified_name)

    @property
    def broken(self) -> tuple[SpecFile, ...]:
        return tuple(f for f in self.files if f.spec is None)

    @property
    def warned(self) -> tuple[SpecFile, ...]:
        """Files that load, with warnings about runtimes that read them differently."""
        return tuple(f for f in self.files if f.spec is not None and f.problems)


def load_spec_file(path: Path, priority: int) -> SpecFile:
    """Read, decode and validate one file the way a runtime's CDI library does."""
    try:
        spec = codec.decode(read_spec_bytes(path), str(path), spec_format(path) or "json")
    except SpecLoadError as exc:
        return SpecFile(path, priority, None, (from_error(exc),))
    problems = tuple(runtime_problems(spec))
    errors = tuple(p for p in problems if p.is_error)
    return SpecFile(path, priority, None, errors) if errors else SpecFile(path, priority, spec, problems)


def resolve(files: Iterable[SpecFile]) -> tuple[dict[str, ResolvedDevice], list[NameConflict]]:
    """Resolve device names across files given in scan order (the CDI cache's ``refresh``)."""
    devices: dict[str, ResolvedDevice] = {}
    clashes: dict[str, set[tuple[int, Path]]] = {}
    for f in files:
        if f.spec is None:
            continue
        kind = parse_kind(f.spec.kind)
        for dev in f.spec.devices:
            name = f"{kind}={dev.name}"
            entry = ResolvedDevice(name, kind, dev, f.spec, f.path, f.priority)
            old = devices.get(name)
            if old is None or f.priority > old.priority:
                devices[name] = entry
            elif f.priority == old.priority:
                clashes.setdefault(name, set()).update({(old.priority, old.path), (f.priority, f.path)})
    conflicts: list[NameConflict] = []
    for name, where in sorted(clashes.items()):
        del devices[name]
        by_priority: dict[int, list[Path]] = {}
        for prio, path in sorted(where):
            by_priority.setdefault(prio, []).append(path)
        conflicts.extend(NameConflict(name, prio, tuple(paths)) for prio, paths in by_priority.items())
    return devices, conflicts


def _stat_key(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class SpecRegistry:
    """Reads spec directories, caching parsed files until they change on disk."""

    def __init__(self, dirs: Sequence[Path]) -> None:
        self.dirs = tuple(Path(d) for d in dirs)
        self._cache: dict[tuple[Path, int], tuple[tuple[int, int, int, int] | None, SpecFile]] = {}

    def refresh(self) -> Snapshot:
        files: list[SpecFile] = []
        seen: set[tuple[Path, int]] = set()
        for priority, directory in enumerate(self.dirs):
            for path in list_spec_files(directory):
                key = (path, priority)
                seen.add(key)
                stamp = _stat_key(path)
                cached = self._cache.get(key)
                if cached is None or stamp is None or cached[0] != stamp:
                    cached = (stamp, load_spec_file(path, priority))
                    self._cache[key] = cached
                files.append(cached[1])
        for key in set(self._cache) - seen:
            del self._cache[key]
        devices, conflicts = resolve(files)
        return Snapshot(self.dirs, tuple(files), MappingProxyType(devices), tuple(conflicts))


def load_registry(dirs: Sequence[Path]) -> Snapshot:
    """A one-off snapshot of ``dirs``."""
    return SpecRegistry(dirs).refresh()
