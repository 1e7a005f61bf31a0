"""JSON and YAML text to plain objects, strictly, and bounded whatever the text holds.

As strict as the CDI library's loader (``yaml.UnmarshalStrict``): a duplicate key is an error
that names where it is. JSON that is not strict JSON but is valid YAML is accepted, as runtimes
read JSON through YAML; a spec is the first YAML document, all that runtimes read. Only what
JSON can hold is accepted (a YAML date stays a string; binary data, sets and unpaired surrogates
are errors); a spec is also refused what the YAML reader of runtimes refuses in JSON. An error
in a YAML file names its line.

The work done is bounded by the size of the text, so a hostile file is one more bad file:

* nesting deeper than :data:`MAX_DEPTH` is refused before any recursive code sees it;
* a number literal longer than :data:`MAX_NUMBER_CHARS` is refused before Python converts it
  (converting thousands of digits takes quadratic time, and past 4300 digits raises);
* YAML anchors and aliases are refused while the document is composed, before any data is built:
  an alias repeats a subtree without repeating its text, so a few hundred bytes can stand for
  gigabytes ("billion laughs"). Neither CDI specs nor the configuration need them.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterable
from typing import Any, Literal

from cdi_plugin.cdi.goyaml import read_as_go_yaml
from cdi_plugin.cdi.problems import pointer_join, pointer_parts
from cdi_plugin.errors import CdiPluginError, SpecLoadError
from cdi_plugin.wording import shown

Format = Literal["json", "yaml"]

#: Nesting deeper than this is not a spec (a real one is under 10 levels deep). Refusing it early
#: keeps every recursive consumer safe: Python's json and the YAML constructor raise RecursionError
#: around 1000 levels, jsonschema-rs fails at 255, and libyaml's composer crashes the process.
MAX_DEPTH = 64
#: No value in a spec or the configuration needs a longer number (a 64-bit integer has 20 digits).
MAX_NUMBER_CHARS = 64
#: A JSON escape of a UTF-16 surrogate (\uD800 to \uDFFF); an unpaired one makes a string UTF-8
#: cannot encode.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
#: Such an escape where it is one (not after an escaped backslash), paired or not: the YAML reader
#: runtimes read JSON with refuses every one ("found invalid Unicode character escape code").
_SURROGATE_ESCAPE_AT = re.compile(r"(?<!\\)(?:\\\\)*(\\u[dD][89a-fA-F][0-9a-fA-F]{2})")

#: What a YAML reader refuses anywhere in a file (go-yaml's and PyYAML's alike: "control characters
#: are not allowed"), in a JSON file too, since runtimes read JSON through YAML.
_UNREADABLE = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

_NO_ALIASES = "YAML anchors and aliases are not allowed"


def _too_deep(document: str) -> str:
    return f"nested more than {MAX_DEPTH} levels deep, which no {document} is"


UNPAIRED_SURROGATE = (
    "holds an unpaired UTF-16 surrogate (a lone \\uD800-\\uDFFF escape), which UTF-8 cannot encode"
)


class _Oversize:
    """Stands for a number literal too long to convert, until the parser names where it is."""

    __slots__ = ("length",)

    def __init__(self, length: int) -> None:
        self.length = length

    def __repr__(self) -> str:
        return f"a number {self.length} characters long"

    @property
    def message(self) -> str:
        return f"{self!r}; no value here needs more than {MAX_NUMBER_CHARS}"


class _DupDict(dict[str, Any]):
    duplicate: str = ""


def _find(obj: Any, wanted: Callable[[Any], bool], ptr: str = "") -> tuple[str, Any] | None:
    """The pointer to the first value ``wanted`` accepts, and the value (depth already bounded)."""
    if wanted(obj):
        return ptr, obj
    children = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in children:
        found = _find(value, wanted, pointer_join(ptr, key))
        if found:
            return found
    return None


def _is_oversize(value: Any) -> bool:
    return isinstance(value, _Oversize)


def _oversize_error(obj: Any, source: str, line: int | None = None) -> SpecLoadError:
    ptr, value = _find(obj, _is_oversize) or ("", _Oversize(0))
    where = f"line {line}: " if line else ""
    return SpecLoadError(source, ptr or "/", "syntax", where + value.message)


class _NotFinite(CdiPluginError):
    """A spec's JSON holds NaN, Infinity or a number beyond a float's range: Python's json reads
    them as numbers, the YAML reader of runtimes as text."""


def _json_loads(text: str, source: str, document: str) -> Any:
    """``json.loads`` that refuses repeated keys and oversize numbers, naming where they are (and
    a spec's numbers that are not finite: :class:`_NotFinite`)."""
    repeated = oversize = not_finite = False

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

    def number(convert: Callable[[str], Any]) -> Callable[[str], Any]:
        def parse(literal: str) -> Any:
            nonlocal oversize
            if len(literal) <= MAX_NUMBER_CHARS:
                return convert(literal)
            oversize = True
            return _Oversize(len(literal))

        return parse

    def real(literal: str) -> float:
        nonlocal not_finite
        value = float(literal)
        not_finite = not_finite or not math.isfinite(value)
        return value

    hooks: dict[str, Any] = {"parse_int": number(int), "parse_float": number(real), "parse_constant": real}
    obj = json.loads(text, object_pairs_hook=pairs_hook, **hooks)
    _check_depth(obj, source, document)
    if oversize:
        raise _oversize_error(obj, source)
    if repeated:
        ptr, dup = _find(obj, lambda v: isinstance(v, _DupDict)) or ("", _DupDict())
        raise SpecLoadError(
            source, ptr or "/", "duplicate-key", f"duplicate key {shown(dup.duplicate)}", "remove one of them"
        )
    if _SURROGATE_ESCAPE.search(text):
        found = find_unencodable(obj)
        if found is not None:
            where, what = found
            raise SpecLoadError(source, where or "/", "syntax", f"a {what} {UNPAIRED_SURROGATE}")
        paired = _SURROGATE_ESCAPE_AT.search(text) if document == "spec" else None
        if paired:
            at = paired.start(1)
            line, column = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
            raise SpecLoadError(
                source, "", "syntax",
                f"line {line} column {column}: a UTF-16 surrogate escape ({paired.group(1)}), which the YAML "
                "reader of runtimes refuses even in a pair; write the character itself",
            )  # fmt: skip
    if not_finite and document == "spec":
        raise _NotFinite
    return obj


def _check_depth(obj: Any, source: str, document: str) -> None:
    stack: list[tuple[Any, int]] = [(obj, 0)] if isinstance(obj, (dict, list)) else []
    while stack:
        value, depth = stack.pop()
        if depth >= MAX_DEPTH:
            raise SpecLoadError(source, "", "syntax", _too_deep(document))
        for item in value.values() if isinstance(value, dict) else value:
            if isinstance(item, (dict, list)):
                stack.append((item, depth + 1))


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


class _YamlRefused(CdiPluginError):
    def __init__(self, rule: str, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.rule, self.line = rule, line


#: YAML types with no JSON equivalent: a runtime reads a spec as JSON, so they are not allowed.
_NON_JSON_TAGS = ("binary", "set", "omap", "pairs", "timestamp")


@functools.cache
def _yaml_loader(spec: bool = False) -> Any:
    """A safe YAML loader for documents without anchors, aliases or oversize numbers, nested at
    most :data:`MAX_DEPTH` deep, that rejects duplicate and non-string keys (go-yaml's strict mode).
    With ``spec``, the document is read as the YAML reader of runtimes reads it
    (:func:`~cdi_plugin.cdi.goyaml.read_as_go_yaml`: ``y`` and ``1e3`` are no text, ``1:20`` and
    ``=`` are, an unknown tag is ignored).

    libyaml (when present) still scans and parses; composing is PyYAML's, so that an anchor, an
    alias or deep nesting is refused event by event, before a node or a value exists. Like the
    YAML-to-JSON conversion runtimes use, an unquoted date stays a string; explicit tags of types
    JSON lacks (``!!binary``, ``!!set``, ...) are errors.
    """
    import yaml
    from yaml.composer import Composer

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    bases = (base,) if issubclass(base, Composer) else (Composer, base)

    class StrictLoader(*bases):  # type: ignore[misc]
        def __init__(self, stream: str) -> None:
            base.__init__(self, stream)
            Composer.__init__(self)
            self.depth = 0
            self.oversize_line = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            line = event.start_mark.line + 1
            if event.anchor is not None:
                sign = "*" if isinstance(event, yaml.AliasEvent) else "&"
                raise _YamlRefused("syntax", line, f"{_NO_ALIASES} ({sign}{event.anchor})")
            if not isinstance(event, yaml.CollectionStartEvent):
                return super().compose_node(parent, index)
            if self.depth >= MAX_DEPTH:
                raise _YamlRefused("too-deep", line, f"nested more than {MAX_DEPTH} levels deep")
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

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
                raise _YamlRefused("type", line, f"a key must be a string, got {shown(key)}")
            if key in out:
                raise _YamlRefused("duplicate-key", line, f"duplicate key {shown(key)}")
            out[key] = loader.construct_object(value_node, deep=True)
        return out

    def bounded_number(kind: str, construct: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def build(loader: Any, node: Any) -> Any:
            if kind != "bool" and len(node.value) > MAX_NUMBER_CHARS:
                loader.oversize_line = loader.oversize_line or node.start_mark.line + 1
                return _Oversize(len(node.value))
            try:
                return construct(loader, node)
            except (ValueError, KeyError):  # an explicit tag on other text, or 0x_ (PyYAML's int)
                raise _YamlRefused(
                    "type", node.start_mark.line + 1, f"{shown(node.value)} is no {kind}"
                ) from None

        return build

    def reject(loader: Any, node: Any) -> None:
        raise _YamlRefused("type", node.start_mark.line + 1, f"a {node.tag} value has no JSON equivalent")

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    if spec:
        read_as_go_yaml(StrictLoader)
    for kind in ("bool", "int", "float"):
        construct = StrictLoader.yaml_constructors[f"tag:yaml.org,2002:{kind}"]
        StrictLoader.add_constructor(f"tag:yaml.org,2002:{kind}", bounded_number(kind, construct))
    for tag in _NON_JSON_TAGS:
        StrictLoader.add_constructor(f"tag:yaml.org,2002:{tag}", reject)
    # YAML 1.1's "value" type: a plain "=" is text (go-yaml reads it so), not a parse failure
    StrictLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: node.value)
    return StrictLoader


def _parse_yaml(text: str, source: str, document: str, syntax_error: str = "") -> Any:
    """The YAML document in ``text``; ``syntax_error`` replaces the message of a YAML syntax error."""
    import yaml

    loader = _yaml_loader(document == "spec")(text)
    try:
        # runtimes decode a spec's first document (go-yaml v2 parses no further); others are one
        obj = loader.get_data() if document == "spec" else loader.get_single_data()
    except _YamlRefused as exc:
        if exc.rule == "too-deep":
            raise SpecLoadError(source, "", "syntax", f"line {exc.line}: {_too_deep(document)}") from None
        hint = "remove one of them" if exc.rule == "duplicate-key" else ""
        raise SpecLoadError(source, "", exc.rule, str(exc), hint) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        if "nesting depth" in str(exc.problem) and not syntax_error:
            # libyaml (bundled with PyYAML >= 6.0.4) scans ahead and stops at its own limit
            # before the composer counts MAX_DEPTH levels: the same refusal, in the same words
            raise SpecLoadError(
                source, "", "syntax", f"line {mark.line + 1 if mark else 1}: {_too_deep(document)}"
            ) from None
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        message = syntax_error or f"invalid YAML: {where}{exc.problem}"
        raise SpecLoadError(source, "", "syntax", message) from None
    except yaml.YAMLError as exc:
        raise SpecLoadError(source, "", "syntax", syntax_error or f"invalid YAML: {exc}") from None
    except RecursionError:
        raise SpecLoadError(source, "", "syntax", _too_deep(document)) from None
    finally:
        loader.dispose()
    if loader.oversize_line:
        raise _oversize_error(obj, source, loader.oversize_line)
    return obj


def parse(
    data: bytes, source: str = "<spec>", fmt: Format = "json", document: str = "spec"
) -> tuple[Any, Format]:
    """Parse text strictly; returns the object and the syntax that parsed it.

    ``fmt`` is the syntax the file name suggests; JSON that only parses as YAML is accepted
    (runtimes read every spec through YAML) and reported as ``"yaml"``. ``document`` names what
    the text is, in messages (``spec``, ``configuration``). A ``spec`` is also refused what the
    YAML reader of runtimes refuses, in JSON too: a raw control character (DEL, C1, U+FFFE,
    U+FFFF) and a surrogate escape, even paired. Other documents are not read by runtimes.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecLoadError(
            source, "", "syntax", f"not UTF-8 text (binary data at byte {exc.start})"
        ) from None
    if not text.strip():
        raise SpecLoadError(source, "", "empty-file", f"the file is empty (no {document} data)")
    if "\x00" in text:
        raise SpecLoadError(source, "", "syntax", f"binary data (NUL byte at offset {text.index(chr(0))})")
    unreadable = _UNREADABLE.search(text) if document == "spec" else None
    if unreadable:
        at, code = unreadable.start(), ord(unreadable.group())
        line, column = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
        raise SpecLoadError(
            source, "", "syntax",
            f"line {line} column {column}: character U+{code:04X}, which the YAML reader of runtimes "
            f"refuses (\"control characters are not allowed\"); in a string, write it as \\u{code:04x}",
        )  # fmt: skip
    if fmt == "yaml":
        return _parse_yaml(text, source, document), "yaml"
    try:
        return _json_loads(text, source, document), "json"
    except json.JSONDecodeError as exc:
        json_error = f"invalid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}"
    except _NotFinite:
        json_error = "invalid JSON: NaN, Infinity or a number beyond a float's range"
    except RecursionError:
        raise SpecLoadError(source, "", "syntax", _too_deep(document)) from None
    return _parse_yaml(text, source, document, json_error), "yaml"


def extra_document_line(data: bytes) -> int | None:
    """The line where a YAML stream goes on after its first document (which is all runtimes
    read of a spec), or None. Call it only on a document :func:`parse` accepted."""
    import yaml

    loader = _yaml_loader()(data.decode("utf-8-sig"))
    try:
        while not isinstance(event := loader.get_event(), (yaml.DocumentEndEvent, yaml.StreamEndEvent)):
            pass
        if isinstance(event, yaml.StreamEndEvent):
            return None
        following = loader.peek_event()
        return None if isinstance(following, yaml.StreamEndEvent) else following.start_mark.line + 1
    except yaml.MarkedYAMLError as exc:  # what follows is no YAML document: runtimes never see it
        mark = exc.problem_mark or exc.context_mark
        return mark.line + 1 if mark is not None else 1
    finally:
        loader.dispose()


def yaml_lines(data: bytes, pointers: Iterable[str]) -> dict[str, int]:
    """The 1-based line each JSON pointer points at in a YAML document (for messages).

    A pointer to an object member gives the line of its key; one that leads nowhere gives the
    line of the deepest node it reaches. Call it only on a document :func:`parse` accepted.
    """
    import yaml

    loader = _yaml_loader()(data.decode("utf-8-sig"))
    try:
        root = loader.get_node() if loader.check_node() else None  # the first document, as parse
    finally:
        loader.dispose()
    out: dict[str, int] = {}
    for pointer in pointers:
        node, line = root, None
        for key in pointer_parts(pointer):
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
