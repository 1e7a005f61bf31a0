"""The spec directories as a runtime sees them: which device names resolve, and from which file.

Resolution follows the CDI library's cache exactly:

* directories are read in order; a directory's index is its priority, the later one wins;
* only ``.json`` and ``.yaml`` files, name-sorted, no recursion; nothing from a directory that
  is itself a symbolic link (the library's walk does not follow it);
* a file that fails to load (an error) is reported and skipped, never hiding the others; a file
  with only warnings loads, as it does in a runtime, and keeps its warnings;
* the same fully-qualified name twice at one priority is a conflict: it is reported for both
  files and the name does not resolve at all, not even from a higher-priority file.

:class:`SpecRegistry` keeps the parsed files between refreshes and re-reads only files whose
inode, size, mtime or ctime changed; told which files changed (the device plugin's inotify watch
knows), it looks at nothing else and resolves again only the names those files define.
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
from cdi_plugin.store.files import is_linked_dir, link_chain, list_spec_files, read_spec_bytes, spec_format


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
    #: The spec defining it (for an entry a writer handed over again unchanged, the one it was
    #: handed over in first: the same device and spec-level edits).
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
class SharedNode:
    """A host device node given by devices of several vendors' kinds (two generators'
    configurations, or one whose vendor was renamed and its old specs left): a runtime, and a
    device plugin serving both kinds, hand out the one device under each name."""

    host_path: str
    #: The qualified names of the devices that give it, by vendor family (:func:`vendor_roots`),
    #: each sorted.
    families: tuple[tuple[str, ...], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(n for family in self.families for n in family))

    def others(self, name: str) -> tuple[str, ...]:
        """The names of the other vendor families than ``name``'s."""
        return tuple(sorted(n for family in self.families if name not in family for n in family))


def vendor_roots(vendors: Iterable[str]) -> dict[str, str]:
    """Each vendor's family: the shortest of ``vendors`` that is the vendor or a domain it is a
    subdomain of (``management.nvidia.com`` is of ``nvidia.com``'s where both give a node)."""
    known = set(vendors)
    roots = {}
    for vendor in known:
        labels = vendor.split(".")
        suffixes = (".".join(labels[i:]) for i in range(len(labels) - 1, 0, -1))
        roots[vendor] = next((s for s in suffixes if s in known), vendor)
    return roots


def shared_nodes(devices: Iterable[ResolvedDevice]) -> list[SharedNode]:
    """The host nodes (``hostPath``, else ``path``) that devices of kinds of more than one vendor
    family give, counting the spec-level edits each device of a spec gets. Kinds of one vendor, or
    of a vendor and its subdomains, sharing a node are that vendor's choice (a card offered as
    ``gpu`` and as ``igpu``, or as ``nvidia.com/gpu`` and ``management.nvidia.com/gpu``)."""
    by_node: dict[str, dict[str, set[str]]] = {}
    for d in devices:
        edits = [d.device.container_edits, d.spec.container_edits]
        for node in (n for e in edits if e is not None for n in e.device_nodes or ()):
            host = node.host_path or node.path
            by_node.setdefault(host, {}).setdefault(d.kind.vendor, set()).add(d.qualified_name)
    shared = []
    for host, vendors in sorted(by_node.items()):
        families: dict[str, set[str]] = {}
        for vendor, root in vendor_roots(vendors).items():
            families.setdefault(root, set()).update(vendors[vendor])
        if len(families) > 1:
            shared.append(SharedNode(host, tuple(sorted(tuple(sorted(f)) for f in families.values()))))
    return shared


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An immutable view of the spec directories at one moment."""

    dirs: tuple[Path, ...]
    files: tuple[SpecFile, ...]
    devices: Mapping[str, ResolvedDevice] = field(default_factory=dict)
    conflicts: tuple[NameConflict, ...] = ()
    #: The names resolved, by kind (``vendor/class``).
    kinds: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def resolve(self, qualified_name: str) -> ResolvedDevice | None:
        return self.devices.get(qualified_name)

    @property
    def broken(self) -> tuple[SpecFile, ...]:
        return tuple(f for f in self.files if f.spec is None)

    @property
    def shared(self) -> list[SharedNode]:
        """Host nodes that the resolved devices of several vendors' kinds give."""
        return shared_nodes(self.devices.values())

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
        for entry in _entries(f):
            name = entry.qualified_name
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


Stat = tuple[int, int, int, int]  # inode, size, mtime, ctime (ns): a file changed when it differs


