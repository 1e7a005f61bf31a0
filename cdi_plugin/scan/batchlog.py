"""What the watcher knows of the specs it wrote, and the log line and metrics of each batch.

One line per batch says which files were written or removed and which devices came and went
(INFO when something changed, else DEBUG); a scan's warnings are logged once until they go away
(a full rescan forgets the ones it no longer reports), except that of a scan removing another
configuration's files, logged at every scan that removes some. The structured fields of the line
(events, kinds rescanned, files, device counts, milliseconds) go to the JSON log too.
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from cdi_plugin.errors import GenerateError, SpecInvalidError
from cdi_plugin.scan.pipeline import ScanReport
from cdi_plugin.wording import plural

if TYPE_CHECKING:  # prometheus_client is loaded only where metrics are served
    from cdi_plugin.metrics import ScanMetrics

log = logging.getLogger(__name__)

_MAX_NAMES = 10


def _names(items: Iterable[str]) -> str:
    items = list(items)
    shown = ", ".join(items[:_MAX_NAMES])
    return shown + (f" and {len(items) - _MAX_NAMES} more" if len(items) > _MAX_NAMES else "")


class BatchLog:
    """The devices of each kind and the spec files (name -> kind) as last written."""

    def __init__(self) -> None:
        self.devices: dict[str, frozenset[str]] = {}
        self.files: dict[str, str] = {}
        self._warned: set[str] = set()

    def missing(self, output_dir: Path) -> set[str]:
        """The kinds whose spec file went away from ``output_dir`` behind the watcher's back."""
        return {kind for name, kind in self.files.items() if not os.path.lexists(output_dir / name)}

    def record(
        self,
        report: ScanReport,
        scope: set[str] | None,
        events: int,
        ms: float,
        initial: bool,
        *,
        updated: bool = False,
    ) -> None:
        """``updated``: device by device, without a rescan."""
        now = {f.kind: frozenset(d.qualified_name for d in f.spec.devices) for f in report.files if f.spec}
        before = self.devices
        if scope is None:
            after = now
            files = {}
            self._warned &= set(report.warnings)
        else:
            replaced = {f.kind for f in report.files} if updated else scope  # updates list only changes
            after = {k: v for k, v in before.items() if k not in replaced} | now
            files = {name: kind for name, kind in self.files.items() if kind not in replaced}
        files.update({f.path.name: f.kind for f in report.files if f.action != "removed"})
        self.devices, self.files = after, files
        for warning in report.warnings:
            if warning not in self._warned:
                log.warning("%s", warning)
        self._warned |= set(report.warnings) - set(report.removal_warnings)
        old_names = set().union(*before.values()) if before else set()
        new_names = set().union(*after.values()) if after else set()
        added, gone = sorted(new_names - old_names), sorted(old_names - new_names)
        written = [f.path.name for f in report.files if f.action in {"created", "changed"}]
        removed = [f.path.name for f in report.files if f.action == "removed"]
        what = "every class" if scope is None else ", ".join(sorted(scope))
        extra = {
            "events": events,
            "rescanned": what,
            "updated": updated,
            "written": ",".join(written),
            "removed": ",".join(removed),
            "devices_added": len(added),
            "devices_removed": len(gone),
            "ms": round(ms, 1),
            "lock_wait_ms": round(report.lock_wait * 1000, 1),
        }
        waited = (
            f" ({report.lock_wait:.1f} s of it waiting for another scan)" if report.lock_wait >= 0.1 else ""
        )
        if initial:
            log.info(
                "initial scan in %.0f ms%s: %s in %s%s%s",
                ms,
                waited,
                plural(len(new_names), "device"),
                plural(len(after), "spec"),
                f"; wrote {_names(written)}" if written else "; no spec changed",
                f"; removed {_names(removed)}" if removed else "",
                extra=extra,
            )
            return
        changes = []
        if written:
            changes.append(f"wrote {_names(written)}")
        if removed:
            changes.append(f"removed {_names(removed)}")
        if added:
            changes.append(f"devices added: {_names(added)}")
        if gone:
            changes.append(f"devices removed: {_names(gone)}")
        log.log(
            logging.INFO if changes else logging.DEBUG,
            "%s %s after %s in %.0f ms%s: %s",
            "updated" if updated else "rescanned",
            what,
            plural(events, "event"),
            ms,
            waited,
            "; ".join(changes) or "nothing changed",
            extra=extra,
        )

    def count(
        self, metrics: ScanMetrics, seconds: float, reports: list[ScanReport], exc: BaseException | None
    ) -> None:
        """A batch's metrics, after :meth:`record` (``exc``: the batch failed)."""
        if exc is not None:
            metrics.record_scan(seconds, ok=False)
            if isinstance(exc, (SpecInvalidError, GenerateError)):
                metrics.record_validation_failure("spec")
            return
        metrics.record_scan(
            seconds,
            ok=True,
            devices={kind: len(names) for kind, names in self.devices.items()},
            writes=collections.Counter(f.action for r in reports for f in r.files),
            refused=sum(r.refused for r in reports),
        )
