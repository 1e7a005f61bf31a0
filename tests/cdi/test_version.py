"""Minimum cdiVersion per feature (presence vs emptiness), and the version checks built on it."""

from __future__ import annotations

from typing import Any

import pytest

from cdi_plugin.cdi import codec, version
from cdi_plugin.cdi.problems import Severity
from cdi_plugin.cdi.runtimes import RUNTIMES
from tests.cdi.helpers import doc, spec

NODE = {"deviceNodes": [{"path": "/dev/widget0"}]}
RDT = {"closID": "gold"}

# (case id, document, minimum version)
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("baseline", doc(), "0.3.0"),
    ("mount without type", doc(edits={"mounts": [{"hostPath": "/a", "containerPath": "/a"}]}), "0.3.0"),
    (
        "mount type empty",
        doc(edits={"mounts": [{"hostPath": "/a", "containerPath": "/a", "type": ""}]}),
        "0.3.0",
    ),
    (
        "mount type",
        doc(edits={"mounts": [{"hostPath": "t", "containerPath": "/t", "type": "tmpfs"}]}),
        "0.4.0",
    ),
    (
        "spec-level mount type",
        doc(containerEdits={"mounts": [{"hostPath": "t", "containerPath": "/t", "type": "tmpfs"}]}),
        "0.4.0",
    ),
    ("hostPath", doc(edits={"deviceNodes": [{"path": "/dev/a", "hostPath": "/dev/b"}]}), "0.5.0"),
    (
        "hostPath equal to path",
        doc(edits={"deviceNodes": [{"path": "/dev/a", "hostPath": "/dev/a"}]}),
        "0.5.0",
    ),
    ("hostPath empty", doc(edits={"deviceNodes": [{"path": "/dev/a", "hostPath": ""}]}), "0.3.0"),
    ("hostPath null", doc(edits={"deviceNodes": [{"path": "/dev/a", "hostPath": None}]}), "0.3.0"),
    ("digit-first device name", doc(name="0"), "0.5.0"),
    ("digit inside device name", doc(name="card0"), "0.3.0"),
    ("spec annotations", doc(annotations={"a": "b"}), "0.6.0"),
    ("spec annotations empty", doc(annotations={}), "0.3.0"),
    (
        "device annotations",
        {**doc(), "devices": [{"name": "w", "annotations": {"a": "b"}, "containerEdits": NODE}]},
        "0.6.0",
    ),
    (
        "device annotations empty",
        {**doc(), "devices": [{"name": "w", "annotations": {}, "containerEdits": NODE}]},
        "0.3.0",
    ),
    ("dot in class", doc(kind="example.com/net.tun"), "0.6.0"),
    ("dot in vendor only", doc(kind="sub.example.com/tun"), "0.3.0"),
    ("intelRdt empty object", doc(edits={"intelRdt": {}}), "0.7.0"),
    ("intelRdt null", doc(edits={**NODE, "intelRdt": None}), "0.3.0"),
    ("spec-level intelRdt", doc(containerEdits={"intelRdt": {}}), "0.7.0"),
    ("intelRdt enableCMT", doc(edits={"intelRdt": {"enableCMT": True}}), "0.7.0"),
    ("additionalGids [0]", doc(edits={"additionalGids": [0]}), "0.7.0"),
    ("additionalGids empty", doc(edits={**NODE, "additionalGids": []}), "0.3.0"),
    ("additionalGids null", doc(edits={**NODE, "additionalGids": None}), "0.3.0"),
    ("schemata empty list", doc(edits={"intelRdt": {"schemata": []}}), "1.1.0"),
    ("schemata", doc(edits={"intelRdt": {"schemata": ["L3:0=f"]}}), "1.1.0"),
    ("schemata null", doc(edits={"intelRdt": {"schemata": None}}), "0.7.0"),
    ("enableMonitoring true", doc(edits={"intelRdt": {"enableMonitoring": True}}), "1.1.0"),
    ("enableMonitoring false", doc(edits={"intelRdt": {"enableMonitoring": False}}), "0.7.0"),
    ("netDevices", doc(edits={"netDevices": [{"hostInterfaceName": "eth0", "name": "net0"}]}), "1.1.0"),
    ("netDevices empty", doc(edits={**NODE, "netDevices": []}), "0.3.0"),
    (
        "spec-level netDevices",
        doc(containerEdits={"netDevices": [{"hostInterfaceName": "eth0", "name": "net0"}]}),
        "1.1.0",
    ),
    (
        "the highest feature wins",
        doc(
            name="0",
            kind="example.com/a.b",
            edits={"mounts": [{"hostPath": "t", "containerPath": "/t", "type": "x"}], "intelRdt": RDT},
        ),
        "0.7.0",
    ),
]


