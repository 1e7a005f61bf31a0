"""CDI names: the parser's character rules, the 1-character guard, and parse/format round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdi_plugin.cdi import names
from cdi_plugin.errors import InvalidNameError
from tests.cdi.strategies import classes, device_names, vendors


@settings(deadline=None)
@given(vendors, classes, device_names)
def test_qualified_name_round_trip(vendor: str, class_: str, name: str) -> None:
    text = names.qualified_name(vendor, class_, name)
    assert text == f"{vendor}/{class_}={name}"
    parsed = names.parse_qualified_name(text)
    assert parsed == names.QualifiedName(vendor, class_, name)
    assert str(parsed) == text
    assert parsed.kind == names.parse_kind(f"{vendor}/{class_}")
    assert str(parsed.kind) == f"{vendor}/{class_}"


@settings(deadline=None)
@given(vendors, classes, st.text(max_size=20))
def test_anything_after_the_first_equals_sign_is_the_device_name(vendor: str, class_: str, name: str) -> None:
    """The CDI parser splits at the first '=': a later '=' belongs to (and invalidates) the name."""
    text = f"{vendor}/{class_}={name}"
    try:
        names.validate_device_name(name)
    except InvalidNameError:
        with pytest.raises(InvalidNameError) as caught:
            names.parse_qualified_name(text)
        assert caught.value.rule == "device-name"
    else:
        assert names.parse_qualified_name(text).name == name


@pytest.mark.parametrize(
    ("kind", "which"),
    [("x/gpu", "vendor"), ("acme.example/g", "class"), ("x/y", "vendor")],
)
def test_one_character_vendor_or_class_is_rejected_because_runtimes_crash(kind: str, which: str) -> None:
    with pytest.raises(InvalidNameError) as caught:
        names.parse_kind(kind)
    assert caught.value.rule == "short-name"
    message = str(caught.value)
    assert which in message
    assert "crash" in message
    assert "at least 2" in message


def test_two_characters_are_enough() -> None:
    assert names.parse_kind("ab/cd") == names.Kind("ab", "cd")


VALID_VENDORS = ["acme.example", "example.com", "a1", "A-b_c.d", "cdi-plugin.io"]
INVALID_VENDORS = [
    ("", "vendor-name", "empty"),
    ("1acme", "vendor-name", "start with a letter"),
    ("_acme", "vendor-name", "start with a letter"),
    ("acme-", "vendor-name", "end with a letter or digit"),
    ("acme.", "vendor-name", "end with a letter or digit"),
    ("ac me", "vendor-name", "only letters"),
    ("ac:me", "vendor-name", "only letters"),
    ("ac=me", "vendor-name", "only letters"),
    ("acmé", "vendor-name", "only letters"),
    ("acme\n", "vendor-name", "only letters"),
]


@pytest.mark.parametrize("vendor", VALID_VENDORS)
def test_valid_vendor(vendor: str) -> None:
    names.validate_vendor(vendor)


@pytest.mark.parametrize(("vendor", "rule", "words"), INVALID_VENDORS)
def test_invalid_vendor(vendor: str, rule: str, words: str) -> None:
    with pytest.raises(InvalidNameError) as caught:
        names.validate_vendor(vendor)
    assert caught.value.rule == rule
    assert words in str(caught.value)
    assert repr(vendor) in str(caught.value) or not vendor


@pytest.mark.parametrize("class_", ["gpu", "net.tun", "g0", "a_b-c.d9"])
def test_valid_class(class_: str) -> None:
    names.validate_class(class_)


@pytest.mark.parametrize("class_", ["", "0gpu", "-gpu", "gpu-", "gpu.", "g pu", "gpu/x", "gpu=x", "gpu:x"])
def test_invalid_class(class_: str) -> None:
    with pytest.raises(InvalidNameError) as caught:
        names.validate_class(class_)
    assert caught.value.rule == "class-name"


@pytest.mark.parametrize(
    "name", ["card0", "0", "7", "0000:3b:00.0", "pci-0000-00-02.0", "a:b", "A_b-c.d:e9", "renderD128"]
)
def test_valid_device_name(name: str) -> None:
    names.validate_device_name(name)


@pytest.mark.parametrize(
    "name",
    ["", "-card", "card-", ":card", "card:", ".card", "card.", "_card", "card_", "ca rd", "ca/rd", "ca=rd",
     "ca+rd", "cärd", "card\n", "card\x00"],
)  # fmt: skip
def test_invalid_device_name(name: str) -> None:
    with pytest.raises(InvalidNameError) as caught:
        names.validate_device_name(name)
    assert caught.value.rule == "device-name"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("acme.example", "kind-format"),
        ("acme.example/gpu/extra", "kind-format"),
        ("/gpu", "vendor-name"),
        ("acme.example/", "class-name"),
        ("1acme/gpu", "vendor-name"),
        ("acme/-gpu", "class-name"),
    ],
)
def test_parse_kind_errors(text: str, rule: str) -> None:
    with pytest.raises(InvalidNameError) as caught:
        names.parse_kind(text)
    assert caught.value.rule == rule
    assert repr(text) in str(caught.value) or rule != "kind-format"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("acme.example/gpu", "qualified-name"),
        ("acme.example=gpu", "kind-format"),
        ("acme.example/gpu=", "device-name"),
        ("acme.example/gpu=a=b", "device-name"),
        ("a/gpu=card0", "short-name"),
        ("acme.example/g=card0", "short-name"),
        ("acme.example/gpu=-card0", "device-name"),
    ],
)
def test_parse_qualified_name_errors(text: str, rule: str) -> None:
    with pytest.raises(InvalidNameError) as caught:
        names.parse_qualified_name(text)
    assert caught.value.rule == rule
    assert text in str(caught.value) or rule == "device-name"


def test_parse_qualified_name_splits_at_the_first_slash_and_equals_sign() -> None:
    assert names.parse_qualified_name("acme.example/net.tun=tun0") == names.QualifiedName(
        "acme.example", "net.tun", "tun0"
    )


def test_qualified_name_validates_every_part() -> None:
    with pytest.raises(InvalidNameError, match="vendor"):
        names.qualified_name("1acme", "gpu", "card0")
    with pytest.raises(InvalidNameError, match="class"):
        names.qualified_name("acme", "gpu/x", "card0")
    with pytest.raises(InvalidNameError, match="device"):
        names.qualified_name("acme", "gpu", "card 0")


def test_invalid_name_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="empty device name"):
        names.validate_device_name("")
