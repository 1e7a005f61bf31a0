"""Building specs from class entries written inline, as the tests in this package do."""

from __future__ import annotations

from typing import Any

from cdi_plugin.cdi import codec
from cdi_plugin.generate.builder import BuiltSpec, build_specs
from cdi_plugin.generate.config import DeviceClass, parse_classes


def classes(*entries: dict[str, Any]) -> list[DeviceClass]:
    config = {"classes": [{"vendor": "example.com", "class": f"c{i}", **e} for i, e in enumerate(entries)]}
    return parse_classes(config, "test.yaml")


def build_one(entry: dict[str, Any], devices: Any, max_version: str | None = "0.5.0") -> BuiltSpec:
    result = build_specs(classes(entry), devices, max_version)
    assert len(result.specs) == 1, result.warnings
    return result.specs[0]


def edits_of(built: BuiltSpec, name: str) -> dict[str, Any]:
    obj = codec.spec_to_obj(built.spec)
    return next(d["containerEdits"] for d in obj["devices"] if d["name"] == name)
