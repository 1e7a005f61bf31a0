"""DeviceClass CEL selectors evaluated as the scheduler evaluates them, with cel-python."""

from __future__ import annotations

from typing import Any

import celpy


def selects(expression: str, device: dict[str, Any], driver: str) -> bool:
    """Whether ``expression`` selects ``device`` (a ResourceSlice entry) of ``driver``: the
    expression sees ``device.driver`` and ``device.attributes`` (domain -> name -> value, the
    unprefixed names in the driver's domain)."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in device.get("attributes", {}).items():
        domain, _, local = name.rpartition("/")
        ((_, plain),) = value.items()
        attributes.setdefault(domain or driver, {})[local] = plain
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    return bool(program.evaluate({"device": celpy.json_to_cel({"driver": driver, "attributes": attributes})}))
