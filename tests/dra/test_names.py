"""Driver, node and device names the Kubernetes API accepts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdi_plugin.dra.names import (
    DraConfigError,
    check_driver_name,
    check_node_name,
    claim_ref_problem,
    device_names,
    is_pool_name,
    is_request_name,
)
from tests.dra.rules import is_label, is_subdomain


@pytest.mark.parametrize("name", ["cdi-plugin.io", "gpu.example.com", "a", "x" * 63])
def test_good_driver_names(name: str) -> None:
    assert check_driver_name(name) == name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "empty"),
        ("Cdi-Plugin.io", "not a DNS subdomain"),
        ("-cdi.io", "not a DNS subdomain"),
        ("cdi..io", "not a DNS subdomain"),
        ("cdi_plugin.io", "not a DNS subdomain"),
        ("cdi.io.", "not a DNS subdomain"),
        ("x" * 64, "64 characters, at most 63"),
    ],
)
def test_bad_driver_names_say_why(name: str, reason: str) -> None:
    with pytest.raises(DraConfigError, match=reason) as info:
        check_driver_name(name)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["node-a", "ip-10-0-0-1.ec2.internal", "n" * 253])
def test_good_node_names(name: str) -> None:
    assert check_node_name(name) == name


@pytest.mark.parametrize("name", ["", "Node_A", "node a", "n" * 254, "node-"])
def test_bad_node_names(name: str) -> None:
    with pytest.raises(DraConfigError, match="node name"):
        check_node_name(name)


def test_plain_names_are_class_and_device() -> None:
    names = device_names(["cdi-plugin.io/fuse=fuse", "cdi-plugin.io/gpu=card0", "acme.com/Net.Dev=eth_0"])
    assert names == {
        "cdi-plugin.io/fuse=fuse": "fuse-fuse",
        "cdi-plugin.io/gpu=card0": "gpu-card0",
        "acme.com/Net.Dev=eth_0": "net-dev-eth-0",
    }


def test_collisions_get_a_hash_and_depend_only_on_the_names() -> None:
    colliding = ["a.io/gpu=card0", "b.io/gpu=card0", "a.io/GPU=card0"]
    names = device_names(colliding)
    assert len(set(names.values())) == 3
    assert all(n.startswith("gpu-card0-") and len(n) == len("gpu-card0-") + 8 for n in names.values())
    assert device_names(reversed(colliding)) == names  # order does not matter
    assert device_names([*colliding, "a.io/fuse=fuse"])["a.io/gpu=card0"] == names["a.io/gpu=card0"]


def test_long_names_are_cut_with_a_hash() -> None:
    long_a, long_b = "v.io/cc=" + "a" * 200 + "x", "v.io/cc=" + "a" * 200 + "y"
    names = device_names([long_a, long_b])
    assert names[long_a] != names[long_b]
    assert all(len(n) == 63 and is_label(n) for n in names.values())


_cdi_part = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,40}[A-Za-z0-9])?", fullmatch=True)
_cdi_names = st.builds(
    lambda v, c, n: f"{v.lower()}.io/{c}={n}",
    st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True),
    st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,29}[A-Za-z0-9]", fullmatch=True),
    _cdi_part,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_cdi_names, max_size=30, unique=True))
def test_every_name_is_a_unique_dns_label(cdi_names: list[str]) -> None:
    names = device_names(cdi_names)
    assert set(names) == set(cdi_names)
    assert len(set(names.values())) == len(cdi_names)
    assert all(is_label(n) for n in names.values())


def test_the_rules_module_agrees_on_subdomains() -> None:
    assert is_subdomain("cdi-plugin.io", 63)
    assert not is_subdomain("cdi-plugin.io.", 63)


@pytest.mark.parametrize(
    ("namespace", "name", "uid"),
    [
        ("default", "fuse-claim", "0f6e3b3c-9b1e-4c59-9d0f-2c1d0f9b8a77"),
        ("a", "a.b-c", "uid-1"),
        ("n" * 63, "c", "u"),
    ],
)
def test_claim_refs_the_api_allows(namespace: str, name: str, uid: str) -> None:
    assert claim_ref_problem(namespace, name, uid) is None


@pytest.mark.parametrize(
    ("namespace", "name", "uid", "problem"),
    [
        ("ns", "../x", "u", "name '../x': not a DNS subdomain"),
        ("ns", "a/b", "u", "name 'a/b': not a DNS subdomain"),
        ("ns", "..", "u", "name '..': not a DNS subdomain"),
        ("ns", "c?watch=1", "u", "name 'c?watch=1': not a DNS subdomain"),
        ("ns", "c%2F", "u", "name 'c%2F': not a DNS subdomain"),
        ("ns", "c" * 254, "u", "name 'cccc"),
        ("ns.x", "c", "u", "namespace 'ns.x': not a DNS label"),
        ("n" * 64, "c", "u", "namespace 'nnnn"),
        ("ns", "c", "", "UID '': not a UID"),
        ("ns", "c", "a/b", "UID 'a/b': not a UID"),
        ("ns", "c", "u\x1b[2J", "UID 'u\\x1b[2J': not a UID"),
        ("ns", "c", "u" * 129, "UID 'uuuu"),
    ],
)
def test_claim_refs_the_api_refuses_say_why_with_the_name_escaped(
    namespace: str, name: str, uid: str, problem: str
) -> None:
    found = claim_ref_problem(namespace, name, uid)
    assert found is not None
    assert found.startswith(problem)
    assert len(found) < 200


@pytest.mark.parametrize(
    ("value", "pool", "request_name"),
    [("node-a", True, True), ("a/b.c", True, False), ("a/b/c", True, False), ("", False, False),
     ("a//b", False, False), ("A", False, False), ("x" * 254, False, False), ("main/sub-1", True, True)],
)  # fmt: skip
def test_pool_and_request_names(value: str, pool: bool, request_name: bool) -> None:
    assert (is_pool_name(value), is_request_name(value)) == (pool, request_name)
