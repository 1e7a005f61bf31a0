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

SPEC_SCHEMA = "cdi-spec.schema.json"
CONFIG_SCHEMA = "config.schema.json"
#: Every schema's ``$id`` is this prefix plus its file name; ``$ref`` between files resolves here.
BASE_URI = "https://cdi-plugin.io/schemas/"

_KEYWORD_RULES = {"additionalProperties": "unknown-field", "required": "required", "type": "type"}


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
        message = f"invalid {what}: {json.dumps(error.instance)}"
    else:
        message = str(error.message)
    return [Problem(pointer or "/", rule, message, hint, severity)]


def _severity(subschema: dict[str, Any]) -> Severity:
    return Severity(subschema.get("x-severity", "error"))


def problems(instance: Any, name: str = SPEC_SCHEMA) -> list[Problem]:
    """Every schema violation of ``instance``; empty when it is valid."""
    validator = _validator(name)
    if validator.is_valid(instance):
        return []
    out: list[Problem] = []
    for error in validator.iter_errors(instance):
        out.extend(_problems(error))
    return out