def file_stat(path: Path | str) -> Stat | None:
    """The stat that tells whether a file changed (None: it cannot be stat'ed)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _listing(directory: Path) -> dict[str, Stat | None]:
    return {p.name: file_stat(p) for p in list_spec_files(directory)}


class SpecRegistry:
    """Reads spec directories, caching parsed files until they change on disk.

    :meth:`refresh` looks at every file (listing the directories, unless the caller has already
    listed them); :meth:`update` only at the files it is told changed, so its cost grows with the
    change, not with the number of files. Either resolves again only the names the changed files
    define (before or after the change).
    """

    def __init__(self, dirs: Sequence[Path]) -> None:
        self.dirs = tuple(Path(d) for d in dirs)
        #: Per directory: file name -> (its stat when read, the file).
        self._files: list[dict[str, tuple[Stat | None, SpecFile]]] = [{} for _ in self.dirs]
        self._order: list[tuple[SpecFile, ...]] = [() for _ in self.dirs]
        self._defs: dict[str, list[ResolvedDevice]] = {}  # every definition of a name
        self._devices: dict[str, ResolvedDevice] = {}
        self._conflicts: dict[str, tuple[NameConflict, ...]] = {}
        self._kinds: dict[str, set[str]] = {}
        self._kind_view: dict[str, frozenset[str]] = {}
        self._snapshot: Snapshot | None = None
        #: (priority, name) -> the links and the file a spec file that is a symbolic link resolves
        #: through (:func:`~cdi_plugin.store.files.link_chain`).
        self.links: dict[tuple[int, str], tuple[Path, ...]] = {}

    def stat_of(self, priority: int, name: str) -> Stat | None:
        """The stat a cached file was read at (None: not cached, or unreadable then)."""
        cached = self._files[priority].get(name)
        return None if cached is None else cached[0]

    def kind_of(self, priority: int, name: str) -> str | None:
        """The kind of a cached file that loaded (None: not cached, or it did not load)."""
        cached = self._files[priority].get(name)
        return None if cached is None or cached[1].spec is None else cached[1].spec.kind

    def take(self, written: Mapping[tuple[int, str], tuple[Spec, Stat]]) -> Snapshot:
        """Files their writer has just put in place, (priority, name) -> (the spec, the file's stat
        then), taken as given: nothing is stat'ed, read or parsed."""
        changed: list[tuple[int, str, Stat | None]] = []
        for (priority, name), (spec, stat) in written.items():
            cached = self._files[priority].get(name)
            if cached is None or cached[0] != stat or cached[1].spec is not spec:
                changed.append((priority, name, stat))
        return self._apply(changed, {key: spec for key, (spec, _) in written.items()})

    def refresh(
        self,
        listing: Sequence[Mapping[str, Stat | None]] | None = None,
        given: Mapping[tuple[int, str], Spec | None] | None = None,
    ) -> Snapshot:
        """Every file of every directory; ``listing`` gives each directory's spec files and their
        stats when the caller has just taken them (``given``: as in :meth:`update`)."""
        lists = [_listing(d) for d in self.dirs] if listing is None else listing
        changed: list[tuple[int, str, Stat | None]] = []
        for priority, (files, now) in enumerate(zip(self._files, lists, strict=True)):
            changed.extend((priority, name, None) for name in files.keys() - now.keys())
            for name, stat in now.items():
                cached = files.get(name)
                if cached is None or stat is None or cached[0] != stat:
                    changed.append((priority, name, stat if stat is not None else _MISSING_STAT))
        return self._apply(changed, given or {})

    def update(
        self, names: Sequence[Iterable[str]], given: Mapping[tuple[int, str], Spec | None] | None = None
    ) -> Snapshot:
        """Only the files named, per directory (each is stat'ed; one gone is dropped). A file in
        ``given`` (priority, name) is taken as that spec, unread, when its stat changed: its
        writer has just written it (None: removed)."""
        changed: list[tuple[int, str, Stat | None]] = []
        given = given or {}
        for priority, batch in enumerate(names):
            files = self._files[priority]
            linked = bool(batch) and is_linked_dir(self.dirs[priority])  # it holds no specs
            for name in batch:
                wanted = name.endswith(_SUFFIXES) and not linked
                stat = file_stat(self.dirs[priority] / name) if wanted else None
                cached = files.get(name)
                if stat is None:
                    if cached is not None:
                        changed.append((priority, name, None))
                elif cached is None or cached[0] != stat:
                    changed.append((priority, name, stat))
                elif (spec := given.get((priority, name))) is not None and spec is not cached[1].spec:
                    # read back before its writer handed it over: keep the writer's objects, which
                    # it goes on sharing with the specs it hands over next
                    changed.append((priority, name, stat))
        return self._apply(changed, given)

    def _apply(
        self, changed: list[tuple[int, str, Stat | None]], given: Mapping[tuple[int, str], Spec | None]
    ) -> Snapshot:
        if self._snapshot is not None and not changed:
            return self._snapshot
        touched: set[str] = set()
        reorder: set[int] = set()
        for priority, name, stat in changed:
            files = self._files[priority]
            old = files.pop(name, None)
            self.links.pop((priority, name), None)
            spec = given.get((priority, name))
            if old is not None and spec is not None and stat is not None and stat is not _MISSING_STAT:
                loaded = SpecFile(old[1].path, priority, spec)
                files[name] = (stat, loaded)
                touched.update(self._redefine(old[1], loaded))
                reorder.add(priority)
                continue
            if old is not None:
                touched.update(self._forget(old[1]))
            if stat is None:
                reorder.add(priority)
                continue
            path = self.dirs[priority] / name
            if spec is not None and stat is not _MISSING_STAT:
                loaded = SpecFile(path, priority, spec)
            else:
                loaded = load_spec_file(path, priority)
                if os.path.islink(path):  # runtimes read what it points to: watched too
                    self.links[(priority, name)] = link_chain(path)
            files[name] = (None if stat is _MISSING_STAT else stat, loaded)
            touched.update(self._define(loaded))
            reorder.add(priority)
        for priority in reorder:
            files = self._files[priority]
            self._order[priority] = tuple(files[n][1] for n in sorted(files))
        if touched or self._snapshot is None:
            self._resolve(touched)
        self._snapshot = Snapshot(
            self.dirs,
            tuple(f for files in self._order for f in files),
            MappingProxyType(dict(self._devices)),
            tuple(c for name in sorted(self._conflicts) for c in self._conflicts[name]),
            MappingProxyType(dict(self._kind_view)),
        )
        return self._snapshot

    def _forget(self, old: SpecFile) -> list[str]:
        if old.spec is None:
            return []
        prefix = f"{parse_kind(old.spec.kind)}="
        names = [prefix + dev.name for dev in old.spec.devices]
        for name in set(names):
            defs = self._defs[name]
            if len(defs) == 1 and defs[0].path is old.path:  # the usual case: its only definition
                defs.clear()
            else:
                defs[:] = [d for d in defs if d.priority != old.priority or d.path != old.path]
        return names

    def _redefine(self, old: SpecFile, new: SpecFile) -> list[str]:
        """A file replaced by a spec its writer handed over: the names whose entry changed. An
        entry the writer reused (the same device object, under the same spec-level edits and
        kind) keeps its definition, whose ``spec`` is then the spec it was first handed over in."""
        if old.spec is None or new.spec is None or old.spec.kind != new.spec.kind:
            return self._forget(old) + self._define(new)
        if old.spec.container_edits is not new.spec.container_edits:
            return self._forget(old) + self._define(new)
        kept = {id(dev) for dev in old.spec.devices}
        fresh = [dev for dev in new.spec.devices if id(dev) not in kept]
        reused = {id(dev) for dev in new.spec.devices} & kept
        gone = [dev for dev in old.spec.devices if id(dev) not in reused]
        prefix = f"{parse_kind(new.spec.kind)}="
        touched: list[str] = []
        for dev in gone:
            name = prefix + dev.name
            defs = self._defs[name]
            defs[:] = [d for d in defs if d.priority != old.priority or d.path != old.path]
            touched.append(name)
        kind = parse_kind(new.spec.kind)
        for dev in fresh:
            entry = ResolvedDevice(prefix + dev.name, kind, dev, new.spec, old.path, old.priority)
            self._defs.setdefault(entry.qualified_name, []).append(entry)
            touched.append(entry.qualified_name)
        return touched

    def _define(self, loaded: SpecFile) -> list[str]:
        entries = _entries(loaded)
        for entry in entries:
            self._defs.setdefault(entry.qualified_name, []).append(entry)
        return [e.qualified_name for e in entries]

    def _resolve(self, names: Iterable[str]) -> None:
        """Resolve these names again from their definitions (the CDI cache's rules)."""
        kinds: set[str] = set()
        for name in names:
            defs = self._defs.get(name) or []
            kind = name.partition("=")[0]
            if self._devices.pop(name, None) is not None:
                kinds.add(kind)
                self._kinds[kind].discard(name)
            self._conflicts.pop(name, None)
            if len(defs) == 1:  # the usual case: one definition
                self._devices[name] = defs[0]
                kinds.add(kind)
                self._kinds.setdefault(kind, set()).add(name)
                continue
            if not defs:
                self._defs.pop(name, None)
                continue
            by_priority: dict[int, list[ResolvedDevice]] = {}
            for d in defs:
                by_priority.setdefault(d.priority, []).append(d)
            clashes = {p: ds for p, ds in by_priority.items() if len(ds) > 1}
            if clashes:
                self._conflicts[name] = tuple(
                    NameConflict(name, p, tuple(sorted({d.path for d in ds})))
                    for p, ds in sorted(clashes.items())
                )
                continue
            self._devices[name] = by_priority[max(by_priority)][0]
            kinds.add(kind)
            self._kinds.setdefault(kind, set()).add(name)
        for kind in kinds:
            members = self._kinds.get(kind)
            if members:
                self._kind_view[kind] = frozenset(members)
            else:
                self._kinds.pop(kind, None)
                self._kind_view.pop(kind, None)


#: The stat of a listed file that could not be stat'ed: read it (and fail as a runtime would).
_MISSING_STAT: Stat = (-1, -1, -1, -1)
_SUFFIXES = (".json", ".yaml")


def _entries(f: SpecFile) -> list[ResolvedDevice]:
    if f.spec is None:
        return []
    kind = parse_kind(f.spec.kind)
    prefix = f"{kind}="
    return [
        ResolvedDevice(prefix + dev.name, kind, dev, f.spec, f.path, f.priority) for dev in f.spec.devices
    ]


def load_registry(dirs: Sequence[Path]) -> Snapshot:
    """A one-off snapshot of ``dirs``."""
    return SpecRegistry(dirs).refresh()
