"""Errors and warnings: the warn corpus, the registry and the plugin load what runtimes load, and
what cdi-gen writes has neither."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from cdi_plugin.cdi import codec, schema, validate
from cdi_plugin.cdi.problems import Severity
from cdi_plugin.deviceplugin.state import DeviceState
from cdi_plugin.discovery.sources import make_source
from cdi_plugin.generate.config import default_classes
from cdi_plugin.inventory import NumaLocator, SpecSource
from cdi_plugin.scan import ScanOptions, run_scan
from cdi_plugin.store.registry import load_registry, load_spec_file
from tests.cdi import upstream
from tests.cdi.test_validate import SPEC_RULES
from tests.deviceplugin.helpers import Layout, make_node, spec_of, write_spec

SPECS = upstream.REPO / "specs"
WARN = sorted((SPECS / "warn").iterdir())
BAD = sorted(p for p in (SPECS / "bad").iterdir() if p.is_file())
GOLDEN = upstream.REPO / "tests" / "generate" / "golden"
#: Every rule that gives a warning; ``removed-field`` is an error at cdiVersion 1.1.0.
WARN_RULES = {
    "version-prefix", "permissions-none", "empty-field", "removed-field", "relative-host-path",
    "annotation-key", "annotation-size", "integer-format",
    "extra-document",
}  # fmt: skip
#: What a warning must name: the runtime or library version it concerns.
RUNTIMES = ("CDI Go library", "iSulad", "containerd", "runtimes")


def check_file(path: Path) -> validate.Validation:
    return validate.validate_bytes(path.read_bytes(), str(path), "yaml" if path.suffix == ".yaml" else "json")


def rule_of(path: Path) -> str:
    return path.name.split("--")[0]


def test_warn_corpus_covers_every_warning_rule() -> None:
    assert {rule_of(p) for p in WARN} == WARN_RULES
    assert all("--" in p.name and p.suffix in {".json", ".yaml"} for p in WARN)


def test_schema_warnings_are_warning_rules() -> None:
    text = json.dumps(schema.load(schema.SPEC_SCHEMA))
    warned = {r.split('"')[0] for r in text.split('"x-rule": "')[1:] if '"x-severity": "warning"' in r[:80]}
    assert warned == {"annotation-key", "relative-host-path", "empty-field"}
    assert warned <= WARN_RULES


@pytest.mark.parametrize("path", WARN, ids=lambda p: p.name)
def test_warn_spec_has_exactly_its_one_warning(path: Path) -> None:
    result = check_file(path)
    assert result.valid
    [problem] = result.problems
    assert (problem.rule, problem.severity) == (rule_of(path), Severity.WARNING)
    assert any(name in problem.message + problem.hint for name in RUNTIMES), problem


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_spec_has_no_warning_of_another_rule(path: Path) -> None:
    result = check_file(path)
    assert {p.rule for p in result.problems if not p.is_error} <= {rule_of(path)}


def test_removed_field_is_an_error_only_where_the_declared_version_lacks_the_field() -> None:
    [at_1_0] = check_file(SPECS / "warn" / "removed-field--enable-cmt-at-1.0.0.json").problems
    [at_1_1] = check_file(SPECS / "bad" / "removed-field--enable-cmt-at-1.1.0.json").problems
    assert (at_1_0.severity, at_1_1.severity) == (Severity.WARNING, Severity.ERROR)
    assert "containerd 2.3" in at_1_0.message


@pytest.mark.parametrize(
    ("edits", "rule"),
    [
        ({"mounts": [{"hostPath": "/a", "containerPath": "/a", "type": ""}]}, "empty-field"),
        ({"deviceNodes": [{"path": "/dev/a", "permissions": "none"}]}, "permissions-none"),
        ({"deviceNodes": [{"path": "/dev/a", "type": ""}]}, "empty-field"),
    ],
)
def test_runtime_warnings_are_among_the_runtime_rules(edits: dict[str, object], rule: str) -> None:
    """The registry uses only ``runtime_problems``; these warnings concern runtimes, so it has them."""
    spec = codec.spec_from_obj({"cdiVersion": "v0.3.0", "kind": "example.com/widget",
                                "devices": [{"name": "w", "containerEdits": edits}]})  # fmt: skip
    found = [(p.rule, p.severity) for p in validate.runtime_problems(spec)]
    assert found == [("version-prefix", Severity.WARNING), (rule, Severity.WARNING)]


def test_registry_loads_every_warn_spec_as_runtimes_do() -> None:
    snapshot = load_registry([SPECS / "warn"])
    assert snapshot.broken == ()
    assert snapshot.conflicts == ()
    assert sorted(d.device.name for d in snapshot.devices.values()) == [p.stem for p in WARN]
    for path in WARN:
        loaded = load_spec_file(path, 0)
        assert loaded.spec is not None
        assert all(p.severity is Severity.WARNING for p in loaded.problems)
    warned = {f.path.name: [p.rule for p in f.problems] for f in snapshot.warned}
    assert warned["version-prefix--v1.1.0.json"] == ["version-prefix"]
    assert warned["permissions-none--device-node.json"] == ["permissions-none"]
    assert warned["empty-field--mount-type.json"] == ["empty-field"]


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_registry_skips_a_bad_spec_exactly_when_the_runtime_rules_reject_it(path: Path) -> None:
    """Loaded by the registry if and only if ``validate`` finds no error among the runtime's rules."""
    loaded = load_spec_file(path, 0)
    result = check_file(path)
    runtime_error = result.spec is None or any(p.is_error for p in validate.runtime_problems(result.spec))
    assert (loaded.spec is None) == runtime_error
    if loaded.spec is None:
        assert loaded.problems
        assert all(p.is_error for p in loaded.problems)


