"""Everything ``cdi-gen`` prints for people (rich) or scripts (JSON). The only importer of rich."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cdi_plugin.cdi.problems import Problem, Severity
from cdi_plugin.store.registry import Snapshot, SpecFile
from cdi_plugin.store.validation import ValidationReport
from cdi_plugin.wording import plural

_out = Console(highlight=False)
if not _out.is_terminal:  # logs and pipes: no wrapping inside table cells
    _out.width = 200


def _line(text: str) -> None:
    """One line of output that is never wrapped, so that it stays one line in logs and pipes."""
    _out.print(text, soft_wrap=True)


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def _problem_table(problems: list[Problem]) -> Table:
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    for name in ("where", "severity", "rule", "problem", "hint"):
        table.add_column(name, overflow="fold")
    for p in problems:
        style = "red" if p.is_error else "yellow"
        table.add_row(
            escape(p.pointer or "-"), f"[{style}]{p.severity}[/]", f"[{style}]{p.rule}[/]",
            escape(p.message), escape(p.hint),
        )  # fmt: skip
    return table


def print_validation(report: ValidationReport) -> None:
    if not report.files:
        where = ", ".join(str(p) for p in report.searched)
        _line(f"no spec files found in {escape(where)}")
        return
    for f in report.files:
        path = escape(str(f.path))
        mark = "[red]✗[/]" if not f.valid else "[yellow]![/]" if f.problems else "[green]✓[/]"
        if f.valid and f.spec is not None:
            n = len(f.spec.devices)
            warned = f", {plural(len(f.problems), 'warning')}" if f.problems else ""
            _line(
                f"{mark} {path}  {escape(f.spec.kind)}, {plural(n, 'device')}, "
                f"cdiVersion {escape(f.spec.cdi_version)}{warned}"
            )
        elif len(f.problems) == 1 and not f.problems[0].pointer:
            problem = f.problems[0]
            what = "" if problem.is_error else f"{problem.severity}: "
            _line(f"{mark} {path}: {what}{escape(problem.message)}")
            continue
        else:
            _line(f"{mark} {path}")
        if f.problems:
            _out.print(_problem_table(f.problems))
    bad = sum(not f.valid for f in report.files)
    total = len(report.files)
    summary = f"{plural(total, 'file')}: {total - bad} valid, {bad} invalid"
    errors, warnings = report.count(Severity.ERROR), report.count(Severity.WARNING)
    if warnings:
        summary += f" ({plural(errors, 'error')}, {plural(warnings, 'warning')})"
    _line(f"[{'red' if bad else 'yellow' if warnings else 'green'}]{summary}[/]")


def listing_json(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "dirs": [str(d) for d in snapshot.dirs],
        "devices": [
            {
                "kind": str(d.kind),
                "name": d.device.name,
                "qualifiedName": d.qualified_name,
                "path": str(d.path),
                "priority": d.priority,
            }
            for d in sorted(snapshot.devices.values(), key=lambda d: d.qualified_name)
        ],
        "conflicts": [
            {"qualifiedName": c.qualified_name, "priority": c.priority, "paths": [str(p) for p in c.paths]}
            for c in snapshot.conflicts
        ],
        "broken": [_file_json(f) for f in snapshot.broken],
        "warnings": [_file_json(f) for f in snapshot.warned],
    }


def _file_json(f: SpecFile) -> dict[str, Any]:
    return {"path": str(f.path), "priority": f.priority, "problems": [p.to_json() for p in f.problems]}


def print_listing(snapshot: Snapshot) -> None:
    if snapshot.devices:
        table = Table(box=None, header_style="bold", pad_edge=False)
        for name in ("kind", "name", "qualified name", "file", "priority"):
            table.add_column(name, overflow="fold")
        for d in sorted(snapshot.devices.values(), key=lambda d: d.qualified_name):
            table.add_row(
                escape(str(d.kind)), escape(d.device.name), escape(d.qualified_name),
                escape(str(d.path)), str(d.priority),
            )  # fmt: skip
        _out.print(table)
    else:
        _line(f"no resolvable devices in {escape(', '.join(str(d) for d in snapshot.dirs))}")
    for c in snapshot.conflicts:
        files = ", ".join(str(p) for p in c.paths)
        _line(
            f"[red]conflict[/] {escape(c.qualified_name)}: defined in {escape(files)} "
            f"(priority {c.priority}); it does not resolve"
        )
    for f in snapshot.broken:
        _line(f"[red]broken[/] {escape(str(f.path))}")
        _out.print(_problem_table(list(f.problems)))
    for f in snapshot.warned:
        _line(f"[yellow]warning[/] {escape(str(f.path))}: loads, with {plural(len(f.problems), 'warning')}")
        _out.print(_problem_table(list(f.problems)))
