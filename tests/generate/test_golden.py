"""The specs the embedded default config generates for a workstation with every default class.

Compared byte for byte with ``golden/<vendor>-<class>.json``; after a deliberate change, review
and regenerate with ``pytest tests/generate --update-golden``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cdi_plugin.cdi import codec
from cdi_plugin.cdi.names import parse_kind
from cdi_plugin.cdi.validate import validate_object
from cdi_plugin.discovery.model import StaticSource
from cdi_plugin.generate.builder import BuildResult, build_specs
from cdi_plugin.generate.config import default_classes
from cdi_plugin.generate.match import query_for
from cdi_plugin.store.files import spec_file_name
from tests.generate.hosts import WORKSTATION

GOLDEN = Path(__file__).parent / "golden"


def _build_all_enabled() -> BuildResult:
    classes = [dataclasses.replace(c, enabled=True) for c in default_classes()]
    found = StaticSource(WORKSTATION).discover(query_for(classes))
    return build_specs(classes, found.devices, max_version="0.5.0")


def test_every_default_class_has_a_golden_spec(update_golden: bool) -> None:
    result = _build_all_enabled()
    kinds = {s.kind for s in result.specs}
    assert kinds == {c.kind for c in default_classes()}, "the workstation must cover every default class"
    written = set()
    for built in result.specs:
        name = spec_file_name(parse_kind(built.kind))
        data = codec.encode(built.spec)
        golden = GOLDEN / name
        written.add(name)
        if update_golden:
            golden.write_bytes(data)
            continue
        assert golden.exists(), f"{golden} is missing: run pytest tests/generate --update-golden"
        assert data == golden.read_bytes(), f"{name} differs from the golden file"
    stale = {p.name for p in GOLDEN.glob("*.json")} - written
    assert not stale, f"golden files without a default class: {stale}"


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.json")), ids=lambda p: p.name)
def test_golden_spec_is_valid_at_the_lowest_version(path: Path) -> None:
    obj, _ = codec.parse(path.read_bytes(), str(path), "json")
    result = validate_object(obj, max_version="0.5.0", source=str(path))
    assert result.valid, result.problems
    assert obj["cdiVersion"] == "0.3.0"
    for dev in obj["devices"]:
        for node in dev["containerEdits"].get("deviceNodes", []):
            assert "major" not in node
            assert "minor" not in node
            assert "hostPath" not in node
            assert {"type", "fileMode", "gid"} <= node.keys()


def test_disabled_classes_generate_nothing_by_default() -> None:
    classes = default_classes()
    disabled = {c.kind for c in classes if not c.enabled}
    assert disabled == {"cdi-plugin.io/hidraw", "cdi-plugin.io/vfio", "cdi-plugin.io/dri-card"}
    result = build_specs(classes, WORKSTATION, max_version="0.5.0")
    assert {s.kind for s in result.specs} == {c.kind for c in classes if c.enabled}


def test_shared_serial_numbers_fall_back_to_the_port_with_a_warning() -> None:
    result = _build_all_enabled()
    serial = next(s for s in result.specs if s.kind == "cdi-plugin.io/usb-serial")
    names = {d.source: (d.name, d.naming) for d in serial.devices}
    assert names["/dev/ttyUSB0"] == ("FT4ZK0A1", "serial")
    assert names["/dev/ttyUSB1"] == ("pci-0000_00_14.0-usb-0_2.1_1.0", "path")
    assert names["/dev/ttyUSB2"] == ("pci-0000_00_14.0-usb-0_2.2_1.0", "path")
    assert names["/dev/ttyACM0"] == ("usb-serial-0042", "serial")
    shared = [w for w in result.warnings if "A50285BI" in w]
    assert len(shared) == 2
    assert all("shared by 2 devices" in w for w in shared)


def test_golden_specs_pass_the_upstream_schema() -> None:
    """Anything the project writes must also pass the CDI project's own JSON schema."""
    import json

    from jsonschema import Draft7Validator
    from referencing import Registry, Resource

    upstream = Path(__file__).resolve().parents[2].parent / "shared" / "upstream-cdi-schema"
    schema = json.loads((upstream / "schema.json").read_text())
    defs = json.loads((upstream / "defs.json").read_text())
    from referencing.jsonschema import DRAFT7

    registry = Registry().with_resource(
        "defs.json", Resource.from_contents(defs, default_specification=DRAFT7)
    )
    validator = Draft7Validator(schema, registry=registry)
    paths = sorted(GOLDEN.glob("*.json"))
    assert len(paths) == len(default_classes())
    for path in paths:
        errors = list(validator.iter_errors(json.loads(path.read_bytes())))
        assert not errors, f"{path.name}: {errors[0].message}"
