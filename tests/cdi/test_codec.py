"""The strict codec's decoding: Go-like types, error locations, parsing text (the encoding and round
trips: test_encoding.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from cdi_plugin.cdi import codec, model, validate
from cdi_plugin.cdi.problems import Severity
from cdi_plugin.errors import SpecLoadError
from tests.cdi.helpers import doc

DEV = "/devices/0/containerEdits"
NODE = f"{DEV}/deviceNodes/0"


def node_doc(**fields: Any) -> dict[str, Any]:
    return doc(edits={"deviceNodes": [{"path": "/dev/widget0", **fields}]})


def load_error(obj: Any) -> SpecLoadError:
    with pytest.raises(SpecLoadError) as caught:
        codec.spec_from_obj(obj, "spec.json")
    return caught.value


# -- strict decoding ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "pointer", "field", "hint"),
    [
        ({**doc(), "devicez": []}, "/devicez", "devicez", "did you mean 'devices'?"),
        (node_doc(hostpath="/dev/x"), f"{NODE}/hostpath", "hostpath", "did you mean 'hostPath'?"),
        (
            doc(edits={"env": ["A=1"], "intelNetDevices": []}),
            f"{DEV}/intelNetDevices",
            "intelNetDevices",
            "did you mean 'netDevices'?",
        ),
        (
            doc(edits={"intelRdt": {"schema": []}}),
            f"{DEV}/intelRdt/schema",
            "schema",
            "did you mean 'schemata'?",
        ),
        (
            {**doc(), "devices": [{"name": "w", "containerEdits": {"env": ["A=1"]}, "zzz": 1}]},
            "/devices/0/zzz",
            "zzz",
            "known fields: name, annotations, containerEdits",
        ),
        (
            doc(containerEdits={"mounts": [{"hostPath": "/a", "containerPath": "/a", "readOnly": True}]}),
            "/containerEdits/mounts/0/readOnly",
            "readOnly",
            "known fields: hostPath, containerPath, options, type",
        ),
        (
            doc(edits={"hooks": [{"hookName": "prestart", "path": "/h", "timeoutSeconds": 1}]}),
            f"{DEV}/hooks/0/timeoutSeconds",
            "timeoutSeconds",
            "did you mean 'timeout'?",
        ),
        ({**doc(), "annotations": {}, "a/b~c": 1}, "/a~1b~0c", "a/b~c", None),
    ],
)
def test_unknown_field_names_the_field_and_its_json_pointer(
    document: dict[str, Any], pointer: str, field: str, hint: str | None
) -> None:
    err = load_error(document)
    assert err.rule == "unknown-field"
    assert err.pointer == pointer
    assert err.message == f"unknown field {field!r}"
    if hint is not None:
        assert err.hint == hint
    assert str(err) == f"spec.json: {pointer}: unknown field {field!r}"


def test_lenient_decoding_skips_unknown_fields() -> None:
    s = codec.spec_from_obj({**node_doc(bogus=1), "extra": {}}, lenient=True)
    assert s.devices[0].container_edits.device_nodes == (model.DeviceNode(path="/dev/widget0"),)


YAML_UNKNOWN = b"""\
cdiVersion: 0.3.0
kind: example.com/widget
devices:
  - name: widget0
    containerEdits:
      deviceNodes:
        - path: /dev/widget0
          hostpath: /dev/widget0
