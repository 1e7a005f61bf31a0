"""The one glob matcher: shell semantics, and time in proportion to the text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdi_plugin.globs import glob_match, is_glob, match_any, may_overlap, path_glob_match


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("tty[A-Z]*", "ttyUSB0", True),
        ("a[]]b", "a]b", True),
        ("a[!]]b", "axb", True),
        ("*", "a/b", True),
        ("a.b", "axb", False),
        ("(x)+", "(x)+", True),
        ("[^a]", "^", True),  # '^' is literal in a glob set, '!' negates
        ("[^a]", "b", False),
        ("[[&&~]x", "&x", True),
        ("a[", "a[", True),  # an unclosed '[' is literal here; the schema refuses it in a config
        ("[a-c]", "b", True),
        ("[a-c]", "-", False),
        ("ttyUSB?", "ttyUSB10", False),
        ("TTY*", "ttyS0", False),  # case-sensitive
        ("a*b", "a\nb", True),
    ],
)
def test_glob_match(pattern: str, value: str, expected: bool) -> None:
    assert glob_match(pattern, value) is expected


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("/dev/loop[0-9]*", "/dev/loop0", True),
        ("/dev/loop[0-9]*", "/dev/loop-control", False),
        ("/dev/nvidia*", "/dev/nvidia0", True),
        ("/dev/nvidia*", "/dev/nvidia-caps/nvidia-cap1", False),  # '*' stays in one component
        ("/dev/*/*", "/dev/dri/card0", True),
        ("/dev/*", "/dev/dri/card0", False),
        ("/dev/*", "/dev/.hidden", False),  # like glob(): wildcards skip dot files
        ("/dev/?hidden", "/dev/.hidden", False),
        ("/dev/.hid*", "/dev/.hidden", True),
        ("/dev/vfio/[0-9]*", "/dev/vfio/42", True),
        ("/dev/vfio/[0-9]*", "/dev/vfio/vfio", False),
        ("/dev/ttyUSB?", "/dev/ttyUSB10", False),
    ],
)
def test_path_glob_match_follows_shell_semantics(pattern: str, path: str, expected: bool) -> None:
    assert path_glob_match(pattern, path) is expected
    assert match_any(["/nothing", pattern], path, path=True) is expected


def test_match_any_is_false_for_no_patterns() -> None:
    assert not match_any([], "x")
    assert match_any(["y", "x*"], "xy")


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "pattern",
    ["*" * 16 + "x", "*a" * 16 + "*x", "?*" * 16 + "x", "*[a-z]" * 16 + "*x"],
)
def test_stars_followed_by_a_missing_literal_do_not_backtrack(pattern: str) -> None:
    """A backtracking matcher needs (len(value) ** stars) steps here: hours, not microseconds."""
    value = "a" * 2000
    for _ in range(50):
        assert not glob_match(pattern, value)
        assert not path_glob_match("/dev/" + pattern, "/dev/" + value)
    assert glob_match(pattern, value + "x")


@given(pattern=st.text(max_size=30), value=st.text(max_size=30))
def test_any_pattern_compiles_without_error_or_warning(pattern: str, value: str) -> None:
    glob_match(pattern, value)
    path_glob_match(pattern, value)
    assert glob_match(pattern.replace("[", "[[]").replace("*", "[*]").replace("?", "[?]"), pattern)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("a/*", "b/*", False),  # the fixed heads disagree
        ("*/fuse", "*/tun", False),  # the fixed tails disagree
        ("vendor/usb*", "vendor/*", True),
        ("a/b", "a/b", True),
        ("a/b", "a/c", False),
        ("v/[ab]x", "v/cx", True),  # a set is not looked into: it may match
        ("v/x[", "v/x[", True),  # an unclosed '[' is a literal
        ("*", "a/b", True),
    ],
)
def test_may_overlap(a: str, b: str, expected: bool) -> None:
    assert may_overlap(a, b) is expected
    assert may_overlap(b, a) is expected


def test_is_glob() -> None:
    assert [is_glob(p) for p in ("a/b", "a/*", "a/b?", "a/[b]")] == [False, True, True, True]


_GLOB_TEXT = st.text(alphabet="ab/*?[]!", max_size=8)


@given(a=_GLOB_TEXT, b=_GLOB_TEXT, value=st.text(alphabet="ab/[]!", max_size=8))
def test_patterns_that_share_a_value_may_overlap(a: str, b: str, value: str) -> None:
    if glob_match(a, value) and glob_match(b, value):
        assert may_overlap(a, b)
