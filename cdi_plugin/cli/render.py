"""Everything ``cdi-gen`` prints for people (rich) or scripts (JSON). The only importer of rich."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cdi_plugin.cdi.problems import Problem, Severity
from cdi_plugin.cli.output import write_document
from cdi_plugin.store.registry import NameConflict, SharedNode, Snapshot, SpecFile
from cdi_plugin.store.validation import ValidationReport
from cdi_plugin.wording import defined_in, escape_controls, plural, some

_out = Console(highlight=False)
if not _out.is_terminal:  # logs and pipes: no wrapping inside table cells
    _out.width = 200


def _line(text: str) -> None:
    """One line of output that is never wrapped, so that it stays one line in logs and pipes."""
    _out.print(text, soft_wrap=True)


def _text(text: str) -> str:
    """Text from a spec file or its name, for rich: control characters and markup escaped."""
    return escape(escape_controls(text))


def _encodes(text: str) -> bool:
    """Whether stdout's encoding has ``text`` (not in the C locale of a Python without UTF-8 mode)."""
    try:
        text.encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def print_json(obj: Any) -> None:
    """``obj`` as indented JSON, encoded whole before any of it is written."""
    write_document(json.dumps(obj, indent=2) + "\n")


#: A file's problems shown as text; ``--json`` gives every one.
MAX_SHOWN_PROBLEMS = 100


def _more(problems: Sequence[Problem]) -> str:
    """``N more problems (--json lists them all)`` past the first :data:`MAX_SHOWN_PROBLEMS`, or ``""``."""
    more = len(problems) - MAX_SHOWN_PROBLEMS
    return f"{plural(more, 'more problem')} (--json lists them all)" if more > 0 else ""


_PROBLEM_COLUMNS = ("where", "severity", "rule", "problem", "hint")
_MIN_TEXT = 20  # the problem and hint columns, narrower than this, give way to one line per problem


def _print_problems(out: Console, problems: Sequence[Problem]) -> None:
    """A table of the problems whose pointers, severities and rules are never broken; on a
    terminal too narrow for it, one line per problem, which the terminal wraps."""
    shown = problems[:MAX_SHOWN_PROBLEMS]
    rows = [
        tuple(
            escape(escape_controls(text))
            for text in (p.pointer or "-", str(p.severity), p.rule, p.message, p.hint)
        )
        for p in shown
    ]
    natural = [
        max(cell_len(head), *(cell_len(r[i]) for r in rows)) for i, head in enumerate(_PROBLEM_COLUMNS[:3])
    ]
    if sum(natural) + _GAP * 4 + 2 * _MIN_TEXT > out.width:
        for p, (where, severity, rule, message, hint) in zip(shown, rows, strict=True):
            style = "red" if p.is_error else "yellow"
            out.print(
                f"  {where}: [{style}]{severity} {rule}[/]: {message}{'; ' * bool(hint)}{hint}",
                soft_wrap=True,
            )
        if _more(problems):
            out.print(f"  {_more(problems)}", soft_wrap=True)
        return
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    for i, name in enumerate(_PROBLEM_COLUMNS):
        table.add_column(name, no_wrap=i < 3, overflow="fold")
    if _more(problems):
        table.caption = _more(problems)
        table.caption_justify = "left"
    for p, (where, severity, rule, message, hint) in zip(shown, rows, strict=True):
        style = "red" if p.is_error else "yellow"
        table.add_row(where, f"[{style}]{severity}[/]", f"[{style}]{rule}[/]", message, hint)
    out.print(table)


def print_validation(report: ValidationReport) -> None:
    if not report.files:
        where = ", ".join(str(p) for p in report.searched)
        _line(f"no spec files found in {_text(where)}")
        return
    cross, tick = ("✗", "✓") if _encodes("✗✓") else ("x", "+")
    for f in report.files:
        path = _text(str(f.path))
        mark = f"[red]{cross}[/]" if not f.valid else "[yellow]![/]" if f.problems else f"[green]{tick}[/]"
        if f.valid and f.spec is not None:
            n = len(f.spec.devices)
            warned = f", {plural(len(f.problems), 'warning')}" if f.problems else ""
            _line(
                f"{mark} {path}  {_text(f.spec.kind)}, {plural(n, 'device')}, "
                f"cdiVersion {_text(f.spec.cdi_version)}{warned}"
            )
        elif len(f.problems) == 1 and not f.problems[0].pointer:
            problem = f.problems[0]
            what = "" if problem.is_error else f"{problem.severity}: "
            _line(f"{mark} {path}: {what}{_text(problem.message)}")
            continue
        else:
            _line(f"{mark} {path}")
        if f.problems:
            _print_problems(_out, f.problems)
    bad = sum(not f.valid for f in report.files)
    total = len(report.files)
    summary = f"{plural(total, 'file')}: {total - bad} valid, {bad} invalid"
    errors, warnings = report.count(Severity.ERROR), report.count(Severity.WARNING)
    if warnings:
        summary += f" ({plural(errors, 'error')}, {plural(warnings, 'warning')})"
    _line(f"[{'red' if bad else 'yellow' if warnings else 'green'}]{summary}[/]")


def listing_json(snapshot: Snapshot, skipped_dirs: Sequence[SpecFile] = ()) -> dict[str, Any]:
    """``cdi-gen list --json``; ``skipped_dirs``: the spec directories runtimes read nothing from
    (a symbolic link), each with the problem that says why."""
    return {
        "dirs": [str(d) for d in snapshot.dirs],
        "skippedDirs": [_file_json(f) for f in skipped_dirs],
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
        "sharedNodes": [{"hostPath": s.host_path, "qualifiedNames": list(s.names)} for s in snapshot.shared],
    }


