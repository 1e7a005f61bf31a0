"""Text that would make the parser allocate without bound (huge numbers and YAML aliases), and huge
values, which problems show cut."""

from __future__ import annotations

import pytest

from cdi_plugin.cdi import codec, textparse, validate
from cdi_plugin.errors import SpecLoadError

DIGITS = "7" * 5000


def spec_text(major: str) -> str:
    return (
        '{"cdiVersion": "0.5.0", "kind": "example.com/x", "devices": [{"name": "a", '
        '"containerEdits": {"deviceNodes": [{"path": "/dev/a", "major": ' + major + "}]}}]}"
    )


@pytest.mark.parametrize("literal", [DIGITS, "-" + DIGITS, DIGITS + ".5", "1e" + DIGITS, "0." + DIGITS])
def test_an_oversize_json_number_is_an_error_naming_the_file_and_key(literal: str) -> None:
    with pytest.raises(SpecLoadError) as caught:
        codec.decode(spec_text(literal).encode(), "big.json", "json")
    assert caught.value.pointer == "/devices/0/containerEdits/deviceNodes/0/major"
    assert str(caught.value).startswith("big.json: /devices/0/containerEdits/deviceNodes/0/major: ")
    assert caught.value.message.endswith(" characters long; no value here needs more than 64")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "literal", [DIGITS, "0x" + "f" * 5000, "0o" + "7" * 5000, "1:" * 3000 + "1", DIGITS + ".0"]
)
def test_an_oversize_yaml_number_is_an_error_naming_the_file_key_and_line(literal: str) -> None:
    text = (
        "cdiVersion: 0.5.0\nkind: example.com/x\ndevices:\n  - name: a\n    containerEdits:\n"
        f"      deviceNodes:\n        - path: /dev/a\n          minor: {literal}\n"
    )
    with pytest.raises(SpecLoadError) as caught:
        codec.decode(text.encode(), "big.yaml", "yaml")
    assert caught.value.pointer == "/devices/0/containerEdits/deviceNodes/0/minor"
    assert caught.value.message.startswith("line 8: ")
    assert "\n" not in str(caught.value)


def test_numbers_of_ordinary_length_still_parse() -> None:
    obj, _ = codec.parse(b'{"a": 18446744073709551615, "b": -1.5e300, "c": 0}', "n.json", "json")
    assert obj == {"a": 2**64 - 1, "b": -1.5e300, "c": 0}
    obj, _ = codec.parse(b"a: 0x1f\nb: 1_000\nc: 190:20:30\nd: .5\n", "n.yaml", "yaml")
    assert obj == {"a": 31, "b": 1000, "c": "190:20:30", "d": 0.5}  # no base 60 for runtimes


def billion_laughs(levels: int = 9) -> bytes:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.timeout(20)
@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_yaml_aliases_are_refused_before_anything_is_built(fmt: codec.Format) -> None:
    with pytest.raises(SpecLoadError) as caught:
        codec.decode(billion_laughs(), f"laughs.{fmt}", fmt)
    assert caught.value.rule == "syntax"
    assert caught.value.message == "line 1: YAML anchors and aliases are not allowed (&l0)"


@pytest.mark.timeout(20)
def test_a_spec_repeating_an_anchored_device_is_refused() -> None:
    device = "  - &dev\n    name: a\n    containerEdits: {env: [A=1]}\n"
    text = "cdiVersion: 0.5.0\nkind: example.com/x\ndevices:\n" + device + "  - *dev\n" * 20000
    assert len(text) > 100_000
    with pytest.raises(SpecLoadError, match=r"line 4: YAML anchors and aliases are not allowed \(&dev\)"):
        codec.decode(text.encode(), "bomb.yaml", "yaml")


def test_an_alias_without_an_anchor_is_still_refused_as_an_alias() -> None:
    with pytest.raises(SpecLoadError, match=r"line 2: YAML anchors and aliases are not allowed \(\*x\)"):
        codec.parse(b"a: 1\nb: *x\n", "s.yaml", "yaml")


def test_a_merge_key_without_aliases_still_works() -> None:
    obj, _ = codec.parse(b"a: {<<: {b: 1}, c: 2}\n", "s.yaml", "yaml")
    assert obj == {"a": {"b": 1, "c": 2}}


def test_the_pure_python_loader_refuses_aliases_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without libyaml, PyYAML's own parser feeds the same composer."""
    import yaml

    monkeypatch.delattr(yaml, "CSafeLoader")
    textparse._yaml_loader.cache_clear()
    try:
        with pytest.raises(SpecLoadError, match=r"line 1: YAML anchors and aliases are not allowed \(&l0\)"):
            codec.parse(billion_laughs(), "laughs.yaml", "yaml")
        obj, _ = codec.parse(b"a: [1, {b: c}]\n", "ok.yaml", "yaml")
        assert obj == {"a": [1, {"b": "c"}]}
    finally:
        monkeypatch.undo()
        textparse._yaml_loader.cache_clear()


