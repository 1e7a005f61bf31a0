"""Allocate's answer (pure): only CDI names, annotation keys by the CDI library's rules."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdi_plugin.cdi.names import parse_qualified_name
from cdi_plugin.deviceplugin.allocate import (
    ANNOTATION_PREFIX,
    AllocationError,
    ContainerAllocation,
    Lookup,
    allocate,
    annotation_key,
)
from cdi_plugin.deviceplugin.resources import resource_name_problem
from cdi_plugin.deviceplugin.settings import Strategy

# the CDI library's AnnotationKey: name after the prefix <= 63, alphanumeric ends, [_.-] inside
CDI_KEY = re.compile(r"cdi\.k8s\.io/([A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?)")

DEVICES = {
    "a": Lookup("cdi-plugin.io/test=a", True),
    "b": Lookup("cdi-plugin.io/test=b", True),
    "a#1": Lookup("cdi-plugin.io/test=a", True),
    "sick": Lookup("cdi-plugin.io/test=sick", False, "host device node /dev/sick is missing"),
    "stale": Lookup("cdi-plugin.io/test=stale", True),
}


def _check(name: str) -> str | None:
    return "does not resolve in the CDI spec directories" if name.endswith("=stale") else None


def _allocate(
    requests: list[list[str]], strategy: Strategy = "both", check: Callable[[str], str | None] = _check
) -> list[ContainerAllocation]:
    return allocate("cdi-plugin.io/test", requests, DEVICES.get, check, strategy)


def _valid_key(key: str) -> bool:
    m = CDI_KEY.fullmatch(key)
    return bool(m) and len(m.group(1)) <= 63 if m else False


def test_one_answer_per_container_with_deduplicated_names() -> None:
    first, second = _allocate([["a", "a#1", "b"], ["b"]])
    assert first.cdi_devices == ("cdi-plugin.io/test=a", "cdi-plugin.io/test=b")
    ((key, value),) = first.annotations.items()
    assert _valid_key(key)
    assert value == "cdi-plugin.io/test=a,cdi-plugin.io/test=b"
    assert all(parse_qualified_name(n) for n in value.split(","))
    assert second.cdi_devices == ("cdi-plugin.io/test=b",)
    assert second.annotations.keys() != first.annotations.keys()


@pytest.mark.parametrize(
    ("strategy", "names", "annotations"),
    [("cri", True, False), ("annotations", False, True), ("both", True, True)],
)
def test_strategy(strategy: Strategy, names: bool, annotations: bool) -> None:
    (answer,) = _allocate([["a"]], strategy)
    assert bool(answer.cdi_devices) is names
    assert bool(answer.annotations) is annotations


@pytest.mark.parametrize(
    ("requests", "code", "words"),
    [
        ([["a", "nope"]], "invalid-argument", ["'nope'", "unknown"]),
        ([["a"], ["sick"]], "failed-precondition", ["'sick'", "Unhealthy", "/dev/sick"]),
        ([["stale", "a"]], "failed-precondition", ["'stale'", "does not resolve"]),
        ([[]], "invalid-argument", ["names no device IDs"]),
        ([], "invalid-argument", ["no container requests"]),
    ],
)
def test_any_bad_id_fails_the_whole_request_naming_it(
    requests: list[list[str]], code: str, words: list[str]
) -> None:
    with pytest.raises(AllocationError) as error:
        _allocate(requests)
    assert error.value.code == code
    for word in words:
        assert word in error.value.message


def test_key_is_deterministic_per_request_and_distinct_per_resource() -> None:
    key = annotation_key("cdi-plugin.io/test", ["b", "a", "a"])
    assert key == annotation_key("cdi-plugin.io/test", ["a", "b"])
    assert key != annotation_key("cdi-plugin.io/test", ["a"])
    assert key != annotation_key("cdi-plugin.io/other", ["a", "b"])
    assert key.startswith(ANNOTATION_PREFIX + "cdi-plugin.io_test_")
    # '/' becomes '_' and a domain has no '_': "a.b/c" and "a/b.c" stay apart
    assert annotation_key("a.b/c", ["x"]) != annotation_key("a/b.c", ["x"])


_label = st.from_regex(re.compile(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?"), fullmatch=True)
_resources = st.builds(
    lambda labels, name: ".".join(labels) + "/" + name,
    st.lists(_label, min_size=1, max_size=12),
    st.from_regex(re.compile(r"[A-Za-z]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"), fullmatch=True),
).filter(lambda r: resource_name_problem(r) is None)


@given(st.lists(_resources, min_size=2, max_size=4, unique=True), st.lists(st.text(min_size=1), min_size=1))
def test_keys_follow_the_cdi_rules_and_never_clash_between_resources(
    resources: list[str], ids: list[str]
) -> None:
    keys = [annotation_key(r, ids) for r in resources]
    assert all(_valid_key(k) for k in keys), keys
    assert len(set(keys)) == len(keys)
