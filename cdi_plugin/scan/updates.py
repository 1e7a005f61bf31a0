"""The work of one watcher batch, in a worker thread: device updates first, then rescans.

A uevent about one device (known by its sysfs path) updates that device's entry in the spec of
each class it touches (:mod:`.livespecs`): the device is read again from the source, as a scan
would read it, and the file is rewritten through the store without enumerating the class or
reading the other spec files. A class is rescanned instead when its spec is not indexed (see
:mod:`.livespecs`), when the update is :class:`~.livespecs.Uncertain`, when the source cannot read
single devices, when the file on disk is not what was last written, or when a batch holds many
devices of a class that were not read ahead (a burst, see :data:`MAX_DEVICES`: one rescan is
cheaper). Every rescan indexes the specs it built again. A kind that a spec cdi-gen does not own
defines fails the batch (the watcher retries it), but only after the other kinds were rescanned:
one foreign file never keeps the specs of other classes from following their devices.

While a batch is still gathering (the coalescer waits for a burst to end), :meth:`BatchWork.read_ahead`
reads the devices of its events so far and builds their entries, so that the batch, once released,
has little left to do: it takes what was read ahead of a device unless an event about the device
came after that reading started (each event has a number; the batch is given the last one of each
device), and reads the others itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from cdi_plugin.cdi.model import Spec
from cdi_plugin.cdi.names import parse_kind
from cdi_plugin.discovery.model import DeviceSource, Query
from cdi_plugin.errors import CdiPluginError
from cdi_plugin.generate.config import DeviceClass
from cdi_plugin.generate.match import query_for
from cdi_plugin.scan.livespecs import Change, Entry, LiveSpec, Uncertain, index_class
from cdi_plugin.scan.pipeline import FileReport, Placed, ScanOptions, ScanReport, placing, run_scan
from cdi_plugin.store.files import spec_file_name
from cdi_plugin.store.ownership import digest, read_record, written_by
from cdi_plugin.store.plan import DONE, ConflictError, Plan, plan_updates
from cdi_plugin.store.registry import Stat
from cdi_plugin.store.writer import apply

log = logging.getLogger(__name__)

#: A batch with more devices of a class than this that were not read ahead, and more than half as
#: many as a rescan of the class would read (the devices it had and those of the batch), rescans
#: the class rather than update them one by one (reading and building one device's entry alone
#: costs up to what a rescan spends on two devices).
MAX_DEVICES = 64

Kinds = frozenset[str]


@dataclass(frozen=True, slots=True)
class DeviceEvent:
    """A uevent about the device at ``sys_path``, touching ``kinds``."""

    sys_path: str
    kinds: Kinds


@dataclass(frozen=True, slots=True)
class Ahead:
    """A device read ahead of its batch, for one class."""

    number: int  # the number of the device's last event when the reading started
    cls: DeviceClass
    entry: Entry | Uncertain | None  # what the class makes of it (None: nothing)


@dataclass(frozen=True, slots=True)
class Outcome:
    report: ScanReport
    scope: set[str] | None  # the kinds it covers; None: every class
    updated: bool  # device by device rather than rescanned


class BatchWork:
    """Runs batches (one at a time) and keeps the indexed specs between them."""

    def __init__(self, options: ScanOptions, source: DeviceSource) -> None:
        self.options = options
        self.source = source
        self.live: dict[str, LiveSpec] = {}
        #: (kind, sys path) -> the device read ahead of the next batch.
        self.ahead: dict[tuple[str, str], Ahead] = {}

    def read_ahead(self, events: Iterable[tuple[DeviceEvent, int, bool]]) -> None:
        """Read the devices of ``events`` (each with the number of its device's last event, and
        whether that event was a removal) for the classes indexed now, and build their entries, for
        the next :meth:`run` to take."""
        lookup = getattr(self.source, "lookup", None)
        if lookup is None:
            return
        queries: dict[str, Query] = {}
        for event, number, gone in events:
            for kind in event.kinds:
                live = self.live.get(kind)
                if live is None:
                    continue
                query = queries.get(kind) or queries.setdefault(kind, query_for([live.cls]))
                try:
                    device = None if gone else lookup(event.sys_path, query)
                    entry: Entry | Uncertain | None = live.entry_of(device)
                except Uncertain as exc:
                    entry = exc
                except CdiPluginError:
                    continue  # the batch reads it again, and reports what is wrong
                self.ahead[(kind, event.sys_path)] = Ahead(number, live.cls, entry)

    def run(
        self,
        classes: Sequence[DeviceClass],
        scope: set[str] | None,
        devices: Iterable[DeviceEvent],
        placed: Placed | None = None,
        *,
        numbers: Mapping[str, int] | None = None,
        gone: AbstractSet[str] = frozenset(),
    ) -> tuple[list[Outcome], BaseException | None]:
        """What was written, and the error that stopped the batch (the device updates already
        written are in the outcomes). ``scope`` None rescans every class. ``placed`` hears of each
        file as soon as it is in place. ``numbers`` holds the number of each device's last event
        (by sys path): what was read ahead of a device since is taken, the rest is dropped. A device
        in ``gone`` (its last event a removal) is taken as gone without reading it: the kernel sends
        ``remove`` before it deletes the device's directory."""
        outcomes: list[Outcome] = []
        ahead, self.ahead = self.ahead, {}
        try:
            if scope is not None:
                by_kind: dict[str, set[str]] = {}
                for event in devices:
                    for kind in event.kinds - scope:
                        by_kind.setdefault(kind, set()).add(event.sys_path)
                if by_kind:
                    fresh = {
                        key: a
                        for key, a in ahead.items()
                        if numbers is not None and a.number == numbers.get(key[1])
                    }
                    outcome, rescan = self._update(classes, by_kind, placed, fresh, gone)
                    if outcome is not None:
                        outcomes.append(outcome)
                    scope |= rescan
                if not scope:
                    return outcomes, None
            try:
                report = run_scan(self.options, self.source, classes, scope, placed)
            except ConflictError as exc:
                # Kinds other specs define wait for them to go; every other kind is written.
                scope = self._kinds(classes, scope) - {c.kind for c in exc.conflicts}
                if not scope:
                    raise
                report = run_scan(self.options, self.source, classes, scope, placed)
                self._index(classes, scope, report)
                outcomes.append(Outcome(report, scope, False))
                return outcomes, exc
            self._index(classes, scope, report)
            outcomes.append(Outcome(report, scope, False))
        except Exception as exc:
            return outcomes, exc
        return outcomes, None

    def _kinds(self, classes: Sequence[DeviceClass], scope: set[str] | None) -> set[str]:
        """The kinds a rescan of ``scope`` covers: with None, every class's and every kind of a file
        this configuration wrote (a class removed from it loses its spec)."""
        if scope is not None:
            return set(scope)
        config = {c.kind for c in classes}
        recorded = read_record(self.options.output_dir).values()
        return config | {entry.kind for entry in recorded if written_by(entry, config)}

    def _index(self, classes: Sequence[DeviceClass], scope: set[str] | None, report: ScanReport) -> None:
        if scope is None:
            self.live.clear()
        for kind in scope or ():
            self.live.pop(kind, None)
        written = {c.kind: c.data for c in report.plan.changes if c.data is not None}
        by_kind = {f.kind: f.spec for f in report.files if f.spec is not None}
        for cls in classes:
            if not cls.enabled or (scope is not None and cls.kind not in scope):
                continue
            live = index_class(
                cls, by_kind.get(cls.kind), report.devices, self.options.version_ceiling(), self.options.fmt
            )
            data = written.get(cls.kind)
            if live is not None and data is not None and live.render().data == data:
                live.digest = digest(data)
                self.live[cls.kind] = live

    def _update(
        self,
        classes: Sequence[DeviceClass],
        by_kind: Mapping[str, set[str]],
        placed: Placed | None,
        ahead: Mapping[tuple[str, str], Ahead],
        gone: AbstractSet[str],
    ) -> tuple[Outcome | None, set[str]]:
        """Update the devices' entries (taking what was read ``ahead`` of them); returns what was
        written and the kinds to rescan."""
        lookup = getattr(self.source, "lookup", None)
        current = {c.kind: c for c in classes if c.enabled}
        rescan: set[str] = set()
        changes: dict[str, tuple[LiveSpec, Change]] = {}
        for kind, paths in sorted(by_kind.items()):
            live = self.live.get(kind)
            if lookup is None or live is None or current.get(kind) is not live.cls:
                rescan.add(kind)
                continue
            read = {p: a.entry for p in paths if (a := ahead.get((kind, p))) and a.cls is live.cls}
            unread = len(paths) - len(read)
            if unread > MAX_DEVICES and 2 * unread > len(live.entries.keys() | paths):
                rescan.add(kind)  # a burst: one rescan costs less
                continue
            query = query_for([live.cls])
            try:
                changed = []
                for path in sorted(paths):
                    if path in read:
                        entry = read[path]
                    else:
                        entry = live.entry_of(None if path in gone else lookup(path, query))
                    if isinstance(entry, Uncertain):
                        raise entry
                    changed.append(live.put(path, entry))
                if any(changed):
                    changes[kind] = (live, live.render())
            except Uncertain as exc:
                log.debug("%s: rescanning the class: %s", kind, exc)
                self.live.pop(kind)
                rescan.add(kind)
        out = self.options.output_dir
        updated = set(by_kind) - rescan
        if not changes:  # the devices are as they were
            report = ScanReport(self.options, "", Plan(out, ()), ())
            return (Outcome(report, updated, True) if updated else None), rescan
        names = {kind: spec_file_name(parse_kind(kind), self.options.fmt) for kind in changes}
        updates = {names[k]: (k, c.data, live.digest) for k, (live, c) in changes.items()}
        known = {names[k]: live.stat for k, (live, _) in changes.items() if live.stat is not None}
        specs = {k: c.spec.spec for k, (_, c) in changes.items() if c.spec is not None}
        stats: dict[Path, Stat | None] = {}

        def tell(path: Path, spec: Spec | None, stat: Stat | None) -> None:
            stats[path] = stat
            if placed is not None:
                placed(path, spec, stat)

        try:
            with self.options.lock() as held:
                plan = plan_updates(out, updates, known)
                applied = apply(plan, tidy=held.held, placed=placing(tell, specs))
        except CdiPluginError as exc:
            log.debug("device updates of %s: %s; rescanning", ", ".join(sorted(changes)), exc)
            for kind in changes:
                self.live.pop(kind)
            return None, rescan | set(changes)
        for kind, (live, change) in changes.items():
            if change.data is None:
                del self.live[kind]  # no file: the next device of the kind is a rescan
            else:
                live.digest = plan.record_after[names[kind]].sha256
                live.stat = stats.get(out / names[kind], live.stat)  # unchanged: not written
        files = tuple(
            FileReport(c.path, c.kind, DONE[c.action], changes[c.kind][1].spec) for c in plan.changes
        )
        report = ScanReport(self.options, "", plan, files, applied=applied)
        return Outcome(report, updated, True), rescan