@pytest.mark.parametrize(("document", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_minimum_version(document: dict[str, Any], expected: str) -> None:
    assert version.minimum_version(codec.spec_from_obj(document)) == expected


@pytest.mark.parametrize(("document", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_declaring_the_minimum_is_enough_and_one_below_is_not(
    document: dict[str, Any], expected: str
) -> None:
    exact = codec.spec_from_obj({**document, "cdiVersion": expected})
    assert [p for p in version.check_version(exact) if p.is_error] == []
    if expected == version.EARLIEST:
        return
    below = version.KNOWN_VERSIONS[version.version_key(expected) - 1]
    low = codec.spec_from_obj({**document, "cdiVersion": below})
    problems = [p for p in version.check_version(low) if p.rule == "version-too-low"]
    assert problems
    assert all(p.is_error for p in problems)
    assert any(f"needs cdiVersion {expected}" in p.message for p in problems)


def test_requirements_name_each_feature_with_its_pointer_in_document_order() -> None:
    s = spec(
        "0.3.0",
        name="0",
        edits={
            "deviceNodes": [{"path": "/dev/a", "hostPath": "/dev/a"}],
            "mounts": [{"hostPath": "t", "containerPath": "/t", "type": "tmpfs"}],
            "intelRdt": {"schemata": []},
            "netDevices": [{"hostInterfaceName": "eth0", "name": "net0"}],
        },
        annotations={"a": "b"},
    )
    found = [(r.version, r.pointer, r.feature) for r in version.requirements(s)]
    assert found == [
        ("0.6.0", "/annotations", "spec 'annotations'"),
        ("0.5.0", "/devices/0/name", "a device name starting with a digit"),
        ("0.4.0", "/devices/0/containerEdits/mounts/0/type", "mount 'type'"),
        ("0.5.0", "/devices/0/containerEdits/deviceNodes/0/hostPath", "deviceNode 'hostPath'"),
        ("0.7.0", "/devices/0/containerEdits/intelRdt", "'intelRdt'"),
        ("1.1.0", "/devices/0/containerEdits/intelRdt/schemata", "intelRdt 'schemata'"),
        ("1.1.0", "/devices/0/containerEdits/netDevices", "'netDevices'"),
    ]


@pytest.mark.parametrize(
    ("document", "pointer", "feature", "needed"),
    [
        (
            doc("0.3.0", edits={"mounts": [{"hostPath": "t", "containerPath": "/t", "type": "tmpfs"}]}),
            "/devices/0/containerEdits/mounts/0/type",
            "mount 'type'",
            "0.4.0",
        ),
        (
            doc("0.4.0", edits={"deviceNodes": [{"path": "/dev/a", "hostPath": "/dev/b"}]}),
            "/devices/0/containerEdits/deviceNodes/0/hostPath",
            "deviceNode 'hostPath'",
            "0.5.0",
        ),
        (doc("0.4.0", name="7"), "/devices/0/name", "a device name starting with a digit", "0.5.0"),
        (doc("0.5.0", annotations={"a": "b"}), "/annotations", "spec 'annotations'", "0.6.0"),
        (
            doc("0.5.0", kind="example.com/a.b"),
            "/kind",
            "a '.' in the class of kind 'example.com/a.b'",
            "0.6.0",
        ),
        (doc("0.6.0", edits={"intelRdt": {}}), "/devices/0/containerEdits/intelRdt", "'intelRdt'", "0.7.0"),
        (
            doc("0.6.0", edits={"additionalGids": [0]}),
            "/devices/0/containerEdits/additionalGids",
            "'additionalGids'",
            "0.7.0",
        ),
        (
            doc("1.0.0", edits={"intelRdt": {"schemata": []}}),
            "/devices/0/containerEdits/intelRdt/schemata",
            "intelRdt 'schemata'",
            "1.1.0",
        ),
        (
            doc("1.0.0", edits={"intelRdt": {"enableMonitoring": True}}),
            "/devices/0/containerEdits/intelRdt/enableMonitoring",
            "intelRdt 'enableMonitoring'",
            "1.1.0",
        ),
        (
            doc("1.0.0", containerEdits={"netDevices": [{"hostInterfaceName": "e", "name": "n"}]}),
            "/containerEdits/netDevices",
            "'netDevices'",
            "1.1.0",
        ),
    ],
)
def test_check_version_message_names_the_feature_and_the_version(
    document: dict[str, Any], pointer: str, feature: str, needed: str
) -> None:
    s = codec.spec_from_obj(document)
    [problem] = version.check_version(s)
    assert problem.rule == "version-too-low"
    assert problem.pointer == pointer
    assert problem.message == f"{feature} needs cdiVersion {needed}, the spec declares {s.cdi_version}"
    assert problem.hint == f"set cdiVersion to at least {needed} or drop the feature"


def test_every_feature_use_is_reported_and_the_hint_names_the_overall_minimum() -> None:
    s = spec(
        "0.3.0", edits={"mounts": [{"hostPath": "t", "containerPath": "/t", "type": "x"}], "intelRdt": {}}
    )
    problems = version.check_version(s)
    assert [p.pointer for p in problems] == [
        "/devices/0/containerEdits/mounts/0/type",
        "/devices/0/containerEdits/intelRdt",
    ]
    assert all("at least 0.7.0" in p.hint for p in problems)


@pytest.mark.parametrize("declared", ["0.9.0", "1.1", "", "latest", "v", "1.1.0 ", "V1.1.0", "vv1.1.0"])
def test_unknown_version(declared: str) -> None:
    [problem] = version.check_version(spec(declared))
    assert problem.rule == "version-unknown"
    assert problem.pointer == "/cdiVersion"
    assert repr(declared) in problem.message
    assert "0.3.0" in problem.hint
    assert "1.1.0" in problem.hint


@pytest.mark.parametrize("declared", ["0.1.0", "0.2.0", "v0.2.0"])
def test_pre_release_versions_are_rejected(declared: str) -> None:
    problems = version.check_version(spec(declared))
    assert [p.rule for p in problems] == ["version-unknown"]
    assert "pre-release" in problems[0].message


@pytest.mark.parametrize("declared", ["v0.3.0", "v1.1.0"])
def test_v_prefix_is_tolerated_like_the_cdi_library(declared: str) -> None:
    assert version.normalize(declared) == declared[1:]
    assert version.check_version(spec(declared)) == []


def test_maximum_version_names_the_feature_that_needs_the_declared_version() -> None:
    s = spec("0.6.0", annotations={"example.com/a": "b"})
    [problem] = version.check_version(s, "0.5.0")
    assert problem.rule == "version-above-max"
    assert problem.message == (
        "cdiVersion 0.6.0 is above the allowed maximum 0.5.0; needed by spec 'annotations'"
    )
    assert "podman 4.3" in problem.hint
    assert "iSulad" not in problem.hint  # iSulad reads 0.6.0


def test_maximum_version_without_a_feature_that_needs_it() -> None:
    [problem] = version.check_version(spec("1.0.0"), "0.7.0")
    assert problem.message == "cdiVersion 1.0.0 is above the allowed maximum 0.7.0"
    assert "containerd 2.0" in problem.hint


@pytest.mark.parametrize("maximum", ["0.6.0", "0.7.0", "1.1.0"])
def test_maximum_at_or_above_the_declared_version_is_fine(maximum: str) -> None:
    assert version.check_version(spec("0.6.0", annotations={"a": "b"}), maximum) == []


@pytest.mark.parametrize(
    ("declared", "severity"),
    [("0.7.0", Severity.WARNING), ("1.0.0", Severity.WARNING), ("1.1.0", Severity.ERROR)],
)
@pytest.mark.parametrize("field", ["enableCMT", "enableMBM"])
def test_removed_intel_rdt_fields(declared: str, severity: Severity, field: str) -> None:
    problems = version.check_version(spec(declared, edits={"intelRdt": {field: False}}))
    assert [(p.rule, p.severity, p.pointer) for p in problems] == [
        ("removed-field", severity, f"/devices/0/containerEdits/intelRdt/{field}")
    ]
    assert field in problems[0].message


@pytest.mark.parametrize(
    ("v", "dropped_by"),
    [
        ("0.3.0", []),
        ("0.5.0", []),
        ("0.6.0", ["containerd 1.7.0-1.7.12", "podman 4.3"]),
        ("0.7.0", ["containerd 1.7.0-1.7.12", "containerd 1.7.13-1.7.19", "podman 4.3", "iSulad 2.1.6"]),
        ("1.1.0", [r.title for r in RUNTIMES if r.max_version != "1.1.0"]),
    ],
)
def test_runtimes_below(v: str, dropped_by: list[str]) -> None:
    assert version.runtimes_below(v) == dropped_by


def test_known_versions_are_in_release_order() -> None:
    keys = [version.version_key(v) for v in version.KNOWN_VERSIONS]
    assert keys == sorted(keys)
    assert version.KNOWN_VERSIONS[0] == "0.1.0"
    assert version.LATEST == "1.1.0"
    assert version.EARLIEST == "0.3.0"
