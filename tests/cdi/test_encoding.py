"""The codec's canonical encoding (the CDI library's field order, two-space JSON, a YAML document
marker, the same bytes for the same spec) and round trips through JSON and YAML."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings

from cdi_plugin.cdi import codec, model
from tests.cdi.helpers import doc
from tests.cdi.strategies import specs

ROUND_TRIP = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])

FULL = {
    "containerEdits": {
        "additionalGids": [0],
        "intelRdt": {"closID": "c"},
        "mounts": [{"type": "bind", "options": ["ro"], "containerPath": "/m", "hostPath": "/m"}],
        "hooks": [{"timeout": 5, "env": ["A=1"], "args": ["h"], "path": "/h", "hookName": "prestart"}],
        "deviceNodes": [{"gid": 0, "uid": 0, "permissions": "rw", "fileMode": 0, "minor": 0, "major": 0,
                         "type": "c", "hostPath": "/dev/b", "path": "/dev/a"}],
        "env": ["B=2"],
    },
    "devices": [{"containerEdits": {"env": ["A=1"]}, "annotations": {"z": "1", "a": "2"}, "name": "d0"}],
    "annotations": {"b": "1", "a": "2"},
    "kind": "example.com/widget",
    "cdiVersion": "0.7.0",
}  # fmt: skip


def test_encoding_uses_the_cdi_library_field_order_and_sorted_annotations() -> None:
    obj = codec.spec_to_obj(codec.spec_from_obj(FULL))
    assert list(obj) == ["cdiVersion", "kind", "annotations", "devices", "containerEdits"]
    assert list(obj["annotations"]) == ["a", "b"]
    assert list(obj["devices"][0]) == ["name", "annotations", "containerEdits"]
    assert list(obj["devices"][0]["annotations"]) == ["a", "z"]
    edits = obj["containerEdits"]
    assert list(edits) == ["env", "deviceNodes", "hooks", "mounts", "intelRdt", "additionalGids"]
    assert list(edits["deviceNodes"][0]) == [
        "path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid",
    ]  # fmt: skip
    assert list(edits["mounts"][0]) == ["hostPath", "containerPath", "options", "type"]
    assert list(edits["hooks"][0]) == ["hookName", "path", "args", "env", "timeout"]


def test_json_encoding_is_indented_by_two_spaces_with_a_trailing_newline() -> None:
    s = codec.spec_from_obj(doc(edits={"env": ["GREETING=grüße"]}))
    text = codec.encode(s).decode()
    assert text == (
        "{\n"
        '  "cdiVersion": "0.3.0",\n'
        '  "kind": "example.com/widget",\n'
        '  "devices": [\n'
        "    {\n"
        '      "name": "widget0",\n'
        '      "containerEdits": {\n'
        '        "env": [\n'
        '          "GREETING=grüße"\n'
        "        ]\n"
        "      }\n"
        "    }\n"
        "  ]\n"
        "}\n"
    )


def test_yaml_encoding_starts_with_a_document_marker_and_round_trips() -> None:
    s = codec.spec_from_obj(FULL)
    text = codec.encode(s, "yaml").decode()
    assert text.startswith("---\ncdiVersion: 0.7.0\nkind: example.com/widget\n")
    assert text.endswith("\n")
    assert codec.decode(text.encode(), "s.yaml", "yaml") == s


#: Plain YAML scalars that the YAML reader of the CDI library (go-yaml v2 under sigs.k8s.io/yaml)
#: resolves to a boolean or a number, then turns into other text where a string belongs (y is
#: "true", 1e3 is "1000", 0o17 is "15", 08 is "8"), while PyYAML reads them as strings.
GO_YAML_NOT_STRINGS = [
    "y",
    "Y",
    "n",
    "N",
    "1e3",
    "1E+3",
    "1.e3",
    "08",
    "0o17",
    "-0o17",
    "0O17",
    "+08",
    "0X1F",
    "0B1",
    "1_0e3",
    "0_8",
]


def test_yaml_quotes_what_runtimes_would_read_as_a_boolean_or_a_number() -> None:
    import yaml

    device = {"name": "y", "containerEdits": {"hooks": [
        {"hookName": "createContainer", "path": "/bin/h", "args": GO_YAML_NOT_STRINGS},
    ]}}  # fmt: skip
    s = codec.spec_from_obj({"cdiVersion": "0.3.0", "kind": "example.com/dev", "devices": [device]})
    text = codec.encode(s, "yaml")
    plain = {
        e.value
        for e in yaml.parse(text.decode())
        if isinstance(e, yaml.ScalarEvent) and e.style is None and e.value in GO_YAML_NOT_STRINGS
    }
    assert plain == set(), text.decode()
    assert codec.decode(text, "s.yaml", "yaml") == s


def test_same_spec_gives_the_same_bytes_whatever_the_input_order() -> None:
    reordered = json.loads(json.dumps(FULL, sort_keys=True))
    a = codec.encode(codec.spec_from_obj(FULL))
    b = codec.encode(codec.spec_from_obj(reordered))
    assert a == b
    assert codec.encode(codec.decode(a)) == a


def test_present_but_empty_and_zero_values_survive_a_round_trip() -> None:
    document = doc(
        "0.7.0",
        edits={
            "env": [],
            "deviceNodes": [{"path": "/dev/a", "major": 0, "minor": 0, "fileMode": 0, "uid": 0, "gid": 0,
                             "hostPath": "", "permissions": ""}],
            "mounts": [],
            "hooks": [{"hookName": "prestart", "path": "/h", "args": [], "env": []}],
            "intelRdt": {},
            "additionalGids": [],
            "netDevices": [],
        },
        annotations={},
        containerEdits={},
    )  # fmt: skip
    formats: list[codec.Format] = ["json", "yaml"]
    for fmt in formats:
        s = codec.spec_from_obj(document)
        data = codec.encode(s, fmt)
        again = codec.decode(data, "s", fmt)
        assert again == s
        assert codec.spec_to_obj(again) == document


@ROUND_TRIP
@given(specs())
def test_json_round_trip(spec: model.Spec) -> None:
    data = codec.encode(spec, "json")
    assert codec.decode(data, "spec.json", "json") == spec
    assert codec.encode(codec.decode(data)) == data
    assert json.loads(data) == codec.spec_to_obj(spec)


@ROUND_TRIP
@given(specs())
def test_yaml_round_trip(spec: model.Spec) -> None:
    data = codec.encode(spec, "yaml")
    obj, fmt = codec.parse(data, "spec.yaml", "yaml")
    assert fmt == "yaml"
    assert obj == codec.spec_to_obj(spec)
    assert codec.decode(data, "spec.yaml", "yaml") == spec
    assert codec.encode(codec.decode(data, "spec.yaml", "yaml"), "yaml") == data


def test_json_holds_escaped_what_the_yaml_reader_of_runtimes_refuses_or_folds() -> None:
    """Runtimes read JSON through YAML, which refuses a raw DEL, C1 control, U+FFFE or U+FFFF and
    reads a raw NEL, LS or PS as a line break."""
    value = "A=\x7f\x85\x9b\u2028\u2029\ufffe\uffff\x1bé"
    spec = codec.spec_from_obj(doc(edits={"env": [value]}))
    data = codec.encode(spec, "json")
    assert '"A=\\u007f\\u0085\\u009b\\u2028\\u2029\\ufffe\\uffff\\u001bé"' in data.decode()
    assert codec.decode(data) == spec
