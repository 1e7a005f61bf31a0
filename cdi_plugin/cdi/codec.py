"""Bytes and plain objects to and from :class:`~cdi_plugin.cdi.model.Spec`.

Decoding is as strict as the CDI library's loader (``yaml.UnmarshalStrict``): a duplicate key, an
unknown field or a value of the wrong type is an error that names the field and where it is.
JSON that is not strict JSON but is valid YAML is accepted, as runtimes read JSON through YAML.
A JSON ``null`` counts as absent, as it does in Go. Only what JSON can hold is accepted (a YAML
date stays a string; binary data, sets and unpaired surrogates are errors), nested at most
:data:`MAX_DEPTH` levels deep. An error in a YAML file names its line.

Encoding is canonical: fields in the order of the CDI library's structs, map keys sorted,
2-space indent, trailing newline; absent fields are omitted and present ones kept, even if empty.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from cdi_plugin.cdi import model
from cdi_plugin.cdi.problems import pointer_join
from cdi_plugin.errors import SpecLoadError

Format = Literal["json", "yaml"]

_INT64 = (-(2**63), 2**63 - 1)
_UINT32 = (0, 2**32 - 1)


class _Err(Exception):
    """Raised inside decoding, turned into a :class:`SpecLoadError` with the source attached."""

    def __init__(self, pointer: str, rule: str, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.pointer, self.rule, self.message, self.hint = pointer, rule, message, hint


def _type_name(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _str(value: Any, ptr: str) -> str:
    if not isinstance(value, str):
        raise _Err(ptr, "type", f"expected a string, got {_type_name(value)}")
    return value


def _bool(value: Any, ptr: str) -> bool:
    if not isinstance(value, bool):
        raise _Err(ptr, "type", f"expected true or false, got {_type_name(value)}")
    return value


def _integer(lo: int, hi: int, what: str) -> Callable[[Any, str], int]:
    def decode(value: Any, ptr: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Err(ptr, "type", f"expected {what}, got {_type_name(value)} {value!r}")
        if not lo <= value <= hi:
            raise _Err(ptr, "type", f"{value} is out of range for {what} ({lo} to {hi})")
        return value

    return decode


_int64 = _integer(*_INT64, "an integer")
_uint32 = _integer(*_UINT32, "an unsigned 32-bit integer")


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
                raise _Err(pointer_join(ptr, key), "unknown-field", f"unknown field {key!r}", hint)
            if item is not None:
                kwargs[field.attr] = field.decode(item, pointer_join(ptr, key))
        for field in fields:
            if field.required and field.attr not in kwargs:
                raise _Err(ptr, "required", f"missing required field {field.key!r}")
        return cls(**kwargs)

    return decode


def _spec_decoder(lenient: bool) -> Callable[[Any, str], Any]:
    """The decoder for a whole spec; a lenient one skips unknown fields instead of failing."""
    strs = _list(_str)
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

    ``lenient`` skips unknown fields, so that a validator can still check the rest.
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
        return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode()
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


#: Characters YAML parsers read as line breaks (NEL, LS, PS).
_YAML_BREAKS = frozenset("\x85\u2028\u2029")


@functools.cache
def _yaml_dumper() -> Any:
    """PyYAML's safe dumper, except that a string holding a YAML line break is double-quoted.

    With ``allow_unicode`` PyYAML writes NEL, LS and PS raw inside a single-quoted scalar, and
    parsers fold them into a space; double quotes make it escape them (``\\N``, ``\\L``, ``\\P``).
    """
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def represent_str(dumper: Any, value: str) -> Any:
        style = '"' if not _YAML_BREAKS.isdisjoint(value) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, represent_str)
    return Dumper


# -- parsing text ------------------------------------------------------------------------------


#: Nesting deeper than this is not a spec (a real one is under 10 levels deep). Refusing it early
#: keeps every recursive consumer safe: Python's json and the YAML constructor raise RecursionError
#: around 1000 levels, jsonschema-rs fails at 255, and libyaml's composer crashes the process.
MAX_DEPTH = 64
#: A JSON escape of a UTF-16 surrogate (\uD800 to \uDFFF); an unpaired one makes a string UTF-8
#: cannot encode.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _DupDict(dict[str, Any]):
    duplicate: str = ""


def _json_loads(text: str) -> tuple[Any, bool]:
    """``json.loads`` that marks an object with a repeated key (see :func:`_find_duplicate`)."""
    repeated = False

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal repeated
        out = dict(pairs)
        if len(out) == len(pairs):
            return out
        repeated = True
        seen: set[str] = set()
        marked = _DupDict(out)
        for key, _ in pairs:
            if key in seen:
                marked.duplicate = key
                break
            seen.add(key)
        return marked

    obj = json.loads(text, object_pairs_hook=pairs_hook)
    return obj, repeated


def _find_duplicate(obj: Any, ptr: str = "") -> tuple[str, str] | None:
    if isinstance(obj, _DupDict):
        return ptr, obj.duplicate
    children = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in children:
        found = _find_duplicate(value, pointer_join(ptr, key))
        if found:
            return found
    return None


_TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep, which no spec is"


def _check_tree(obj: Any, source: str, surrogates: bool) -> None:
    """Reject nesting deeper than :data:`MAX_DEPTH` and (if ``surrogates``) unpaired surrogates."""
    stack: list[tuple[Any, int]] = [(obj, 0)] if isinstance(obj, (dict, list)) else []
    while stack:
        value, depth = stack.pop()
        if depth >= MAX_DEPTH:
            raise SpecLoadError(source, "", "syntax", _TOO_DEEP)
        for item in value.values() if isinstance(value, dict) else value:
            if isinstance(item, (dict, list)):
                stack.append((item, depth + 1))
    if surrogates:
        found = find_unencodable(obj)
        if found is not None:
            where, what = found
            raise SpecLoadError(source, where or "/", "syntax", f"a {what} {UNPAIRED_SURROGATE}")


UNPAIRED_SURROGATE = (
    "holds an unpaired UTF-16 surrogate (a lone \\uD800-\\uDFFF escape), which UTF-8 cannot encode"
)


def find_unencodable(value: Any, ptr: str = "") -> tuple[str, str] | None:
    """The pointer to the first string or key UTF-8 cannot encode, and which of the two it is.

    Such a string comes from a lone surrogate escape in JSON, or from bytes decoded with
    ``surrogateescape``. ``value`` must be nested at most :data:`MAX_DEPTH` levels deep.
    """
    if isinstance(value, str):
        return None if _is_utf8(value) else (ptr, "string")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and not _is_utf8(key):
            return pointer_join(ptr, key), "key"
        found = find_unencodable(item, pointer_join(ptr, key))
        if found is not None:
            return found
    return None


def _is_utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


class _YamlKeyError(Exception):
    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


#: YAML types with no JSON equivalent: a runtime reads a spec as JSON, so they are not allowed.
_NON_JSON_TAGS = ("binary", "set", "omap", "pairs", "timestamp")


@functools.cache
def _yaml_loader() -> Any:
    """A safe YAML loader that rejects duplicate and non-string keys (go-yaml's strict mode).

    Like the YAML-to-JSON conversion runtimes use, an unquoted date stays a string; explicit
    tags of types JSON lacks (``!!binary``, ``!!set``, ...) are errors.
    """
    import yaml

    class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        pass

    timestamp = "tag:yaml.org,2002:timestamp"
    StrictLoader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != timestamp]
        for first, resolvers in StrictLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(loader: Any, node: Any) -> dict[str, Any]:
        loader.flatten_mapping(node)
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                raise _YamlKeyError("type", f"line {line}: a key must be a string, got {key!r}")
            if key in out:
                raise _YamlKeyError("duplicate-key", f"line {line}: duplicate key {key!r}")
            out[key] = loader.construct_object(value_node, deep=True)
        return out

    def reject(loader: Any, node: Any) -> None:
        line = node.start_mark.line + 1
        raise _YamlKeyError("type", f"line {line}: a {node.tag} value has no JSON equivalent")

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    for tag in _NON_JSON_TAGS:
        StrictLoader.add_constructor(f"tag:yaml.org,2002:{tag}", reject)
    return StrictLoader


def _yaml_depth_error(text: str, loader: Any) -> str | None:
    """A message if the document nests deeper than :data:`MAX_DEPTH`, found from the event stream.

    libyaml's event parser keeps its own stack, unlike the composer, which recurses on the C stack
    and crashes the process on a deeply nested document; so this runs first.
    """
    import yaml

    depth = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                return f"line {mark.line + 1}: {_TOO_DEEP}" if mark else _TOO_DEEP
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return None


def _parse_yaml(text: str, source: str) -> Any:
    import yaml

    loader = _yaml_loader()
    try:
        too_deep = _yaml_depth_error(text, loader)
        if too_deep:
            raise SpecLoadError(source, "", "syntax", too_deep)
        return yaml.load(text, Loader=loader)
    except _YamlKeyError as exc:
        hint = "remove one of them" if exc.rule == "duplicate-key" else ""
        raise SpecLoadError(source, "", exc.rule, str(exc), hint) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        raise SpecLoadError(source, "", "syntax", f"invalid YAML: {where}{exc.problem}") from None
    except yaml.YAMLError as exc:
        raise SpecLoadError(source, "", "syntax", f"invalid YAML: {exc}") from None
    except RecursionError:
        raise SpecLoadError(source, "", "syntax", _TOO_DEEP) from None


def parse(data: bytes, source: str = "<spec>", fmt: Format = "json") -> tuple[Any, Format]:
    """Parse text strictly; returns the object and the syntax that parsed it.

    ``fmt`` is the syntax the file name suggests; JSON that only parses as YAML is accepted
    (runtimes read every spec through YAML) and reported as ``"yaml"``.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecLoadError(
            source, "", "syntax", f"not UTF-8 text (binary data at byte {exc.start})"
        ) from None
    if not text.strip():
        raise SpecLoadError(source, "", "empty-file", "the file is empty (no spec data)")
    if "\x00" in text:
        raise SpecLoadError(source, "", "syntax", f"binary data (NUL byte at offset {text.index(chr(0))})")
    if fmt == "json":
        try:
            obj, repeated = _json_loads(text)
        except json.JSONDecodeError as exc:
            json_error = f"invalid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}"
        except RecursionError:
            raise SpecLoadError(source, "", "syntax", _TOO_DEEP) from None
        else:
            _check_tree(obj, source, surrogates=_SURROGATE_ESCAPE.search(text) is not None)
            dup = _find_duplicate(obj) if repeated else None
            if dup:
                raise SpecLoadError(
                    source, dup[0] or "/", "duplicate-key", f"duplicate key {dup[1]!r}", "remove one of them"
                )
            return obj, "json"
        try:
            obj = _parse_yaml(text, source)
        except SpecLoadError as exc:
            if exc.rule == "syntax":
                raise SpecLoadError(source, "", "syntax", json_error) from None
            raise
        return obj, "yaml"
    return _parse_yaml(text, source), "yaml"


def yaml_lines(data: bytes, pointers: Iterable[str]) -> dict[str, int]:
    """The 1-based line each JSON pointer points at in a YAML document (for messages).

    A pointer to an object member gives the line of its key; one that leads nowhere gives the
    line of the deepest node it reaches. Call it only on a document :func:`parse` accepted.
    """
    import yaml

    root = yaml.compose(data.decode("utf-8-sig"), Loader=_yaml_loader())
    out: dict[str, int] = {}
    for pointer in pointers:
        node, line = root, None
        for part in pointer.split("/")[1:] if pointer.strip("/") else []:
            key = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, yaml.MappingNode):
                found = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key]
                if not found:
                    break
                key_node, node = found[-1]
                line = key_node.start_mark.line + 1
            elif isinstance(node, yaml.SequenceNode) and key.isdigit() and int(key) < len(node.value):
                node = node.value[int(key)]
                line = node.start_mark.line + 1
            else:
                break
        if line is not None:
            out[pointer] = line
    return out


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
