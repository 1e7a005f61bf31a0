"""The scan pipeline behind ``cdi-gen scan``, ``cdi-gen watch`` and ``cdi-plugin serve --scan``.

Configuration, discovery, specs, plan and (unless a dry run) apply, in that order: every check
(config, names, versions, validation, foreign specs) happens before the first byte is written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdi_plugin.cdi import codec
from cdi_plugin.cdi.model import Spec
from cdi_plugin.cdi.runtime_checks import ceiling, format_refusal, refusals
from cdi_plugin.cdi.runtimes import Runtime, targets
from cdi_plugin.discovery.model import DeviceSource, DiscoveredDevice, Discovery
from cdi_plugin.errors import GenerateError
from cdi_plugin.generate.builder import BuildResult, BuiltSpec, build_specs
from cdi_plugin.generate.config import DeviceClass, classes_of, runtimes_of
from cdi_plugin.generate.match import query_for
from cdi_plugin.store import files
from cdi_plugin.store.configfile import read_config
from cdi_plugin.store.dirlock import DEFAULT_LOCK_TIMEOUT, DirLock, locked
from cdi_plugin.store.plan import DONE, FileChange, OtherConfiguration, Plan, plan_writes
from cdi_plugin.store.registry import Stat, file_stat
from cdi_plugin.store.writer import Applied, apply
from cdi_plugin.wording import first_few, plural

log = logging.getLogger(__name__)

DEFAULT_MAX_VERSION = "0.5.0"

#: Told of each spec file as soon as it is in place (from the writing thread): its path, the spec
#: it holds (None: removed) and its stat just after the rename.
Placed = Callable[[Path, Spec | None, Stat | None], None]


def placing(placed: Placed | None, specs: Mapping[str, Spec]) -> Callable[[FileChange], None] | None:
    """The writer's ``placed`` callback telling ``placed`` of each file, with its spec (by kind)."""
    if placed is None:
        return None

    def tell(change: FileChange) -> None:
        if change.data is None:
            placed(change.path, None, None)
        else:
            placed(change.path, specs[change.kind], file_stat(change.path))

    return tell


@dataclass(frozen=True, slots=True)
class ScanOptions:
    config: Path | None = None
    #: Default: the first of the spec directories runtimes read (/etc/cdi).
    output_dir: Path = field(default_factory=lambda: files.spec_dirs()[0])
    dry_run: bool = False
    fmt: codec.Format = "json"
    max_version: str = DEFAULT_MAX_VERSION
    force: bool = False
    skip_refused: bool = False
    #: False refuses a configuration whose classes have hooks or mounts (``serve --scan``).
    allow_hooks_and_mounts: bool = True
    #: The spec directories runtimes read, lowest priority first (``$CDI_SPEC_DIRS``, else
    #: /etc/cdi and /var/run/cdi).
    runtime_dirs: tuple[Path, ...] = field(default_factory=files.spec_dirs)
    #: More directories searched for foreign specs of the same kinds (``--spec-dir``).
    spec_dirs: tuple[Path, ...] = ()
    #: The runtimes every spec written must be read by (``--runtime``; for ``cdi-gen scan``, the
    #: configuration's ``runtimes`` too).
    runtimes: tuple[str, ...] = ()

    def version_ceiling(self) -> str | None:
        """The highest cdiVersion a spec may have: ``max_version``, and what ``runtimes`` read."""
        return ceiling(self.max_version, targets(self.runtimes))

    def conflict_dirs(self) -> tuple[Path, ...]:
        """The directories, besides the output directory, where a foreign spec of a kind being
        written makes the scan fail (unless ``force``).

        A runtime merges every directory it reads, so specs written into one of them must not
        clash with the others. An output directory that no runtime reads (a try-out, a staging
        directory) cannot clash with them in any runtime: it is checked against ``spec_dirs`` only.
        """
        read = (*self.runtime_dirs, *self.spec_dirs)
        if os.path.realpath(self.output_dir) in {os.path.realpath(d) for d in read}:
            return read
        return self.spec_dirs

    #: Seconds to wait for another scan of the output directory before giving up.
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT
    #: Set when the process stops (a watcher): a wait for that scan ends at once.
    stopping: threading.Event | None = field(default=None, compare=False)

    def lock(self) -> contextlib.AbstractContextManager[DirLock]:
        """The output directory's lock, waited for as the options say."""
        return locked(self.output_dir, self.lock_timeout, stopping=self.stopping)


