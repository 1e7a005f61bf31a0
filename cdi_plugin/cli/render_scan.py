"""What ``cdi-gen scan`` prints for people (a rich table, diffs) or scripts (JSON).

Results go to stdout; warnings and progress to stderr (progress only on a terminal). A warning
is one line however long: rich does not wrap it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from cdi_plugin.cli.output import write_document
from cdi_plugin.scan import ScanReport
from cdi_plugin.wording import escape_controls, plural

_out = Console(highlight=False)
_err = Console(stderr=True, highlight=False)
if not _out.is_terminal:  # logs and pipes: no wrapping inside table cells
    _out.width = 200
if not _err.is_terminal:
    _err.width = 400

_STYLE = {"created": "green", "changed": "yellow", "removed": "red", "unchanged": "dim"}
_WOULD = {
    "created": "would create",
    "changed": "would change",
    "removed": "would remove",
    "unchanged": "unchanged",
}


@contextlib.contextmanager
def progress(message: str) -> Iterator[None]:
    """A spinner on stderr while work runs, only when stderr is a terminal."""
    if not _err.is_terminal:
        yield
        return
    with _err.status(escape(message)):
        yield


def print_warnings(warnings: tuple[str, ...]) -> None:
    for w in warnings:
        _err.print(f"[yellow]cdi-gen: warning:[/] {escape(escape_controls(w))}", soft_wrap=True)


def print_json(report: ScanReport) -> None:
    write_document(json.dumps(report.to_json(), indent=2) + "\n")


def _diff_text(diff: str) -> Text:
    text = Text()
    for line in diff.splitlines(keepends=True):
        style = "green" if line.startswith("+") else "red" if line.startswith("-") else ""
        if line.startswith(("+++", "---", "@@")):
            style = "cyan"
        text.append(line, style=style)
    return text


#: The columns of the scan's table: only the file column is ever narrower than its cells (it folds).
_COLUMNS = ("kind", "device", "host nodes", "file", "status")
_GAP = 2  # between two columns of a table without a box
_MIN_FOLDED_FILE = 12  # a narrower file column gives way to one line per file and per device


def _rows(report: ScanReport) -> list[tuple[str, str, str, str, str]]:
    """The table's cells, unstyled: a file's kind, path and status on its first device's row."""
    rows = []
    for f in report.files:
        status = _WOULD[f.action] if report.options.dry_run else f.action
        devices = [(d.name, " ".join(d.host_nodes)) for d in f.spec.devices] if f.spec else [("-", "-")]
        for i, (name, nodes) in enumerate(devices):
            rows.append((f.kind, name, nodes, str(f.path), status) if i == 0 else ("", name, nodes, "", ""))
    return rows


def print_scan(report: ScanReport) -> None:
    """A table; on a terminal too narrow for it without breaking a name, a device or its nodes,
    a line per file (kind, path, status) and per device (name, nodes), which the terminal wraps."""
    dry = report.options.dry_run
    if not report.files:
        _out.print(f"no matching devices; nothing to write in {escape(str(report.options.output_dir))}")
        return
    rows = _rows(report)
    natural = [max(cell_len(head), *(cell_len(r[i]) for r in rows)) for i, head in enumerate(_COLUMNS)]
    fixed = sum(natural) - natural[3] + _GAP * (len(_COLUMNS) - 1)
    styles = iter(_STYLE[f.action] for f in report.files)
    if fixed + min(natural[3], _MIN_FOLDED_FILE) <= _out.width:
        table = Table(box=None, header_style="bold", pad_edge=False)
        for i, name in enumerate(_COLUMNS):
            table.add_column(name, no_wrap=i != 3, overflow="fold")
        for kind, name, nodes, path, status in rows:
            styled = f"[{next(styles)}]{status}[/]" if status else ""
            table.add_row(escape(kind), escape(name), escape(nodes), escape(path), styled)
        _out.print(table)
    else:
        for kind, name, nodes, path, status in rows:
            if kind:
                _out.print(f"{escape(kind)}  {escape(path)}  [{next(styles)}]{status}[/]", soft_wrap=True)
            _out.print(f"  {escape(name)}  {escape(nodes)}", soft_wrap=True)
    for line in report.forced:
        _out.print(
            f"[yellow]--force:[/] {'would write' if dry else 'wrote'} over {escape(line)}", soft_wrap=True
        )
    for line in report.left_alone:
        _out.print(f"[yellow]--force:[/] also defined, left as it is: {escape(line)}", soft_wrap=True)
    counts: dict[str, int] = {}
    for f in report.files:
        counts[f.action] = counts.get(f.action, 0) + 1
    summary = ", ".join(f"{n} {(_WOULD[a] if dry else a)}" for a, n in counts.items())
    devices = report.device_count
    _out.print(f"{plural(devices, 'device')} in {len(report.files)} file(s): {summary}")
    if dry:
        for f in report.files:
            if f.diff:
                _out.print(_diff_text(f.diff), end="", soft_wrap=True)
        _out.print("[bold]dry run:[/] nothing was written")
