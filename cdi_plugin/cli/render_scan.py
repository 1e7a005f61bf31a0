"""What ``cdi-gen scan`` prints for people (a rich table, diffs) or scripts (JSON).

Results go to stdout; warnings and progress to stderr (progress only on a terminal). A warning
is one line however long: rich does not wrap it.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from cdi_plugin.scan import ScanReport
from cdi_plugin.wording import plural

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
        _err.print(f"[yellow]cdi-gen: warning:[/] {escape(w)}", soft_wrap=True)


def print_json(report: ScanReport) -> None:
    sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")


def _diff_text(diff: str) -> Text:
    text = Text()
    for line in diff.splitlines(keepends=True):
        style = "green" if line.startswith("+") else "red" if line.startswith("-") else ""
        if line.startswith(("+++", "---", "@@")):
            style = "cyan"
        text.append(line, style=style)
    return text


def print_scan(report: ScanReport) -> None:
    dry = report.options.dry_run
    if not report.files:
        _out.print(f"no matching devices; nothing to write in {escape(str(report.options.output_dir))}")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("kind", "device", "host nodes", "file", "status"):
        table.add_column(name, overflow="fold")
    for f in report.files:
        status = _WOULD[f.action] if dry else f.action
        styled = f"[{_STYLE[f.action]}]{status}[/]"
        if f.spec is None:
            table.add_row(escape(f.kind), "-", "-", escape(str(f.path)), styled)
            continue
        for i, d in enumerate(f.spec.devices):
            table.add_row(
                escape(f.kind) if i == 0 else "",
                escape(d.name),
                escape(" ".join(d.host_nodes)),
                escape(str(f.path)) if i == 0 else "",
                styled if i == 0 else "",
            )
    _out.print(table)
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
                _out.print(_diff_text(f.diff), end="")
        _out.print("[bold]dry run:[/] nothing was written")