"""


def test_unknown_field_in_yaml_names_the_field_and_its_line() -> None:
    with pytest.raises(SpecLoadError) as caught:
        codec.decode(YAML_UNKNOWN, "spec.yaml", "yaml")
    err = caught.value
    assert (err.rule, err.pointer) == ("unknown-field", f"{NODE}/hostpath")
    assert err.message == "line 8: unknown field 'hostpath'"


@pytest.mark.parametrize(
    ("text", "pointer", "key"),
    [
        ('{"cdiVersion": "0.3.0", "cdiVersion": "0.4.0"}', "/", "cdiVersion"),
        ('{"devices": [{"name": "a"}, {"name": "b", "name": "c"}]}', "/devices/1", "name"),
        ('{"devices": [{"containerEdits": {"deviceNodes": [{"path": "/a", "uid": 0, "uid": 1}]}}]}',
         "/devices/0/containerEdits/deviceNodes/0", "uid"),
        ('{"annotations": {"a/b": "1", "a/b": "2"}}', "/annotations", "a/b"),
    ],
)  # fmt: skip
def test_duplicate_json_key_names_the_key_and_its_pointer(text: str, pointer: str, key: str) -> None:
    with pytest.raises(SpecLoadError) as caught:
        codec.parse(text.encode(), "spec.json", "json")
    err = caught.value
    assert (err.rule, err.pointer, err.message) == ("duplicate-key", pointer, f"duplicate key {key!r}")
    assert err.hint == "remove one of them"


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ("cdiVersion: 0.3.0\nkind: a\nkind: b\n", 3, "kind"),
        ("devices:\n  - name: a\n    containerEdits:\n      env: []\n      env: [A=1]\n", 5, "env"),
        ("a: {x: 1, w: 2, x: 3}\n", 1, "x"),  # a key y is true to runtimes, no string
    ],
)
def test_duplicate_yaml_key_names_the_key_and_its_line(text: str, line: int, key: str) -> None:
    with pytest.raises(SpecLoadError) as caught:
        codec.parse(text.encode(), "spec.yaml", "yaml")
    err = caught.value
    assert err.rule == "duplicate-key"
    assert err.message == f"line {line}: duplicate key {key!r}"


SPEC_YAML = (
    "cdiVersion: 0.3.0\nkind: example.com/dev\ndevices:\n- name: a\n  containerEdits:\n    env: [A=1]\n"
)


@pytest.mark.parametrize(
    ("rest", "line"),
    [
        ("---\ncdiVersion: 0.3.0\nkind: example.com/other\n", 7),
        ("...\n---\n[unclosed\n", 8),  # go-yaml never parses past the first document
        ("---\n", 7),
    ],
)
def test_a_yaml_spec_is_its_first_document(rest: str, line: int) -> None:
    """The CDI Go library (go-yaml v2's Unmarshal) decodes the first document of a file only."""
    data = (SPEC_YAML + rest).encode()
    assert codec.decode(data, "spec.yaml", "yaml").kind == "example.com/dev"
    result = validate.validate_bytes(data, "spec.yaml", "yaml")
    assert result.valid
    assert [(p.rule, p.severity, p.message) for p in result.problems] == [
        ("extra-document", Severity.WARNING,
         f"line {line}: runtimes read only the first YAML document of a file and ignore the rest"),
    ]  # fmt: skip


def test_a_single_yaml_document_has_no_extra_document() -> None:
    for data in (SPEC_YAML, "---\n" + SPEC_YAML + "...\n# end\n"):
        assert validate.validate_bytes(data.encode(), "spec.yaml", "yaml").problems == []


def test_problems_of_a_first_yaml_document_name_their_lines() -> None:
    data = (SPEC_YAML.replace("A=1", "A") + "---\nfoo: 1\n").encode()
    problems = validate.validate_bytes(data, "spec.yaml", "yaml").problems
    assert [(p.rule, p.message) for p in problems] == [
        ("env-format", "line 6: invalid env entry 'A'"),
        (
            "extra-document",
            "line 7: runtimes read only the first YAML document of a file and ignore the rest",
        ),
    ]


@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_and_infinity_in_json_are_text_as_runtimes_read_them(word: str) -> None:
    """Python's json module takes NaN and Infinity for numbers (they are no JSON), and 1e999 for
    infinity: runtimes read the file through YAML, which makes text of them all."""
    text = json.dumps(doc("0.6.0", annotations={"a": "WORD"})).replace('"WORD"', word)
    obj, parsed_as = codec.parse(text.encode(), "spec.json", "json")
    assert (obj["annotations"], parsed_as) == ({"a": word}, "yaml")
    result = validate.validate_bytes(text.encode(), "spec.json", "json")
    assert [(p.rule, p.severity) for p in result.problems] == [("not-strict-json", Severity.WARNING)]


def test_yaml_key_that_is_not_a_string() -> None:
    with pytest.raises(SpecLoadError) as caught:
        codec.parse(b"cdiVersion: 0.3.0\n7: x\n", "spec.yaml", "yaml")
    assert (caught.value.rule, caught.value.message) == ("type", "line 2: a key must be a string, got 7")


# -- Go-like types -----------------------------------------------------------------------------

UINT32_MAX = 2**32 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@pytest.mark.parametrize("field", ["uid", "gid", "fileMode"])
@pytest.mark.parametrize("value", [0, 1, 0o644, UINT32_MAX])
def test_uint32_fields_accept_their_range(field: str, value: int) -> None:
    s = codec.spec_from_obj(node_doc(**{field: value}))
    attr = {"fileMode": "file_mode"}.get(field, field)
    assert getattr(s.devices[0].container_edits.device_nodes[0], attr) == value  # type: ignore[index]


@pytest.mark.parametrize("field", ["uid", "gid", "fileMode"])
@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "-1 is out of range for an unsigned 32-bit integer (0 to 4294967295)"),
        (UINT32_MAX + 1, "4294967296 is out of range for an unsigned 32-bit integer (0 to 4294967295)"),
        (1.5, "expected an unsigned 32-bit integer, got number 1.5"),
        (-0.0, "expected an unsigned 32-bit integer, got number -0.0"),
        (True, "expected an unsigned 32-bit integer, got boolean True"),
        ("0644", "expected an unsigned 32-bit integer, got string '0644'"),
        ([1], "expected an unsigned 32-bit integer, got array [1]"),
    ],
)
def test_uint32_fields_reject_other_values(field: str, value: Any, message: str) -> None:
    err = load_error(node_doc(**{field: value}))
    assert (err.rule, err.pointer, err.message) == ("type", f"{NODE}/{field}", message)


