"""A click command whose ``--help`` lists its options in titled sections.

Written here rather than taken from a click extension: cloup adds 2 MiB to the resident memory of
``cdi-plugin serve`` (it loads ``importlib.metadata``, ``email`` and more), and click-option-group
takes only options made by its own decorator, which the options shared between the programs
(:mod:`cdi_plugin.cli.scanopts`) are not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from cdi_plugin.cli.scanopts import HelpCommand

#: The widest first column before an option's help moves to the next line (click's own limit).
COLUMN_MAX = 30


class SectionedCommand(HelpCommand):
    """``sections`` maps a title to the names of the parameters listed under it, in order; the
    options left over (``--help``) go under "Other options". Every section has the same columns."""

    def __init__(self, *args: Any, sections: Mapping[str, Sequence[str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sections = sections

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                records[param.name] = record
        groups = [
            (title, [records.pop(n) for n in names if n in records]) for title, names in self.sections.items()
        ]
        groups.append(("Other options", list(records.values())))
        width = min(max(len(first) for _, rows in groups for first, _ in rows), COLUMN_MAX)
        for title, rows in groups:
            if rows:
                with formatter.section(title):
                    formatter.write_dl([(first.ljust(width), text) for first, text in rows], col_max=width)
