"""Run UdevSource queries and print the results as JSON (run under ``umockdev-run`` by the tests).

Usage: ``python tests/discovery/query_runner.py '{"name": {"subsystems": [...], ...}, ...}'``.
Prints ``{"name": {"devices": [...], "warnings": [...], "seconds": 0.01}}`` (or ``{"error": msg}``).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from cdi_plugin.discovery.fixture import device_to_obj
from cdi_plugin.discovery.model import Query
from cdi_plugin.discovery.udev import UdevSource
from cdi_plugin.errors import DiscoveryError


def query_from_obj(obj: dict[str, Any]) -> Query:
    return Query(
        subsystems=frozenset(obj.get("subsystems", ())),
        devnode_globs=tuple(obj.get("devnode_globs", ())),
        attributes=frozenset(obj.get("attributes", ())),
        with_ancestors=obj.get("with_ancestors", True),
    )


def query_to_obj(query: Query) -> dict[str, Any]:
    return {
        "subsystems": sorted(query.subsystems),
        "devnode_globs": list(query.devnode_globs),
        "attributes": sorted(query.attributes),
        "with_ancestors": query.with_ancestors,
    }


def main(argv: list[str]) -> int:
    source = UdevSource(dev_root=argv[2]) if len(argv) > 2 else UdevSource()
    results: dict[str, Any] = {}
    for name, obj in json.loads(argv[1]).items():
        started = time.perf_counter()
        try:
            found = source.discover(query_from_obj(obj))
        except DiscoveryError as exc:
            results[name] = {"error": str(exc)}
            continue
        results[name] = {
            "devices": [device_to_obj(d) for d in found.devices],
            "warnings": list(found.warnings),
            "seconds": time.perf_counter() - started,
        }
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
