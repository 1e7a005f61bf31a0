"""The project's JSON Schemas (``schemas/``, shipped as package data), compiled with jsonschema-rs.

Each error becomes a :class:`Problem` whose rule comes from the keyword (unknown field, missing
field, wrong type) or from the ``x-rule``/``x-hint`` annotations of the failing subschema, which
may also carry ``x-severity: warning`` (runtimes load such a spec).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import jsonschema_rs

from cdi_plugin.cdi.problems import Problem, Severity, pointer_join, pointer_parts
from cdi_plugin.wording import clipped

SPEC_SCHEMA = "cdi-spec.schema.json"
CONFIG_SCHEMA = "config.schema.json"
#: Every schema's ``$id`` is this prefix plus its file name; ``$ref`` between files resolves here.
BASE_URI = "https://cdi-plugin.io/schemas/"

_KEYWORD_RULES = {"additionalProperties": "unknown-field", "required": "required", "type": "type"}
#: jsonschema-rs builds every error of a document at once, a few KB each: an invalid document is
#: checked on its first values only, this many in all, so that a hostile 4 MiB file with an error
#: in each of its entries costs what a small one does (the rules of validate.py still see it all).
MAX_CHECKED_VALUES = 10_000


@functools.cache
def load(name: str) -> dict[str, Any]:
    """A schema from the package's ``schemas`` directory."""
    text = resources.files("cdi_plugin").joinpath("schemas", name).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def _retrieve(uri: str) -> dict[str, Any]:
    if not uri.startswith(BASE_URI):
        raise ValueError(f"schema {uri} is not one of cdi-plugin's")
    return load(uri.removeprefix(BASE_URI))


@functools.cache
def _validator(name: str) -> Any:
    return jsonschema_rs.validator_for(load(name), retriever=_retrieve)


def _subschema(schema: dict[str, Any], fragment: str) -> dict[str, Any]:
    node: Any = schema
    for part in pointer_parts(fragment):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node if isinstance(node, dict) else {}


def _problems(error: Any) -> list[Problem]:
    pointer = pointer_join("", *error.instance_path)
    uri, _, fragment = str(error.absolute_keyword_location or "").partition("#")
    parent, _, keyword = fragment.rpartition("/")
    owner = _subschema(_retrieve(uri), parent) if uri.startswith(BASE_URI) else {}
    kind = error.kind
    if keyword == "additionalProperties":
        return [
            Problem(pointer_join(pointer, key), "unknown-field", f"unknown field {key!r}")
            for key in kind.unexpected
        ]
    if keyword == "required":
        return [Problem(pointer or "/", "required", f"missing required field {kind.property!r}")]
    if keyword == "propertyNames":
        key = kind.error.instance
        names = owner["propertyNames"]
        return [
            Problem(pointer_join(pointer, key), names["x-rule"], f"invalid key {key!r}", names["x-hint"],
                    _severity(names))
        ]  # fmt: skip
    rule = _KEYWORD_RULES.get(keyword)
    severity = Severity.ERROR if rule else _severity(owner)
    rule = rule or owner.get("x-rule", "schema")
    hint = owner.get("x-hint", "")
    if hint and keyword in {"pattern", "enum", "not", "minLength", "maxLength"}:
        last = error.instance_path[-1] if error.instance_path else "value"
        what = "entry" if isinstance(last, int) else repr(last)
        message = f"invalid {what}: {clipped(json.dumps(error.instance))}"
    else:
        message = clipped(str(error.message), 160)
    return [Problem(pointer or "/", rule, message, hint, severity)]


def _severity(subschema: dict[str, Any]) -> Severity:
    return Severity(subschema.get("x-severity", "error"))


def problems(instance: Any, name: str = SPEC_SCHEMA) -> list[Problem]:
    """The schema violations of ``instance`` in its first :data:`MAX_CHECKED_VALUES` values (every
    one in a smaller document, or when none is among those values); empty when it is valid."""
    validator = _validator(name)
    if validator.is_valid(instance):
        return []
    out: list[Problem] = []
    for error in validator.iter_errors(_first_values(instance, _required_keys(name))):
        out.extend(_problems(error))
    if not out:  # every violation lies beyond the values checked first: all of them, then
        for error in validator.iter_errors(instance):
            out.extend(_problems(error))
    return out


@functools.cache
def _required_keys(name: str) -> frozenset[str]:
    """Every key some object of the schema ``name`` requires."""
    found: set[str] = set()
    stack: list[Any] = [load(name)]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("required"), list):
                found.update(node["required"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(found)


def _first_values(instance: Any, required: frozenset[str]) -> Any:
    """``instance`` with about :data:`MAX_CHECKED_VALUES` values: once they are counted, an array
    keeps only its first entry and an object only its ``required`` keys, so that the cut adds no
    problem of its own (no missing field, no empty array)."""
    budget = MAX_CHECKED_VALUES

    def cut(value: Any) -> Any:
        nonlocal budget
        if isinstance(value, list):
            kept = [item for i, item in enumerate(value) if (budget := budget - 1) >= 0 or i == 0]
            return [cut(item) for item in kept]
        if isinstance(value, dict):
            return {
                key: cut(item)
                for key, item in value.items()
                if (budget := budget - 1) >= 0 or key in required
            }
        return value

    return cut(instance)