@pytest.mark.parametrize("field", ["major", "minor"])
@pytest.mark.parametrize("value", [INT64_MIN, -1, 0, 226, INT64_MAX])
def test_int64_fields_accept_their_range(field: str, value: int) -> None:
    s = codec.spec_from_obj(node_doc(**{field: value}))
    assert getattr(s.devices[0].container_edits.device_nodes[0], field) == value  # type: ignore[index]


@pytest.mark.parametrize(
    ("field", "value", "read"),
    [
        ("major", 1.0, 1),
        ("minor", 1e2, 100),
        ("minor", -0.0, 0),
        ("uid", 1e3, 1000),
        ("fileMode", 420.0, 420),
    ],
)
def test_integer_fields_read_an_integral_number_as_its_integer(field: str, value: float, read: int) -> None:
    """The CDI Go library reads a number through YAML and Go's JSON encoder, which writes 1.0 as 1
    and 1e2 as 100: an integer field takes it (but -0, as written, no unsigned one)."""
    s = codec.spec_from_obj(node_doc(**{field: value}))
    got = getattr(s.devices[0].container_edits.device_nodes[0], {"fileMode": "file_mode"}.get(field, field))  # type: ignore[index]
    assert (got, type(got)) == (read, int)


def test_an_integral_yaml_number_out_of_range_is_still_out_of_range() -> None:
    text = (
        "cdiVersion: 0.3.0\nkind: example.com/dev\ndevices:\n- name: a\n  containerEdits:\n"
        "    deviceNodes: [{path: /dev/a, uid: 1e10}]\n"
    )
    with pytest.raises(SpecLoadError) as caught:
        codec.decode(text.encode(), "spec.yaml", "yaml")
    assert caught.value.message.endswith(
        "10000000000 is out of range for an unsigned 32-bit integer (0 to 4294967295)"
    )


