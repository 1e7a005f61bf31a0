"""What ``cdi-gen watch`` listens to for a set of device classes, and which classes an event touches.

* uevents of the subsystems the classes match; every subsystem when a class matches neither a
  subsystem nor a devnode glob (its query is "every device");
* the directories of devnode globs, with inotify: classes that match only by ``devnode`` (nodes
  never announced to udev, e.g. ``/dev/nvidia*``) and companion nodes that edits name by host path.

A uevent touches a class when its subsystem is one the class matches (or the class matches every
subsystem) and its kernel name one the class matches (unless the class has siblings, whose names
it matches otherwise, or the event is a ``move``: a renamed device's event gives only its new
name, and the device may leave the class by it), or when its device node matches one of the
class's globs; a node appearing or vanishing touches the classes whose globs match its path. Which
of those classes can be updated one device at a time, and which are rescanned whole, is
:mod:`.livespecs`'s business.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cdi_plugin.discovery.model import UdevEvent
from cdi_plugin.generate.config import DeviceClass
from cdi_plugin.generate.match import query_for
from cdi_plugin.globs import match_any, path_glob_match

Kinds = frozenset[str]


@dataclass(frozen=True, slots=True)
class Targets:
    #: The uevent filter; empty when ``every_subsystem`` (or when no class needs uevents).
    subsystems: frozenset[str] = frozenset()
    every_subsystem: bool = False
    by_subsystem: Mapping[str, Kinds] = field(default_factory=dict)
    #: Kinds every uevent touches (classes matching every subsystem).
    any_event: Kinds = frozenset()
    #: Devnode globs (absolute, under /dev) and the kinds each one feeds.
    globs: tuple[tuple[str, Kinds], ...] = ()
    #: The kernel names a kind's devices can have (kinds not listed: any).
    kernels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def wants_uevents(self) -> bool:
        return self.every_subsystem or bool(self.subsystems)

    @property
    def glob_kinds(self) -> Kinds:
        return frozenset(k for _, kinds in self.globs for k in kinds)

    def kinds_for_event(self, event: UdevEvent) -> Kinds:
        kinds = self.any_event | self.by_subsystem.get(event.subsystem, frozenset())
        if self.kernels and event.action != "move":  # a move gives the new name only
            kernels = self.kernels
            kinds = frozenset(k for k in kinds if k not in kernels or match_any(kernels[k], event.sys_name))
        if event.devnode is not None:
            kinds |= self.kinds_for_node(event.devnode)
        return kinds

    def kinds_for_node(self, path: str) -> Kinds:
        """The kinds whose globs match the device node ``path`` (``/dev/...``)."""
        return frozenset(k for glob, kinds in self.globs if path_glob_match(glob, path) for k in kinds)

    def kinds_for_dir_entry(self, path: str) -> Kinds:
        """The kinds whose globs match ``path`` or could match below it (a new directory on a
        wildcard level, such as ``/dev/bus/usb/002`` for ``/dev/bus/usb/*/*``)."""
        depth = path.count("/")
        out: set[str] = set()
        for glob, kinds in self.globs:
            parts = glob.split("/")
            if depth < len(parts) and path_glob_match("/".join(parts[: depth + 1]), path):
                out |= kinds
        return frozenset(out)


def _union(pairs: Iterable[tuple[str, str]]) -> dict[str, Kinds]:
    out: dict[str, set[str]] = {}
    for key, kind in pairs:
        out.setdefault(key, set()).add(kind)
    return {key: frozenset(kinds) for key, kinds in sorted(out.items())}


def targets_for(classes: Sequence[DeviceClass]) -> Targets:
    """What to watch so that every enabled class of ``classes`` stays up to date."""
    by_subsystem: list[tuple[str, str]] = []
    any_event: set[str] = set()
    globs: list[tuple[str, str]] = []
    kernels: dict[str, tuple[str, ...]] = {}
    for cls in classes:
        if not cls.enabled:
            continue
        match = cls.match
        if match.kernel and not cls.siblings and kernels.get(cls.kind) != ():
            kernels[cls.kind] = kernels.get(cls.kind, ()) + match.kernel
        else:
            kernels[cls.kind] = ()  # any kernel name
        if match.subsystems:
            by_subsystem += [(s, cls.kind) for s in match.subsystems]
        elif not match.devnode:
            any_event.add(cls.kind)
        globs += [(g, cls.kind) for g in query_for([cls]).devnode_globs]
    per_subsystem = _union(by_subsystem)
    return Targets(
        subsystems=frozenset() if any_event else frozenset(per_subsystem),
        every_subsystem=bool(any_event),
        by_subsystem=per_subsystem,
        any_event=frozenset(any_event),
        globs=tuple(_union(globs).items()),
        kernels={kind: globs for kind, globs in kernels.items() if globs},
    )
