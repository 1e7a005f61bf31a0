"""How go-yaml v2, the YAML reader of the CDI library (under sigs.k8s.io/yaml), resolves a plain
scalar: the text a spec's YAML must quote, and the values a spec is read with; and a PyYAML
loader made to read as it does."""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable
from typing import Any

#: go-yaml v2's resolve.go: its YAML 1.1 booleans with y and n; integers as Go's ParseInt or ParseUint read
#: them once every underscore is gone (0x, 0o, 0b, a leading 0 for octal); floats like 1e3 or 08;
#: everything else (a date, 1:20, =) is a string.
_GO_BOOLS = {
    **dict.fromkeys(["y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"], True),
    **dict.fromkeys(["n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"], False),
}
_GO_CONSTANTS: dict[str, tuple[str, Any]] = {
    **{text: ("bool", value) for text, value in _GO_BOOLS.items()},
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), ("null", None)),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), ("float", math.nan)),
    **{
        sign + inf: ("float", -math.inf if sign == "-" else math.inf)
        for sign in ("", "+", "-")
        for inf in (".inf", ".Inf", ".INF")
    },
    "<<": ("merge", "<<"),
}
_GO_INT = re.compile(
    r"(?P<sign>[-+]?)(?:0[xX](?P<hex>[0-9a-fA-F]+)|0[oO](?P<oct>[0-7]+)|0[bB](?P<bin>[01]+)|0(?P<zero>[0-7]*)|(?P<dec>[1-9][0-9]*))"
)
_GO_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_GO_DOT_FLOAT = re.compile(r"\.[0-9][0-9_]*(?:[eE][-+]?[0-9_]+)?")
_GO_BASES = {"hex": 16, "oct": 8, "bin": 2, "zero": 8, "dec": 10}


def go_yaml_scalar(text: str) -> tuple[str, Any]:
    """The type (``str``, ``bool``, ``int``, ``float``, ``null`` or ``merge``) and value that
    go-yaml v2 gives the plain scalar ``text``."""
    if text in _GO_CONSTANTS:
        return _GO_CONSTANTS[text]
    if text[:1] == ".":  # Go's ParseFloat of the text as it is (underscores only between digits)
        if _GO_DOT_FLOAT.fullmatch(text):
            with contextlib.suppress(ValueError):
                return "float", float(text)
        return "str", text
    if text[:1] not in tuple("+-0123456789"):
        return "str", text
    plain = text.replace("_", "")
    match = _GO_INT.fullmatch(plain)
    if match:
        base, digits = next(
            (_GO_BASES[k], v) for k, v in match.groupdict().items() if k != "sign" and v is not None
        )
        digits = digits.lstrip("0") or "0"
        if len(digits) <= 64:  # more overflows 64 bits in any base: never converted
            number = int(digits, base) * (-1 if match["sign"] == "-" else 1)
            if -(2**63) <= number < 2**63 or (not match["sign"] and number < 2**64):  # ParseUint: no sign
                return "int", number
    if _GO_FLOAT.fullmatch(plain):
        real = float(plain)
        if math.isfinite(real):  # ParseFloat fails out of range
            return "float", real
    return "str", text


def read_as_go_yaml(loader: Any) -> None:
    """Make the PyYAML ``loader`` class read as go-yaml v2 does: plain scalars resolved by
    :func:`go_yaml_scalar`, and a tag it does not know ignored (``!x 010`` is the text '010')."""
    import yaml

    tag = "tag:yaml.org,2002:"
    resolve = loader.resolve
    construct_mapping = loader.yaml_constructors[tag + "map"]

    def go_resolve(self: Any, kind: Any, value: str, implicit: tuple[bool, bool]) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:
            return tag + go_yaml_scalar(value)[0]
        return resolve(self, kind, value, implicit)

    def unknown_tag(self: Any, node: Any) -> Any:
        if isinstance(node, yaml.ScalarNode):
            return node.value
        if isinstance(node, yaml.SequenceNode):
            return self.construct_sequence(node, deep=True)
        return construct_mapping(self, node)

    loader.resolve = go_resolve
    for kind in ("bool", "int", "float"):
        loader.add_constructor(tag + kind, _go_constructor(kind, loader.yaml_constructors[tag + kind]))
    loader.add_constructor(tag + "merge", lambda self, node: node.value)  # "<<" but as a key
    loader.add_constructor(None, unknown_tag)


def _go_constructor(kind: str, construct: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def build(loader: Any, node: Any) -> Any:
        found, value = go_yaml_scalar(node.value)
        return value if found == kind else construct(loader, node)  # an explicit tag: PyYAML's reading

    return build