@pytest.mark.parametrize(
    ("value", "shown"), [(1e300, "1.000e+300"), (-1e300, "-1.000e+300"), (10**30, "1.000e+30")]
)
def test_a_huge_integer_out_of_range_is_named_in_a_few_characters(value: float, shown: str) -> None:
    """1e300 read as an integer has 301 digits: the message shows it as 1.000e+300."""
    err = load_error(node_doc(major=value))
    assert err.message == f"{shown} is out of range for an integer ({INT64_MIN} to {INT64_MAX})"


@pytest.mark.parametrize("field", ["major", "minor"])
@pytest.mark.parametrize("value", [INT64_MIN - 1, INT64_MAX + 1, 1.5, float("nan"), False, "7"])
def test_int64_fields_reject_other_values(field: str, value: Any) -> None:
    err = load_error(node_doc(**{field: value}))
    assert (err.rule, err.pointer) == ("type", f"{NODE}/{field}")


@pytest.mark.parametrize(
    ("edits", "pointer"),
    [
        ({"additionalGids": [0, -1]}, f"{DEV}/additionalGids/1"),
        ({"additionalGids": [UINT32_MAX + 1]}, f"{DEV}/additionalGids/0"),
        ({"intelRdt": {"enableMonitoring": 1}}, f"{DEV}/intelRdt/enableMonitoring"),
        ({"intelRdt": {"enableCMT": "true"}}, f"{DEV}/intelRdt/enableCMT"),
        ({"intelRdt": {"schemata": "L3:0=f"}}, f"{DEV}/intelRdt/schemata"),
        ({"intelRdt": []}, f"{DEV}/intelRdt"),
        ({"env": "A=1"}, f"{DEV}/env"),
        ({"env": ["A=1", 2]}, f"{DEV}/env/1"),
        ({"env": [None]}, f"{DEV}/env/0"),
        ({"deviceNodes": [None]}, f"{DEV}/deviceNodes/0"),
        ({"deviceNodes": {"path": "/a"}}, f"{DEV}/deviceNodes"),
        ({"hooks": [{"hookName": "prestart", "path": "/h", "timeout": "5"}]}, f"{DEV}/hooks/0/timeout"),
        ({"mounts": [{"hostPath": 1, "containerPath": "/a"}]}, f"{DEV}/mounts/0/hostPath"),
        ({"netDevices": [{"hostInterfaceName": "e", "name": 0}]}, f"{DEV}/netDevices/0/name"),
    ],
)
def test_type_errors_name_the_pointer(edits: dict[str, Any], pointer: str) -> None:
    err = load_error(doc(edits=edits))
    assert (err.rule, err.pointer) == ("type", pointer)


@pytest.mark.parametrize("value", [0, 10, 1.5, True])
def test_a_number_or_boolean_where_a_string_belongs_says_to_quote_it(value: Any) -> None:
    err = load_error(doc(edits={"env": ["A=1", value]}))
    assert (err.rule, err.pointer) == ("type", f"{DEV}/env/1")
    assert err.hint.startswith("quote it: runtimes would read it as text")
    assert load_error(doc(edits={"env": [["A=1"]]})).hint == ""  # an array is no text in Go either


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("y", True), ("N", False), ("1e3", 1000.0), ("08", 8.0), ("1.e3", 1000.0), ("0o17", 15),
        ("-0O17", -15), ("0o1__7", 15), ("0X1F", 31), ("0B101", 5), ("1_0e3", 10000.0), ("0_8", 8.0),
    ],
)  # fmt: skip
def test_yaml_reads_plain_scalars_as_the_yaml_reader_of_runtimes_does(text: str, value: Any) -> None:
    """go-yaml v2 takes these for a boolean or a number where PyYAML reads text: a YAML spec
    naming a device y names it "true" for a runtime, so it is refused as a number would be."""
    data = f"cdiVersion: 0.3.0\nkind: example.com/dev\nfoo: {text}\n".encode()
    obj, _ = codec.parse(data, "spec.yaml", "yaml")
    assert obj["foo"] == value
    assert type(obj["foo"]) is type(value)
    quoted = f"cdiVersion: 0.3.0\nkind: example.com/dev\nfoo: '{text}'\n".encode()
    assert codec.parse(quoted, "spec.yaml", "yaml")[0]["foo"] == text
    spec = f"cdiVersion: 0.3.0\nkind: a.com/dev\ndevices:\n- name: {text}\n  containerEdits: {{env: [A=1]}}\n"
    with pytest.raises(SpecLoadError) as caught:
        codec.decode(spec.encode(), "spec.yaml", "yaml")
    assert (caught.value.rule, caught.value.pointer) == ("type", "/devices/0/name")


