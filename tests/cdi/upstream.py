"""The upstream CDI JSON Schema (draft-07, ``schema.json`` + ``defs.json``), for cross-checks.

It lives next to the repository (``../shared/upstream-cdi-schema``) and is never copied into it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = REPO / ".." / "shared" / "upstream-cdi-schema"


@functools.cache
def validator() -> Draft7Validator:
    schema = json.loads((UPSTREAM / "schema.json").read_text())
    defs = json.loads((UPSTREAM / "defs.json").read_text())
    registry: Registry[Any] = Registry().with_resource(
        "defs.json", Resource.from_contents(defs, default_specification=DRAFT7)
    )
    return Draft7Validator(schema, registry=registry)


def errors(instance: Any) -> list[str]:
    """The upstream schema's complaints about ``instance``; empty when it passes."""
    return [f"{e.json_path}: {e.message}" for e in validator().iter_errors(instance)]
