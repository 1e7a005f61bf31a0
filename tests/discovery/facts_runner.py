"""Print the udev facts of host device nodes as JSON (run under ``umockdev-run`` by the tests).

Usage: ``python tests/discovery/facts_runner.py PATH...``; prints ``{"PATH": {facts} | null}``,
``null`` for a node whose device number no device owns.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import sys

from cdi_plugin.cli.udev_facts import udev_facts
from cdi_plugin.inventory.health import Rdev


def main(paths: list[str]) -> int:
    lookup = udev_facts()
    out = {}
    for path in paths:
        info = os.stat(path)
        facts = lookup(Rdev(stat.S_ISBLK(info.st_mode), os.major(info.st_rdev), os.minor(info.st_rdev)))
        out[path] = None if facts is None else dataclasses.asdict(facts)
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