@pytest.mark.parametrize(
    "text",
    ["1:20", "190:20:30.5", "=", "<<", "2024-01-31", "0o_", "0x_", "0b_", "1e999", "0x1FFFFFFFFFFFFFFFF"],
)
def test_yaml_reads_as_text_what_the_yaml_reader_of_runtimes_takes_for_text(text: str) -> None:
    """go-yaml v2 has no base 60 numbers, no = or << values, no dates, and takes what Go cannot
    convert for a string: a spec using them is valid, and read with the same text."""
    spec = (
        "cdiVersion: 0.5.0\nkind: example.com/dev\ndevices:\n- name: dev\n  containerEdits:\n"
        f"    hooks: [{{hookName: createContainer, path: /bin/h, args: [{text}]}}]\n"
    )
    s = codec.decode(spec.encode(), "spec.yaml", "yaml")
    assert s.devices[0].container_edits.hooks[0].args == (text,)


def test_a_yaml_tag_runtimes_do_not_know_is_ignored_as_they_ignore_it() -> None:
    """go-yaml v2 reads a scalar with a tag it does not know as its text, unresolved (``!x 010``
    is '010'), and ignores such a tag on a sequence or a mapping."""
    spec = (
        "cdiVersion: !v 0.3.0\nkind: !local example.com/dev\ndevices: !list\n- !dev\n  name: !n 010\n"
        "  containerEdits: !!foo\n    env: !e [A=1]\n"
    )
    s = codec.decode(spec.encode(), "spec.yaml", "yaml")
    assert (s.cdi_version, s.kind, s.devices[0].name) == ("0.3.0", "example.com/dev", "010")
    assert s.devices[0].container_edits.env == ("A=1",)


def test_a_configuration_still_refuses_a_tag_it_does_not_know() -> None:
    with pytest.raises(SpecLoadError) as caught:
        codec.parse(b"a: !foo x\n", "config.yaml", "yaml", "configuration")
    assert caught.value.rule == "syntax"


@pytest.mark.parametrize("text", ["!!int x", "!!bool x", "!!float x", "!!int 0x_"])
def test_yaml_explicit_tag_on_other_text_is_a_one_line_refusal(text: str) -> None:
    with pytest.raises(SpecLoadError) as caught:
        codec.parse(f"foo: {text}\n".encode(), "spec.yaml", "yaml")
    assert caught.value.rule == "type"
    assert "line 1" in str(caught.value)


@pytest.mark.parametrize(
    ("document", "pointer"),
    [
        ([], "/"),
        ("spec", "/"),
        (None, "/"),
        ({**doc(), "cdiVersion": 0.3}, "/cdiVersion"),
        ({**doc(), "annotations": {"a": 1}}, "/annotations/a"),
        ({**doc(), "annotations": ["a"]}, "/annotations"),
        ({**doc(), "devices": {}}, "/devices"),
    ],
)
def test_document_level_type_errors(document: Any, pointer: str) -> None:
    err = load_error(document)
    assert (err.rule, err.pointer) == ("type", pointer)