@dataclass(frozen=True, slots=True)
class FileReport:
    path: Path
    kind: str
    action: str  # created, changed, unchanged, removed
    spec: BuiltSpec | None  # None for a removed file
    diff: str = ""


@dataclass(frozen=True, slots=True)
class ScanReport:
    options: ScanOptions
    config_source: str
    plan: Plan
    files: tuple[FileReport, ...]
    warnings: tuple[str, ...] = ()
    applied: Applied | None = None
    #: --force: foreign files in the output directory replaced by cdi-gen's spec of their kind.
    forced: tuple[str, ...] = ()
    #: --force: foreign specs elsewhere that define a kind written; cdi-gen leaves them alone.
    left_alone: tuple[str, ...] = ()
    refused: int = 0  # devices left out because their udev data is hostile
    lock_wait: float = 0.0  # seconds spent waiting for another scan of the output directory
    #: Everything discovered, for the watcher's index of the specs (not kept beyond the batch).
    devices: tuple[DiscoveredDevice, ...] = ()
    #: Those of ``warnings`` on this scan's removals of another configuration's files: each such
    #: scan says them again (a watcher too), unlike a warning of how things are.
    removal_warnings: tuple[str, ...] = ()

    @property
    def device_count(self) -> int:
        return sum(len(f.spec.devices) for f in self.files if f.spec is not None)

    def to_json(self) -> dict[str, Any]:
        files = []
        for f in self.files:
            entry: dict[str, Any] = {"path": str(f.path), "kind": f.kind, "action": f.action}
            if f.spec is not None:
                entry["cdiVersion"] = f.spec.spec.cdi_version
                entry["devices"] = [
                    {
                        "name": d.name,
                        "qualifiedName": d.qualified_name,
                        "hostNodes": list(d.host_nodes),
                        "source": d.source,
                        "naming": d.naming,
                    }
                    for d in f.spec.devices
                ]
            if self.options.dry_run:
                entry["diff"] = f.diff
            files.append(entry)
        return {
            "dryRun": self.options.dry_run,
            "outputDir": str(self.options.output_dir),
            "config": self.config_source,
            "files": files,
            "forced": list(self.forced),
            "leftAlone": list(self.left_alone),
            "otherConfigurations": [
                {"kinds": sorted(o.kinds), "files": [str(p) for p in o.paths]} for o in self.plan.others
            ],
            "replacedConfigurations": [
                {
                    "kinds": sorted(r.kinds),
                    "sharedKinds": sorted(r.shared),
                    "files": [str(p) for p in r.paths],
                }
                for r in self.plan.replaced
            ],
            "warnings": list(self.warnings),
        }


def _file_reports(plan: Plan, build: BuildResult, dry_run: bool) -> tuple[FileReport, ...]:
    by_kind = {s.kind: s for s in build.specs}
    return tuple(
        FileReport(
            change.path,
            change.kind,
            DONE[change.action],
            by_kind.get(change.kind) if change.action != "remove" else None,
            change.diff() if dry_run else "",
        )
        for change in sorted(plan.changes, key=lambda c: c.path.name)
    )


def other_configuration_warning(output_dir: Path, other: OtherConfiguration) -> str:
    """The warning of a full scan about the files of a configuration sharing no kind with its own."""
    n = len(other.paths)
    were, them = ("were", "them") if n > 1 else ("was", "it")
    return (
        f"{output_dir}: {plural(n, 'spec')} ({first_few([p.name for p in other.paths])}) {were} written "
        f"by another configuration (kinds {first_few(sorted(other.kinds), 5)}), which shares no kind "
        f"with this one; left in place as another generator's: delete {them} if no generator uses "
        "that configuration any more"
    )


def replaced_configuration_warning(output_dir: Path, replaced: OtherConfiguration, dry_run: bool) -> str:
    """The warning of a scan removing files another configuration sharing a kind with its own wrote."""
    n, shared = len(replaced.paths), sorted(replaced.shared)
    return (
        f"{output_dir}: {'would remove' if dry_run else 'removed'} {plural(n, 'spec')} "
        f"({first_few([p.name for p in replaced.paths])}) written by another configuration (kinds "
        f"{first_few(sorted(replaced.kinds), 5)}), which shares {'kinds' if len(shared) > 1 else 'kind'} "
        f"{first_few(shared, 5)} with this one: nothing to do if this one replaced it; if another "
        "generator still uses it, the two remove each other's specs at every scan: give each its own "
        "kinds or its own output directory"
    )


