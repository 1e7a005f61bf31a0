"""Bytes and plain objects to and from :class:`~cdi_plugin.cdi.model.Spec`.

Decoding is as strict as the CDI library's loader (``yaml.UnmarshalStrict``): a duplicate key, an
unknown field or a value of the wrong type is an error that names the field and where it is.
Text is parsed by :mod:`cdi_plugin.cdi.textparse` (JSON, or YAML as runtimes accept it, with every
resource bounded). A JSON ``null`` counts as absent, as it does in Go. An error in a YAML file
names its line.

Encoding is canonical: fields in the order of the CDI library's structs, map keys sorted,
2-space indent, trailing newline; absent fields are omitted and present ones kept, even if empty.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from cdi_plugin.cdi import model
from cdi_plugin.cdi.goyaml import go_yaml_scalar
from cdi_plugin.cdi.problems import pointer_join
from cdi_plugin.cdi.textparse import (
    MAX_DEPTH,
    UNPAIRED_SURROGATE,
    Format,
    extra_document_line,
    find_unencodable,
    parse,
    yaml_lines,
)
from cdi_plugin.errors import CdiPluginError, SpecLoadError
from cdi_plugin.wording import shown

__all__ = [
    "MAX_DEPTH",
    "UNPAIRED_SURROGATE",
    "Format",
    "decode",
    "encode",
    "extra_document_line",
    "find_unencodable",
    "parse",
    "spec_from_obj",
    "spec_to_obj",
    "yaml_lines",
]


@dataclass(frozen=True, slots=True)
class IntRange:
    """The values a Go integer field holds (decoding rejects the others)."""

    lo: int
    hi: int
    what: str

    def out_of_range(self, value: int) -> str | None:
        """Why ``value`` does not fit, or None (a value of over 24 digits, 1e300 read as an
        integer, say, is shown as 1.000e+300)."""
        if self.lo <= value <= self.hi:
            return None
        written = f"{value:.3e}" if abs(value) >= 10**24 else str(value)
        return f"{written} is out of range for {self.what} ({self.lo} to {self.hi})"


INT64 = IntRange(-(2**63), 2**63 - 1, "an integer")
UINT32 = IntRange(0, 2**32 - 1, "an unsigned 32-bit integer")


class _Err(CdiPluginError):
    """Raised inside decoding, turned into a :class:`SpecLoadError` with the source attached."""

    def __init__(self, pointer: str, rule: str, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.pointer, self.rule, self.message, self.hint = pointer, rule, message, hint


def _type_name(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


#: The CDI Go library reads a number or boolean where a string belongs as text, as YAML resolved it
#: (``010`` as "8", ``yes`` as "true"); a spec is refused instead, so that a name is what it shows.
_SCALAR_HINT = "quote it: runtimes would read it as text, cdi-plugin does not (010 would be '8')"


def _str(value: Any, ptr: str) -> str:
    if not isinstance(value, str):
        hint = _SCALAR_HINT if isinstance(value, int | float) else ""  # a bool too
        raise _Err(ptr, "type", f"expected a string, got {_type_name(value)}", hint)
    return value


def _bool(value: Any, ptr: str) -> bool:
    if not isinstance(value, bool):
        raise _Err(ptr, "type", f"expected true or false, got {_type_name(value)}")
    return value


def _integer(bounds: IntRange, lenient: bool) -> Callable[[Any, str], int]:
    """A Go integer field, which the CDI Go library also fills from an integral number written
    as 1.0 or 1e2 (not from -0.0 for an unsigned one: Go's encoder writes it "-0")."""

    def decode(value: Any, ptr: str) -> int:
        if isinstance(value, float) and value.is_integer() and math.copysign(1, value) >= bounds.lo:
            value = int(value)  # as Go's JSON encoder writes it for the decoder: 1.0 as 1, 1e2 as 100
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Err(ptr, "type", f"expected {bounds.what}, got {_type_name(value)} {shown(value)}")
        wrong = None if lenient else bounds.out_of_range(value)
        if wrong:
            raise _Err(ptr, "type", wrong)
        return value

    return decode


def _list(item: Callable[[Any, str], Any]) -> Callable[[Any, str], tuple[Any, ...]]:
    def decode(value: Any, ptr: str) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise _Err(ptr, "type", f"expected an array, got {_type_name(value)}")
        return tuple(item(v, f"{ptr}/{i}") for i, v in enumerate(value))

    return decode


def _string_map(value: Any, ptr: str) -> Mapping[str, str]:
    if not isinstance(value, dict):
        raise _Err(ptr, "type", f"expected an object of strings, got {_type_name(value)}")
    for key, item in value.items():
        _str(item, pointer_join(ptr, key))
    return MappingProxyType(dict(value))


@dataclass(frozen=True, slots=True)
class _Field:
    key: str
    attr: str
    decode: Callable[[Any, str], Any]
    required: bool = False


_TYPES: dict[type, tuple[_Field, ...]] = {}


def _object(cls: type, lenient: bool, *fields: _Field) -> Callable[[Any, str], Any]:
    _TYPES[cls] = fields
    by_key = {f.key: f for f in fields}

    def decode(value: Any, ptr: str) -> Any:
        if not isinstance(value, dict):
            raise _Err(ptr, "type", f"expected an object, got {_type_name(value)}")
        kwargs: dict[str, Any] = {}
        for key, item in value.items():
            field = by_key.get(key)
            if field is None:
                if lenient:
                    continue
                close = difflib.get_close_matches(key, by_key, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"known fields: {', '.join(by_key)}"
                raise _Err(pointer_join(ptr, key), "unknown-field", f"unknown field {shown(key)}", hint)
            if item is not None:
                kwargs[field.attr] = field.decode(item, pointer_join(ptr, key))
        for field in fields:
            if field.required and field.attr not in kwargs:
                raise _Err(ptr, "required", f"missing required field {field.key!r}")
        return cls(**kwargs)

    return decode


def _spec_decoder(lenient: bool) -> Callable[[Any, str], Any]:
    """The decoder for a whole spec; a lenient one skips unknown fields and keeps integers out of
    range instead of failing."""
    strs = _list(_str)
    _int64, _uint32 = _integer(INT64, lenient), _integer(UINT32, lenient)
    device_node = _object(
        model.DeviceNode,
        lenient,
        _Field("path", "path", _str, required=True),
        _Field("hostPath", "host_path", _str),
        _Field("type", "type", _str),
        _Field("major", "major", _int64),
        _Field("minor", "minor", _int64),
        _Field("fileMode", "file_mode", _uint32),
        _Field("permissions", "permissions", _str),
        _Field("uid", "uid", _uint32),
        _Field("gid", "gid", _uint32),
    )
    mount = _object(
        model.Mount,
        lenient,
        _Field("hostPath", "host_path", _str, required=True),
        _Field("containerPath", "container_path", _str, required=True),
        _Field("options", "options", strs),
        _Field("type", "type", _str),
    )
    hook = _object(
        model.Hook,
        lenient,
        _Field("hookName", "hook_name", _str, required=True),
        _Field("path", "path", _str, required=True),
        _Field("args", "args", strs),
        _Field("env", "env", strs),
        _Field("timeout", "timeout", _int64),
    )
    intel_rdt = _object(
        model.IntelRdt,
        lenient,
        _Field("closID", "clos_id", _str),
        _Field("l3CacheSchema", "l3_cache_schema", _str),
        _Field("memBwSchema", "mem_bw_schema", _str),
        _Field("schemata", "schemata", strs),
        _Field("enableMonitoring", "enable_monitoring", _bool),
        _Field("enableCMT", "enable_cmt", _bool),
        _Field("enableMBM", "enable_mbm", _bool),
    )
    net_device = _object(
        model.NetDevice,
        lenient,
        _Field("hostInterfaceName", "host_interface_name", _str, required=True),
        _Field("name", "name", _str, required=True),
    )
    edits = _object(
        model.ContainerEdits,
        lenient,
        _Field("env", "env", strs),
        _Field("deviceNodes", "device_nodes", _list(device_node)),
        _Field("netDevices", "net_devices", _list(net_device)),
        _Field("hooks", "hooks", _list(hook)),
        _Field("mounts", "mounts", _list(mount)),
        _Field("intelRdt", "intel_rdt", intel_rdt),
        _Field("additionalGids", "additional_gids", _list(_uint32)),
    )
    device = _object(
        model.Device,
        lenient,
        _Field("name", "name", _str, required=True),
        _Field("annotations", "annotations", _string_map),
        _Field("containerEdits", "container_edits", edits, required=True),
    )
    return _object(
        model.Spec,
        lenient,
        _Field("cdiVersion", "cdi_version", _str, required=True),
        _Field("kind", "kind", _str, required=True),
        _Field("annotations", "annotations", _string_map),
        _Field("devices", "devices", _list(device), required=True),
        _Field("containerEdits", "container_edits", edits),
    )


_strict_spec = _spec_decoder(lenient=False)
_lenient_spec = _spec_decoder(lenient=True)


def spec_from_obj(obj: Any, source: str = "<spec>", *, lenient: bool = False) -> model.Spec:
    """Decode a parsed document; raises :class:`SpecLoadError` on the first problem.

    ``lenient`` skips unknown fields and keeps integers out of range, so that a validator can
    still check the rest.
    """
    try:
        spec: model.Spec = (_lenient_spec if lenient else _strict_spec)(obj, "")
    except _Err as exc:
        raise SpecLoadError(source, exc.pointer or "/", exc.rule, exc.message, exc.hint) from None
    return spec


def _encode(value: Any) -> Any:
    fields = _TYPES.get(type(value))
    if fields is not None:
        out = {}
        for f in fields:
            item = getattr(value, f.attr)
            if item is not None:
                out[f.key] = _encode(item)
        return out
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):
        return {k: value[k] for k in sorted(value)}
    return value


def spec_to_obj(spec: model.Spec) -> dict[str, Any]:
    """The spec as plain JSON-ready objects, in canonical field order."""
    out: dict[str, Any] = _encode(spec)
    return out


def encode(spec: model.Spec, fmt: Format = "json") -> bytes:
    """Canonical bytes: the same spec always gives the same bytes."""
    obj = spec_to_obj(spec)
    if fmt == "json":
        text = json.dumps(obj, indent=2, ensure_ascii=False)
        return (_JSON_ESCAPED.sub(_json_escape, text) + "\n").encode()
    import yaml

    text = yaml.dump(
        obj,
        Dumper=_yaml_dumper(),
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        indent=2,
        width=1 << 16,
    )
    return ("---\n" + text).encode()


#: Characters a JSON spec holds escaped, as runtimes read it through YAML: those the YAML reader
#: refuses raw (DEL, C1 controls, U+FFFE, U+FFFF) and the line breaks it folds (NEL, LS, PS).
#: (json.dumps escapes the C0 controls itself.)
_JSON_ESCAPED = re.compile("[\x7f-\x9f\u2028\u2029\ufffe\uffff]")


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


#: Characters YAML parsers read as line breaks (NEL, LS, PS).
_YAML_BREAKS = frozenset("\x85\u2028\u2029")


@functools.cache
def _yaml_dumper() -> Any:
    """PyYAML's safe dumper, except that a string holding a YAML line break is double-quoted, and
    one the CDI library would read as a boolean or a number single-quoted.

    With ``allow_unicode`` PyYAML writes NEL, LS and PS raw inside a single-quoted scalar, and
    parsers fold them into a space; double quotes make it escape them (``\\N``, ``\\L``, ``\\P``).
    """
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def represent_str(dumper: Any, value: str) -> Any:
        style = None
        if not _YAML_BREAKS.isdisjoint(value):
            style = '"'
        elif go_yaml_scalar(value)[0] != "str":  # y is "true" to the CDI library, 1e3 "1000"
            style = "'"
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, represent_str)
    return Dumper


def decode(data: bytes, source: str = "<spec>", fmt: Format = "json") -> model.Spec:
    """Parse and decode a spec file's bytes; a YAML file's error names the line."""
    obj, parsed_as = parse(data, source, fmt)
    try:
        return spec_from_obj(obj, source)
    except SpecLoadError as exc:
        if parsed_as != "yaml":
            raise
        line = yaml_lines(data, [exc.pointer]).get(exc.pointer)
        if line is None:
            raise
        raise SpecLoadError(source, exc.pointer, exc.rule, f"line {line}: {exc.message}", exc.hint) from None