def test_null_means_absent() -> None:
    document = doc(
        edits={
            "env": None,
            "deviceNodes": [
                {"path": "/dev/a", "hostPath": None, "uid": None, "fileMode": None, "type": None}
            ],
            "intelRdt": None,
            "additionalGids": None,
            "mounts": [{"hostPath": "/a", "containerPath": "/a", "options": None, "type": None}],
        },
        annotations=None,
        containerEdits=None,
    )
    s = codec.spec_from_obj(document)
    assert s.annotations is None
    assert s.container_edits is None
    edits = s.devices[0].container_edits
    assert edits == model.ContainerEdits(
        device_nodes=(model.DeviceNode(path="/dev/a"),),
        mounts=(model.Mount(host_path="/a", container_path="/a"),),
    )
    assert codec.spec_to_obj(s)["devices"][0]["containerEdits"] == {
        "deviceNodes": [{"path": "/dev/a"}],
        "mounts": [{"hostPath": "/a", "containerPath": "/a"}],
    }


@pytest.mark.parametrize(
    ("document", "pointer", "field"),
    [
        ({"kind": "a.b/c", "devices": []}, "/", "cdiVersion"),
        ({"cdiVersion": "0.3.0", "kind": None, "devices": []}, "/", "kind"),
        ({"cdiVersion": "0.3.0", "kind": "a.b/c"}, "/", "devices"),
        (
            {"cdiVersion": "0.3.0", "kind": "a.b/c", "devices": [{"name": "a"}]},
            "/devices/0",
            "containerEdits",
        ),
        ({"cdiVersion": "0.3.0", "kind": "a.b/c", "devices": [{"containerEdits": {}}]}, "/devices/0", "name"),
        (doc(edits={"deviceNodes": [{"hostPath": "/a"}]}), f"{DEV}/deviceNodes/0", "path"),
        (doc(edits={"mounts": [{"containerPath": "/a"}]}), f"{DEV}/mounts/0", "hostPath"),
        (doc(edits={"hooks": [{"path": "/a"}]}), f"{DEV}/hooks/0", "hookName"),
        (doc(edits={"netDevices": [{"name": "n"}]}), f"{DEV}/netDevices/0", "hostInterfaceName"),
    ],
)
def test_required_fields(document: dict[str, Any], pointer: str, field: str) -> None:
    err = load_error(document)
    assert (err.rule, err.pointer, err.message) == ("required", pointer, f"missing required field {field!r}")


# -- parsing text ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "rule", "message"),
    [
        (b"", "empty-file", "the file is empty (no spec data)"),
        (b" \n\t\n", "empty-file", "the file is empty (no spec data)"),
        (b"\xef\xbb\xbf\n", "empty-file", "the file is empty (no spec data)"),
        (b'{"a": "\xff"}', "syntax", "not UTF-8 text (binary data at byte 7)"),
        (b'{"a":\x00 1}', "syntax", "binary data (NUL byte at offset 5)"),
        (b'{"a": [1, 2}', "syntax", "invalid JSON: line 1 column 12: Expecting ',' delimiter"),
        (b'{\n  "a": 1\n', "syntax", "invalid JSON: line 3 column 1: Expecting ',' delimiter"),
    ],
)
def test_parse_errors(data: bytes, rule: str, message: str) -> None:
    with pytest.raises(SpecLoadError) as caught:
        codec.parse(data, "spec.json", "json")
    assert (caught.value.rule, caught.value.message) == (rule, message)
    assert str(caught.value) == f"spec.json: {message}"


def test_yaml_syntax_error_names_line_and_column() -> None:
    with pytest.raises(SpecLoadError) as caught:
        codec.parse(b"devices:\n  - name: a\n   kind: b\n", "spec.yaml", "yaml")
    assert caught.value.rule == "syntax"
    assert caught.value.message.startswith("invalid YAML: line 3 column ")