#: An escape character (escaped, as JSON and YAML double quotes write it) and a megabyte of text.
HUGE = "\\u001b" + "a" * 1_000_000


@pytest.mark.parametrize(
    ("text", "fmt", "rule"),
    [
        ('{"cdiVersion": "0.3.0", "kind": "example.com/' + HUGE + '", "devices": []}', "json", "class-name"),
        ('{"' + HUGE + '": 1, "cdiVersion": "0.3.0"}', "json", "unknown-field"),
        ('{"' + HUGE + '": 1, "' + HUGE + '": 1}', "json", "duplicate-key"),
        (f'? "{HUGE}"\n: 1\n? "{HUGE}"\n: 1\n', "yaml", "duplicate-key"),
        (spec_text("1").replace('"name": "a"', '"name": "' + HUGE + '"'), "json", "device-name"),
        (spec_text("1").replace('"path": "/dev/a"', '"path": "' + HUGE + '"'), "json", "absolute-path"),
        (spec_text("1").replace('"major": 1', '"major": "' + HUGE + '"'), "json", "type"),
        (
            spec_text("1").replace(
                '"deviceNodes": [{"path": "/dev/a", "major": 1}]', '"env": ["' + HUGE + '"]'
            ),
            "json",
            "env-format",
        ),
    ],
)
def test_a_huge_value_is_shown_cut_and_escaped_in_its_problem(
    text: str, fmt: codec.Format, rule: str
) -> None:
    problems = validate.validate_bytes(text.encode(), "huge", fmt).problems
    assert rule in {p.rule for p in problems}
    for p in problems:
        assert len(p.message) < 300, (p.rule, len(p.message))
        assert "\x1b" not in p.message


@pytest.mark.parametrize("char", ["\x7f", "\x80", "\x9b", "\ufffe", "\uffff"])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_a_raw_character_the_yaml_reader_of_runtimes_refuses_is_a_one_line_error(
    char: str, fmt: codec.Format
) -> None:
    """go-yaml reads every spec, JSON too, and refuses these anywhere in a file; escaped, they pass."""
    env = '"A=' + char + '"'
    text = spec_text("1").replace('"deviceNodes": [{"path": "/dev/a", "major": 1}]', '"env": [' + env + "]")
    with pytest.raises(SpecLoadError) as caught:
        codec.decode(text.encode(), "raw", fmt)
    assert caught.value.rule == "syntax"
    escape = f"\\u{ord(char):04x}"
    assert caught.value.message == (
        f"line 1 column {text.index(char) + 1}: character U+{ord(char):04X}, which the YAML reader of "
        f'runtimes refuses ("control characters are not allowed"); in a string, write it as {escape}'
    )
    escaped = codec.decode(text.replace(char, escape).encode(), "escaped", fmt)
    assert escaped.devices[0].container_edits.env == (f"A={char}",)


def test_a_surrogate_pair_escape_in_json_is_refused_as_the_yaml_reader_of_runtimes_refuses_it() -> None:
    paired = spec_text("1").replace('"path": "/dev/a"', '"path": "/dev/\\ud83d\\ude00"')
    with pytest.raises(SpecLoadError) as caught:
        codec.decode(paired.encode(), "pair.json", "json")
    assert caught.value.rule == "syntax"
    column = paired.index("\\ud83d") + 1
    assert caught.value.message == (
        f"line 1 column {column}: a UTF-16 surrogate escape (\\ud83d), which the YAML "
        "reader of runtimes refuses even in a pair; write the character itself"
    )
    raw = spec_text("1").replace('"path": "/dev/a"', '"path": "/dev/\U0001f600\\\\ud83d"')
    assert codec.decode(raw.encode(), "raw.json", "json").devices[0].container_edits.device_nodes[0].path == (
        "/dev/\U0001f600\\ud83d"
    )


@pytest.mark.parametrize("document", ["configuration", "spec"])
def test_a_plain_equals_sign_is_text(document: str) -> None:
    """YAML 1.1 gives a plain ``=`` a type of its own ("value"), which PyYAML cannot build: it is
    text, as go-yaml reads it, in a configuration (a hook argument) as in a spec."""
    obj, _ = codec.parse(b"args: [sh, =, '=']\n", "<yaml>", "yaml", document)
    assert obj == {"args": ["sh", "=", "="]}
