"""Helpers for the tests that keep docs/ in step with the schemas."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def schema_properties(node: Any) -> Iterator[str]:
    """Property names declared anywhere in a schema (``properties`` maps hold names, not schemas)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                yield from value
                for sub in value.values():
                    yield from schema_properties(sub)
            else:
                yield from schema_properties(value)
    elif isinstance(node, list):
        for item in node:
            yield from schema_properties(item)
