"""The work of one watcher batch, in a worker thread: device updates first, then rescans.

A uevent about one device (known by its sysfs path) updates that device's entry in the spec of
each class it touches (:mod:`.livespecs`): the device is read again from the source, as a scan
would read it, and the file is rewritten through the store without enumerating the class or
reading the other spec files. A class is rescanned instead when its spec is not indexed (see
:mod:`.livespecs`), when the update is :class:`~.livespecs.Uncertain`, when the source cannot read
single devices, when the file on disk is not what was last written, or when a batch holds many
devices of a class (a burst, see :data:`MAX_DEVICES`: one rescan is cheaper). Every rescan
indexes the specs it built again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cdi_plugin.cdi.model import Spec
from cdi_plugin.cdi.names import parse_kind
from cdi_plugin.discovery.model import DeviceSource
from cdi_plugin.errors import CdiPluginError
from cdi_plugin.generate.config import DeviceClass
from cdi_plugin.generate.match import query_for
from cdi_plugin.scan.livespecs import Change, LiveSpec, Uncertain, index_class
from cdi_plugin.scan.pipeline import FileReport, Placed, ScanOptions, ScanReport, placing, run_scan
from cdi_plugin.store.dirlock import locked
from cdi_plugin.store.files import spec_file_name
from cdi_plugin.store.ownership import digest
from cdi_plugin.store.plan import DONE, Plan, plan_updates
from cdi_plugin.store.registry import Stat
from cdi_plugin.store.writer import apply

log = logging.getLogger(__name__)

#: A batch with more devices of a class than this, and than half the devices the class had, rescans
#: the class rather than update them one by one (a device's update costs about what a rescan spends
#: on two devices).
MAX_DEVICES = 64

Kinds = frozenset[str]


@dataclass(frozen=True, slots=True)
class DeviceEvent:
    """A uevent about the device at ``sys_path``, touching ``kinds``."""

    sys_path: str
    kinds: Kinds


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

    def run(
        self,
        classes: Sequence[DeviceClass],
        scope: set[str] | None,
        devices: Iterable[DeviceEvent],
        placed: Placed | None = None,
    ) -> tuple[list[Outcome], BaseException | None]:
        """What was written, and the error that stopped the batch (the device updates already
        written are in the outcomes). ``scope`` None rescans every class. ``placed`` hears of each
        file as soon as it is in place."""
        outcomes: list[Outcome] = []
        try:
            if scope is not None:
                by_kind: dict[str, set[str]] = {}
                for event in devices:
                    for kind in event.kinds - scope:
                        by_kind.setdefault(kind, set()).add(event.sys_path)
                if by_kind:
                    outcome, rescan = self._update(classes, by_kind, placed)
                    if outcome is not None:
                        outcomes.append(outcome)
                    scope |= rescan
                if not scope:
                    return outcomes, None
            report = run_scan(self.options, self.source, classes, scope, placed)
            self._index(classes, scope, report)
            outcomes.append(Outcome(report, scope, False))
        except Exception as exc:
            return outcomes, exc
        return outcomes, None

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
                cls, by_kind.get(cls.kind), report.devices, self.options.max_version, self.options.fmt
            )
            data = written.get(cls.kind)
            if live is not None and data is not None and live.render().data == data:
                live.digest = digest(data)
                self.live[cls.kind] = live

    def _update(
        self, classes: Sequence[DeviceClass], by_kind: Mapping[str, set[str]], placed: Placed | None
    ) -> tuple[Outcome | None, set[str]]:
        """Update the devices' entries; returns what was written and the kinds to rescan."""
        lookup = getattr(self.source, "lookup", None)
        current = {c.kind: c for c in classes if c.enabled}
        rescan: set[str] = set()
        changes: dict[str, tuple[LiveSpec, Change]] = {}
        for kind, paths in sorted(by_kind.items()):
            live = self.live.get(kind)
            if lookup is None or live is None or current.get(kind) is not live.cls:
                rescan.add(kind)
                continue
            if len(paths) > max(MAX_DEVICES, len(live.entries) // 2):
                rescan.add(kind)  # a burst: one rescan costs less
                continue
            query = query_for([live.cls])
            try:
                changed = [live.update(path, lookup(path, query)) for path in sorted(paths)]
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
            with locked(out, self.options.lock_timeout) as held:
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