def _refuse_format(runtimes: Sequence[Runtime], fmt: codec.Format) -> None:
    """Raise :class:`GenerateError` when one of ``runtimes`` reads no file of format ``fmt``."""
    for runtime in runtimes:
        refused = format_refusal(runtime, fmt)
        if refused is not None:
            raise GenerateError(f"--format {fmt}: {refused}; nothing was written")


def _check_runtimes(specs: Sequence[Spec], runtimes: Sequence[Runtime], fmt: codec.Format) -> None:
    """Raise :class:`GenerateError` naming the first spec one of ``runtimes`` would drop, and why."""
    for spec in specs:
        for runtime in runtimes:
            errors = [p for p in refusals(runtime, spec, f".{fmt}", fmt) if p.is_error]
            if errors:
                first = errors[0]
                hint = f" ({first.hint})" if first.hint else ""
                raise GenerateError(
                    f"{spec.kind}: {first.pointer or '/'}: {first.message}{hint}; nothing was written"
                )


def run_scan(
    options: ScanOptions,
    source: DeviceSource,
    classes: Sequence[DeviceClass] | None = None,
    kinds: Collection[str] | None = None,
    placed: Placed | None = None,
) -> ScanReport:
    """Scan, build, validate, plan and (unless ``dry_run``) write; raises a ``CdiPluginError``.

    ``classes`` replaces the configuration (``cdi-gen watch``, tests, benchmarks). ``kinds`` limits
    the scan to the classes of those kinds: the specs of other kinds are neither written nor
    removed, and a kind without an enabled class (or without devices) loses its spec. ``placed``
    hears of each file written or removed as soon as it is in place.
    """
    runtimes = targets(options.runtimes)
    if classes is None:
        config = read_config(options.config) if options.config is not None else None
        loaded, config_source = classes_of(config, allow_hooks_and_mounts=options.allow_hooks_and_mounts)
        runtimes = targets(options.runtimes + runtimes_of(config))
    else:
        loaded, config_source = list(classes), "<given classes>"
    _refuse_format(runtimes, options.fmt)
    config_kinds = {c.kind for c in loaded}
    if kinds is not None:
        loaded = [c for c in loaded if c.kind in kinds]
    enabled = any(c.enabled for c in loaded)
    discovery = source.discover(query_for(loaded)) if enabled else Discovery(())
    build = build_specs(loaded, discovery.devices, options.max_version)
    if build.refused and not options.skip_refused:
        n = len(build.refused)
        raise GenerateError(
            f"refusing {plural(n, 'device')} (hostile udev data, or no name of its own), nothing was "
            "written: " + "; ".join(build.refused) + " (--skip-refused writes the other devices)"
        )
    _check_runtimes([s.spec for s in build.specs], runtimes, options.fmt)
    lock = contextlib.nullcontext(None) if options.dry_run else options.lock()
    with lock as held:
        plan = plan_writes(
            [s.spec for s in build.specs],
            options.output_dir,
            fmt=options.fmt,
            spec_dirs=options.conflict_dirs(),
            force=options.force,
            max_version=options.max_version,
            kinds=kinds,
            config=config_kinds,
        )
        tell = placing(placed, {s.kind: s.spec for s in build.specs})
        applied = None if held is None else apply(plan, tidy=held.held, placed=tell)
    for path in plan.adopted if applied is not None else ():
        log.info(
            "%s: cdi-gen's again: the directory has no ownership record, and the file holds exactly "
            "what cdi-gen writes there now",
            path,
        )
    forced = {c.path for c in plan.changes if c.replaces_foreign}
    overridden = [(c.path in forced, f"{c.kind}: {c.path} ({c.reason})") for c in plan.overridden]
    removals = tuple(
        replaced_configuration_warning(options.output_dir, r, options.dry_run) for r in plan.replaced
    )
    return ScanReport(
        options,
        config_source,
        plan,
        _file_reports(plan, build, options.dry_run),
        tuple(discovery.warnings)
        + build.warnings
        + build.refused
        + tuple(
            f"{c.path}: {c.kind} has no devices now, but this file, {c.reason}, is left as it is "
            "(runtimes still read it): remove it if its devices are gone"
            for c in plan.left
        )
        + tuple(other_configuration_warning(options.output_dir, o) for o in plan.others)
        + removals,
        applied,
        tuple(line for was_forced, line in overridden if was_forced),
        tuple(line for was_forced, line in overridden if not was_forced),
        len(build.refused),
        0.0 if held is None else held.waited,
        discovery.devices,
        removals,
    )
