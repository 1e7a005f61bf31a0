"""What ``cdi-gen validate`` and ``cdi-gen list`` compute, apart from how it is shown."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdi_plugin.cdi import codec
from cdi_plugin.cdi.model import Spec
from cdi_plugin.cdi.problems import Problem, Severity, from_error
from cdi_plugin.cdi.validate import validate_bytes
from cdi_plugin.errors import SpecLoadError
from cdi_plugin.store.files import DEFAULT_SPEC_DIRS, list_spec_files, read_spec_bytes, spec_format
from cdi_plugin.store.registry import SpecFile, resolve


@dataclass
class FileReport:
    path: Path
    priority: int
    spec: Spec | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.spec is not None and not any(p.is_error for p in self.problems)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "valid": self.valid,
            "kind": self.spec.kind if self.spec else None,
            "cdiVersion": self.spec.cdi_version if self.spec else None,
            "devices": len(self.spec.devices) if self.spec else None,
            "problems": [p.to_json() for p in self.problems],
        }


@dataclass
class ValidationReport:
    files: list[FileReport]
    searched: list[Path]

    @property
    def valid(self) -> bool:
        return all(f.valid for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "files": [f.to_json() for f in self.files]}


def _check_file(path: Path, priority: int, max_version: str | None) -> FileReport:
    report = FileReport(path, priority)
    fmt = spec_format(path)
    if fmt is None and path.exists():
        report.problems.append(
            Problem("", "ignored-suffix", "runtimes ignore this file: only .json and .yaml are read",
                    "rename it", Severity.WARNING)
        )  # fmt: skip
    try:
        data = read_spec_bytes(path)
    except SpecLoadError as exc:
        report.problems.insert(0, from_error(exc))
        return report
    guessed: codec.Format = fmt or ("yaml" if path.suffix == ".yml" else "json")
    result = validate_bytes(data, str(path), guessed, max_version)
    report.spec = result.spec
    report.problems = result.problems + report.problems
    return report


def _add_conflicts(reports: list[FileReport]) -> None:
    """Report what the runtime's cache would do with names defined in several files."""
    by_path = {r.path: r for r in reports}
    files = [SpecFile(r.path, r.priority, r.spec) for r in reports if r.valid]
    files.sort(key=lambda f: (f.priority, f.path.name))
    devices, conflicts = resolve(files)
    for conflict in conflicts:
        for path in conflict.paths:
            others = ", ".join(str(p) for p in conflict.paths if p != path)
            by_path[path].problems.append(
                Problem(_device_pointer(by_path[path].spec, conflict.qualified_name), "conflict",
                        f"{conflict.qualified_name} is also defined in {others} at the same priority; "
                        "runtimes drop every definition of it",
                        "define each device in one file per directory")
            )  # fmt: skip
    for f in files:
        assert f.spec is not None
        for dev in f.spec.devices:
            name = f"{f.spec.kind}={dev.name}"
            winner = devices.get(name)
            if winner is not None and winner.path != f.path:
                by_path[f.path].problems.append(
                    Problem(_device_pointer(f.spec, name), "shadowed",
                            f"{name} is overridden by {winner.path}, which has a higher priority",
                            "", Severity.WARNING)
                )  # fmt: skip


def _device_pointer(spec: Spec | None, qualified: str) -> str:
    name = qualified.partition("=")[2]
    for i, dev in enumerate(spec.devices if spec else ()):
        if dev.name == name:
            return f"/devices/{i}/name"
    return ""


def validate_paths(paths: list[Path], max_version: str | None = None) -> ValidationReport:
    """Validate files and directories; directories get the runtime's priority and conflict rules.

    A directory's priority is its position among the directories named (or holding the files
    named), in the order given; with no paths, the standard spec directories are checked.
    """
    searched = paths or list(DEFAULT_SPEC_DIRS)
    reports: list[FileReport] = []
    priorities: dict[Path, int] = {}
    for path in searched:
        if path.is_dir():
            priority = priorities.setdefault(path.resolve(), len(priorities))
            reports += [_check_file(p, priority, max_version) for p in list_spec_files(path)]
        elif path.exists() or path.is_symlink() or paths:
            priority = priorities.setdefault(path.parent.resolve(), len(priorities))
            reports.append(_check_file(path, priority, max_version))
    _add_conflicts(reports)
    return ValidationReport(reports, searched)
