"""``python -m cdi_plugin.discovery``: print what discovery finds, as a fixture file.

Records the host (or replays a fixture) for a query given on the command line; the JSON goes to
stdout, each warning to stderr as ``warning: ...``. Useful to see what udev reports, to record a
fixture for ``--source fixture:PATH``, and to run discovery under ``umockdev-run``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cdi_plugin.discovery.fixture import dumps
from cdi_plugin.discovery.model import Query
from cdi_plugin.discovery.sources import make_source
from cdi_plugin.errors import DiscoveryError

PROG = "python -m cdi_plugin.discovery"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Print what discovery finds, as a fixture file (for --source fixture:PATH): the JSON "
        "on stdout, each warning on stderr.",
    )
    parser.add_argument(
        "-s", "--subsystem", action="append", default=[], help="udev subsystem (repeatable; default: all)"
    )
    parser.add_argument(
        "-a", "--attribute", action="append", default=[], help="sysfs attribute to read (repeatable)"
    )
    parser.add_argument(
        "-g", "--glob", action="append", default=[], help="devnode glob under /dev (repeatable)"
    )
    parser.add_argument("--no-ancestors", action="store_true", help="leave out parent devices")
    parser.add_argument("--source", default="udev", help="udev (default) or fixture:PATH")
    parser.add_argument(
        "--dev-root", default="/dev", help="where the host's /dev is visible (udev source; default: /dev)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    query = Query(
        subsystems=frozenset(args.subsystem),
        devnode_globs=tuple(args.glob),
        attributes=frozenset(args.attribute),
        with_ancestors=not args.no_ancestors,
    )
    try:
        found = make_source(args.source, dev_root=args.dev_root, simulated=False).discover(query)
    except DiscoveryError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    for warning in found.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    sys.stdout.write(dumps(found.devices))
    return 0


if __name__ == "__main__":
    sys.exit(main())