def test_byte_order_mark_is_accepted() -> None:
    obj, fmt = codec.parse(b'\xef\xbb\xbf{"a": 1}', "spec.json", "json")
    assert (obj, fmt) == ({"a": 1}, "json")


def test_json_that_is_only_yaml_is_parsed_as_yaml() -> None:
    obj, fmt = codec.parse(b'{"a": [1, 2,], b: c}  # comment\n', "spec.json", "json")
    assert (obj, fmt) == ({"a": [1, 2], "b": "c"}, "yaml")


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        (b"[" * 70 + b"]" * 70, "json"),
        (b'{"x": ' + b"[" * 5000 + b"]" * 5000 + b"}", "json"),
        (b"[" * 200_000, "json"),
        (b"x: " + b"[" * 70 + b"]" * 70, "yaml"),
        (b"x: " + b"{a: " * 3000 + b"}" * 3000, "yaml"),
        (b"".join(b"  " * i + b"- \n" for i in range(80)), "yaml"),
    ],
)
def test_deep_nesting_is_a_syntax_error(data: bytes, fmt: codec.Format) -> None:
    with pytest.raises(SpecLoadError) as caught:
        codec.parse(data, "spec", fmt)
    assert caught.value.rule == "syntax"
    assert "nested more than 64 levels deep" in caught.value.message


def test_very_deep_yaml_does_not_crash_the_process() -> None:
    """libyaml's composer recurses on the C stack; the depth check must run before it."""
    code = (
        "from cdi_plugin.cdi import codec\n"
        "from cdi_plugin.errors import SpecLoadError\n"
        "try:\n"
        "    codec.parse(b'a: ' + b'[' * 300000, 'deep.yaml', 'yaml')\n"
        "except SpecLoadError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "deep.yaml: line 1: nested more than 64 levels deep" in done.stdout


def test_nesting_up_to_the_limit_is_fine() -> None:
    obj, _ = codec.parse(b'{"x": ' + b"[" * 60 + b"]" * 60 + b"}", "spec.json", "json")
    assert isinstance(obj["x"], list)


def test_lone_surrogate_escape_is_rejected() -> None:
    with pytest.raises(SpecLoadError) as caught:
        codec.parse(b'{"env": ["A=\\ud800"], "ok": "\\ud83d\\ude00"}', "spec.json", "json")
    assert (caught.value.rule, caught.value.pointer) == ("syntax", "/env/0")
    assert "surrogate" in caught.value.message


def test_surrogate_pair_escape_is_fine_outside_a_spec() -> None:
    """Only a spec is read by runtimes through YAML, which refuses it (test_hostile_text.py)."""
    text = b'{"a": "\\ud83d\\ude00\x7f"}'
    for document in ("configuration", "OCI runtime spec"):
        obj, _ = codec.parse(text, "doc.json", "json", document)
        assert obj == {"a": "\U0001f600\x7f"}


def test_yaml_dates_stay_strings_like_in_runtimes() -> None:
    obj, _ = codec.parse(b"cdiVersion: 2024-01-02\nwhen: 2001-12-14t21:59:43.10-05:00\n", "s.yaml", "yaml")
    assert obj == {"cdiVersion": "2024-01-02", "when": "2001-12-14t21:59:43.10-05:00"}


@pytest.mark.parametrize(
    "tag", ["!!binary aGVsbG8=", "!!set {a, b}", "!!omap [a: 1]", "!!timestamp 2001-12-14"]
)
def test_yaml_types_without_a_json_equivalent_are_rejected(tag: str) -> None:
    with pytest.raises(SpecLoadError) as caught:
        codec.parse(f"a: 1\nb: {tag}\n".encode(), "s.yaml", "yaml")
    assert caught.value.rule == "type"
    assert caught.value.message.startswith("line 2: ")
