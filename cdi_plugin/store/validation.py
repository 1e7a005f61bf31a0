"""Checking spec files and directories as ``cdi-gen validate`` does: each file against the rules,
and the names a runtime's cache would drop or shadow across files. The CLI only renders the result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdi_plugin.cdi import codec
from cdi_plugin.cdi.model import Spec
from cdi_plugin.cdi.problems import Problem, Severity, from_error
from cdi_plugin.cdi.runtime_checks import refusals
from cdi_plugin.cdi.runtimes import Runtime
from cdi_plugin.cdi.validate import runtime_problems, validate_bytes
from cdi_plugin.errors import SpecLoadError
from cdi_plugin.store.files import (
    file_suffix,
    is_linked_dir,
    read_spec_bytes,
    scan_spec_dir,
    spec_dirs,
    spec_format,
)
from cdi_plugin.store.registry import SpecFile, resolve, shared_nodes
from cdi_plugin.wording import some


@dataclass
class FileCheck:
    path: Path
    priority: int
    spec: Spec | None = None
    problems: list[Problem] = field(default_factory=list)
    #: Warnings make the file invalid too (``validate --strict``).
    strict: bool = False
    #: Per runtime checked (``validate --runtime``): why it drops the file or reads it differently.
    runtimes: dict[str, list[Problem]] = field(default_factory=dict)
    #: Runtimes never read the file (its suffix, its directory a symbolic link): checked on its
    #: own, but its devices clash with no other file's.
    ignored: bool = False

    @property
    def valid(self) -> bool:
        return self.spec is not None and not any(p.is_error or self.strict for p in self.problems)

    def count(self, severity: Severity) -> int:
        return sum(p.severity is severity for p in self.problems)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": str(self.path),
            "valid": self.valid,
            "kind": self.spec.kind if self.spec else None,
            "cdiVersion": self.spec.cdi_version if self.spec else None,
            "devices": len(self.spec.devices) if self.spec else None,
            "problems": [p.to_json() for p in self.problems],
        }
        if self.runtimes:
            loads = _runtime_loads(self)
            out["runtimes"] = {
                name: {
                    "loads": loads and not any(p.is_error for p in found),
                    "problems": [p.to_json() for p in found],
                }
                for name, found in self.runtimes.items()
            }
        return out


@dataclass
class ValidationReport:
    files: list[FileCheck]
    searched: list[Path]

    @property
    def valid(self) -> bool:
        return all(f.valid for f in self.files)

    def count(self, severity: Severity) -> int:
        return sum(f.count(severity) for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "errors": self.count(Severity.ERROR),
            "warnings": self.count(Severity.WARNING),
            "files": [f.to_json() for f in self.files],
        }


def _check_file(
    path: Path, priority: int, max_version: str | None, runtimes: Sequence[Runtime] = ()
) -> FileCheck:
    report = FileCheck(path, priority)
    fmt = spec_format(path)
    if fmt is None and path.exists():
        report.ignored = True
        report.problems.append(
            Problem("", "ignored-suffix", "runtimes ignore this file: only .json and .yaml are read",
                    "rename it", Severity.WARNING)
        )  # fmt: skip
    if is_linked_dir(path.parent):
        report.ignored = True
        report.problems.append(
            Problem("", "linked-dir",
                    f"runtimes ignore this file: its directory {path.parent} is a symbolic link, which "
                    "their CDI library does not follow",
                    "name the directory it points to in their spec directories", Severity.WARNING)
        )  # fmt: skip
    try:
        data = read_spec_bytes(path)
    except SpecLoadError as exc:
        report.problems.insert(0, from_error(exc))
        return report
    guessed: codec.Format = fmt or ("yaml" if file_suffix(path) == ".yml" else "json")
    result = validate_bytes(data, str(path), guessed, max_version)
    report.spec = result.spec
    report.problems = result.problems + report.problems
    if result.spec is not None:
        suffix = file_suffix(path)
        for runtime in runtimes:
            found = report.runtimes[runtime.name] = refusals(runtime, result.spec, suffix, result.syntax)
            report.problems += found
    return report


def _add_conflicts(reports: list[FileCheck]) -> None:
    """Report what the runtime's cache would do with names defined in several files.

    Every file a runtime loads takes part, including those only the stricter rules reject; one it
    never reads does not.
    """
    by_path = {r.path: r for r in reports}
    files = [SpecFile(r.path, r.priority, r.spec) for r in reports if not r.ignored and _runtime_loads(r)]
    files.sort(key=lambda f: (f.priority, f.path.name))
    devices, conflicts = resolve(files)
    pointers: dict[Path, dict[str, str]] = {}
    for conflict in conflicts:
        for path in conflict.paths:
            if path not in pointers:
                pointers[path] = _device_pointers(by_path[path].spec)
            others = ", ".join(str(p) for p in conflict.paths if p != path)
            by_path[path].problems.append(
                Problem(pointers[path].get(conflict.qualified_name.partition("=")[2], ""), "conflict",
                        f"{conflict.qualified_name} is also defined in {others} at the same priority; "
                        "runtimes drop every definition of it",
                        "define each device in one file per directory")
            )  # fmt: skip
    for f in files:
        assert f.spec is not None
        for i, dev in enumerate(f.spec.devices):
            name = f"{f.spec.kind}={dev.name}"
            winner = devices.get(name)
            if winner is not None and winner.path != f.path:
                by_path[f.path].problems.append(
                    Problem(f"/devices/{i}/name", "shadowed",
                            f"{name} is overridden by {winner.path}, which has a higher priority",
                            "", Severity.WARNING)
                )  # fmt: skip

    for shared in shared_nodes(devices.values()):
        for family in shared.families:
            rest = shared.others(family[0])
            givers = [f"{n} ({devices[n].path})" for n in rest[:5]]
            verb = "give" if len(rest) > 1 else "gives"
            said = f"{some(givers, total=len(rest))} {verb} too, of another vendor"
            for name in family:
                device = devices[name]
                if device.path not in pointers:
                    pointers[device.path] = _device_pointers(device.spec)
                by_path[device.path].problems.append(
                    Problem(pointers[device.path].get(device.device.name, ""), "shared-node",
                            f"{name} gives the host node {shared.host_path}, which {said}: runtimes "
                            "and device plugins hand the one device out under each name",
                            "remove the specs of the vendor no longer used", Severity.WARNING)
                )  # fmt: skip


def _runtime_loads(report: FileCheck) -> bool:
    spec = report.spec
    return report.valid or (spec is not None and not any(p.is_error for p in runtime_problems(spec)))


def _device_pointers(spec: Spec | None) -> dict[str, str]:
    """Device name -> JSON pointer to the name of its first definition in ``spec``."""
    devices = list(enumerate(spec.devices if spec else ()))
    return {dev.name: f"/devices/{i}/name" for i, dev in reversed(devices)}


def validate_paths(
    paths: list[Path], max_version: str | None = None, strict: bool = False, runtimes: Sequence[Runtime] = ()
) -> ValidationReport:
    """Validate files and directories; directories get the runtime's priority and conflict rules.

    A directory's priority is its position among the directories named (or holding the files
    named), in the order given; with no paths, the spec directories runtimes read are checked.
    ``strict`` makes a file with warnings invalid; each of ``runtimes`` adds why it would drop a
    file (an error) or read it differently (a warning).
    """
    searched = paths or list(spec_dirs())
    reports: list[FileCheck] = []
    priorities: dict[Path, int] = {}
    for path in searched:
        if path.is_dir():
            priority = priorities.setdefault(path.resolve(), len(priorities))
            try:
                files = scan_spec_dir(path)
            except SpecLoadError as exc:
                reports.append(FileCheck(path, priority, problems=[from_error(exc)]))
                continue
            reports += [_check_file(p, priority, max_version, runtimes) for p in files]
        elif path.exists() or path.is_symlink() or paths:
            priority = priorities.setdefault(path.parent.resolve(), len(priorities))
            reports.append(_check_file(path, priority, max_version, runtimes))
    _add_conflicts(reports)
    for report in reports:
        report.strict = strict
    return ValidationReport(reports, searched)
