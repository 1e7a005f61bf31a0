"""Device-supplied text can never escape into a name, a path, an option or a new line."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdi_plugin.cdi.names import validate_device_name
from cdi_plugin.generate.sanitize import (
    NAME_MAX,
    clean_node_path,
    device_name,
    path_component,
    safe_value,
)

# The kubelet-facing form: a cdi.k8s.io annotation key's name part (stricter than CDI names).
ANNOTATION_SAFE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?")

hostile = st.lists(
    st.one_of(
        st.characters(),
        st.sampled_from(["/", "..", "../", "-", "--", "\n", "\0", "=", ",", " ", "$", "`", "\\", ":", "."]),
    ),
    max_size=120,
).map("".join)
prefixes = st.sampled_from(["usb-serial-", "vfio-", "a", "Gpu_"])


@settings(max_examples=400)
@given(raw=hostile, prefix=prefixes)
def test_any_text_gives_a_valid_short_device_name_starting_with_a_letter(raw: str, prefix: str) -> None:
    name = device_name(raw, prefix)
    if name is None:
        assert not re.search(r"[A-Za-z0-9]", raw), "text with a letter or digit must give a name"
        return
    validate_device_name(name)
    assert len(name) <= NAME_MAX
    assert name[0].isascii()
    assert name[0].isalpha()
    assert ANNOTATION_SAFE.fullmatch(name)


@settings(max_examples=400)
@given(raw=hostile)
def test_any_text_gives_a_value_that_cannot_escape(raw: str) -> None:
    value = safe_value(raw)
    assert "/" not in value
    assert "\n" not in value
    assert "\0" not in value
    assert not value.startswith(("-", "."))
    assert all(c.isascii() and (c.isalnum() or c in "_.:+@-") for c in value)
    assert len(value) <= 255


@settings(max_examples=400)
@given(raw=hostile)
def test_any_text_gives_exactly_one_path_component(raw: str) -> None:
    part = path_component(raw)
    assert part not in {"", ".", ".."}
    assert "/" not in part
    assert "\0" not in part
    assert "\n" not in part
    assert not part.startswith("-")
    assert clean_node_path(f"/dev/serial/{part}")


@pytest.mark.parametrize(
    ("raw", "prefix", "expected"),
    [
        ("A50285BI", "x-", "A50285BI"),
        ("0042", "usb-serial-", "usb-serial-0042"),
        ("pci-0000:00:14.0-usb-0:2:1.0", "x-", "pci-0000_00_14.0-usb-0_2_1.0"),
        ("../../etc/passwd", "x-", "etc_passwd"),
        ("--privileged", "x-", "privileged"),
        ("a b\tc\nd", "x-", "a_b_c_d"),
        ("Ünïcødé", "x-", "n_c_d"),
        ("___", "x-", None),
        ("", "x-", None),
        ("12", "vfio-", "vfio-12"),
    ],
)
def test_device_name_table(raw: str, prefix: str, expected: str | None) -> None:
    assert device_name(raw, prefix) == expected


def test_long_names_keep_a_prefix_and_end_in_a_hash_of_the_whole_text() -> None:
    a = device_name("X" * 80 + "a", "x-")
    b = device_name("X" * 80 + "b", "x-")
    assert a is not None
    assert b is not None
    assert len(a) == len(b) == NAME_MAX
    assert a != b
    assert a.startswith("X" * 50)
    assert re.fullmatch(r"X+-[0-9a-f]{8}", a)
    assert device_name("X" * 80 + "a", "x-") == a, "the same device must get the same name every time"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("A50285BI", "A50285BI"),
        ("x\nLD_PRELOAD=/evil.so", "x_LD_PRELOAD_evil.so"),
        ("--config=/etc/shadow", "_config_etc_shadow"),
        ("..", "_"),
        (".hidden", "_hidden"),
        ("pci-0000:00:14.0", "pci-0000:00:14.0"),
        ("", ""),
    ],
)
def test_safe_value_table(raw: str, expected: str) -> None:
    assert safe_value(raw) == expected


@pytest.mark.parametrize(
    ("path", "clean"),
    [
        ("/dev/ttyUSB0", True),
        ("/dev/bus/usb/001/002", True),
        ("/dev/dri/by-path/pci-0000:03:00.0-render", True),
        ("/dev/../etc/shadow", False),
        ("/dev//ttyUSB0", False),
        ("/dev/ttyUSB0/", False),
        ("/dev/./ttyUSB0", False),
        ("dev/ttyUSB0", False),
        ("/dev/tty USB0", False),
        ("/dev/tty\nUSB0", False),
        ("/dev/tty\0", False),
    ],
)
def test_clean_node_path_table(path: str, clean: bool) -> None:
    assert clean_node_path(path) is clean
