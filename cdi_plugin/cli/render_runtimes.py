"""What ``cdi-gen list --runtime`` adds: per runtime, the device names it does not see and why.

Plain lines, never wrapped: a qualified name stays whole and can be copied.
"""

from __future__ import annotations

from collections.abc import Iterable

import click

from cdi_plugin.cdi.runtimes import targets
from cdi_plugin.store import runtimeview
from cdi_plugin.store.registry import Snapshot
from cdi_plugin.store.runtimeview import RuntimeView
from cdi_plugin.wording import plural


def runtime_views(snapshot: Snapshot, names: Iterable[str]) -> list[RuntimeView]:
    """How the runtimes ``names`` (``--runtime``) see ``snapshot``."""
    return runtimeview.runtime_views(snapshot, targets(names))


def print_views(views: list[RuntimeView]) -> None:
    for view in views:
        total = view.seen + len(view.unseen)
        if view.unseen:
            head = f"{len(view.unseen)} of {plural(total, 'device')} not seen"
        else:
            head = f"sees {'the' if total == 1 else 'all'} {plural(total, 'device')}"
        click.echo(f"{view.runtime.label}: {head}")
        for unseen in view.unseen:
            click.echo(f"  not seen   {unseen.qualified_name}: {'; '.join(unseen.reasons)}")
        for name, path in view.elsewhere:
            click.echo(f"  elsewhere  {name}: read from {path}")
        for path, problems in view.files:
            for problem in problems:
                if not problem.is_error:
                    where = f" {problem.pointer}" if problem.pointer else ""
                    click.echo(f"  warning    {path}{where}: {problem.message}")