def test_plugin_serves_a_spec_that_has_only_warnings(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    node = make_node(layout.dev / "widget0")
    kind = "cdi-plugin.io/test"
    spec = spec_of(kind, {"w0": [node]}, version="v0.5.0")
    [device] = spec.devices
    [dev_node] = device.container_edits.device_nodes or ()
    none = dataclasses.replace(dev_node, permissions="none")
    edits = dataclasses.replace(device.container_edits, device_nodes=(none,))
    spec = dataclasses.replace(spec, devices=(dataclasses.replace(device, container_edits=edits),))
    write_spec(layout.etc, spec)
    problems = {p.rule for p in check_file(layout.etc / "cdi-plugin.io-test.json").problems}
    assert problems == {"version-prefix", "permissions-none"}
    settings = layout.settings()
    state = DeviceState(settings, SpecSource(settings.spec_dirs), NumaLocator(layout.sysfs), lambda: 0.0)
    state.sync()
    board = state.board(kind)
    assert board is not None
    assert {i: s.healthy for i, s in board.view.devices.items()} == {"w0": True}


def _assert_clean(directory: Path) -> None:
    files = sorted(directory.glob("*.json"))
    assert files
    for path in files:
        assert check_file(path).problems == [], path


def test_specs_cdi_gen_scan_writes_have_neither_errors_nor_warnings(tmp_path: Path) -> None:
    classes = [dataclasses.replace(c, enabled=True) for c in default_classes()]
    options = ScanOptions(output_dir=tmp_path, spec_dirs=())
    run_scan(options, make_source("simulated"), classes=classes)
    _assert_clean(tmp_path)


def test_golden_specs_have_neither_errors_nor_warnings() -> None:
    _assert_clean(GOLDEN)


def _documented() -> dict[str, str]:
    """Rule -> severity cell of the tables in docs/validation.md."""
    out = {}
    for line in (upstream.REPO / "docs" / "validation.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            out.update(dict.fromkeys(re.findall(r"`([a-z-]+)`", cells[0]), cells[1]))
    return out


def test_docs_give_every_rule_its_severity() -> None:
    documented = _documented()
    extra = {"not-found", "unreadable", "not-a-file", "not-a-directory", "too-large", "not-strict-json",
             "ignored-suffix", "linked-dir", "conflict", "shadowed", "shared-node", "version-above-max",
             "runtime-format", "runtime-version", "runtime-field", "runtime-ignored"}  # fmt: skip
    assert set(documented) == SPEC_RULES | WARN_RULES | extra
    for rule in SPEC_RULES:
        assert documented[rule].startswith("error"), rule
    for rule in WARN_RULES:
        assert "warning" in documented[rule], rule
    assert {r for r, s in documented.items() if s == "warning"} == WARN_RULES - {"removed-field"} | {
        "not-strict-json",
        "ignored-suffix",
        "linked-dir",
        "shadowed",
        "shared-node",
        "runtime-ignored",
    }
