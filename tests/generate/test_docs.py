"""docs/config.md cannot drift from the schema, the placeholders, the strategies or the defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cdi_plugin.cdi import schema
from cdi_plugin.generate.config import NAMING_KEYWORDS, default_classes, parse_classes
from cdi_plugin.generate.template import ARG_PLACEHOLDERS, PLACEHOLDERS
from cdi_plugin.store.configfile import parse_config
from tests.docs_helpers import schema_properties

DOCS = Path(__file__).resolve().parents[2] / "docs"
CONFIG_MD = (DOCS / "config.md").read_text()


def test_every_schema_property_is_documented() -> None:
    names = set(schema_properties(schema.load("device-classes.schema.json")))
    assert len(names) > 30
    missing = sorted(n for n in names if f"`{n}`" not in CONFIG_MD)
    assert not missing, f"docs/config.md does not mention {missing}"


def test_every_placeholder_and_naming_strategy_is_documented() -> None:
    for key in PLACEHOLDERS:
        assert f"`{{{key}}}`" in CONFIG_MD, key
    for key in ARG_PLACEHOLDERS:
        assert f"`{{{key}:NAME}}`" in CONFIG_MD, key
    for keyword in NAMING_KEYWORDS:
        assert f"| `{keyword}` |" in CONFIG_MD, keyword


def test_every_default_class_is_in_the_table() -> None:
    for cls in default_classes():
        row = re.search(rf"^\| `{re.escape(cls.kind)}` \| (yes|\*\*no\*\*) \|", CONFIG_MD, re.MULTILINE)
        assert row is not None, cls.kind
        assert (row.group(1) == "yes") is cls.enabled, cls.kind


def _examples() -> list[str]:
    return [m.group(1) for m in re.finditer(r"```yaml\n(.*?)```", CONFIG_MD, re.DOTALL)]


@pytest.mark.parametrize("example", _examples(), ids=lambda e: e.splitlines()[2].strip()[:40])
def test_every_example_is_a_valid_configuration(example: str) -> None:
    config = parse_config(example.encode(), "docs/config.md")
    classes = parse_classes(config, "docs/config.md")
    assert classes, "an example defines at least one class"
    assert not any(c.vendor.endswith("nvidia.com") for c in classes)
