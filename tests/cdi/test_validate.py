"""Validation: the good and bad corpus, the upstream schema's test data, and soundness against it."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdi_plugin.cdi import codec, schema, validate
from cdi_plugin.cdi.model import Spec
from cdi_plugin.cdi.problems import Problem, Severity
from cdi_plugin.cdi.version import KNOWN_VERSIONS, minimum_version
from tests.cdi import upstream
from tests.cdi.helpers import doc
from tests.cdi.strategies import specs

SPECS = upstream.REPO / "specs"
GOOD = sorted(p for p in (SPECS / "good").rglob("*") if p.suffix in {".json", ".yaml"})
BAD = sorted(p for p in (SPECS / "bad").iterdir() if p.is_file())
UPSTREAM_GOOD = sorted((upstream.UPSTREAM / "testdata" / "good").iterdir())
UPSTREAM_BAD = sorted((upstream.UPSTREAM / "testdata" / "bad").iterdir())
#: Bad files whose single mistake also trips a second rule, and which one.
ALSO = {"required--devices-null.json": {"type"}}


def fmt_of(path: Path) -> codec.Format:
    return "yaml" if path.suffix == ".yaml" else "json"


def check_file(path: Path, max_version: str | None = None) -> validate.Validation:
    return validate.validate_bytes(path.read_bytes(), str(path), fmt_of(path), max_version)


def errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.is_error]


def test_the_corpus_is_there() -> None:
    assert len(GOOD) >= 15
    assert len(BAD) >= 100
    assert UPSTREAM_GOOD
    assert UPSTREAM_BAD


@pytest.mark.parametrize("path", GOOD, ids=lambda p: str(p.relative_to(SPECS)))
def test_good_spec_has_no_error(path: Path) -> None:
    result = check_file(path)
    assert errors(result.problems) == []
    assert result.problems == [], "a good spec has no warning either (specs/warn has those)"
    assert result.valid
    assert result.spec is not None
    assert validate.runtime_problems(result.spec) == []


@pytest.mark.parametrize("path", GOOD, ids=lambda p: str(p.relative_to(SPECS)))
def test_good_spec_passes_the_upstream_schema(path: Path) -> None:
    obj, _ = codec.parse(path.read_bytes(), str(path), fmt_of(path))
    assert upstream.errors(obj) == []


def test_good_specs_cover_every_released_version_with_its_feature() -> None:
    """``vX.Y.Z-*`` files declare X.Y.Z and use a feature that needs it (0.8.0 and 1.0.0 added none)."""
    seen = set()
    for path in GOOD:
        if not path.name.startswith("v"):
            continue
        declared = path.name[1:].split("-")[0]
        spec = codec.decode(path.read_bytes(), str(path), fmt_of(path))
        assert spec.cdi_version == declared
        needed = minimum_version(spec)
        assert needed == declared or (declared in {"0.8.0", "1.0.0"} and needed == "0.7.0"), path.name
        seen.add(declared)
    assert seen == set(KNOWN_VERSIONS[2:])


#: Every rule that gives an error; ``too-large`` is tested with a generated file instead of a
#: committed 4 MiB one, and ``conflict`` with the ``specs/bad/conflict`` directory. The rules that
#: give warnings have their corpus in ``specs/warn`` (tests/cdi/test_severity.py).
SPEC_RULES = {
    "syntax", "empty-file", "duplicate-key", "unknown-field", "type", "required", "version-unknown",
    "version-too-low", "removed-field", "kind-format", "vendor-name", "class-name",
    "short-name", "device-name", "duplicate-device-name", "no-devices", "empty-device-edits", "env-format",
    "device-node-path", "device-node-type", "device-node-permissions", "hook-name", "hook-path", "mount-path",
    "intel-rdt-closid", "net-device", "absolute-path", "hook-timeout",
}  # fmt: skip


def test_bad_corpus_covers_every_rule() -> None:
    assert {p.name.split("--")[0] for p in BAD} == SPEC_RULES


def test_bad_corpus_file_names_use_known_rules() -> None:
    rules = {p.name.split("--")[0] for p in BAD + sorted((SPECS / "warn").iterdir())}
    schema_rules = set(json.dumps(schema.load(schema.SPEC_SCHEMA)).split('"x-rule": "')[1:])
    schema_rules = {r.split('"')[0] for r in schema_rules}
    assert schema_rules <= rules
    assert all("--" in p.name and p.suffix in {".json", ".yaml"} for p in BAD)


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_spec_yields_the_rule_in_its_name(path: Path) -> None:
    rule = path.name.split("--")[0]
    result = check_file(path)
    assert not result.valid
    found = {p.rule for p in errors(result.problems)}
    assert rule in found
    assert {p.rule for p in result.problems} <= {rule} | ALSO.get(path.name, set()), "one rule only"


@pytest.mark.parametrize("path", UPSTREAM_GOOD, ids=lambda p: p.name)
def test_upstream_good_examples_are_accepted(path: Path) -> None:
    result = check_file(path)
    assert errors(result.problems) == []
    assert upstream.errors(json.loads(path.read_bytes())) == []


@pytest.mark.parametrize(
    ("name", "rules"), [("empty.json", {"empty-file"}), ("explicit-empty.json", {"required"})]
)
def test_upstream_bad_examples_are_rejected(name: str, rules: set[str]) -> None:
    path = upstream.UPSTREAM / "testdata" / "bad" / name
    assert path in UPSTREAM_BAD
    result = check_file(path)
    assert not result.valid
    assert {p.rule for p in errors(result.problems)} == rules


def test_upstream_bad_examples_fail_the_upstream_schema_too() -> None:
    assert upstream.errors(json.loads((upstream.UPSTREAM / "testdata/bad/explicit-empty.json").read_text()))
    with pytest.raises(json.JSONDecodeError):
        json.loads((upstream.UPSTREAM / "testdata/bad/empty.json").read_text())


# -- soundness against the upstream schema -----------------------------------------------------

SOUNDNESS = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


@SOUNDNESS
@given(specs())
def test_generated_specs_are_valid_and_pass_the_upstream_schema(spec: Spec) -> None:
    obj = codec.spec_to_obj(spec)
    result = validate.validate_object(obj)
    assert errors(result.problems) == []
    assert result.spec == spec
    assert upstream.errors(obj) == []


ODD_VALUES = st.sampled_from(
    [
        None,
        "",
        "x",
        "/",
        "A=1",
        "=",
        0,
        -1,
        1,
        2**32,
        2**63,
        1.5,
        True,
        False,
        [],
        {},
        [""],
        ["A=1"],
        {"": ""},
        {"a": 1},
        "v0.3.0",
        "0.2.0",
        "1.1.0",
        "c",
        "rwm",
        "prestart",
        "..",
        "a/b",
    ]
)


def _containers(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path] if isinstance(obj, (dict, list)) else []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        out += _containers(value, (*path, key))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    """A valid spec with a few random edits: values replaced, keys removed or added."""
    obj = copy.deepcopy(codec.spec_to_obj(draw(specs())))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(_containers(obj)))
        target: Any = obj
        for step in where:
            target = target[step]
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        action = draw(st.sampled_from(["set", "delete", "add"] if keys else ["add"]))
        if action == "add":
            if isinstance(target, dict):
                key = draw(st.sampled_from(["extra", "name", "path", "type", "env", "schema"]))
                target[key] = copy.deepcopy(draw(ODD_VALUES))
            else:
                target.append(copy.deepcopy(draw(ODD_VALUES)))
        else:
            key = draw(st.sampled_from(keys))
            if action == "delete":
                del target[key]
            else:
                target[key] = copy.deepcopy(draw(ODD_VALUES))
    return obj


@SOUNDNESS
@given(mutated())
def test_whatever_our_validator_accepts_passes_the_upstream_schema(obj: Any) -> None:
    result = validate.validate_object(obj)
    if result.valid:
        assert upstream.errors(obj) == []
    else:
        assert errors(result.problems)


# -- semantic rules and how problems are put together -----------------------------------------

DEV = "/devices/0/containerEdits"


@pytest.mark.parametrize(
    ("edits", "pointer", "rule"),
    [
        ({"env": ["A=1", "B"]}, f"{DEV}/env/1", "env-format"),
        ({"deviceNodes": [{"path": ""}]}, f"{DEV}/deviceNodes/0/path", "device-node-path"),
        ({"deviceNodes": [{"path": "/a", "type": "x"}]}, f"{DEV}/deviceNodes/0/type", "device-node-type"),
        (
            {"deviceNodes": [{"path": "/a", "permissions": "rwx"}]},
            f"{DEV}/deviceNodes/0/permissions",
            "device-node-permissions",
        ),
        ({"hooks": [{"hookName": "preStart", "path": "/h"}]}, f"{DEV}/hooks/0/hookName", "hook-name"),
        ({"hooks": [{"hookName": "prestart", "path": ""}]}, f"{DEV}/hooks/0/path", "hook-path"),
        (
            {"hooks": [{"hookName": "prestart", "path": "/h", "env": ["X"]}]},
            f"{DEV}/hooks/0/env/0",
            "env-format",
        ),
        ({"mounts": [{"hostPath": "", "containerPath": "/m"}]}, f"{DEV}/mounts/0/hostPath", "mount-path"),
        (
            {"mounts": [{"hostPath": "/m", "containerPath": ""}]},
            f"{DEV}/mounts/0/containerPath",
            "mount-path",
        ),
        ({"intelRdt": {"closID": "."}}, f"{DEV}/intelRdt/closID", "intel-rdt-closid"),
        (
            {
                "netDevices": [
                    {"hostInterfaceName": "e", "name": "n"},
                    {"hostInterfaceName": "e", "name": "m"},
                ]
            },
            f"{DEV}/netDevices/1/hostInterfaceName",
            "net-device",
        ),
        ({}, DEV, "empty-device-edits"),
        ({"env": [], "intelRdt": None}, DEV, "empty-device-edits"),
    ],
)
def test_runtime_rules_point_at_the_offending_value(edits: dict[str, Any], pointer: str, rule: str) -> None:
    version = "1.1.0"
    spec = codec.spec_from_obj(doc(version, edits=edits))
    found = [(p.pointer, p.rule) for p in validate.runtime_problems(spec)]
    assert found == [(pointer, rule)]


@pytest.mark.parametrize("closid", ["/", "gold", "a" * 4095, "x.y", "..."])
def test_valid_closids(closid: str) -> None:
    spec = codec.spec_from_obj(doc("0.7.0", edits={"intelRdt": {"closID": closid}}))
    assert validate.runtime_problems(spec) == []


def test_closid_limit_is_in_bytes() -> None:
    spec = codec.spec_from_obj(doc("0.7.0", edits={"intelRdt": {"closID": "é" * 2048}}))
    assert [p.rule for p in validate.runtime_problems(spec)] == ["intel-rdt-closid"]


@pytest.mark.parametrize(
    ("closid", "valid"),
    [("/", True), ("gold", True), ("a" * 4095, True), ("é" * 4095, True), ("...", True),
     ("", False), (".", False), ("..", False), ("a/b", False), ("a\nb", False), ("//", False),
     ("a" * 4096, False)],
)  # fmt: skip
def test_the_schema_bounds_closids_in_characters(closid: str, valid: bool) -> None:
    problems = schema.problems(doc("0.7.0", edits={"intelRdt": {"closID": closid}}))
    assert [(p.pointer, p.rule) for p in problems] == (
        [] if valid else [("/devices/0/containerEdits/intelRdt/closID", "intel-rdt-closid")]
    )


def _bounded_repeats(node: Any) -> list[int]:
    if isinstance(node, dict):
        found = [int(m) for m in re.findall(r"\{\d*,?(\d+)\}", node.get("pattern", ""))]
        return found + [n for v in node.values() for n in _bounded_repeats(v)]
    return [n for v in node for n in _bounded_repeats(v)] if isinstance(node, list) else []


@pytest.mark.parametrize("name", sorted(p.name for p in (upstream.REPO / "schemas").glob("*.json")))
def test_schema_patterns_repeat_at_most_255_times(name: str) -> None:
    """The regex engine builds a state per repetition: ``[^/]{1,4095}`` alone took 8 MiB to compile
    (lengths belong in maxLength)."""
    assert max(_bounded_repeats(schema.load(name)), default=0) <= 255


def test_permissions_none_and_every_combination_are_valid() -> None:
    for perms in ["none", "r", "w", "m", "rw", "rm", "wm", "rwm", "mwr"]:
        obj = doc(edits={"deviceNodes": [{"path": "/a", "permissions": perms}]})
        assert validate.validate_object(obj).valid, perms


def test_all_problems_are_collected_in_one_pass() -> None:
    obj = {
        "cdiVersion": "0.3.0",
        "kind": "x/widget",
        "extra": 1,
        "devices": [
            {"name": "a-", "containerEdits": {"env": ["A"]}},
            {"name": "b", "containerEdits": {"deviceNodes": [{"path": "dev/b", "hostPath": "/dev/b"}]}},
            {"name": "b", "containerEdits": {"hooks": [{"hookName": "x", "path": "/h", "timeout": 0}]}},
        ],
    }
    result = validate.validate_object(obj)
    assert result.spec is None
    found = {(p.pointer, p.rule) for p in result.problems}
    assert found == {
        ("/extra", "unknown-field"),
        ("/kind", "short-name"),
        ("/devices/0/name", "device-name"),
        ("/devices/0/containerEdits/env/0", "env-format"),
        ("/devices/1/containerEdits/deviceNodes/0/hostPath", "version-too-low"),
        ("/devices/1/containerEdits/deviceNodes/0/path", "absolute-path"),
        ("/devices/2/name", "duplicate-device-name"),
        ("/devices/2/containerEdits/hooks/0/hookName", "hook-name"),
        ("/devices/2/containerEdits/hooks/0/timeout", "hook-timeout"),
    }
    assert len(result.problems) == len(found), "at most one problem per pointer and rule"


def test_semantic_problems_come_before_schema_problems_and_win_at_the_same_pointer() -> None:
    result = validate.validate_object(doc(edits={"env": ["A"], "deviceNodes": [{"path": "a"}]}))
    rules = [(p.pointer, p.rule) for p in result.problems]
    assert rules == [(f"{DEV}/env/0", "env-format"), (f"{DEV}/deviceNodes/0/path", "absolute-path")]
    assert result.problems[0].message == "invalid env entry 'A'"


def test_max_version_turns_a_higher_declared_version_into_an_error() -> None:
    obj = doc("0.6.0", annotations={"example.com/owner": "x"})
    assert validate.validate_object(obj).valid
    result = validate.validate_object(obj, max_version="0.5.0")
    assert [(p.pointer, p.rule, p.severity) for p in result.problems] == [
        ("/cdiVersion", "version-above-max", Severity.ERROR)
    ]
    assert "needed by spec 'annotations'" in result.problems[0].message
    assert validate.validate_object(obj, max_version="0.6.0").valid


def test_annotation_size_limit_counts_keys_and_values() -> None:
    limit = validate.ANNOTATIONS_MAX_BYTES
    at_limit = doc("0.6.0", annotations={"k": "v" * (limit - 1)})
    assert validate.validate_object(at_limit).valid
    over = doc("0.6.0", annotations={"k": "v" * limit})
    assert [p.rule for p in validate.validate_object(over).problems] == ["annotation-size"]


def test_yaml_problems_name_the_line() -> None:
    data = b"cdiVersion: 0.3.0\nkind: example.com/widget\ndevices:\n  - name: w\n    containerEdits:\n"
    data += b"      env: [A]\n"
    result = validate.validate_bytes(data, "s.yaml", "yaml")
    [problem] = result.problems
    assert (problem.pointer, problem.rule) == ("/devices/0/containerEdits/env/0", "env-format")
    assert problem.message == "line 6: invalid env entry 'A'"


def test_json_file_that_is_only_yaml_gets_a_warning_not_an_error() -> None:
    data = (
        b"{cdiVersion: 0.3.0, kind: example.com/widget, devices: [{name: w, containerEdits: {env: [A=1]}}]}"
    )
    result = validate.validate_bytes(data, "s.json", "json")
    assert result.valid
    assert [(p.rule, p.severity) for p in result.problems] == [("not-strict-json", Severity.WARNING)]


def test_validation_of_a_document_that_does_not_parse() -> None:
    result = validate.validate_bytes(b"{", "s.json")
    assert result.spec is None
    assert not result.valid
    assert [p.rule for p in result.problems] == ["syntax"]


@pytest.mark.parametrize(
    ("document", "pointer", "what"),
    [
        (doc(edits={"env": ["A=\udcff"]}), "/devices/0/containerEdits/env/0", "string"),
        (doc("0.6.0", annotations={"k\udcff": "v"}), "/annotations/k\udcff", "key"),
        (doc("0.7.0", edits={"intelRdt": {"closID": "\udcff"}}), "/devices/0/containerEdits/intelRdt/closID",
         "string"),
    ],
)  # fmt: skip
def test_strings_utf8_cannot_encode_are_reported_not_raised(document: Any, pointer: str, what: str) -> None:
    """Such strings come from bytes decoded with ``surrogateescape`` (e.g. a sysfs attribute)."""
    result = validate.validate_object(document)
    assert not result.valid
    [problem] = result.problems
    assert (problem.pointer, problem.rule) == (pointer, "syntax")
    assert problem.message.startswith(f"a {what} holds an unpaired UTF-16 surrogate")