def _file_json(f: SpecFile) -> dict[str, Any]:
    return {"path": str(f.path), "priority": f.priority, "problems": [p.to_json() for p in f.problems]}


#: The columns of ``cdi-gen list``, as the table heads them; the plain rows have the same order.
_LIST_COLUMNS = ("qualified name", "file", "priority", "kind", "name")
_GAP = 2  # between two columns of a table without a box
_MIN_FOLDED_FILE = 12  # a narrower file column is dropped rather than folded


def print_listing(snapshot: Snapshot) -> None:
    """A table on a terminal; plain tab-separated rows on stdout otherwise, the rest on stderr.

    A qualified name is never broken: on a narrow terminal the name and kind columns (which the
    qualified name holds) go first, then the priority (which the file's directory tells), then
    the file column folds, and goes last.
    """
    devices = sorted(snapshot.devices.values(), key=lambda d: d.qualified_name)
    rows = [
        (d.qualified_name, _one_field(str(d.path)), str(d.priority), str(d.kind), d.device.name)
        for d in devices
    ]
    if not sys.stdout.isatty():
        sys.stdout.writelines("\t".join(row) + "\n" for row in rows)
        for line in _listing_problems(snapshot):
            sys.stderr.write(line + "\n")
        return
    out = Console(highlight=False)
    if rows:
        _print_list_table(out, rows)
    else:
        out.print(escape(_no_devices(snapshot)), soft_wrap=True)
    for c in snapshot.conflicts:
        out.print(f"[red]conflict[/] {escape(_conflict_line(c))}", soft_wrap=True)
    for shared in snapshot.shared:
        out.print(f"[yellow]shared[/] {escape(_shared_line(shared))}", soft_wrap=True)
    for f in snapshot.broken:
        out.print(f"[red]broken[/] {_text(str(f.path))}", soft_wrap=True)
        _print_problems(out, f.problems)
    for f in snapshot.warned:
        warned = f"loads, with {plural(len(f.problems), 'warning')}"
        out.print(f"[yellow]warning[/] {_text(str(f.path))}: {warned}", soft_wrap=True)
        _print_problems(out, f.problems)


def _one_field(text: str) -> str:
    """A file name as one field of one row: a backslash and every control character (tab, newline,
    escape...) is escaped."""
    return escape_controls(text.replace("\\", "\\\\"))


def _conflict_line(c: NameConflict) -> str:
    where = defined_in([_one_field(str(p)) for p in c.paths])
    return f"{c.qualified_name}: {where} (priority {c.priority}); it does not resolve"


def _shared_line(shared: SharedNode) -> str:
    return (
        f"{_one_field(shared.host_path)}: given by {some(list(shared.names))}, of different vendors: "
        "it is handed out under each name (remove the specs of the vendor no longer used)"
    )


def _listing_problems(snapshot: Snapshot) -> list[str]:
    """What the plain rows leave out, one line each: no devices, conflicts, host nodes of several
    vendors, broken files, warnings."""
    lines = [] if snapshot.devices else [_no_devices(snapshot)]
    lines += [f"conflict {_conflict_line(c)}" for c in snapshot.conflicts]
    lines += [f"shared {_shared_line(s)}" for s in snapshot.shared]
    for label, files in (("broken", snapshot.broken), ("warning", snapshot.warned)):
        for f in files:
            path, shown = _one_field(str(f.path)), f.problems[:MAX_SHOWN_PROBLEMS]
            lines += [f"{label} {path}: {escape_controls(_where(p) + p.message)}" for p in shown]
            lines += [f"{label} {path}: {_more(f.problems)}"] if _more(f.problems) else []
    return lines


def _no_devices(snapshot: Snapshot) -> str:
    return f"no resolvable devices in {', '.join(_one_field(str(d)) for d in snapshot.dirs)}"


def _where(p: Problem) -> str:
    return f"{p.pointer}: " if p.pointer else ""


def _print_list_table(out: Console, rows: Sequence[Sequence[str]]) -> None:
    columns = _list_layout(rows, out.width)
    if len(columns) == 1:  # not even the names fit beside a file: one per line, wrapped by the terminal
        for row in rows:
            out.print(escape(row[0]), soft_wrap=True)
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for i, width in columns:  # only the file column is ever narrower than its cells: it folds
        table.add_column(_LIST_COLUMNS[i], width=width, no_wrap=i == 0, overflow="fold")
    for row in rows:
        table.add_row(*(escape(row[i]) for i, _ in columns))
    out.print(table)


def _list_layout(rows: Sequence[Sequence[str]], width: int) -> list[tuple[int, int]]:
    """The columns that fit ``width``: (index into :data:`_LIST_COLUMNS`, width) each."""
    natural = [max(cell_len(head), *(cell_len(r[i]) for r in rows)) for i, head in enumerate(_LIST_COLUMNS)]
    for shown in ([0, 1, 2, 3, 4], [0, 1, 2, 3], [0, 1, 2], [0, 1]):
        if sum(natural[i] for i in shown) + _GAP * (len(shown) - 1) <= width:
            return [(i, natural[i]) for i in shown]
    rest = width - natural[0] - _GAP
    return [(0, natural[0]), (1, rest)] if rest >= _MIN_FOLDED_FILE else [(0, natural[0])]
