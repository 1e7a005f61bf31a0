"""The device-class configuration: the embedded default, and every kind of bad input."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from cdi_plugin.cdi import schema
from cdi_plugin.errors import ConfigError
from cdi_plugin.generate.config import (
    DEFAULT_NAMING,
    default_classes,
    default_config_text,
    parse_classes,
)
from cdi_plugin.store.configfile import parse_config


def load(text: str) -> list[object]:
    source = "cfg.yaml"
    return list(parse_classes(parse_config(textwrap.dedent(text).encode(), source), source))


def test_default_config_validates_against_the_schema() -> None:
    obj = yaml.safe_load(default_config_text())
    assert schema.problems(obj, schema.CONFIG_SCHEMA) == []
    assert schema.problems(obj["classes"], "device-classes.schema.json") == []


def test_default_config_uses_only_the_projects_vendor_domain() -> None:
    classes = default_classes()
    assert len(classes) == 13
    assert {c.vendor for c in classes} == {"cdi-plugin.io"}
    assert not any("nvidia" in c.kind for c in classes)


def test_default_config_is_commented_for_people() -> None:
    text = default_config_text()
    assert text.startswith("# cdi-gen device classes")
    assert sum(line.lstrip().startswith("#") for line in text.splitlines()) > 30


def test_a_minimal_class_gets_the_defaults() -> None:
    (cls,) = load(
        """
        classes:
          - vendor: example.com
            class: widget
            match: {subsystem: misc, kernel: widget}
        """
    )
    assert cls.enabled
    assert not cls.all_device
    assert tuple(s.source for s in cls.naming) == DEFAULT_NAMING  # type: ignore[attr-defined]
    assert cls.node.attach
    assert cls.node.path.source == "{devnode}"


def test_a_config_without_classes_is_valid() -> None:
    assert load("plugin: {}\n") == []


BAD = [
    # (yaml, expected start of the message after "cfg.yaml: ")
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: x}, mach: {subsystem: misc}}]",
        "classes[0].mach: unknown field 'mach'",
    ),
    (
        "classes: [{vendor: example.com, class: widget, mach: {subsystem: misc}}]",
        "classes[0]: missing required field 'match' (and 1 more)",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {subsystem: misc, kernel: 'tty[AB'}}]",
        "classes[0].match.kernel: invalid 'kernel'",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {subsystem: misc, kernel: [ok, 'x[']}}]",
        "classes[0].match.kernel[1]: invalid entry",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {devnode: 'dev/tty*'}}]",
        "classes[0].match.devnode: invalid 'devnode'",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: 'a/b'}}]",
        "classes[0].match.kernel: invalid 'kernel'",
    ),
    (
        "classes: [{vendor: 1example.com, class: widget, match: {kernel: x}}]",
        "classes[0].vendor: invalid 'vendor'",
    ),
    (
        "classes: [{vendor: example.com, class: 'my class', match: {kernel: x}}]",
        "classes[0].class: invalid 'class'",
    ),
    ("classes: [{vendor: example.com, class: w, match: {kernel: x}}]", "classes[0].class: invalid 'class'"),
    (
        "classes: [{vendor: example.com, class: widget-, match: {kernel: x}}]",
        "classes[0].class: invalid 'class'",
    ),
    ("classes: [{vendor: example.com, class: widget, match: {driver: x}}]", "classes[0].match:"),
    ("classes: [{vendor: example.com, class: widget}]", "classes[0]: missing required field 'match'"),
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: x}, naming: [uuid]}]",
        "classes[0].naming[0]: invalid entry",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: x}, naming: ['{nope}']}]",
        "classes[0].naming[0]: unknown placeholder {nope}",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: x}, naming: ['{name}-x']}]",
        "classes[0].naming[0]: {name} cannot be used",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: x}, edits: {env: ['{kernel}=1']}}]",
        "classes[0].edits.env[0]: invalid entry",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: x}, edits: {env: ['A={bad}']}}]",
        "classes[0].edits.env[0]: unknown placeholder {bad}",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: x},"
        " edits: {hooks: [{hookName: createContainer, path: bin/hook}]}}]",
        "classes[0].edits.hooks[0].path: invalid 'path'",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: x},"
        " edits: {hooks: [{hookName: createContainer, path: '/usr/bin/{kernel}'}]}}]",
        "classes[0].edits.hooks[0].path: invalid 'path'",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: x},"
        " edits: {hooks: [{hookName: onStart, path: /bin/true}]}}]",
        "classes[0].edits.hooks[0].hookName: invalid 'hookName'",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: x},"
        " edits: {mounts: [{hostPath: /a, containerPath: /b, options: ['{kernel}']}]}}]",
        "classes[0].edits.mounts[0].options[0]: invalid entry",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: x},"
        " classEdits: {env: ['DEV={kernel}']}}]",
        "classes[0].classEdits: {kernel} in 'DEV={kernel}': class-wide edits apply to the whole kind",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: x}, node: {permissions: rwx}}]",
        "classes[0].node.permissions: invalid 'permissions'",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: x}, node: {path: dev/x}}]",
        "classes[0].node.path: invalid 'path'",
    ),
    (
        "classes: [{vendor: a.io, class: widget, match: {kernel: x}},"
        " {vendor: a.io, class: widget, match: {kernel: y}}]",
        "classes[1].class: kind a.io/widget is already defined by classes[0]",
    ),
    (
        "classes: [{vendor: a.io-x, class: widget, match: {kernel: x}},"
        " {vendor: a.io, class: x-widget, match: {kernel: y}}]",
        "classes[1].class: kind a.io/x-widget would be written to the same file as a.io-x/widget of "
        "classes[0], a.io-x-widget.json (give one of them another vendor or class)",
    ),
    (
        "classes: [{vendor: example.com, class: widget, match: {kernel: x}, enabled: 'yes'}]",
        "classes[0].enabled:",
    ),
    ("classes: {vendor: example.com}", "classes:"),
    (
        "classes: [{vendor: a.io, class: widget, match: {kernel: x}}]\nclasses: []\n",
        "line 2: duplicate key 'classes'",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_config_is_refused_with_file_key_and_reason(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(text)
    text_of_error = str(info.value)
    assert text_of_error.startswith(f"cfg.yaml: {message}"), text_of_error
    assert "\n" not in text_of_error
